"""The timer wheel of one partition: pure logic over an ordered key-value store.

One bucket per second, as in a classic timer wheel, laid out in an ordered store so
that every operation is O(1) amortized in the number of timers sharing a second (the
key layout is :mod:`app.core.keys`): pending timers sort by due second, so "everything
due up to S" is one range scan that starts where the last one ended. The id index
holds the state of the newest version of each timer — ``P`` pending, ``F`` fired,
``C`` cancelled — with its due second and token: reschedules and cancels find the
pending entry through it, and late duplicates are recognised.

A series (a timer with a recurrence) is stored as its next occurrence only. Its index
entry stays ``P`` for as long as the series lives, with the second its occurrence is
stored under; after each fire :meth:`PartitionWheel.finish_tick` stores the next
occurrence in place of the fired one (same unit of work), and only when the series ends
does the entry become ``F``, with occurrence 1's due second (the version's identity).
An occurrence stored already due (catch-up left for the next tick) is keyed under the
next tick's second, since scans only go forward, and keeps its true due in its value.
A spread timer (:mod:`app.core.spread`) is keyed the same way under the second it fires
at (:attr:`Timer.fire_at`, in ``[due, due + spread]``), keeping its requested due in its
value: the index points at that key, so cancels, reschedules and lookups find it, and
the version's identity (fired, cancelled) stays its requested due.

State stays O(pending): a fired or cancelled id is remembered for a bounded window
(``memory_seconds``, 7 days by default), long enough to recognise a redelivered request
and a cancel that arrives before its request. Something expires each terminal index
entry, sorted by the tick second it expires at: for a cancelled id (or one fired as it
arrived) an expiry key (``X<expiry>\\0<id>``) whose value is the entry it expires; for
the fired timers a round forgets together, expiry batches (``V<expiry>\\0<first id>``,
up to 256 ids and their entries a key, :mod:`app.core.expiry_batch`). Ticks sweep both
ranges as they advance — about :data:`EXPIRY_SWEEP_PER_TICK` ids per tick, the rest on
the next — and remove an index entry only if it still equals the expired one. Every
removal is a changelog tombstone, so compaction drops the id from the changelog too.
Cost: a terminal write of the index entry and a share of a batch (a cancel: an expiry
key) when an id ends, and the index entry's tombstone (with a share of the batch's) when
it expires, O(1) per timer. Expiry counts in the partition's tick seconds (the clock
only before its first tick), so the window is the same for every worker that ever owns
the partition. An id whose terminal entry is written again unchanged (the same cancel
sent twice) is remembered from the first time.

Nothing here knows about Kafka or Faust; :mod:`app.worker.partition_store` adapts this to a
Faust RocksDB table and its changelog, and the unit tests use an in-memory store.
"""

from __future__ import annotations

import struct
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from enum import Enum
from itertools import count, islice, repeat
from typing import NamedTuple, Protocol

from app.core import expiry_batch
from app.core.forecast import PartitionForecast
from app.core.held import HeldEntry, HeldQueue
from app.core.keys import (
    DELIVERED,
    DELIVERED_END,
    EXPIRY,
    EXPIRY_BATCH,
    EXPIRY_BATCH_END,
    EXPIRY_END,
    INDEX,
    INDEX_END,
    PAUSED,
    PAUSED_END,
    PENDING,
    PENDING_END,
    WATERMARK,
    bucket_floor,
    delivered_batch_key,
    delivered_batch_seq,
    expiry_batch_key,
    expiry_batch_second,
    expiry_floor,
    expiry_key,
    index_key,
    parse_expiry_key,
    parse_timer_key,
    paused_key,
    timer_key,
    timer_key_prefix,
    timer_key_second,
)
from app.core.stored import (
    check_layout,
    pack_next_occurrence,
    pack_timer,
    stored_topic,
    unpack_timer,
)
from app.core.timer import Cancel, Timer
from kafka_timers_client.outcome import CancelOutcome, PauseOutcome

__all__ = [
    "DEFAULT_MAX_CANCELS_IN_ADVANCE",
    "DEFAULT_MEMORY_SECONDS",
    "EXPIRY_SWEEP_PER_TICK",
    "Accepted",
    "CancelOutcome",
    "HeldTimer",
    "KeyCounts",
    "OrderedKV",
    "PartitionWheel",
    "PauseOutcome",
    "Scheduled",
    "key_kind",
]

#: An idle tick persists ``fired_through`` only this often (seconds): it bounds how far
#: back a restarted scan starts, without a changelog write per partition per second.
WATERMARK_PERSIST_INTERVAL = 60
#: How long a fired or cancelled id is remembered by default, seconds (7 days: as long
#: as the request topic the service creates keeps a request).
DEFAULT_MEMORY_SECONDS = 7 * 86400
#: Most remembered ids one tick sweeps per partition (expiry keys, and the ids of whole
#: expiry batches: at most a batch more); the rest waits for the next tick, so a
#: backlog (a million ids expiring in one second) never stalls a tick. Measured cost is
#: a few microseconds per id plus its index entry's changelog tombstone.
EXPIRY_SWEEP_PER_TICK = 1000
#: Most cancels in advance (for ids with no timer yet) one partition remembers. Each is
#: two store keys of about the id's length plus 40 bytes, kept for the memory window: a
#: flood of cancels for ids that never come (5,000 with 1 KB ids made 10.5 MB of
#: changelog) stops growing here. Past it a cancel in advance is answered
#: ``not_remembered`` and counted; one repeated is not written again, so repeating it
#: never extends its window.
DEFAULT_MAX_CANCELS_IN_ADVANCE = 100_000
_PENDING, _FIRED, _CANCELLED = b"P", b"F", b"C"
#: Held timers :meth:`PartitionWheel.take_held` reads with one scan, at most.
TAKE_BATCH = 1000
#: Most delivered held timers one partition leaves to forget later
#: (:meth:`PartitionWheel.forget_behind`); past it a round forgets its own at once.
#: Each is its id, token, topic and seconds, never its payload: about 0.4 KB (measured
#: with tracemalloc: 143 B of tuple, dict and deque, the rest the strings it keeps), so
#: 150,000 are about 60 MB. They are recorded in the store as delivered (``L`` keys,
#: :meth:`PartitionWheel._record_behind`), so a restart, a rebalance or the next owner
#: forgets them rather than delivering them again: the cap bounds memory only.
#:
#: Why 150,000: the same burst with no limit is one round whose timers (payloads
#: included, about 1 KB each: a worker peaked at 843 MB for its 500,000 of a million)
#: are all in memory until delivered; a limited burst of up to 150,000 a partition
#: costs less. At
#: 50,000, a million due at once to a topic limited to 50,000/s (125,000 a partition)
#: reached the cap 11 s in, and from then each round forgot its own inside the
#: delivery: 26,443 and 26,389/s; at 150,000, 36,409 and 33,195/s with the workers'
#: peak RSS unchanged (323-350 MB), the forgetting after the last callback (19-21 s)
#: instead (docs/performance.md, "Room to forget a million later").
BEHIND_MAX = 150_000
#: How an index entry of a cancel in advance starts: cancelled, due second 0.
_IN_ADVANCE_PREFIX = b"C%012d" % 0


class OrderedKV(Protocol):
    """The store a wheel needs: point reads and writes, and ordered range scans."""

    def get(self, key: bytes) -> bytes | None: ...

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """``[get(key) for key in keys]``, in one call: RocksDB's multi-get reads a batch
        for about half of what as many point reads cost."""
        ...

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


