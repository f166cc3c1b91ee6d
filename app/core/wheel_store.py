"""A wheel's storage: the ordered store it runs on, its key counts, and the writes that
every one of its jobs shares (store an occurrence, end an id, read an id's entry).

:class:`WheelStore` is the base of :class:`app.core.wheel.PartitionWheel`: it declares
the partition's state in one place (each job's module sets and documents its own part)
and names the few methods one job calls in another (:meth:`WheelStore._settle` and the
like), so that each job's module reads alone. The key layout is :mod:`app.core.keys`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import count
from typing import NamedTuple, Protocol

from app.core.forecast import PartitionForecast
from app.core.held import HeldQueue
from app.core.keys import (
    EXPIRY,
    EXPIRY_BATCH,
    IN_ADVANCE_PREFIX,
    INDEX,
    INDEX_CANCELLED,
    INDEX_PENDING,
    PAUSED,
    PENDING,
    WATERMARK,
    IndexEntry,
    expiry_key,
    index_key,
    pending_index_entry,
    timer_key,
)
from app.core.quotas import PartitionQuotas
from app.core.stored import pack_next_occurrence, pack_timer
from app.core.timer import Timer

__all__ = ["Behind", "KeyCounts", "OrderedKV", "Parked", "WheelStore", "key_kind"]


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


def key_kind(key: bytes, value: bytes) -> str:
    """Which kind of store key this is: ``pending``, ``remembered`` or ``bookkeeping``.

    The same classification :class:`KeyCounts` keeps, for code that reads a store (or a
    changelog) from outside: benchmarks, tests, tools.
    """
    prefix = key[:1]
    if prefix in (PENDING, PAUSED) or (prefix == INDEX and value[:1] == INDEX_PENDING):
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
    #: ``remembered``): what ``DEFAULT_MAX_CANCELS_IN_ADVANCE`` caps.
    in_advance: int = 0


class Parked(NamedTuple):
    """A paused timer that came due: it waits here (and in the store) until resumed."""

    slot: int
    topic: str
    since: float


class Behind(NamedTuple):
    """A held timer delivered whose forgetting is behind: what forgetting it needs (the
    fields of :class:`Timer` that the forgetting reads), not its payload."""

    id: str
    due: int
    token: str
    topic: str
    version_due: int
    slot: int
    #: The key of the batch (``L``) that records it in the store, until it is forgotten.
    batch: bytes


class WheelStore:
    """The partition's state, declared once, and the store writes its jobs share."""

    # -- storage (set here) ------------------------------------------------------------
    _kv: OrderedKV
    #: Pending timers per topic and future minute/hour, told of every store and
    #: removal (app.core.forecast); None: not kept.
    forecast: PartitionForecast | None
    #: Pending timers per quota key, told of every store and removal by id
    #: (app.core.quotas); None: no quota is set, nothing is counted.
    quotas: PartitionQuotas | None
    _memory: int
    _max_in_advance: int
    #: "Now" before this partition has seen a tick (a cancel can come first).
    _clock: Callable[[], float]
    #: Store keys by kind; exact after ``recount``, then kept up to date.
    counts: KeyCounts
    #: Every timer due at or before this second has fired and been forgotten.
    fired_through: int | None
    #: What the store's ``W`` key says (at or below ``fired_through``).
    _persisted_through: int | None
    #: Ticks seen up to this second: a request due at or before it fires at once.
    #: Ahead of ``fired_through`` while a tick's timers are being delivered.
    ticked_through: int | None
    # -- the round in flight (app.core.wheel_tick) -------------------------------------
    _in_flight: set[str]
    _in_flight_series: set[str]
    _fired_at_once: set[str]
    _superseded: set[str]
    _slots: dict[tuple[str, int], int]
    _series_stored: dict[str, bytes]
    _taken: bool
    _taken_ids: set[str]
    # -- held timers (app.core.wheel_held) ---------------------------------------------
    _held: dict[str, HeldQueue]
    _held_order: count[int]
    # -- behind: delivered, forgotten later (app.core.wheel_behind) --------------------
    _behind: dict[str, Behind]
    _behind_order: deque[Behind]
    _behind_slots: dict[int, int]
    _batch_left: dict[bytes, int]
    _next_delivered: int
    _stale_delivered: list[bytes]
    # -- paused and parked (app.core.wheel_pause) --------------------------------------
    _paused: set[str]
    _parked: dict[str, Parked]
    _parked_floor: int | None

    def _init_store(
        self,
        kv: OrderedKV,
        memory_seconds: int,
        clock: Callable[[], float],
        max_cancels_in_advance: int,
        forecast: PartitionForecast | None,
        quotas: PartitionQuotas | None = None,
    ) -> None:
        self._kv = kv
        self.forecast = forecast
        self.quotas = quotas
        self._memory = memory_seconds
        self._max_in_advance = max_cancels_in_advance
        self._clock = clock
        self.counts = KeyCounts()
        raw = kv.get(WATERMARK)
        self.fired_through = int(raw) if raw is not None else None
        self._persisted_through = self.fired_through
        self.ticked_through = self.fired_through

    # -- what one job calls in another -------------------------------------------------

    def _settle(self, timer_id: str) -> None:
        """Forget ``timer_id`` now if it was delivered and left behind (wheel_behind)."""
        raise NotImplementedError

    def _unpause(self, timer_id: str) -> None:
        """Drop ``timer_id``'s pause and its ``S`` key (wheel_pause)."""
        raise NotImplementedError

    def _forget(
        self,
        fired: Sequence[Timer | Behind],
        slots: Mapping[tuple[str, int], int],
        successors: Mapping[str, Timer] | None,
        second: int,
        *,
        settled: bool = False,
    ) -> None:
        """Remove the delivered ``fired`` from the store (wheel_tick)."""
        raise NotImplementedError

    def _park(self, timer_id: str, slot: int, topic: str, since: float) -> None:
        """Park the paused ``timer_id``, come due (wheel_pause)."""
        raise NotImplementedError

    def _park_paused(self, timers: list[Timer], slots: dict[tuple[str, int], int]) -> list[Timer]:
        """Of a scan's due ``timers``, those to deliver: paused ones are parked (wheel_pause)."""
        raise NotImplementedError

    def _oldest_parked(self) -> int | None:
        """The oldest slot of a parked timer, or None (wheel_pause)."""
        raise NotImplementedError

    def _held_queue(self, topic: str) -> HeldQueue:
        """The held queue of ``topic``, made if need be (wheel_held)."""
        raise NotImplementedError

    def _oldest_held(self) -> int:
        """The oldest slot of a held timer; only while any is held (wheel_held)."""
        raise NotImplementedError

    def _leave_behind(self, fired: list[Timer]) -> list[Timer]:
        """Leave what may be forgotten later; return what to forget now (wheel_behind)."""
        raise NotImplementedError

    def _load_behind(self) -> None:
        """Read back what earlier rounds left behind (wheel_behind)."""
        raise NotImplementedError

    # -- shared reads and writes -------------------------------------------------------

    def _now(self) -> int:
        """The partition's time: its newest tick, or the clock before the first tick."""
        if self.ticked_through is not None:
            return self.ticked_through
        return int(self._clock())

    def _slot_for(self, due: int) -> int:
        """The second to key an occurrence due at ``due`` under: its own, or the next
        tick's if that second has been ticked already (scans never look back)."""
        if self.ticked_through is not None and due <= self.ticked_through:
            return self.ticked_through + 1
        return due

    def _index(self, timer_id: str) -> IndexEntry | None:
        """``timer_id``'s index entry, after forgetting it if it was left behind."""
        if self._behind:
            self._settle(timer_id)
        raw = self._kv.get(index_key(timer_id))
        return None if raw is None else IndexEntry.decode(raw)

    def _store_occurrence(
        self,
        occurrence: Timer,
        slot: int,
        previous: bytes | None = None,
        index_at: bytes | None = None,
    ) -> None:
        # The new key before the index that points at it: a crash in between leaves an
        # occurrence that fires, never an index entry that points nowhere. (Key counts
        # are the caller's: in finish_tick one timer key replaces another.) ``previous``:
        # the stored bytes of the occurrence before it, if at hand (a series' fire);
        # ``index_at``: the id's index key, if the caller has it already (a request).
        packed = (
            pack_timer(occurrence)
            if previous is None
            else pack_next_occurrence(previous, occurrence)
        )
        kv = self._kv
        kv.put(timer_key(slot, occurrence.id), packed)
        kv.put(index_at or index_key(occurrence.id), pending_index_entry(slot, occurrence.token))
        if self.forecast is not None:
            self.forecast.add(slot, occurrence.id, occurrence.topic)
        if self.quotas is not None:
            self.quotas.stored(occurrence)

    def _count_stored(self, was: IndexEntry | None) -> None:
        """Key counts after a timer was stored whose id's index entry was ``was``."""
        counts = self.counts
        counts.timers += 1
        counts.pending += 1
        if was is None:
            counts.pending += 1
        elif was.state != INDEX_PENDING:  # a new version of a remembered id: pending again
            counts.remembered -= 1
            counts.pending += 1
            if was.state == INDEX_CANCELLED and was.due == 0:
                counts.in_advance -= 1

    def _terminal(
        self,
        timer_id: str,
        entry: IndexEntry,
        was: IndexEntry | None,
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
        elif was.state == INDEX_PENDING:
            counts.pending -= 1
            counts.remembered += 1
        counts.in_advance += encoded.startswith(IN_ADVANCE_PREFIX) - (
            was is not None and was.state == INDEX_CANCELLED and was.due == 0
        )
        self._kv.put(index_key(timer_id), encoded)
        self._kv.put(expiry, encoded)
