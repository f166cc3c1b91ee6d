"""The ids of a round in flight when most of its timers are not decoded yet.

A round's ids are *in flight* from its scan to its end: a reschedule of one while the
round awaits is kept from firing the old version after it (``PartitionWheel.still_due``),
a cancel of one is too late. A burst's scan leaves most of its timers undecoded
(:meth:`app.core.wheel_tick.TickJob.begin_tick`'s ``decode_first``), and reading each
one's id from its key into a set is a quarter of what that scan does per timer (py-spy,
60,000 keys), all before its first callback can go out. :class:`InFlightIds` is that set,
filled from the keys the first time it is used: by a request that arrives while the
round awaits, or not at all.

Pure: no clock, no Kafka.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from app.core.keys import timer_key_prefix

__all__ = ["InFlightIds", "id_of_key"]

#: Where a pending timer's id starts in its key (app.core.keys.timer_key).
_ID_AT = len(timer_key_prefix(0))


def id_of_key(key: bytes) -> str:
    """The id of a pending timer's ``key`` (``parse_timer_key`` without the second)."""
    return key[_ID_AT:].decode()


class InFlightIds(set[str]):
    """``ids``, and the ids of the pending-timer keys that head the tuples of ``scanned``
    (its other items are skipped: their ids are among ``ids``), read on first use.

    ``in``, ``discard``, ``len`` and iteration fill it first (``add`` needs not): what
    the wheel does with its in-flight ids (other set operations would see it unfilled).

    >>> ids = InFlightIds(["a"], [(b"T000000000100\\x00b", b""), "decoded"])
    >>> ("b" in ids, len(ids))
    (True, 2)
    """

    __slots__ = ("_scanned",)

    def __init__(self, ids: Iterable[str], scanned: Sequence[object]) -> None:
        super().__init__(ids)
        self._scanned: Sequence[object] | None = scanned

    def _fill(self) -> None:
        scanned, self._scanned = self._scanned, None
        if scanned:
            set.update(
                self,
                [item[0][_ID_AT:].decode() for item in scanned if isinstance(item, tuple)],
            )

    def __contains__(self, timer_id: object) -> bool:
        if self._scanned is not None:
            self._fill()
        return set.__contains__(self, timer_id)

    def discard(self, timer_id: object) -> None:
        if self._scanned is not None:
            self._fill()
        set.discard(self, timer_id)

    def __len__(self) -> int:
        if self._scanned is not None:
            self._fill()
        return set.__len__(self)

    def __iter__(self) -> Iterator[str]:
        if self._scanned is not None:
            self._fill()
        return set.__iter__(self)
