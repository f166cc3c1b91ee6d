"""A tick: the scan of what is due, and the forgetting of what was delivered.

:meth:`TickJob.begin_tick` finds every pending timer due up to the tick's second with
one range scan that starts where the last one ended (timers sort by the second they are
keyed under, their *slot*); the service delivers them; :meth:`TickJob.finish_tick`
forgets them (each one-shot timer's key goes, its index entry becomes fired and is
remembered for the window), stores the next occurrence of each series that goes on,
sweeps expired ids (:mod:`app.core.expiry_sweep`), and moves the *watermark*: the
persisted second (``W``) below which everything has fired and been forgotten, kept
below every timer still held, parked or behind, so that a reload scans those again.

A burst (more than :data:`EAGER_SCAN` keys in one scan) is put in its fair order
(:mod:`app.core.fair_order`) before it is decoded, when the caller asks
(``decode_first``): the scan reads each value's topic alone, and the timers are decoded
as the service produces them (:meth:`TickJob.take_scanned`). Decoding is most of a
scan's cost (3.5 of 4 µs a timer): a burst of 200,000 decoded first would keep another
topic's few callbacks of the same second waiting over a second, on top of the time to
read the burst at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from itertools import chain, islice, repeat

from app.core import expiry_batch
from app.core.expiry_sweep import ExpirySweep
from app.core.fair_in_flight import InFlightIds, id_of_key
from app.core.fair_order import interleave_by_topic, take_turns
from app.core.held import HeldEntry
from app.core.keys import (
    INDEX,
    WATERMARK,
    bucket_floor,
    fired_index_entry,
    pending_index_prefix,
    timer_key_prefix,
    timer_key_second,
)
from app.core.stored import stored_topic, stored_topic_is, topic_field, unpack_timer
from app.core.timer import Timer
from app.core.wheel_store import Behind, WheelStore

__all__ = ["EAGER_SCAN", "WATERMARK_PERSIST_INTERVAL", "TickJob"]

#: An idle tick persists ``fired_through`` only this often (seconds): it bounds how far
#: back a restarted scan starts, without a changelog write per partition per second.
WATERMARK_PERSIST_INTERVAL = 60

#: Keys a tick's scan decodes as it reads them, when the caller takes the rest decoded
#: later (``decode_first``): a tick of fewer (nearly all of them) is scanned as it
#: always was, at no cost more.
EAGER_SCAN = 1024
#: A stored timer's first byte, its layout version (app.core.stored): version 1 is a
#: one-shot timer with no late policy of its own, the one kind a scan may leave undecoded.
_ONE_SHOT_LAYOUT = 1

#: Where a pending timer's key (:func:`app.core.keys.timer_key`: ``T``, the second in 12
#: digits, a zero byte, the id) holds its second and its id: a scan that holds a burst
#: reads both from every key inline (a call each was a tenth of holding a timer).
_SECOND = slice(1, 13)
_ID_AT = 14

#: A scanned timer the round has not decoded yet: its key and stored value.
Scanned = tuple[bytes, bytes]


class TickJob(WheelStore):
    """The wheel's rounds: begin a tick, then finish (forget) or abort it."""

    #: Forgets remembered ids as ticks advance.
    _expiry: ExpirySweep
    #: The round's timers in their fair order, decoded or not (:meth:`take_scanned`),
    #: from ``_undecoded_at`` on; empty unless a burst was scanned with ``decode_first``.
    _undecoded: list[Timer | Scanned]
    _undecoded_at: int
    #: Their callback topics.
    _undecoded_topics: frozenset[str]

    def _init_round(self) -> None:
        #: Ids of the round in flight (being delivered).
        self._in_flight = set()
        #: The series among them: a cancel still stops those.
        self._in_flight_series = set()
        #: One-shot ids of the round that a new version replaced (PartitionWheel.still_due).
        self._superseded = set()
        #: Keys of in-flight catch-up occurrences stored under a later second than their
        #: due: ``(id, due) -> second`` (see :meth:`_slot_for`).
        self._slots = {}
        #: The stored bytes of the in-flight series occurrences read by the tick's scan, by
        #: id: each one's successor is packed from them (``pack_next_occurrence``).
        self._series_stored = {}
        #: Whether this round took held timers (:meth:`abort_tick` must then rescan).
        self._taken = False
        #: The one-shot timers this round took from the held ones: the ones
        #: :meth:`finish_tick` may leave behind (app.core.wheel_behind).
        self._taken_ids = set()
        self._undecoded = []
        self._undecoded_at = 0
        self._undecoded_topics = frozenset()

    def begin_tick(
        self,
        second: int,
        hold: AbstractSet[str] = frozenset(),
        since: float = 0.0,
        *,
        decode_first: int | None = None,
    ) -> list[Timer] | None:
        """Collect every pending timer due at or before ``second``, topics taking turns.

        Returns ``None`` for a tick already seen (duplicates from redundant oscillators,
        redelivery after a restart). A gap since the last tick is caught up, not skipped:
        the scan starts right after the last second fully fired. Cost is one seek plus
        the timers returned, never the number pending.

        Timers whose callback topic is in ``hold`` (rate-limited or paused topics) are
        held at once, as :meth:`hold` would hold them (``since`` is the time they are
        held from), and not returned. They are told apart by their topic alone and
        unpacked once, when :meth:`take_held` releases them: unpacking them here too
        was a third of a held timer's cost.

        ``decode_first``: a scan of more than :data:`EAGER_SCAN` keys returns only the
        first ``decode_first`` timers of the round's fair order; the rest are read by
        their topic alone (in flight, their ids are read from their keys when asked:
        :mod:`app.core.fair_in_flight`) and decoded by :meth:`take_scanned` as they are
        produced, every one before :meth:`finish_tick`.
        """
        if self.ticked_through is not None and second <= self.ticked_through:
            return None
        start = 0 if self.fired_through is None else self.fired_through + 1
        self.ticked_through = second
        timers = []
        slots: dict[tuple[str, int], int] = {}
        series: set[str] = set()
        series_stored: dict[str, bytes] = {}
        order, behind = self._held_order, self._behind
        self._undecoded, self._undecoded_at = [], 0
        scan = self._kv.scan(bucket_floor(start), bucket_floor(second + 1))
        # The rest of a longer scan is read by _scan_undecoded (islice reads no further).
        eager = scan if decode_first is None else islice(scan, EAGER_SCAN)
        # Held timers per topic, pushed to their queues once the scan is read (a run each).
        holding: dict[str, list[HeldEntry]] = {}
        for key, value in eager:
            if behind and key[_ID_AT:].decode() in behind:
                continue  # delivered already (a reload's rescan): forgotten later
            if hold and (topic := stored_topic(value)) in hold:
                entries = holding.get(topic)
                if entries is None:
                    entries = holding[topic] = []
                entries.append((int(key[_SECOND]), next(order), key[_ID_AT:].decode(), since))
                continue
            timer = unpack_timer(value)
            timers.append(timer)
            # Keyed under another second than its due one: a series' catch-up, a spread
            # timer, a trigger's or a backfill's (app.core.wheel_extra: their own late
            # policy tells them apart; a one-shot without one costs no key parse here).
            if timer.recurrence is not None or timer.spread or timer.late is not None:
                if timer.recurrence is not None:
                    series.add(timer.id)
                    series_stored[timer.id] = value
                slot = timer_key_second(key)
                if slot != timer.due:
                    slots[(timer.id, timer.due)] = slot
        self._push_held(holding)
        if self._paused:
            timers = self._park_paused(timers, slots)
            series.intersection_update(t.id for t in timers)
        self._in_flight_series = series
        self._slots = slots
        self._series_stored = series_stored
        if decode_first is not None and self._scan_undecoded(scan, timers, hold, since):
            return self.take_scanned(decode_first)
        # A burst to one topic must not hold back another topic's callbacks of the same
        # tick: topics take turns (app.core.fair_order).
        timers = interleave_by_topic(timers)
        self._in_flight = {t.id for t in timers}
        return timers

    @property
    def undecoded(self) -> int:
        """How many of the round's timers :meth:`take_scanned` has still to give."""
        return len(self._undecoded) - self._undecoded_at

    @property
    def undecoded_topics(self) -> frozenset[str]:
        """The callback topics of the round's timers not taken yet (a superset)."""
        return self._undecoded_topics

    def take_scanned(self, n: int | None = None) -> list[Timer]:
        """The next ``n`` (all, if None) of the round's timers in their fair order,
        decoded, less those a request replaced since the scan (as :meth:`still_due`)."""
        items, at = self._undecoded, self._undecoded_at
        end = len(items) if n is None else min(len(items), at + n)
        superseded = self._superseded
        taken = []
        for item in items[at:end]:
            if isinstance(item, tuple):  # a plain one-shot timer: _decode_scanned, inline
                timer = unpack_timer(item[1])
                if timer.spread:  # keyed under its fire second
                    self._note_slot(item[0], timer)
            else:
                timer = item
            if not (superseded and timer.id in superseded):
                taken.append(timer)
        if end == len(items):
            self._undecoded, self._undecoded_at = [], 0
        else:
            self._undecoded_at = end
        return taken

    def _scan_undecoded(
        self,
        scan: Iterator[tuple[bytes, bytes]],
        timers: list[Timer],
        hold: AbstractSet[str],
        since: float,
    ) -> bool:
        """Read what is left of a tick's ``scan`` after the decoded ``timers`` without
        decoding it, and put the round in its fair order for :meth:`take_scanned`;
        False if nothing is left (the round is ``timers``).

        Each value's topic is read alone (:func:`stored_topic`, a seventh of a decode),
        its id only if asked (:class:`InFlightIds`); only a timer of another layout than
        a plain one-shot timer's (a series, a timer with its own late policy: rare in a
        burst) is decoded here, so that the round knows its series and their slots
        before it awaits. A topic's timers keep their scan order, decoded or not. Held
        and paused timers are told apart here as :meth:`begin_tick` does.
        """
        first = next(scan, None)
        if first is None:
            return False
        queues: dict[str, list[Timer | Scanned]] = {}
        for timer in timers:
            queue = queues.get(timer.topic)
            if queue is None:
                queues[timer.topic] = [timer]
            else:
                queue.append(timer)
        in_flight = {t.id for t in timers}  # and the undecoded ones' (InFlightIds)
        order, behind, paused = self._held_order, self._behind, self._paused
        now = self._clock() if paused else 0.0
        last_topic, last_field, last_queue = "", b"", None
        # Held timers per topic, pushed to their queues once the scan is read (a run
        # each), and the run the last one held went to, with its topic's field.
        holding: dict[str, list[HeldEntry]] = {}
        held_field, held_run = b"", None
        item: Timer | Scanned
        for item in chain((first,), scan):  # the scan's own pairs are kept, not copied
            key, value = item
            if (behind or paused) and self._skipped_at_scan(key, value, hold, now):
                continue
            if (
                last_queue is not None
                and value[0] == _ONE_SHOT_LAYOUT
                and stored_topic_is(value, last_field)
            ):  # a burst: its neighbour's topic (compared, not read), held by no gate
                last_queue.append(item)
                continue
            if (
                held_run is not None
                and value[0] == _ONE_SHOT_LAYOUT
                and stored_topic_is(value, held_field)
            ):  # a burst to a held topic: the same, held
                held_run.append((int(key[_SECOND]), next(order), key[_ID_AT:].decode(), since))
                continue
            topic = stored_topic(value)
            if hold and topic in hold:
                held_run = holding.get(topic)
                if held_run is None:
                    held_run = holding[topic] = []
                held_field = topic_field(topic)
                held_run.append((int(key[_SECOND]), next(order), key[_ID_AT:].decode(), since))
                continue
            if value[0] != _ONE_SHOT_LAYOUT:
                item = self._decode_scanned(key, value)
                in_flight.add(item.id)
            if topic != last_topic or last_queue is None:
                last_queue = queues.get(topic)
                if last_queue is None:
                    last_queue = queues[topic] = []
                last_topic, last_field = topic, topic_field(topic)
            last_queue.append(item)
        self._push_held(holding)
        self._undecoded = take_turns(queues.values())
        self._in_flight = InFlightIds(in_flight, self._undecoded)
        self._undecoded_at = 0
        self._undecoded_topics = frozenset(queues)
        return True

    def _push_held(self, holding: dict[str, list[HeldEntry]]) -> None:
        """Hold what a scan found of held topics: each topic's run, in key order."""
        for topic, entries in holding.items():
            self._held_queue(topic).push_many(entries)

    def _skipped_at_scan(
        self, key: bytes, value: bytes, hold: AbstractSet[str], now: float
    ) -> bool:
        """Whether a burst's scan passes this timer by: delivered already (a reload's
        rescan: forgotten later), or paused (parked, unless held)."""
        timer_id = id_of_key(key)
        if timer_id in self._behind:
            return True
        if timer_id not in self._paused:
            return False
        topic = stored_topic(value)
        if hold and topic in hold:
            return False  # held, as begin_tick holds a paused timer of a held topic
        self._park(timer_id, timer_key_second(key), topic, now)
        return True

    def _decode_scanned(self, key: bytes, value: bytes) -> Timer:
        """A scanned timer decoded, and known to the round as :meth:`begin_tick` knows
        the ones it decodes (a series and its stored bytes, a key second not its due)."""
        timer = unpack_timer(value)
        if timer.recurrence is not None or timer.spread or timer.late is not None:
            if timer.recurrence is not None:
                self._in_flight_series.add(timer.id)
                self._series_stored[timer.id] = value
            self._note_slot(key, timer)
        return timer

    def _note_slot(self, key: bytes, timer: Timer) -> None:
        """Remember the second ``timer`` is keyed under (``key``'s) if not its due."""
        slot = timer_key_second(key)
        if slot != timer.due:
            self._slots[(timer.id, timer.due)] = slot

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
        if self._undecoded:
            raise RuntimeError("a round finished before take_scanned gave all its timers")
        if forget_taken_later and self._taken_ids:
            fired = self._leave_behind(fired)
        if self._stale_delivered:
            for key in self._stale_delivered:
                self._kv.delete(key)
            self._stale_delivered = []
        self._forget(fired, self._slots, successors, second)
        self._expiry.sweep(second)
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

    def _oldest_waiting(self) -> int | None:
        """The oldest slot a held, parked or delivered but not forgotten timer is stored
        under, or None."""
        oldest = self._oldest_held() if self._held else None
        parked = self._oldest_parked()
        if parked is not None and (oldest is None or parked < oldest):
            oldest = parked
        if self._behind_slots:
            floor = min(self._behind_slots)
            if oldest is None or floor < oldest:
                oldest = floor
        return oldest

    def _end_round(self) -> None:
        """Forget what the round in flight took and read (finished or aborted)."""
        self._taken = False
        self._taken_ids = set()
        self._in_flight = set()
        self._in_flight_series = set()
        self._superseded = set()
        self._slots = {}
        self._series_stored = {}
        self._undecoded, self._undecoded_at = [], 0
        self._undecoded_topics = frozenset()

    def _forget(
        self,
        fired: Sequence[Timer | Behind],
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
        # Each id is encoded once for its keys (index_key's among them). The ids that end
        # here are remembered in expiry batches, written after the loop
        # (app.core.expiry_batch).
        ids = [timer.id.encode() for timer in fired]
        # Every fired timer's index entry in one multi-get (each id is fired once in a
        # round, and the loop writes only the index entries of ids it has read already).
        if settled:
            entries: Iterable[bytes | None] = repeat(None, len(fired))
        else:
            entries = kv.get_many([INDEX + id_bytes for id_bytes in ids]) if fired else []
        ended_entries: list[expiry_batch.Entry] = []
        paused, put, delete = self._paused, kv.put, kv.delete
        quotas = self.quotas
        # A round's timers share one second, or a few: the keys' and the index entries'
        # formatted seconds are kept from one timer to the next (pending_index_entry and
        # fired_index_entry are those prefixes and the token's bytes).
        last_slot, slot_prefix, pending_prefix = None, b"", b""
        last_version, fired_prefix = None, b""
        for timer, id_bytes, indexed in zip(fired, ids, entries, strict=True):
            due = timer.due
            slot = slots.get((timer.id, due), due) if slots else due
            if slot != last_slot:
                last_slot, slot_prefix = slot, timer_key_prefix(slot)
                pending_prefix = pending_index_prefix(slot)
            key = slot_prefix + id_bytes
            token = timer.token.encode()
            # Still the entry this occurrence was stored with, compared as bytes (the
            # entry is always written by pending_index_entry): no decode per fired timer.
            current = settled or indexed == pending_prefix + token
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
                # Timer.fire_at, a property call, only for a spread series.
                fire_at = successor.fire_at if successor.spread else successor.due
                self._store_occurrence(
                    successor, max(fire_at, second + 1), self._series_stored.get(timer.id)
                )
                delete(key)  # after its successor is written: never neither
                continue
            delete(key)
            if current:
                if quotas is not None:
                    quotas.removed(timer.id)
                # A one-shot timer, or a series that ended: terminal, remembered for the
                # window under its version's due second, then expired. What _terminal
                # does for an entry that was pending, inline: this runs once a timer
                # (its key counts are added up after the loop).
                if paused and timer.id in paused:  # a paused timer's key goes with it
                    self._unpause(timer.id)
                # A one-shot timer's version is its due second (Timer.version_due, a
                # property call, only for a series and for what was left behind).
                if isinstance(timer, Timer) and timer.recurrence is None:
                    version = due
                else:
                    version = timer.version_due
                if version != last_version:
                    last_version, fired_prefix = version, fired_index_entry(version, "")
                encoded = fired_prefix + token
                put(INDEX + id_bytes, encoded)
                ended_entries.append((id_bytes, encoded))
        if ended_entries:
            ended = len(ended_entries)
            counts = self.counts
            counts.timers -= ended
            counts.pending -= 2 * ended
            counts.remembered += ended + self._put_expiry_batches(ended_entries)

    def _put_expiry_batches(self, entries: Sequence[expiry_batch.Entry]) -> int:
        """Remember ``entries`` (ids that end now, with their terminal index entries) for
        the window, in expiry batches; return how many batch keys were written."""
        return self._expiry.remember(entries, self._now() + self._memory)