def key_kind(key: bytes, value: bytes) -> str:
    """Which kind of store key this is: ``pending``, ``remembered`` or ``bookkeeping``.

    The same classification :class:`KeyCounts` keeps, for code that reads a store (or a
    changelog) from outside: benchmarks, tests, tools.
    """
    prefix = key[:1]
    if prefix in (PENDING, PAUSED) or (prefix == INDEX and value[:1] == _PENDING):
        return "pending"
    if prefix in (INDEX, EXPIRY, EXPIRY_BATCH):
        return "remembered"
    return "bookkeeping"


@dataclass
class KeyCounts:
    """How many store keys a wheel holds, by kind; kept up to date with every write.

    ``pending`` counts the keys of pending timers (the timer, its ``P`` index entry and,
    while it is paused, its ``S`` key),
    ``remembered`` the keys of fired and cancelled ids (their index entry and expiry
    key); ``timers`` is the number of pending timers. Bookkeeping keys (``W``, ``R``,
    Faust's offset) are not the wheel's: see :data:`app.core.keys.BOOKKEEPING`.
    """

    timers: int = 0
    pending: int = 0
    remembered: int = 0
    #: Cancels remembered for timers not seen yet (their index entries, among
    #: ``remembered``): what :data:`DEFAULT_MAX_CANCELS_IN_ADVANCE` caps.
    in_advance: int = 0


class Scheduled(str, Enum):
    """What happened to an accepted timer request."""

    #: Stored; it fires on the first tick at or after its second.
    STORED = "stored"
    #: Its second has already been ticked on this partition: fire it now (late, never lost).
    FIRE_NOW = "fire_now"
    #: A cancel for this id and token arrived first; the request is dropped.
    CANCELLED_EARLIER = "cancelled_earlier"
    #: The very same version (id, token, due) already fired: a redelivered duplicate.
    #: Also a series whose very version (id, token, first occurrence) is pending past
    #: its first occurrence: starting it over would fire those occurrences again.
    DUPLICATE = "duplicate"
    #: The id's pending timer is protected by a token this request does not carry: the
    #: request is refused and the pending timer (and its pause) stays as it was.
    WRONG_TOKEN = "wrong_token"


@dataclass(frozen=True)
class Accepted:
    """Outcome of :meth:`PartitionWheel.schedule`."""

    #: What happens to the timer.
    outcome: Scheduled
    #: Whether an older pending version of the same id was replaced.
    replaced: bool = False


#: Outcomes are immutable, so :meth:`PartitionWheel.schedule` hands out shared ones.
_STORED_NEW = Accepted(Scheduled.STORED, False)
_STORED_REPLACED = Accepted(Scheduled.STORED, True)
_FIRE_NOW_NEW = Accepted(Scheduled.FIRE_NOW, False)
_FIRE_NOW_REPLACED = Accepted(Scheduled.FIRE_NOW, True)
_CANCELLED_EARLIER = Accepted(Scheduled.CANCELLED_EARLIER)
_DUPLICATE = Accepted(Scheduled.DUPLICATE)
_WRONG_TOKEN = Accepted(Scheduled.WRONG_TOKEN)


def _pending_prefix(due: int) -> bytes:
    """What every pending index entry for ``due`` starts with (:func:`_pending_entry`)."""
    return b"P%012d" % due


def _pending_entry(due: int, token: str) -> bytes:
    """``_IndexEntry(_PENDING, due, token).encode()`` without building the dataclass."""
    return _pending_prefix(due) + token.encode()


class _Parked(NamedTuple):
    """A paused timer that came due: it waits here (and in the store) until resumed."""

    slot: int
    topic: str
    since: float


class _Behind(NamedTuple):
    """A held timer delivered whose forgetting is behind: what forgetting it needs (the
    fields of :class:`Timer` that :meth:`PartitionWheel._forget` reads), not its payload."""

    id: str
    due: int
    token: str
    topic: str
    version_due: int
    slot: int
    #: The key of the batch (``L``) that records it in the store, until it is forgotten.
    batch: bytes


#: A held timer taken to be delivered (:meth:`PartitionWheel.take_held`), and when it was
#: first held: the delay the gate added is the delivery time minus that. A plain tuple:
#: one is built for every timer a limited topic receives.
HeldTimer = tuple[Timer, float]


