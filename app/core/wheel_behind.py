"""Forgetting behind delivery: held timers delivered now and forgotten later ("behind").

Forgetting a delivered timer (a delete and two writes, and a random read of its index
entry) cost about as much as delivering it (38 µs of a limited timer's 90 µs of worker
CPU, measured). A rate-limited topic's rounds deliver at the limit, so in at-least-once
mode the one-shot timers a round took from the held ones may be left *behind*: still
pending in the store, the watermark kept below them, and forgotten in the rounds' spare
time (:meth:`BehindJob.forget_behind`), up to :data:`BEHIND_MAX` at once. Each round
records the ones it leaves in ``L`` batches (:mod:`app.core.keys`) so that a restart, a
rebalance or the next owner forgets them rather than delivering them again.

Whatever touches an id left behind (a request, a cancel, a pause, a lookup) *settles*
it first: it is forgotten at once, so the touch finds it fired. A timer forgotten this
way or from the oldest end is *settled*: known to be the pending version its index
entry names, so forgetting it reads no index entry.
"""

from __future__ import annotations

import struct
import sys
from collections import Counter, deque
from collections.abc import Iterator
from operator import attrgetter, itemgetter

from app.core import expiry_batch
from app.core.keys import (
    DELIVERED,
    DELIVERED_END,
    INDEX,
    WATERMARK,
    IndexEntry,
    delivered_batch_key,
    delivered_batch_seq,
    parse_timer_key,
    pending_index_prefix,
    timer_key_prefix,
)
from app.core.stored import unpack_timer
from app.core.timer import Timer
from app.core.wheel_store import Behind, WheelStore

__all__ = ["BEHIND_MAX", "BehindJob"]

# A Behind's fields by position, read in C over a batch (map): id, slot, its L batch.
_id = itemgetter(0)
_slot = itemgetter(5)
_batch = itemgetter(6)
_due = attrgetter("due")

#: Most delivered held timers one partition leaves to forget later
#: (:meth:`BehindJob.forget_behind`); past it a round forgets its own at once.
#: Each is its id, token, topic and seconds, never its payload: about 0.33 KB (measured
#: with tracemalloc, its id's and token's strings included; its topic's is one string
#: for all, 0.40 KB when each kept its own), where the same timer held cost about
#: 0.22 KB (its entry in a :class:`~app.core.held.HeldQueue`, freed as it is taken). They are
#: recorded in the store as delivered (``L`` keys, :meth:`BehindJob._record_behind`), so
#: a restart, a rebalance or the next owner forgets them rather than delivering them
#: again: the cap bounds memory only.
#:
#: Why a million: a burst to a limited topic is held first, so leaving its timers
#: behind as they are delivered adds about half of what holding them cost at the start
#: (a million in one partition: about 220 MB held at the start, 330 MB behind at the end);
#: the same burst with no limit is one round whose timers (payloads included, about
#: 1 KB each) are all in memory until delivered. A smaller cap made a burst to a limited
#: topic forget inside its delivery once past it: at 150,000, a million in one partition
#: forgot 85% of its timers between its callbacks, two store writes and their changelog
#: records each, on the one worker that delivers them all (docs/performance.md).
BEHIND_MAX = 1_000_000


