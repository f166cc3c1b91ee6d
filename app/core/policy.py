"""What the service agrees to do: callback allow-list, payload size and due-time horizon.

The worker writes callbacks with its own credentials. Without these checks any producer
on the request topic could make the worker write into any topic it can reach, including
the service's own topics and Kafka's internal ones.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from app.core.errors import RejectedRequest, RejectReason
from app.core.timer import Timer

__all__ = ["RequestPolicy"]

_LEGAL_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
#: Most allowed topics a policy remembers: a flood of distinct names cannot grow it.
ALLOWED_CACHE_SIZE = 10_000


@dataclass(frozen=True)
class RequestPolicy:
    """Checks a parsed timer against the service's rules before it is stored or fired."""

    #: Regexes a callback topic must fully match (at least one).
    allowed_topics: tuple[re.Pattern[str], ...]
    #: The service's own topics (ticks, requests, fired, DLQ): always refused.
    own_topics: frozenset[str]
    #: Prefixes always refused: ``__`` (Kafka internals) and the Faust app id (changelogs).
    refused_prefixes: tuple[str, ...]
    #: Largest callback value accepted, in bytes.
    max_payload_bytes: int
    #: How far in the future a timer may be due, in seconds.
    horizon_seconds: int
    #: Callback topics that passed :meth:`check_topic` (at most
    #: :data:`ALLOWED_CACHE_SIZE`). The rules above are frozen, so a topic that passed
    #: once passes again: it skips the regexes next time (a microsecond per request).
    _allowed: set[str] = field(
        default_factory=set, init=False, repr=False, compare=False, hash=False
    )

    @classmethod
    def build(
        cls,
        *,
        allow_patterns: Iterable[str],
        own_topics: Iterable[str],
        app_id: str,
        max_payload_bytes: int,
        horizon_seconds: int,
    ) -> RequestPolicy:
        """Compile the allow-list and derive the always-refused names from the app id."""
        return cls(
            allowed_topics=tuple(re.compile(p) for p in allow_patterns),
            own_topics=frozenset(own_topics),
            refused_prefixes=("__", f"{app_id}-"),
            max_payload_bytes=max_payload_bytes,
            horizon_seconds=horizon_seconds,
        )

    def check_topic(self, topic: str) -> None:
        """Raise :class:`RejectedRequest` unless callbacks may be written to ``topic``."""
        if topic in self._allowed:
            return
        self._check_topic(topic)
        if len(self._allowed) < ALLOWED_CACHE_SIZE:
            self._allowed.add(topic)

    def _check_topic(self, topic: str) -> None:
        if not topic:
            raise RejectedRequest(RejectReason.MISSING_TOPIC, "no callback topic")
        if not _LEGAL_TOPIC.match(topic) or topic in (".", ".."):
            raise RejectedRequest(RejectReason.INVALID_TOPIC, f"illegal topic name {topic[:80]!r}")
        if topic in self.own_topics or topic.startswith(self.refused_prefixes):
            raise RejectedRequest(
                RejectReason.TOPIC_NOT_ALLOWED, f"{topic!r} is internal or the service's own"
            )
        if not any(p.fullmatch(topic) for p in self.allowed_topics):
            raise RejectedRequest(
                RejectReason.TOPIC_NOT_ALLOWED, f"{topic!r} is not in the callback allow-list"
            )

    def check(self, timer: Timer, now: float) -> None:
        """Raise :class:`RejectedRequest` unless ``timer`` may be scheduled at time ``now``."""
        self.check_topic(timer.topic)
        if timer.due < 0 or timer.due > now + self.horizon_seconds:
            raise RejectedRequest(
                RejectReason.DUE_OUT_OF_RANGE,
                f"due {timer.due} is before 1970 or more than {self.horizon_seconds}s ahead",
            )
        size = len(timer.value or b"")
        if size > self.max_payload_bytes:
            raise RejectedRequest(
                RejectReason.PAYLOAD_TOO_LARGE,
                f"callback value is {size} bytes, limit {self.max_payload_bytes}",
            )
