"""The timer wheel of one partition: pure logic over an ordered key-value store.

One bucket per second, as in a classic timer wheel, laid out in an ordered store so
that every operation is O(1) amortized in the number of timers sharing a second (the
key layout is :mod:`app.core.keys`): pending timers sort by due second, so "everything
due up to S" is one range scan that starts where the last one ended. The id index
holds the state of the newest version of each timer — ``P`` pending, ``F`` fired,
``C`` cancelled — with its due second and token: reschedules and cancels find the
pending entry through it, and late duplicates are recognised.

Nothing here knows about Kafka or Faust; :mod:`app.worker.partition_store` adapts this to a
Faust RocksDB table and its changelog, and the unit tests use an in-memory store.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from app.core.keys import (
    PENDING,
    PENDING_END,
    WATERMARK,
    bucket_floor,
    index_key,
    parse_timer_key,
    timer_key,
)
from app.core.stored import pack_timer, unpack_timer
from app.core.timer import Cancel, Timer

__all__ = [
    "Accepted",
    "CancelOutcome",
    "OrderedKV",
    "PartitionWheel",
    "Scheduled",
]

#: An idle tick persists ``fired_through`` only this often (seconds): it bounds how far
#: back a restarted scan starts, without a changelog write per partition per second.
WATERMARK_PERSIST_INTERVAL = 60
_PENDING, _FIRED, _CANCELLED = b"P", b"F", b"C"


class OrderedKV(Protocol):
    """The store a wheel needs: point reads and writes, and ordered range scans."""

    def get(self, key: bytes) -> bytes | None: ...

    def put(self, key: bytes, value: bytes) -> None: ...

    def delete(self, key: bytes) -> None: ...

    def scan(self, low: bytes, high: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Items with ``low <= key < high`` in key order."""
        ...


@dataclass(frozen=True)
class _IndexEntry:
    state: bytes
    due: int
    token: str

    def encode(self) -> bytes:
        return self.state + b"%012d" % self.due + self.token.encode()

    @classmethod
    def decode(cls, raw: bytes) -> _IndexEntry:
        return cls(state=raw[:1], due=int(raw[1:13]), token=raw[13:].decode())


class Scheduled(str, Enum):
    """What happened to an accepted timer request."""

    #: Stored; it fires on the first tick at or after its second.
    STORED = "stored"
    #: Its second has already been ticked on this partition: fire it now (late, never lost).
    FIRE_NOW = "fire_now"
    #: A cancel for this id and token arrived first; the request is dropped.
    CANCELLED_EARLIER = "cancelled_earlier"
    #: The very same version (id, token, due) already fired: a redelivered duplicate.
    DUPLICATE = "duplicate"


@dataclass(frozen=True)
class Accepted:
    """Outcome of :meth:`PartitionWheel.schedule`."""

    #: What happens to the timer.
    outcome: Scheduled
    #: Whether an older pending version of the same id was replaced.
    replaced: bool = False


class CancelOutcome(str, Enum):
    """What a cancel did; reported on the fired topic so the audit can tell."""

    #: The pending timer was removed and will not fire (also the answer to a repeat).
    CANCELLED = "cancelled"
    #: The token did not match the pending timer's: refused, the timer still fires.
    WRONG_TOKEN = "wrong_token"
    #: The timer has already fired (or is firing right now): nothing to cancel.
    ALREADY_FIRED = "already_fired"
    #: No such timer yet: remembered, so the request wins nothing when it arrives.
    CANCELLED_IN_ADVANCE = "cancelled_in_advance"
    #: No such timer and the cancel does not wait for one (etf1 tombstone).
    NOT_FOUND = "not_found"


