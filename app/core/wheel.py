"""The timer wheel of one partition: pure logic over an ordered key-value store.

One bucket per second, as in a classic timer wheel, laid out in an ordered store so
that every operation is O(1) amortized in the number of timers sharing a second (the
key layout is :mod:`app.core.keys`): pending timers sort by due second, so "everything
due up to S" is one range scan that starts where the last one ended. The id index
holds the state of the newest version of each timer — ``P`` pending, ``F`` fired,
``C`` cancelled — with its due second and token: reschedules and cancels find the
pending entry through it, and late duplicates are recognised.

A worked example. ``schedule(a, due=100)`` writes ``T…100\0a`` and ``I a = P…100``.
A tick for second 99 scans ``T…0`` to ``T…100`` (exclusive) and finds nothing; the
tick for 100 scans from ``T…100`` and returns ``a``; once it is delivered,
``finish_tick(100, [a])`` deletes ``T…100\0a``, writes ``I a = F…100``, remembers it in
an expiry batch (``V<100 + window>``) and moves the watermark to 100. A request for ``a``
due 100 again is then a duplicate; the tick at ``100 + window`` sweeps ``I a`` away.

A series (a timer with a recurrence) is stored as its next occurrence only. Its index
entry stays ``P`` for as long as the series lives, with the second its occurrence is
stored under; after each fire :meth:`finish_tick` stores
the next occurrence in place of the fired one (same unit of work), and only when the
series ends does the entry become ``F``, with occurrence 1's due second (the version's
identity). An occurrence stored already due (catch-up left for the next tick) is keyed
under the next tick's second, since scans only go forward, and keeps its true due in its
value. A spread timer (:mod:`kafka_timers_client.spread`) is keyed the same way under the second it
fires at (:attr:`Timer.fire_at`, in ``[due, due + spread]``), keeping its requested due
in its value: the index points at that key, so cancels, reschedules and lookups find
it, and the version's identity (fired, cancelled) stays its requested due.

State stays O(pending): a fired or cancelled id is remembered for a bounded window
(``memory_seconds``, 7 days by default), long enough to recognise a redelivered request
and a cancel that arrives before its request, then swept (:mod:`app.core.expiry_sweep`).
Cost: a terminal write of the index entry and a share of an expiry batch (a cancel: an
expiry key) when an id ends, and the index entry's tombstone when it expires, O(1) per
timer. Expiry counts in the partition's tick seconds (the clock only before its first
tick), so the window is the same for every worker that ever owns the partition.

Glossary:

slot
    the second a pending timer's key is stored under: its due second, or later for a
    catch-up occurrence (the next tick's) and a spread timer (the second it fires at).
watermark
    ``fired_through``: every timer due at or before it has fired and been forgotten. Its
    persisted copy (the ``W`` key) stays below every timer still held, parked or behind,
    so a reload's first scan finds those again.
held
    due, but held back by a gate (a rate limit, a paused topic): pending in the store,
    delivered later in key order (:mod:`app.core.wheel_held`).
parked
    paused by its owner and come due: pending in the store until resumed, then held
    (:mod:`app.core.wheel_pause`).
behind
    held, delivered, and not yet forgotten: forgetting follows in the rounds' spare time
    (at-least-once mode, :mod:`app.core.wheel_behind`).
settled
    known to be still the pending version its index entry names, so forgetting it need
    not read the entry: true of timers behind, since whatever touches such an id
    forgets it first.

The parts, one job each: :mod:`app.core.wheel_rules` (what a request does: the token
rule, dedup, refusals; pure), :mod:`app.core.wheel_store` (the store, key counts and the
writes all jobs share), :mod:`app.core.wheel_tick` (scan and forget),
:mod:`app.core.wheel_held`, :mod:`app.core.wheel_behind`, :mod:`app.core.wheel_pause`
and :mod:`app.core.expiry_sweep`. :class:`PartitionWheel` composes them and takes the
requests. Nothing here knows about Kafka or Faust; :mod:`app.worker.partition_store`
adapts this to a Faust RocksDB table and its changelog, and the unit tests use an
in-memory store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from app.core.debounce import merge as merge_debounced
from app.core.expiry_sweep import EXPIRY_SWEEP_PER_TICK, ExpirySweep
from app.core.forecast import PartitionForecast
from app.core.keys import (
    EXPIRY,
    EXPIRY_BATCH,
    EXPIRY_BATCH_END,
    EXPIRY_END,
    IN_ADVANCE_PREFIX,
    INDEX,
    INDEX_CANCELLED,
    INDEX_END,
    INDEX_FIRED,
    INDEX_PENDING,
    PAUSED,
    PAUSED_END,
    PENDING,
    PENDING_END,
    IndexEntry,
    bucket_floor,
    index_key,
    parse_timer_key,
    timer_key,
)
from app.core.quotas import PartitionQuotas
from app.core.stored import check_layout, unpack_timer
from app.core.timer import Cancel, Timer
from app.core.wheel_behind import BehindJob
from app.core.wheel_extra import ExtraJob
from app.core.wheel_held import HeldJob, HeldTimer
from app.core.wheel_pause import PauseJob
from app.core.wheel_rules import (
    DUPLICATE,
    FIRE_NOW_NEW,
    FIRE_NOW_REPLACED,
    STORED_NEW,
    STORED_REPLACED,
    Accepted,
    Scheduled,
    cancel_ruling,
    schedule_refusal,
    series_restarted,
)
from app.core.wheel_store import KeyCounts, OrderedKV, key_kind
from app.core.wheel_tick import TickJob
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

#: How long a fired or cancelled id is remembered by default, seconds (7 days: as long
#: as the request topic the service creates keeps a request).
DEFAULT_MEMORY_SECONDS = 7 * 86400
#: Most cancels in advance (for ids with no timer yet) one partition remembers. Each is
#: two store keys of about the id's length plus 40 bytes, kept for the memory window: a
#: flood of cancels for ids that never come (5,000 with 1 KB ids made 10.5 MB of
#: changelog) stops growing here. Past it a cancel in advance is answered
#: ``not_remembered`` and counted; one repeated is not written again, so repeating it
#: never extends its window.
DEFAULT_MAX_CANCELS_IN_ADVANCE = 100_000
#: How :meth:`PartitionWheel.lookup` names an index entry's state.
_STATE_NAMES = {INDEX_PENDING: "pending", INDEX_FIRED: "fired", INDEX_CANCELLED: "cancelled"}


class PartitionWheel(TickJob, HeldJob, BehindJob, PauseJob, ExtraJob):
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
        quotas: PartitionQuotas | None = None,
    ) -> None:
        self._init_store(kv, memory_seconds, clock, max_cancels_in_advance, forecast, quotas)
        self._expiry = ExpirySweep(kv, self.counts, sweep_limit)
        self._init_round()
        self._init_held()
        self._init_behind()
        self._init_pause()
        #: One-shot ids fired at once by a request whose delivery is not yet marked
        #: (:meth:`mark_fired`): a cancel of one is too late, like one in a tick's round.
        self._fired_at_once: set[str] = set()

    # -- requests ---------------------------------------------------------------------

    def schedule(self, timer: Timer, *, reread: bool = False) -> Accepted:
        """Store ``timer`` (replacing an older version of its id), or say to fire it now.

        For a series, "fire it now" means its first occurrence; the caller then stores
        the next one with :meth:`store_successor`.

        ``reread``: the request is read again after a crash, and the store may hold the
        effects of requests after it already (a newer version of its id among them).
        Its second passed, it is then stored under the next tick's second instead of
        fired at once: the rest of the re-read (the newer version) replaces it as it
        did the first time, and if nothing does, it fires on the next tick.

        The token rule (:mod:`app.core.wheel_rules`): a token means it for every change. A
        pending timer stored with a token is replaced (rescheduled, given another payload or
        callback, imported over) only by a request carrying that very token; any other
        request for its id, token-less or with another token, is refused
        (:attr:`Scheduled.WRONG_TOKEN`) and changes nothing: the timer fires as it was, and
        a pause on it stays. A pending timer stored *without* a token is "cancel/replace by
        id" on purpose (etf1's schedules, a JSON request naming no token): any request for
        its id replaces it, one carrying a token included, and the new version is then
        protected by that token. A replace that is accepted is a new decision: it ends the
        old version's pause (so only the token's holder can end a pause this way, or anyone
        for a token-less timer, which anyone could cancel anyway). Fired and cancelled ids
        are not protected: their token guards the version that ended, and another version
        with another token is a new timer (an id reused), as before.

        A debounced request (``timer.debounce`` set) over a pending version is merged with
        it (:func:`app.core.debounce.merge`), under the same token rule: what is stored is
        the merged timer, and a request merged already (read again after a crash) stores
        nothing. Over a version a round is delivering, it starts a new debounce and the
        round still delivers the old one. A debounced timer restored whole (an import's
        request, :attr:`~app.core.debounce.Debounce.restored`) replaces the pending
        version as any reschedule does.
        """
        if self._behind:
            self._settle(timer.id)
        ikey = index_key(timer.id)
        raw = self._kv.get(ikey)
        index = IndexEntry.decode(raw) if raw is not None else None
        replaced = False
        if index is not None:
            refused = schedule_refusal(index, timer)
            if refused is not None:
                return refused
            if index.state == INDEX_PENDING:
                if timer.debounce is not None:
                    merged = self._debounced(timer, index.due)
                    if merged is None:
                        return STORED_REPLACED  # merged already: nothing to write again
                    timer = merged
                if (
                    timer.recurrence is not None
                    and index.token == timer.token
                    and series_restarted(self._stored(index.due, timer.id), timer)
                ):
                    return DUPLICATE
                if timer.id in self._in_flight:
                    # A debounced request starts a new debounce behind the fire under
                    # way; a restored one (an import) is a reschedule, as a plain one.
                    debounce = timer.debounce
                    keep_firing = debounce is not None and not debounce.restored
                    self._replaced_in_flight(timer.id, keep_firing=keep_firing)
                self._drop_pending(timer.id, index.due)
                replaced = True
        fire_at = timer.fire_at if timer.spread else timer.due  # the property's shortcut
        if reread:
            fire_at = self._slot_for(fire_at)
        elif self.ticked_through is not None and fire_at <= self.ticked_through:
            if replaced:
                self._kv.delete(ikey)
                self.counts.pending -= 1
            self._fired_at_once.add(timer.id)
            return FIRE_NOW_REPLACED if replaced else FIRE_NOW_NEW
        self._store_occurrence(timer, fire_at, None, ikey)
        if index is None:  # a new id, most requests: _count_stored's first case, inline
            counts = self.counts
            counts.timers += 1
            counts.pending += 2
            return STORED_NEW
        self._count_stored(index)
        return STORED_REPLACED if replaced else STORED_NEW

    def _debounced(self, request: Timer, slot: int) -> Timer | None:
        """What the debounced ``request`` stores over its id's pending version, keyed
        under ``slot`` (:func:`app.core.debounce.merge`); None: nothing (merged already).

        A version a round is delivering has fired as far as this request can tell: it
        goes out as it is, and the request starts a new debounce (see
        :meth:`_replaced_in_flight`)."""
        if request.id in self._in_flight:
            return request
        return merge_debounced(self._stored(slot, request.id), request)

    def _stored(self, slot: int, timer_id: str) -> Timer | None:
        """The pending timer ``timer_id`` keyed under ``slot``, or None."""
        raw = self._kv.get(timer_key(slot, timer_id))
        return None if raw is None else unpack_timer(raw)

    def _drop_pending(self, timer_id: str, slot: int) -> None:
        """Delete the pending version keyed under ``slot`` that a new one replaces: a new
        version is a new decision, so its pause goes too."""
        if self.forecast is not None:
            self.forecast.discard(slot, timer_id, self._kv.get)
        self._kv.delete(timer_key(slot, timer_id))
        if self.quotas is not None:
            self.quotas.removed(timer_id)
        counts = self.counts
        counts.timers -= 1
        counts.pending -= 1
        if timer_id in self._paused:
            self._unpause(timer_id)

    def cancel(self, cancel: Cancel) -> CancelOutcome:
        """Remove the pending timer ``cancel.id`` if the token matches."""
        index = self._index(cancel.id)
        delivering = (
            cancel.id in self._in_flight and cancel.id not in self._in_flight_series
        ) or cancel.id in self._fired_at_once
        ruling = cancel_ruling(index, cancel, delivering)
        if ruling is CancelOutcome.CANCELLED_IN_ADVANCE:
            entry = IndexEntry(INDEX_CANCELLED, 0, cancel.token)
            if index != entry:  # the same cancel again is remembered from the first one
                new = index is None or index.due != 0
                if new and self.counts.in_advance >= self._max_in_advance:
                    return CancelOutcome.NOT_REMEMBERED
                self._terminal(cancel.id, entry, was=index)
            return ruling
        if ruling is not None or index is None:
            return CancelOutcome.NOT_FOUND if ruling is None else ruling
        if self.forecast is not None:
            self.forecast.discard(index.due, cancel.id, self._kv.get)
        key = timer_key(index.due, cancel.id)
        due = index.due
        stored = self._stored(index.due, cancel.id)
        if stored is not None and stored.spread:  # keyed under its fire second: remember
            due = stored.version_due  # its version's due second instead
        self._kv.delete(key)
        if self.quotas is not None:
            self.quotas.removed(cancel.id)
        self.counts.timers -= 1
        self.counts.pending -= 1
        self._terminal(cancel.id, IndexEntry(INDEX_CANCELLED, due, index.token), was=index)
        return CancelOutcome.CANCELLED

    def mark_fired(self, timer: Timer) -> None:
        """Record that ``timer`` (fired at once, never stored) has been delivered; for a
        series, that it ended at once (otherwise :meth:`store_successor` keeps it)."""
        self._fired_at_once.discard(timer.id)
        entry = IndexEntry(INDEX_FIRED, timer.version_due, timer.token)
        self._terminal(timer.id, entry, was=self._index(timer.id))

    def _replaced_in_flight(self, timer_id: str, *, keep_firing: bool = False) -> None:
        """A new version of ``timer_id`` replaces the one a round is delivering.

        ``keep_firing``: the round still delivers the old one (a debounced request that
        starts a new debounce behind a fire under way), where a reschedule stops it if
        it is not produced yet."""
        if timer_id not in self._in_flight_series and not keep_firing:
            self._superseded.add(timer_id)  # see still_due
        # Taken from the held ones, it is forgotten at the round's end, its index entry
        # checked, never later unchecked (a delivery left behind is forgotten without a
        # read: it would overwrite the new version's entry with the old one's "fired").
        self._taken_ids.discard(timer_id)

    def still_due(self, timers: list[Timer]) -> list[Timer]:
        """Of a round's ``timers`` (taken by :meth:`begin_tick` or :meth:`take_held`),
        those no request replaced since: called just before their callbacks are
        produced. A round awaits between taking its timers and producing them (loading
        a partition, looking topics up), and a request unit may run there: a new
        version of an id read then was stored, and the round would still fire the old
        one after it (a reschedule undone, by its order). Once produced, the old
        version is on its way and fires (at least once), as a cancel then answers."""
        superseded = self._superseded
        if not superseded:
            return timers
        return [t for t in timers if t.id not in superseded]

    def settle_fired_at_once(self) -> None:
        """A request unit is over: every timer it fired at once has been marked (or its
        unit failed, and the store is rebuilt); none of them is on its way out now."""
        self._fired_at_once.clear()

    def store_successor(self, successor: Timer) -> None:
        """Store the next occurrence of a series fired at once (never stored before)."""
        self._fired_at_once.discard(successor.id)  # the series goes on: a cancel ends it
        was = self._index(successor.id)
        self._store_occurrence(successor, self._slot_for(successor.fire_at))
        self._count_stored(was=was)

    # -- reads, for status and start-up ----------------------------------------------

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

    def iter_due(self, from_second: int = 0) -> Iterator[tuple[int, str]]:
        """``(due, id)`` of pending timers in due order, from the keys alone (no unpacking)."""
        for key, _ in self.scan_pending(bucket_floor(from_second)):
            yield parse_timer_key(key)

    def get_pending(self, timer_id: str) -> Timer | None:
        """The pending version of ``timer_id`` by point reads, or None."""
        index = self._index(timer_id)
        if index is None or index.state != INDEX_PENDING:
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
        return _STATE_NAMES[index.state], index.due, index.token

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
            if value[:1] == INDEX_PENDING:
                pending_index += 1
            else:
                terminal_index += 1
                in_advance += value.startswith(IN_ADVANCE_PREFIX)
        expiries = sum(1 for _ in self._kv.scan(EXPIRY, EXPIRY_END))
        expiries += sum(1 for _ in self._kv.scan(EXPIRY_BATCH, EXPIRY_BATCH_END))
        self._paused = {key[1:].decode() for key, _ in self._kv.scan(PAUSED, PAUSED_END)}
        self._parked = {}
        self._parked_floor = None
        self._load_behind()
        self.counts = self._expiry.counts = KeyCounts(
            timers=timers,
            pending=timers + pending_index + len(self._paused),
            remembered=terminal_index + expiries,
            in_advance=in_advance,
        )
        if self.forecast is not None:
            self.forecast.rebuild(max(self._now(), int(self._clock())), self._kv.scan)
        if self.quotas is not None:  # a second scan, only when a quota is set
            self.quotas.clear()
            for _, value in self._kv.scan(PENDING, PENDING_END):
                self.quotas.stored(unpack_timer(value))
        return self.counts
