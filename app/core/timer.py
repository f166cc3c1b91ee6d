"""The timer model: what a request asks for, independent of its wire format."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Cancel", "Header", "Timer"]

#: One Kafka record header: a name and raw bytes.
Header = tuple[str, bytes]


@dataclass(frozen=True)
class Timer:
    """A request to deliver one record to ``topic`` at (or after) epoch second ``due``."""

    #: Stable id of the timer; receivers de-duplicate callbacks on it.
    id: str
    #: Epoch second at or after which the callback is produced (fractions already rounded up).
    due: int
    #: Topic the callback is produced to.
    topic: str
    #: Key of the callback record (``None`` for a keyless record).
    key: bytes | None
    #: Value of the callback record, passed through unchanged.
    value: bytes | None
    #: Token of this version of the timer; cancels must present it.
    token: str = ""
    #: Headers copied onto the callback, after the service's own ``timer-*`` headers.
    headers: tuple[Header, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Cancel:
    """A request to remove the pending timer ``id``, authorised by its ``token``."""

    #: Id of the timer to cancel.
    id: str
    #: Token the timer was scheduled with; a mismatch refuses the cancel.
    token: str
    #: Whether the token must match (etf1 tombstones carry none and cancel by key alone).
    check_token: bool = True