class PartitionWheel:
    """Pending timers of one partition, and which of them a tick makes due."""

    def __init__(self, kv: OrderedKV) -> None:
        self._kv = kv
        raw = kv.get(WATERMARK)
        #: Every timer due at or before this second has fired and been forgotten.
        self.fired_through: int | None = int(raw) if raw is not None else None
        self._persisted_through = self.fired_through
        #: Ticks seen up to this second: a request due at or before it fires at once.
        #: Ahead of ``fired_through`` while a tick's timers are being delivered.
        self.ticked_through: int | None = self.fired_through
        self._in_flight: set[str] = set()

    # -- requests ---------------------------------------------------------------

    def schedule(self, timer: Timer) -> Accepted:
        """Store ``timer`` (replacing an older version of its id), or say to fire it now."""
        index = self._index(timer.id)
        replaced = False
        if index is not None:
            if index.state == _CANCELLED and index.token == timer.token:
                return Accepted(Scheduled.CANCELLED_EARLIER)
            if index.state == _FIRED and index.token == timer.token and index.due == timer.due:
                return Accepted(Scheduled.DUPLICATE)
            if index.state == _PENDING:
                self._kv.delete(timer_key(index.due, timer.id))
                replaced = True
        if self.ticked_through is not None and timer.due <= self.ticked_through:
            if replaced:
                self._kv.delete(index_key(timer.id))
            return Accepted(Scheduled.FIRE_NOW, replaced)
        self._kv.put(timer_key(timer.due, timer.id), pack_timer(timer))
        self._kv.put(index_key(timer.id), _IndexEntry(_PENDING, timer.due, timer.token).encode())
        return Accepted(Scheduled.STORED, replaced)

    def cancel(self, cancel: Cancel) -> CancelOutcome:
        """Remove the pending timer ``cancel.id`` if the token matches."""
        index = self._index(cancel.id)
        if (
            index is not None
            and index.state == _CANCELLED
            and index.due != 0
            and (index.token == cancel.token or not cancel.check_token)
        ):
            # A repeat of the cancel that removed it (a client retrying after no answer
            # came, a redelivered request): the same answer, and nothing rewritten.
            return CancelOutcome.CANCELLED
        if index is None or index.state == _CANCELLED:
            if not cancel.check_token:
                return CancelOutcome.NOT_FOUND
            self._kv.put(index_key(cancel.id), _IndexEntry(_CANCELLED, 0, cancel.token).encode())
            return CancelOutcome.CANCELLED_IN_ADVANCE
        if index.state == _FIRED or cancel.id in self._in_flight:
            return CancelOutcome.ALREADY_FIRED
        if cancel.check_token and cancel.token != index.token:
            return CancelOutcome.WRONG_TOKEN
        self._kv.delete(timer_key(index.due, cancel.id))
        self._kv.put(index_key(cancel.id), _IndexEntry(_CANCELLED, index.due, index.token).encode())
        return CancelOutcome.CANCELLED

    def mark_fired(self, timer: Timer) -> None:
        """Record that ``timer`` (fired at once, never stored) has been delivered."""
        self._kv.put(index_key(timer.id), _IndexEntry(_FIRED, timer.due, timer.token).encode())

    # -- ticks ------------------------------------------------------------------

    def begin_tick(self, second: int) -> list[Timer] | None:
        """Collect every pending timer due at or before ``second``.

        Returns ``None`` for a tick already seen (duplicates from redundant oscillators,
        redelivery after a restart). A gap since the last tick is caught up, not skipped:
        the scan starts right after the last second fully fired. Cost is one seek plus
        the timers returned, never the number pending.
        """
        if self.ticked_through is not None and second <= self.ticked_through:
            return None
        start = 0 if self.fired_through is None else self.fired_through + 1
        self.ticked_through = second
        timers = [
            unpack_timer(v) for _, v in self._kv.scan(bucket_floor(start), bucket_floor(second + 1))
        ]
        self._in_flight = {t.id for t in timers}
        return timers

    def finish_tick(self, second: int, fired: list[Timer]) -> None:
        """Forget ``fired`` (all delivered) and advance ``fired_through`` to ``second``."""
        for timer in fired:
            self._kv.delete(timer_key(timer.due, timer.id))
            index = self._index(timer.id)
            if (
                index is not None
                and index.state == _PENDING
                and index.due == timer.due
                and index.token == timer.token
            ):
                self._kv.put(
                    index_key(timer.id), _IndexEntry(_FIRED, timer.due, timer.token).encode()
                )
        persisted = self._persisted_through
        if fired or persisted is None or second - persisted >= WATERMARK_PERSIST_INTERVAL:
            self._kv.put(WATERMARK, b"%d" % second)
            self._persisted_through = second
        self.fired_through = second
        self._in_flight = set()

    def abort_tick(self) -> None:
        """Delivery failed: keep it all pending; the next tick retries from ``fired_through``."""
        self._in_flight = set()

    def iter_pending(self, from_second: int = 0) -> Iterator[Timer]:
        """Pending timers in due order from ``from_second`` on (read-only, for status)."""
        for _, value in self._kv.scan(bucket_floor(from_second), PENDING_END):
            yield unpack_timer(value)

    def iter_due(self, from_second: int = 0) -> Iterator[tuple[int, str]]:
        """``(due, id)`` of pending timers in due order, from the keys alone (no unpacking)."""
        for key, _ in self._kv.scan(bucket_floor(from_second), PENDING_END):
            yield parse_timer_key(key)

    def get_pending(self, timer_id: str) -> Timer | None:
        """The pending version of ``timer_id`` by point reads, or None."""
        index = self._index(timer_id)
        if index is None or index.state != _PENDING:
            return None
        raw = self._kv.get(timer_key(index.due, timer_id))
        return None if raw is None else unpack_timer(raw)

    def lookup(self, timer_id: str) -> tuple[str, int, str] | None:
        """``(state, due, token)`` of the newest version of ``timer_id``, or None.

        state is ``pending``, ``fired`` or ``cancelled``.
        """
        index = self._index(timer_id)
        if index is None:
            return None
        state = {_PENDING: "pending", _FIRED: "fired", _CANCELLED: "cancelled"}[index.state]
        return state, index.due, index.token

    def count_pending(self) -> int:
        """Number of stored timers; O(pending), so only for start-up and status."""
        return sum(1 for _ in self._kv.scan(PENDING, PENDING_END))

    def _index(self, timer_id: str) -> _IndexEntry | None:
        raw = self._kv.get(index_key(timer_id))
        return None if raw is None else _IndexEntry.decode(raw)