class BehindJob(WheelStore):
    """The wheel's delivered-but-not-forgotten timers, and their ``L`` records."""

    def _init_behind(self) -> None:
        #: Delivered held timers not yet forgotten, by id (oldest first in
        #: :attr:`_behind_order`, where an entry no longer in here is skipped): still
        #: pending in the store,
        #: the watermark below them, forgotten by :meth:`forget_behind`, or at once when
        #: anything touches their id.
        self._behind = {}
        self._behind_order = deque()
        #: How many of them each slot holds (the watermark stays below the oldest).
        self._behind_slots = {}
        #: The store's batches (``L`` keys) recording them, with how many of each are
        #: not forgotten yet: a batch's key goes with its last one.
        self._batch_left = {}
        #: The number of the next such batch (they are numbered in write order).
        self._next_delivered = 0
        #: Batches a reload found with none of their timers left behind: deleted by the
        #: next round (a reload writes nothing).
        self._stale_delivered = []

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
                slots = [IndexEntry.decode(entry).due for _, entry in recorded]
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
                left = behind[timer_id] = Behind(
                    timer_id, timer.due, timer.token, sys.intern(timer.topic), timer.due, slot, key
                )
                order.append(left)
                slot_counts[slot] = slot_counts.get(slot, 0) + 1
                live += 1
            if live:
                self._batch_left[key] = live
            else:
                self._stale_delivered.append(key)
        self._next_delivered = max(self._next_delivered, last + 1)

    def _leave_behind(self, fired: list[Timer]) -> list[Timer]:
        """Of a round's ``fired``, move the one-shot timers taken from the held ones to
        :attr:`_behind` while there is room; return the ones to forget now with an
        index read.

        Past :data:`BEHIND_MAX`, this round's own are forgotten at once, *settled*
        (:meth:`_forget`'s ``settled``: no index read): each was read from the store by
        :meth:`take_held_runs` as its pending version, and a request that replaced it
        since took it out of ``_taken_ids``, exactly what makes a timer left behind
        safe to forget unread. Making room instead (forgetting as many of the oldest
        left behind, then recording this round's in ``L`` batches) did the same
        forgetting and the recording on top: a backlog of a million past the cap paid
        an ``L`` record for every timer for nothing.
        """
        taken = self._taken_ids
        leaving = [t for t in fired if t.id in taken and t.recurrence is None]
        if not leaving:
            return fired
        room = max(0, BEHIND_MAX - len(self._behind))
        if room:
            self._record_behind(leaving[:room])
        if len(leaving) > room:
            self._forget(leaving[room:], self._slots, None, self._now(), settled=True)
        if len(leaving) == len(fired):  # a limited round: every one taken from the held
            return []
        chosen = {id(t) for t in leaving}
        return [t for t in fired if id(t) not in chosen]

    def _record_behind(self, leaving: list[Timer]) -> None:
        """Leave ``leaving`` (one-shot timers just delivered) to be forgotten later, and
        record them in the store, in batches of up to 256 (``L`` keys, in write order):
        a reload finds them there (:meth:`_load_behind`), so neither a stop nor a crash
        after this round's unit delivers them again.

        Per timer: its record's entry and its :class:`Behind`; the rest (the dict of
        ids, the order, the counts per slot) is added a batch at a time in C
        (``map``, ``Counter``)."""
        behind, order = self._behind, self._behind_order
        slot_counts, slots = self._behind_slots, self._slots
        new = tuple.__new__  # a Behind without its Python-level constructor: one a timer
        # A decoded timer's topic is a string of its own: one kept for all of theirs.
        intern = sys.intern
        put, batch_left = self._kv.put, self._batch_left
        # Each one's key second, once: a one-shot timer's due is its version_due.
        if slots:
            keyed = [slots.get((t.id, t.due), t.due) for t in leaving]
        else:
            keyed = list(map(_due, leaving))
        # Each one's pending index entry (keys.pending_index_entry), its prefix formatted
        # once a slot: a round's timers share one second, or a few.
        prefixes = {slot: pending_index_prefix(slot) for slot in set(keyed)}
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
            made = [
                new(Behind, (t.id, t.due, t.token, intern(t.topic), t.due, slot, key))
                for t, slot in zip(leaving[at:end], keyed[at:end], strict=True)
            ]
            behind.update(zip(map(_id, made), made, strict=True))
            order.extend(made)
            at = end
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
        batch: list[Behind] = []
        popleft = order.popleft
        while order and len(batch) < n:
            popped = [popleft() for _ in range(min(n - len(batch), len(order)))]
            # Each is still behind unless forgotten already, when its id was touched, or
            # an earlier delivery of its id whose entry a later one's replaced.
            live = [entry for entry in popped if behind.get(entry[0]) is entry]
            for timer_id in map(_id, live):
                del behind[timer_id]
            batch += live
        self._forget_entries(batch)
        return len(batch)

    def _forget_entries(self, batch: list[Behind]) -> None:
        """Forget ``batch``, taken out of :attr:`_behind`: their counts per slot and per
        ``L`` batch go down a batch at a time (a record's key goes with the last of its
        timers, in the same unit)."""
        if not batch:
            return
        slot_counts, batch_left = self._behind_slots, self._batch_left
        for slot, n in Counter(map(_slot, batch)).items():
            left = slot_counts[slot] - n
            if left:
                slot_counts[slot] = left
            else:
                del slot_counts[slot]
        for key, n in Counter(map(_batch, batch)).items():
            left = batch_left[key] - n
            if left:
                batch_left[key] = left
            else:
                del batch_left[key]
                self._kv.delete(key)
        # Keyed under another second than their due (a catch-up's slot): rare.
        slots = {(e.id, e.due): e.slot for e in batch if e.slot != e.due}
        self._forget(batch, slots, None, self._now(), settled=True)

    def _settle(self, timer_id: str) -> None:
        """Forget ``timer_id`` now if it was delivered and left behind: whatever asks
        about an id (a request for it, a cancel, a pause, a lookup) then finds it fired."""
        entry = self._behind.pop(timer_id, None)
        if entry is not None:
            self._forget_entries([entry])

    def _skip_behind(self, scan: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        behind = self._behind
        for key, value in scan:
            if not behind or parse_timer_key(key)[1] not in behind:
                yield key, value