class PartitionWheel:
    """Pending timers of one partition, and which of them a tick makes due."""

    def __init__(
        self,
        kv: OrderedKV,
        *,
        memory_seconds: int = DEFAULT_MEMORY_SECONDS,
        sweep_limit: int = EXPIRY_SWEEP_PER_TICK,
        clock: Callable[[], float] = time.time,
        max_cancels_in_advance: int = DEFAULT_MAX_CANCELS_IN_ADVANCE,
        forecast: PartitionForecast | None = None,
    ) -> None:
        self._kv = kv
        #: Pending timers per topic and future minute/hour, told of every store and
        #: removal (app.core.forecast); None: not kept.
        self.forecast = forecast
        self._memory = memory_seconds
        self._max_in_advance = max_cancels_in_advance
        self._sweep_limit = sweep_limit
        #: "Now" before this partition has seen a tick (a cancel can come first).
        self._clock = clock
        #: Expiry keys before this one are swept: later sweeps seek past their tombstones.
        self._sweep_from = EXPIRY
        #: Likewise for expiry batches (:mod:`app.core.expiry_batch`).
        self._batch_sweep_from = EXPIRY_BATCH
        #: The expiry second of the first batch not swept; ``None``: there is none. An
        #: idle tick then does not scan for batches (0: not known yet, so the first
        #: tick's sweep looks).
        self._next_batch_expiry: int | None = 0
        #: The earliest expiry of the batches written since the last look: a unit's
        #: writes may be deferred (app.worker.partition_store), out of the scan's sight.
        self._batch_written: int | None = None
        #: Store keys by kind; exact after :meth:`recount`, then kept up to date.
        self.counts = KeyCounts()
        raw = kv.get(WATERMARK)
        #: Every timer due at or before this second has fired and been forgotten.
        self.fired_through: int | None = int(raw) if raw is not None else None
        self._persisted_through = self.fired_through
        #: Ticks seen up to this second: a request due at or before it fires at once.
        #: Ahead of ``fired_through`` while a tick's timers are being delivered.
        self.ticked_through: int | None = self.fired_through
        self._in_flight: set[str] = set()
        #: The series among them: a cancel still stops those.
        self._in_flight_series: set[str] = set()
        #: Keys of in-flight catch-up occurrences stored under a later second than their
        #: due: ``(id, due) -> second`` (see :meth:`_slot_for`).
        self._slots: dict[tuple[str, int], int] = {}
        #: The stored bytes of the in-flight series occurrences read by the tick's scan, by
        #: id: each one's successor is packed from them (:func:`pack_next_occurrence`).
        self._series_stored: dict[str, bytes] = {}
        #: Due timers a gate holds back (a rate limit, a pause: app.worker.topic_gates),
        #: per callback topic in due order: still pending in the store, delivered by
        #: :meth:`take_held`. Not persisted: the watermark stays below the oldest of them,
        #: so a new owner's (or a restart's) first scan finds them again.
        #: Entries are keys only (app.core.held): a backlog of a million costs ~150 MB of
        #: them, not the timers' payloads.
        self._held: dict[str, HeldQueue] = {}
        self._held_order = count()
        #: Whether this round took held timers (:meth:`abort_tick` must then rescan).
        self._taken = False
        #: The one-shot timers this round took from the held ones: the ones
        #: :meth:`finish_tick` may leave to :meth:`forget_behind`.
        self._taken_ids: set[str] = set()
        #: Delivered held timers not yet forgotten, by id (oldest first in
        #: :attr:`_behind_order`): still pending in the store, the watermark below them,
        #: forgotten by :meth:`forget_behind`, or at once when anything touches their id.
        self._behind: dict[str, _Behind] = {}
        self._behind_order: deque[str] = deque()
        #: How many of them each slot holds (the watermark stays below the oldest).
        self._behind_slots: dict[int, int] = {}
        #: The store's batches (``L`` keys) recording them, with how many of each are
        #: not forgotten yet: a batch's key goes with its last one.
        self._batch_left: dict[bytes, int] = {}
        #: The number of the next such batch (they are numbered in write order).
        self._next_delivered = 0
        #: Batches a reload found with none of their timers left behind: deleted by the
        #: next round (a reload writes nothing).
        self._stale_delivered: list[bytes] = []
        #: Ids paused by their owners: their ``S`` keys, read by :meth:`recount`.
        self._paused: set[str] = set()
        #: Paused timers that came due, by id: pending in the store and kept above the
        #: watermark like held ones, until :meth:`resume` hands them to the held queues.
        self._parked: dict[str, _Parked] = {}
        #: The oldest slot among :attr:`_parked` (None: work it out again).
        self._parked_floor: int | None = None

    # -- requests ---------------------------------------------------------------

    def schedule(self, timer: Timer, *, reread: bool = False) -> Accepted:
        """Store ``timer`` (replacing an older version of its id), or say to fire it now.

        For a series, "fire it now" means its first occurrence; the caller then stores
        the next one with :meth:`store_successor`.

        ``reread``: the request is read again after a crash, and the store may hold the
        effects of requests after it already (a newer version of its id among them).
        Its second passed, it is then stored under the next tick's second instead of
        fired at once: the rest of the re-read (the newer version) replaces it as it
        did the first time, and if nothing does, it fires on the next tick.

        A token means it for every change. A pending timer stored with a token is
        replaced (rescheduled, given another payload or callback, imported over) only
        by a request carrying that very token; any other request for its id, token-less
        or with another token, is refused (:attr:`Scheduled.WRONG_TOKEN`) and changes
        nothing: the timer fires as it was, and a pause on it stays. A pending timer
        stored *without* a token is "cancel/replace by id" on purpose (etf1's schedules,
        a JSON request naming no token): any request for its id replaces it, one
        carrying a token included, and the new version is then protected by that token.
        A replace that is accepted is a new decision: it ends the old version's pause
        (so only the token's holder can end a pause this way, or anyone for a token-less
        timer, which anyone could cancel anyway). Fired and cancelled ids are not
        protected: their token guards the version that ended, and another version with
        another token is a new timer (an id reused), as before.
        """
        if self._behind:
            self._settle(timer.id)
        ikey = index_key(timer.id)
        raw = self._kv.get(ikey)
        index = _IndexEntry.decode(raw) if raw is not None else None
        replaced = False
        counts = self.counts
        if index is not None:
            if (
                index.state == _CANCELLED
                and index.token == timer.token
                and (index.due == 0 or index.due == timer.version_due)
            ):
                # A cancel that came first, or this very version again after its cancel.
                # Another version of a cancelled id (an etf1 key scheduled again after
                # its tombstone, with a new due time) is a new timer.
                return _CANCELLED_EARLIER
            if (
                index.state == _FIRED
                and index.token == timer.token
                and index.due == timer.version_due
            ):
                return _DUPLICATE
            if index.state == _PENDING:
                if index.token and index.token != timer.token:
                    return _WRONG_TOKEN
                if (
                    timer.recurrence is not None
                    and index.token == timer.token
                    and self._series_under_way(timer, index.due)
                ):
                    # The very same series again (a redelivery, an import run twice)
                    # after it fired: starting it over would fire its occurrences again.
                    return _DUPLICATE
                if self.forecast is not None:
                    self.forecast.discard(index.due, timer.id, self._kv.get)
                self._kv.delete(timer_key(index.due, timer.id))
                counts.timers -= 1
                counts.pending -= 1
                replaced = True
                if timer.id in self._paused:  # a new version is a new decision
                    self._unpause(timer.id)
        fire_at = timer.fire_at
        if reread:
            fire_at = self._slot_for(fire_at)
        elif self.ticked_through is not None and fire_at <= self.ticked_through:
            if replaced:
                self._kv.delete(ikey)
                counts.pending -= 1
            return _FIRE_NOW_REPLACED if replaced else _FIRE_NOW_NEW
        self._store_occurrence(timer, fire_at)
        self._count_stored(was=index)
        return _STORED_REPLACED if replaced else _STORED_NEW

    def _series_under_way(self, timer: Timer, slot: int) -> bool:
        """Whether the pending series stored at ``slot`` is ``timer``'s very version
        (same token, same first occurrence) and has fired at least once already."""
        raw = self._kv.get(timer_key(slot, timer.id))
        if raw is None:
            return False
        stored = unpack_timer(raw)
        return stored.seq > 1 and stored.version_due == timer.version_due

    def cancel(self, cancel: Cancel) -> CancelOutcome:
        """Remove the pending timer ``cancel.id`` if the token matches."""
        index = self._index(cancel.id)
        if (
            index is not None
            and index.state == _CANCELLED
            and index.due != 0
            and index.token == cancel.token
        ):
            # A repeat of the cancel that removed it (a client retrying after no answer
            # came, a redelivered request): the same answer, and nothing rewritten.
            return CancelOutcome.CANCELLED
        if index is None or index.state == _CANCELLED:
            if not cancel.check_token:
                return CancelOutcome.NOT_FOUND
            entry = _IndexEntry(_CANCELLED, 0, cancel.token)
            if index != entry:  # the same cancel again is remembered from the first one
                new = index is None or index.due != 0
                if new and self.counts.in_advance >= self._max_in_advance:
                    return CancelOutcome.NOT_REMEMBERED
                self._terminal(cancel.id, entry, was=index)
            return CancelOutcome.CANCELLED_IN_ADVANCE
        if index.state == _FIRED or (
            cancel.id in self._in_flight and cancel.id not in self._in_flight_series
        ):
            # A series being delivered is still cancelled: the occurrence on its way
            # goes out, the ones after it never do (finish_tick stores no successor).
            return CancelOutcome.ALREADY_FIRED
        if cancel.token != index.token:
            # A tombstone carries no token: it cancels only a timer stored without one
            # (etf1's own), never one its producer protected with a token.
            return CancelOutcome.WRONG_TOKEN
        if self.forecast is not None:
            self.forecast.discard(index.due, cancel.id, self._kv.get)
        key = timer_key(index.due, cancel.id)
        due = index.due
        raw = self._kv.get(key)
        stored = None if raw is None else unpack_timer(raw)
        if stored is not None and stored.spread:  # keyed under its fire second: remember
            due = stored.version_due  # its version's due second instead
        self._kv.delete(key)
        self.counts.timers -= 1
        self.counts.pending -= 1
        self._terminal(cancel.id, _IndexEntry(_CANCELLED, due, index.token), was=index)
        return CancelOutcome.CANCELLED

    # -- pause and resume, by the timer's owner ------------------------------------------

    def pause(self, request: Cancel) -> PauseOutcome:
        """Pause the pending timer ``request.id`` (a one-shot or a series) if the token
        matches: from now on its occurrences wait when due, in the store, across
        restarts and new owners, until :meth:`resume`. An occurrence on its way out goes
        out. A new version of the timer (scheduled again) is not paused."""
        index = self._index(request.id)
        outcome = self._owned(request, index)
        if outcome is not None:
            return outcome
        if request.id not in self._paused:
            self._kv.put(paused_key(request.id), b"")
            self._paused.add(request.id)
            self.counts.pending += 1
        return PauseOutcome.PAUSED

    def resume(self, request: Cancel) -> PauseOutcome:
        """Resume the paused timer ``request.id`` if the token matches: an occurrence
        that came due meanwhile is held for delivery at once (:meth:`take_held`), where
        its late policy applies as to any late fire; resuming one not paused is a no-op
        answered ``resumed``."""
        outcome = self._owned(request, self._index(request.id))
        if outcome is not None:
            return outcome
        if request.id in self._paused:
            parked = self._parked.get(request.id)
            self._unpause(request.id)
            if parked is not None:
                self._held_queue(parked.topic).push(
                    (parked.slot, next(self._held_order), request.id, parked.since)
                )
        return PauseOutcome.RESUMED

    def is_paused(self, timer_id: str) -> bool:
        return timer_id in self._paused

    @property
    def paused_count(self) -> int:
        """Timers paused by their owners (parked or not yet due)."""
        return len(self._paused)

    def _owned(self, request: Cancel, index: _IndexEntry | None) -> PauseOutcome | None:
        """Why ``request`` (a pause or resume) cannot act on its timer, or None."""
        if index is None or index.state == _CANCELLED:
            return PauseOutcome.NOT_FOUND
        if index.state == _FIRED or (
            request.id in self._in_flight and request.id not in self._in_flight_series
        ):
            return PauseOutcome.ALREADY_FIRED
        if request.token != index.token:
            return PauseOutcome.WRONG_TOKEN
        return None

    def _unpause(self, timer_id: str) -> None:
        self._paused.discard(timer_id)
        if self._parked.pop(timer_id, None) is not None:
            self._parked_floor = None
        self._kv.delete(paused_key(timer_id))
        self.counts.pending -= 1

    def _park(self, timer_id: str, slot: int, topic: str, since: float) -> None:
        self._in_flight.discard(timer_id)
        self._in_flight_series.discard(timer_id)
        self._parked[timer_id] = _Parked(slot, topic, since)
        floor = self._parked_floor
        if (floor is not None and slot < floor) or (floor is None and len(self._parked) == 1):
            self._parked_floor = slot

    def _park_paused(self, timers: list[Timer], slots: dict[tuple[str, int], int]) -> list[Timer]:
        """Of a scan's due ``timers``, those to deliver: paused ones are parked."""
        paused = self._paused
        now = self._clock()
        keep = []
        for timer in timers:
            if timer.id in paused:
                self._park(timer.id, slots.get((timer.id, timer.due), timer.due), timer.topic, now)
            else:
                keep.append(timer)
        return keep

    def _oldest_waiting(self) -> int | None:
        """The oldest slot a held, parked or delivered but not forgotten timer is stored
        under, or None."""
        oldest = self._oldest_held() if self._held else None
        if self._parked:
            if self._parked_floor is None:
                self._parked_floor = min(p.slot for p in self._parked.values())
            if oldest is None or self._parked_floor < oldest:
                oldest = self._parked_floor
        if self._behind_slots:
            floor = min(self._behind_slots)
            if oldest is None or floor < oldest:
                oldest = floor
        return oldest

    def mark_fired(self, timer: Timer) -> None:
        """Record that ``timer`` (fired at once, never stored) has been delivered; for a
        series, that it ended at once (otherwise :meth:`store_successor` keeps it)."""
        entry = _IndexEntry(_FIRED, timer.version_due, timer.token)
        self._terminal(timer.id, entry, was=self._index(timer.id))

    def store_successor(self, successor: Timer) -> None:
        """Store the next occurrence of a series fired at once (never stored before)."""
        was = self._index(successor.id)
        self._store_occurrence(successor, self._slot_for(successor.fire_at))
        self._count_stored(was=was)

    def _slot_for(self, due: int) -> int:
        """The second to key an occurrence due at ``due`` under: its own, or the next
        tick's if that second has been ticked already (scans never look back)."""
        if self.ticked_through is not None and due <= self.ticked_through:
            return self.ticked_through + 1
        return due

    def _store_occurrence(
        self, occurrence: Timer, slot: int, previous: bytes | None = None
    ) -> None:
        # The new key before the index that points at it: a crash in between leaves an
        # occurrence that fires, never an index entry that points nowhere. (Key counts
        # are the caller's: in finish_tick one timer key replaces another.) ``previous``:
        # the stored bytes of the occurrence before it, if at hand (a series' fire).
        packed = (
            pack_timer(occurrence)
            if previous is None
            else pack_next_occurrence(previous, occurrence)
        )
        self._kv.put(timer_key(slot, occurrence.id), packed)
        self._kv.put(index_key(occurrence.id), _pending_entry(slot, occurrence.token))
        if self.forecast is not None:
            self.forecast.add(slot, occurrence.id, occurrence.topic)

    def _count_stored(self, was: _IndexEntry | None) -> None:
        """Key counts after a timer was stored whose id's index entry was ``was``."""
        counts = self.counts
        counts.timers += 1
        counts.pending += 1
        if was is None:
            counts.pending += 1
        elif was.state != _PENDING:  # a new version of a remembered id: pending again
            counts.remembered -= 1
            counts.pending += 1
            if was.state == _CANCELLED and was.due == 0:
                counts.in_advance -= 1

    def _terminal(
        self,
        timer_id: str,
        entry: _IndexEntry,
        was: _IndexEntry | None,
        expiry_stored: bool | None = None,
    ) -> None:
        """Write the terminal index ``entry`` of ``timer_id`` and the key that expires it.

        ``was`` is the index entry it replaces (for the key counts); ``expiry_stored``
        whether that expiry key exists already, if the caller read it (else it is read).
        """
        if timer_id in self._paused:  # a paused timer's key goes with the timer
            self._unpause(timer_id)
        encoded = entry.encode()
        expiry = expiry_key(self._now() + self._memory, timer_id)
        counts = self.counts
        if expiry_stored is None:
            expiry_stored = self._kv.get(expiry) is not None
        if not expiry_stored:  # two versions can end in one second: one key
            counts.remembered += 1
        if was is None:
            counts.remembered += 1
        elif was.state == _PENDING:
            counts.pending -= 1
            counts.remembered += 1
        counts.in_advance += encoded.startswith(_IN_ADVANCE_PREFIX) - (
            was is not None and was.state == _CANCELLED and was.due == 0
        )
        self._kv.put(index_key(timer_id), encoded)
        self._kv.put(expiry, encoded)

    def _now(self) -> int:
        """The partition's time: its newest tick, or the clock before the first tick."""
        if self.ticked_through is not None:
            return self.ticked_through
        return int(self._clock())

    def _sweep(self, second: int) -> None:
        """Forget remembered ids whose expiry second is at or before ``second``: at most
        about ``sweep_limit`` ids a tick (a batch is taken whole), the rest on the next."""
        budget = self._sweep_limit
        expired = list(islice(self._kv.scan(self._sweep_from, expiry_floor(second + 1)), budget))
        for key, _ in expired:
            self._kv.delete(key)
        self.counts.remembered -= len(expired)
        self._expire_index_entries(
            [(index_key(parse_expiry_key(key)[1]), value) for key, value in expired]
        )
        if expired:
            self._sweep_from = expired[-1][0] + b"\x00"
        budget -= len(expired)
        due = self._next_batch_expiry
        if budget > 0 and due is not None and due <= second:
            self._sweep_batches(second, budget)

    def _sweep_batches(self, second: int, budget: int) -> None:
        """The expiry batches' share of :meth:`_sweep`: whole batches until ``budget`` ids
        are taken, their index entries expired as an expiry key's are."""
        kv = self._kv
        counts = self.counts
        expired: list[tuple[bytes, list[expiry_batch.Entry]]] = []
        self._next_batch_expiry, self._batch_written = self._batch_written, None
        for key, value in kv.scan(self._batch_sweep_from, EXPIRY_BATCH_END):
            expiry = expiry_batch_second(key)
            if expiry > second or budget <= 0:  # the next sweep starts here
                self._batch_due(expiry)
                break
            self._batch_sweep_from = key + b"\x00"
            try:
                entries = expiry_batch.unpack(value)
            except ValueError:  # not this layout's: left for a release that reads it
                continue
            expired.append((key, entries))
            budget -= len(entries)
        for key, _ in expired:
            kv.delete(key)
        counts.remembered -= len(expired)
        self._expire_index_entries(
            [(INDEX + id_bytes, entry) for _, entries in expired for id_bytes, entry in entries]
        )

    def _expire_index_entries(self, expired: Sequence[tuple[bytes, bytes]]) -> None:
        """Remove each index entry named in ``expired`` (its key, the entry an expiry key or
        batch expires) that still equals that entry: a newer version since then keeps
        its own. One multi-get for all of them; an id named twice (two versions ended in
        one second, or the same entry remembered twice) goes once."""
        if not expired:
            return
        kv, counts = self._kv, self.counts
        removed: set[bytes] = set()
        currents = kv.get_many([index for index, _ in expired])
        for (index, entry), current in zip(expired, currents, strict=True):
            if current == entry and index not in removed:
                removed.add(index)
                kv.delete(index)
                counts.remembered -= 1
                counts.in_advance -= entry.startswith(_IN_ADVANCE_PREFIX)

    # -- ticks ------------------------------------------------------------------

    def begin_tick(
        self, second: int, hold: AbstractSet[str] = frozenset(), since: float = 0.0
    ) -> list[Timer] | None:
        """Collect every pending timer due at or before ``second``.

        Returns ``None`` for a tick already seen (duplicates from redundant oscillators,
        redelivery after a restart). A gap since the last tick is caught up, not skipped:
        the scan starts right after the last second fully fired. Cost is one seek plus
        the timers returned, never the number pending.

        Timers whose callback topic is in ``hold`` (rate-limited or paused topics) are
        held at once, as :meth:`hold` would hold them (``since`` is the time they are
        held from), and not returned. They are told apart by their topic alone and
        unpacked once, when :meth:`take_held` releases them: unpacking them here too
        was a third of a held timer's cost.
        """
        if self.ticked_through is not None and second <= self.ticked_through:
            return None
        start = 0 if self.fired_through is None else self.fired_through + 1
        self.ticked_through = second
        timers = []
        slots: dict[tuple[str, int], int] = {}
        series: set[str] = set()
        series_stored: dict[str, bytes] = {}
        held, order, behind = self._held, self._held_order, self._behind
        for key, value in self._kv.scan(bucket_floor(start), bucket_floor(second + 1)):
            if behind and parse_timer_key(key)[1] in behind:
                continue  # delivered already (a reload's rescan): forgotten later
            if hold and (topic := stored_topic(value)) in hold:
                slot, timer_id = parse_timer_key(key)
                queue = held.get(topic)  # _held_queue inline: this runs for every timer held
                if queue is None:
                    queue = held[topic] = HeldQueue()
                queue.push((slot, next(order), timer_id, since))
                continue
            timer = unpack_timer(value)
            timers.append(timer)
            if timer.recurrence is not None or timer.spread:
                if timer.recurrence is not None:
                    series.add(timer.id)
                    series_stored[timer.id] = value
                slot = timer_key_second(key)
                if slot != timer.due:  # a catch-up occurrence, or a spread timer, keyed
                    slots[(timer.id, timer.due)] = slot  # under a later second
        if self._paused:
            timers = self._park_paused(timers, slots)
            series.intersection_update(t.id for t in timers)
        self._in_flight = {t.id for t in timers}
        self._in_flight_series = series
        self._slots = slots
        self._series_stored = series_stored
        return timers

    def finish_tick(
        self,
        second: int,
        fired: list[Timer],
        successors: Mapping[str, Timer] | None = None,
        *,
        forget_taken_later: bool = False,
    ) -> None:
        """Forget ``fired`` (all delivered) and advance ``fired_through`` to ``second``.

        ``successors`` holds, by id, the next occurrence of each fired series that goes
        on: it replaces the fired one (and its index entry stays ``P``). A series
        without one has ended.

        ``forget_taken_later``: the one-shot timers this round took from the held ones
        may be left for :meth:`forget_behind` (up to :data:`BEHIND_MAX`), so that a
        limited topic's rounds deliver at the limit while the forgetting (a delete and
        two writes each: 38 µs of a limited timer's 90 µs of worker CPU, measured)
        follows in the rounds' spare time, as a tick's burst delivers all its
        callbacks before forgetting any. Only where a crash may deliver twice anyway
        (at-least-once mode).
        """
        if forget_taken_later and self._taken_ids:
            fired = self._leave_behind(fired)
        if self._stale_delivered:
            for key in self._stale_delivered:
                self._kv.delete(key)
            self._stale_delivered = []
        self._forget(fired, self._slots, successors, second)
        self._sweep(second)
        if self.forecast is not None:
            self.forecast.advance(second, self._kv.scan)
        persisted = self._persisted_through
        # Held timers stay pending below the scan: the persisted watermark stays under the
        # oldest of them, so a reload (a restart, a new owner) scans them again.
        waiting = self._oldest_waiting() if self._held or self._parked or self._behind else None
        mark = second if waiting is None else min(second, waiting - 1)
        if mark != persisted and (
            fired or persisted is None or mark - persisted >= WATERMARK_PERSIST_INTERVAL
        ):
            self._kv.put(WATERMARK, b"%d" % mark)
            self._persisted_through = mark
        self.fired_through = second
        self._end_round()

    def _end_round(self) -> None:
        """Forget what the round in flight took and read (finished or aborted)."""
        self._taken = False
        self._taken_ids = set()
        self._in_flight = set()
        self._in_flight_series = set()
        self._slots = {}
        self._series_stored = {}

    def _forget(
        self,
        fired: Sequence[Timer | _Behind],
        slots: Mapping[tuple[str, int], int],
        successors: Mapping[str, Timer] | None,
        second: int,
        *,
        settled: bool = False,
    ) -> None:
        """Remove the delivered ``fired`` from the store: each one-shot timer's key goes,
        its index entry becomes fired and is remembered; a series with a successor in
        ``successors`` stores it in place of the fired occurrence (keyed after
        ``second``). ``slots``: the key second of those stored under another than their
        due (see :meth:`_slot_for`).

        ``settled``: every one of ``fired`` is known to be still the pending version its
        index entry names, so the entries are not read. True of timers left behind
        (:meth:`forget_behind`): whatever would change an id's index entry first reads
        it through :meth:`_index` or :meth:`schedule`, and both forget a timer left
        behind before they go on. That read was a random one per timer (ids hash all
        over the index), the costliest step of forgetting: 18% of a worker's samples
        while it forgot a limited burst (py-spy, 300,000 timers)."""
        kv = self._kv
        forecast = self.forecast
        # Every fired timer's index entry in one multi-get (each id is fired once in a
        # round, and the loop writes only the index entries of ids it has read already).
        if settled:
            entries: Iterable[bytes | None] = repeat(None, len(fired))
        else:
            entries = kv.get_many([index_key(timer.id) for timer in fired]) if fired else []
        # Each id is encoded once for its keys. The ids that end here are remembered in
        # expiry batches, written after the loop (app.core.expiry_batch).
        ids = [timer.id.encode() for timer in fired]
        ended_entries: list[expiry_batch.Entry] = []
        paused, put, delete = self._paused, kv.put, kv.delete
        last_slot, slot_prefix = None, b""
        for timer, id_bytes, indexed in zip(fired, ids, entries, strict=True):
            due = timer.due
            slot = slots.get((timer.id, due), due) if slots else due
            if slot != last_slot:  # a round's timers share one second, or a few
                last_slot, slot_prefix = slot, timer_key_prefix(slot)
            key = slot_prefix + id_bytes
            # Still the entry this occurrence was stored with, compared as bytes (the
            # entry is always written by _pending_entry): no decode per fired timer.
            current = settled or indexed == _pending_entry(slot, timer.token)
            # else a reschedule or cancel while it was being delivered already removed it
            successor = successors.get(timer.id) if current and successors else None
            if forecast is not None:  # its key goes now (unless a cancel took it already)
                if current:
                    forecast.remove(slot, timer.id, timer.topic)
                else:
                    forecast.discard(slot, timer.id, kv.get)
            if successor is not None:
                # A series goes on: its next occurrence replaces this one, the index entry
                # stays pending (and is never remembered or expired while the series lives).
                self._store_occurrence(
                    successor,
                    max(successor.fire_at, second + 1),
                    self._series_stored.get(timer.id),
                )
                delete(key)  # after its successor is written: never neither
                continue
            delete(key)
            if current:
                # A one-shot timer, or a series that ended: terminal, remembered for the
                # window under its version's due second, then expired. What _terminal
                # does for an entry that was pending, inline: this runs once a timer
                # (its key counts are added up after the loop).
                if paused and timer.id in paused:  # a paused timer's key goes with it
                    self._unpause(timer.id)
                encoded = b"F%012d" % timer.version_due + timer.token.encode()
                put(INDEX + id_bytes, encoded)
                ended_entries.append((id_bytes, encoded))
        if ended_entries:
            ended = len(ended_entries)
            counts = self.counts
            counts.timers -= ended
            counts.pending -= 2 * ended
            counts.remembered += ended + self._put_expiry_batches(ended_entries)

    def _batch_due(self, expiry: int) -> None:
        """A batch not swept expires at ``expiry``: the sweep looks for batches from then."""
        if self._next_batch_expiry is None or expiry < self._next_batch_expiry:
            self._next_batch_expiry = expiry

    def _put_expiry_batches(self, entries: Sequence[expiry_batch.Entry]) -> int:
        """Remember ``entries`` (ids that end now, with their terminal index entries) until
        the window ends, in expiry batches; return how many batch keys were written.

        A batch is keyed by its first id, and a key that exists already (that id ended
        twice in one second) is never overwritten: the new batch's key gets a zero byte
        more, so the ids of neither are lost to the sweep."""
        kv = self._kv
        expiry = self._now() + self._memory
        self._batch_due(expiry)
        if self._batch_written is None or expiry < self._batch_written:
            self._batch_written = expiry
        written = 0
        for batch in expiry_batch.chunks(entries):
            key = expiry_batch_key(expiry, batch[0][0])
            while kv.get(key) is not None:
                key += b"\x00"
            kv.put(key, expiry_batch.pack(batch))
            written += 1
        return written

    # -- forgetting behind delivery (at-least-once mode) --------------------------------

    def _leave_behind(self, fired: list[Timer]) -> list[Timer]:
        """Of a round's ``fired``, move the one-shot timers taken from the held ones to
        :attr:`_behind` while there is room; return the ones to forget now.

        With :data:`BEHIND_MAX` reached, room is made first by forgetting the oldest left
        behind (:meth:`_forget_oldest_behind`), as many as this round would leave: the same
        forgetting as this round's own, but without reading index entries (a random
        read each). A limited backlog of a million timers reached the cap after 17 s
        and then forgot each round's own, with those reads, inside the delivery.
        """
        taken, behind = self._taken_ids, self._behind
        room = BEHIND_MAX - len(behind)
        if room < len(fired) and behind:
            wanted = sum(1 for t in fired if t.id in taken and t.recurrence is None)
            if wanted > room:
                self._forget_oldest_behind(wanted - room)
                room = BEHIND_MAX - len(behind)
        if room <= 0:
            return fired
        leaving = [t for t in fired if t.id in taken and t.recurrence is None]
        if len(leaving) == len(fired) and room >= len(fired):
            # A limited round: every one taken from the held ones, with room for all.
            self._record_behind(leaving)
            return []
        if len(leaving) > room:
            leaving = leaving[:room]  # the oldest go behind, as a round delivered them
        chosen = {id(t) for t in leaving}
        if leaving:
            self._record_behind(leaving)
        return [t for t in fired if id(t) not in chosen]

    def _record_behind(self, leaving: list[Timer]) -> None:
        """Leave ``leaving`` (one-shot timers just delivered) to be forgotten later, and
        record them in the store, in batches of up to 256 (``L`` keys, in write order):
        a reload finds them there (:meth:`_load_behind`), so neither a stop nor a crash
        after this round's unit delivers them again. About a microsecond a timer, where
        forgetting one costs 15-25."""
        behind, order = self._behind, self._behind_order
        slot_counts, slots = self._behind_slots, self._slots
        new = tuple.__new__  # a _Behind without its Python-level constructor: one a timer
        put, batch_left = self._kv.put, self._batch_left
        # Each one's key second, once: a one-shot timer's due is its version_due.
        if slots:
            keyed = [slots.get((t.id, t.due), t.due) for t in leaving]
        else:
            keyed = [t.due for t in leaving]
        # Each one's pending index entry (_pending_entry), its prefix formatted once a
        # slot: a round's timers share one second, or a few.
        prefixes = {slot: _pending_prefix(slot) for slot in set(keyed)}
        recorded: list[expiry_batch.Entry] = [
            (timer.id.encode(), prefixes[slot] + timer.token.encode())
            for timer, slot in zip(leaving, keyed, strict=True)
        ]
        at = 0
        for chunk in expiry_batch.chunks(recorded):
            key = delivered_batch_key(self._next_delivered)
            self._next_delivered += 1
            put(key, expiry_batch.pack(chunk))
            batch_left[key] = len(chunk)
            end = at + len(chunk)
            for timer, slot in zip(leaving[at:end], keyed[at:end], strict=True):
                timer_id, due = timer.id, timer.due
                behind[timer_id] = new(
                    _Behind, (timer_id, due, timer.token, timer.topic, due, slot, key)
                )
            at = end
        order.extend([timer.id for timer in leaving])
        for slot, n in Counter(keyed).items():
            slot_counts[slot] = slot_counts.get(slot, 0) + n

    @property
    def behind(self) -> int:
        """Delivered held timers not yet forgotten (:meth:`forget_behind`)."""
        return len(self._behind)

    @property
    def delivered_batches(self) -> int:
        """Store keys recording timers delivered and left behind (``L``): bookkeeping."""
        return len(self._batch_left) + len(self._stale_delivered)

    def forget_behind(self, n: int) -> int:
        """Forget up to ``n`` of the delivered timers left behind, oldest first; return
        how many. Once none is left (and nothing waits), the watermark moves up."""
        behind = self._behind
        forgotten = self._forget_oldest_behind(n)
        if not behind:
            self._behind_order.clear()
            through = self.fired_through
            if (
                through is not None
                and not self._held
                and not self._parked
                and self._persisted_through != through
            ):
                self._kv.put(WATERMARK, b"%d" % through)
                self._persisted_through = through
        return forgotten

    def _forget_oldest_behind(self, n: int) -> int:
        """Forget up to ``n`` of the timers left behind, oldest first; return how many.
        The watermark is the caller's (a round's :meth:`finish_tick` keeps it below the
        timers it leaves behind in their place)."""
        behind, order = self._behind, self._behind_order
        batch: list[_Behind] = []
        while order and len(batch) < n:
            entry = behind.pop(order.popleft(), None)
            if entry is not None:  # else forgotten already, when its id was touched
                batch.append(entry)
        self._forget_entries(batch)
        return len(batch)

    def _forget_entries(self, batch: list[_Behind]) -> None:
        if not batch:
            return
        slot_counts, batch_left = self._behind_slots, self._batch_left
        slots: dict[tuple[str, int], int] = {}
        for entry in batch:
            left = slot_counts[entry.slot] - 1
            if left:
                slot_counts[entry.slot] = left
            else:
                del slot_counts[entry.slot]
            if entry.slot != entry.due:
                slots[(entry.id, entry.due)] = entry.slot
            left = batch_left[entry.batch] - 1
            if left:
                batch_left[entry.batch] = left
            else:  # the last of its batch: the record goes with it, in the same unit
                del batch_left[entry.batch]
                self._kv.delete(entry.batch)
        self._forget(batch, slots, None, self._now(), settled=True)

    def _settle(self, timer_id: str) -> None:
        """Forget ``timer_id`` now if it was delivered and left behind: whatever asks
        about an id (a request for it, a cancel, a pause, a lookup) then finds it fired."""
        entry = self._behind.pop(timer_id, None)
        if entry is not None:
            self._forget_entries([entry])

    def abort_tick(self) -> None:
        """Delivery failed: keep it all pending; the next tick retries from ``fired_through``.

        With timers held (or taken from the held ones this round, or delivered and left
        behind), the wheel forgets them and the next tick scans again from the persisted
        watermark, as a reload would: they are all still in the store, above it (those
        left behind are delivered again: at least once).
        """
        if self._held or self._taken or self._behind:
            self._held = {}
            self.fired_through = self._persisted_through
            # What earlier rounds delivered and recorded stays delivered: read back
            # from their records, as a reload would, and skipped by the rescan.
            self._load_behind()
        self._end_round()

    # -- gates: due timers held back (app.worker.topic_gates) ---------------------------

    def hold(self, timers: Sequence[Timer], since: float) -> None:
        """Keep ``timers`` (due, from the current :meth:`begin_tick`) pending: a gate holds
        them back. They are delivered later through :meth:`take_held`, in key order; until
        then a cancel or a reschedule finds them as any pending timer."""
        in_flight, series, slots = self._in_flight, self._in_flight_series, self._slots
        order = self._held_order
        for timer in timers:
            in_flight.discard(timer.id)
            series.discard(timer.id)
            slot = slots.get((timer.id, timer.due), timer.due)
            self._held_queue(timer.topic).push((slot, next(order), timer.id, since))

    def hold_due(self, timer: Timer, since: float) -> None:
        """Store ``timer``, already due (a request for a second ticked already), held back
        at once instead of fired: keyed under its due second, and the persisted
        watermark moved below it in the same unit, so a reload scans it again."""
        was = self._index(timer.id)
        self._store_occurrence(timer, timer.due)
        self._count_stored(was=was)
        persisted = self._persisted_through
        if persisted is not None and timer.due <= persisted:
            self._kv.put(WATERMARK, b"%d" % (timer.due - 1))
            self._persisted_through = timer.due - 1
        self._held_queue(timer.topic).push((timer.due, next(self._held_order), timer.id, since))

    def _held_queue(self, topic: str) -> HeldQueue:
        queue = self._held.get(topic)
        if queue is None:
            queue = self._held[topic] = HeldQueue()
        return queue

    def take_held(self, topic: str, n: int | None) -> list[HeldTimer]:
        """Up to ``n`` (``None``: all) held timers of ``topic``, oldest key first, to
        deliver in this round (then :meth:`finish_tick` forgets them like fired ones).

        Read back from the store: one a cancel or a reschedule removed meanwhile is
        dropped here (every path that points an id's index entry elsewhere deletes the
        key it pointed at, so a key still there is the pending version, exactly as
        :meth:`begin_tick`'s scan finds it; :meth:`finish_tick` checks the index once
        more), and an id held twice (a request sent again while held) goes out once.
        One read per timer, in batches of up to :data:`TAKE_BATCH` (a scan each:
        :meth:`_read_clustered`), and one unpack.
        """
        queue = self._held.get(topic)
        if not queue:
            return []
        taken: list[HeldTimer] = []
        in_flight, paused, taken_ids = self._in_flight, self._paused, self._taken_ids
        behind = self._behind
        while queue and (n is None or len(taken) < n):
            # A batch of candidates, read with one scan: as many as are still wanted
            # (each may turn out cancelled), at most TAKE_BATCH at once.
            want = TAKE_BATCH if n is None else min(TAKE_BATCH, n - len(taken))
            batch: list[HeldEntry] = []
            chosen: set[str] = set()
            while queue and len(batch) < want:
                entry = queue.pop()
                timer_id = entry[2]
                if timer_id in in_flight:
                    continue  # held twice: it goes out once
                if behind and timer_id in behind:
                    # Held twice, the other delivered in an earlier round and left
                    # behind: its key is still there until forgotten, and is that
                    # delivery's (a request for the id would have forgotten it first).
                    continue
                if timer_id in chosen:  # decided once the batch's read tells which is live
                    queue.put_back(entry)
                    break
                if paused and timer_id in paused:  # paused while held: waits for its resume
                    self._park(timer_id, entry[0], topic, entry[3])
                    continue
                batch.append(entry)
                chosen.add(timer_id)
            raws = self._read_clustered(
                [timer_key(slot, timer_id) for slot, _, timer_id, _ in batch]
            )
            for (slot, _, _, since), raw in zip(batch, raws, strict=True):
                if raw is None:
                    continue  # cancelled or rescheduled while held
                timer = unpack_timer(raw)
                taken.append((timer, since))
                in_flight.add(timer.id)
                if timer.recurrence is not None:
                    self._in_flight_series.add(timer.id)
                else:
                    taken_ids.add(timer.id)
                if slot != timer.due:
                    self._slots[(timer.id, timer.due)] = slot
        if not queue:
            del self._held[topic]
        if taken:
            self._taken = True
        return taken

    def _read_clustered(self, keys: list[bytes]) -> list[bytes | None]:
        """The values of ``keys`` (``None`` where absent), keys that sit together in the
        store, as a batch of held timers does (taken in key order from one due second,
        or a few): read with one scan of their range.

        Why: a worker's RocksDB (small write buffers and block cache) reads a key in a
        multi-get for about 3 µs and walks to the next for about 1 (measured, 37,500
        held timers a partition), and the multi-get of each round's held timers was a
        tenth of a worker's samples (py-spy) in a burst to a limited topic. The walk
        stops after twice as many keys as it looks for (other topics' held timers may
        sit between them); the keys past where it stopped are then read with a
        multi-get, so a batch spread thin costs at most that walk more. Takes run
        between units, with no local writes deferred, so a scan sees what a read sees.
        """
        if not keys:
            return []
        kv = self._kv
        limit = 2 * len(keys)
        # dict() drains the scan in C; in key order, so its last key is the walk's end.
        walked: dict[bytes, bytes | None] = dict(
            islice(kv.scan(min(keys), max(keys) + b"\x00"), limit)
        )
        if len(walked) == limit:  # stopped short: read what lies past its last key
            last = next(reversed(walked))
            rest = [key for key in keys if key > last]
            walked.update(zip(rest, kv.get_many(rest), strict=True))
        return [walked.get(key) for key in keys]

    def _drop_behind(self) -> None:
        self._behind = {}
        self._behind_order = deque()
        self._behind_slots = {}
        self._batch_left = {}

    def _load_behind(self) -> None:
        """Read back what earlier rounds delivered and left to forget (``L`` batches,
        :meth:`_record_behind`), oldest first: each timer whose index entry is still the
        pending one it was delivered as, and whose key is still there, is left behind
        again (to be forgotten, never delivered again); the rest were forgotten (or
        replaced) since. A batch that is not one (a foreign write) is left alone.

        A record names each timer by the pending index entry it was delivered as (its
        second and token), so a version stored since is not taken for it: a request
        with the same token and second is a duplicate while the fired entry is
        remembered (the memory window, a week), and a record's batch goes once its
        last timer is forgotten, seconds after the round in a running worker."""
        self._drop_behind()
        self._stale_delivered = []
        kv = self._kv
        behind, order, slot_counts = self._behind, self._behind_order, self._behind_slots
        last = -1
        for key, value in kv.scan(DELIVERED, DELIVERED_END):
            try:
                seq = delivered_batch_seq(key)
                recorded = expiry_batch.unpack(value)
                slots = [_IndexEntry.decode(entry).due for _, entry in recorded]
            except ValueError:
                continue
            last = max(last, seq)
            entries = kv.get_many([INDEX + timer_id for timer_id, _ in recorded])
            keys = [
                timer_key_prefix(slot) + timer_id
                for (timer_id, _), slot in zip(recorded, slots, strict=True)
            ]
            values = kv.get_many(keys)
            live = 0
            for (_, entry), slot, current, raw in zip(
                recorded, slots, entries, values, strict=True
            ):
                if current != entry or raw is None:
                    continue  # forgotten, or replaced, since
                try:
                    timer = unpack_timer(raw)
                except (ValueError, struct.error):
                    continue  # the rescan meets it as any pending timer
                timer_id = timer.id
                if timer_id in behind:
                    continue
                behind[timer_id] = _Behind(
                    timer_id, timer.due, timer.token, timer.topic, timer.due, slot, key
                )
                order.append(timer_id)
                slot_counts[slot] = slot_counts.get(slot, 0) + 1
                live += 1
            if live:
                self._batch_left[key] = live
            else:
                self._stale_delivered.append(key)
        self._next_delivered = max(self._next_delivered, last + 1)

    def held_topics(self) -> list[str]:
        """Callback topics this partition holds timers of."""
        return list(self._held)

    def held_count(self, topic: str) -> int:
        """Timers of ``topic`` held (cancelled ones not yet dropped included)."""
        return len(self._held.get(topic, ()))

    @property
    def holding(self) -> bool:
        """Whether any timer is held."""
        return bool(self._held)

    def _oldest_held(self) -> int:
        return min(queue.oldest_slot() for queue in self._held.values())

    def iter_pending(self, from_second: int = 0) -> Iterator[Timer]:
        """Pending timers in due order from ``from_second`` on (read-only, for status)."""
        for _, value in self.scan_pending(bucket_floor(from_second)):
            yield unpack_timer(value)

    def scan_pending(
        self, low: bytes = PENDING, high: bytes = PENDING_END
    ) -> Iterator[tuple[bytes, bytes]]:
        """Pending timers' store keys and values with ``low <= key < high``, clamped to
        their range, in key order (read-only: ``kafka-timers list``, bulk cancels).
        Timers delivered but not yet forgotten (:meth:`forget_behind`) are left out:
        they have fired."""
        scan = self._kv.scan(max(low, PENDING), min(high, PENDING_END))
        return self._skip_behind(scan) if self._behind else scan

    def _skip_behind(self, scan: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        behind = self._behind
        for key, value in scan:
            if not behind or parse_timer_key(key)[1] not in behind:
                yield key, value

    def iter_due(self, from_second: int = 0) -> Iterator[tuple[int, str]]:
        """``(due, id)`` of pending timers in due order, from the keys alone (no unpacking)."""
        for key, _ in self.scan_pending(bucket_floor(from_second)):
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
        """Number of stored timers; O(pending), so only for start-up and status.

        Each timer's layout version is checked on the way (one byte): a partition holding
        a timer a later release wrote is refused as it is loaded, before anything of it
        fires (:class:`~app.core.stored.StoredLayoutTooNew`).
        """
        count = 0
        for _, value in self._kv.scan(PENDING, PENDING_END):
            check_layout(value)
            count += 1
        return count

    def recount(self) -> KeyCounts:
        """Count the store's keys by kind from scratch: O(pending + remembered).

        Called once when a partition is loaded; every write keeps :attr:`counts` exact
        after that.
        """
        timers = self.count_pending()
        pending_index = terminal_index = in_advance = 0
        for _, value in self._kv.scan(INDEX, INDEX_END):
            if value[:1] == _PENDING:
                pending_index += 1
            else:
                terminal_index += 1
                in_advance += value.startswith(_IN_ADVANCE_PREFIX)
        expiries = sum(1 for _ in self._kv.scan(EXPIRY, EXPIRY_END))
        expiries += sum(1 for _ in self._kv.scan(EXPIRY_BATCH, EXPIRY_BATCH_END))
        self._paused = {key[1:].decode() for key, _ in self._kv.scan(PAUSED, PAUSED_END)}
        self._parked = {}
        self._parked_floor = None
        self._load_behind()
        self.counts = KeyCounts(
            timers=timers,
            pending=timers + pending_index + len(self._paused),
            remembered=terminal_index + expiries,
            in_advance=in_advance,
        )
        if self.forecast is not None:
            self.forecast.rebuild(max(self._now(), int(self._clock())), self._kv.scan)
        return self.counts

    def _index(self, timer_id: str) -> _IndexEntry | None:
        if self._behind:
            self._settle(timer_id)
        raw = self._kv.get(index_key(timer_id))
        return None if raw is None else _IndexEntry.decode(raw)
