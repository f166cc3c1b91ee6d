"""Due timers a gate holds back (a rate limit, a paused topic), and their release.

A gate (:mod:`app.worker.topic_gates`) holds due timers back per callback topic; the
wheel keeps them as *held*: still pending in the store, their keys in a
:class:`~app.core.held.HeldQueue` per topic (never their payloads: a backlog of a million
costs about 150 MB of entries), and delivers them later through
:meth:`HeldJob.take_held`, in key order. Held timers are not persisted as such: the
watermark stays below the oldest of them, so a new owner's (or a restart's) first scan
finds them again. Until taken, a cancel or a reschedule finds them as any pending timer.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import count, islice

from app.core.held import HeldEntry, HeldQueue
from app.core.keys import WATERMARK, timer_key_prefix
from app.core.stored import unpack_timer
from app.core.timer import Timer
from app.core.wheel_store import WheelStore

__all__ = ["TAKE_BATCH", "HeldJob", "HeldTimer"]

#: Held timers :meth:`HeldJob.take_held` reads with one scan, at most.
TAKE_BATCH = 1000

#: A held timer taken to be delivered (:meth:`HeldJob.take_held`), and when it was first
#: held: the delay the gate added is the delivery time minus that. A plain tuple: one is
#: built for every timer a limited topic receives.
HeldTimer = tuple[Timer, float]


class HeldJob(WheelStore):
    """The wheel's held timers: per topic, in key order, released in batches."""

    def _init_held(self) -> None:
        #: Due timers a gate holds back, per callback topic in due order (see above).
        self._held = {}
        self._held_order = count()

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

    def hold_due(self, timer: Timer, since: float, *, queue: bool = True) -> None:
        """Store ``timer``, already due (a request for a second ticked already), held back
        at once instead of fired: keyed under its due second, and the persisted
        watermark moved below it in the same unit, so a reload scans it again.

        ``queue`` False: stored, but no round takes it until :meth:`queue_held` (a unit
        holding it for the rest of its batch, through the pauses that let rounds run)."""
        self._fired_at_once.discard(timer.id)  # not fired after all: held
        was = self._index(timer.id)
        self._store_occurrence(timer, timer.due)
        self._count_stored(was=was)
        persisted = self._persisted_through
        if persisted is not None and timer.due <= persisted:
            self._kv.put(WATERMARK, b"%d" % (timer.due - 1))
            self._persisted_through = timer.due - 1
        if queue:
            self.queue_held(timer, since)

    def queue_held(self, timer: Timer, since: float) -> None:
        """Let rounds take ``timer``, stored by :meth:`hold_due` (if a later request
        removed it meanwhile, the round finds its key gone and drops it)."""
        self._held_queue(timer.topic).push((timer.due, next(self._held_order), timer.id, since))

    def _held_queue(self, topic: str) -> HeldQueue:
        queue = self._held.get(topic)
        if queue is None:
            queue = self._held[topic] = HeldQueue()
        return queue

    def take_held(self, topic: str, n: int | None) -> list[HeldTimer]:
        """Up to ``n`` (``None``: all) held timers of ``topic``, oldest key first, each
        with when it was first held: :meth:`take_held_runs` as pairs."""
        timers, runs = self.take_held_runs(topic, n)
        sinces = (since for since, run in runs for _ in range(run))
        return list(zip(timers, sinces, strict=True))

    def take_held_runs(
        self, topic: str, n: int | None
    ) -> tuple[list[Timer], list[tuple[float, int]]]:
        """Up to ``n`` (``None``: all) held timers of ``topic``, oldest key first, to
        deliver in this round (then :meth:`finish_tick` forgets them like fired ones),
        and when they were first held, as runs ``(since, how many)`` in their order:
        the delay the gate added is the delivery time minus that, and a round's timers
        were held together (a tick's burst), so a run is observed once.

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
            return [], []
        timers: list[Timer] = []
        runs: list[tuple[float, int]] = []
        last_since, run = 0.0, 0
        in_flight, paused, taken_ids = self._in_flight, self._paused, self._taken_ids
        behind, series, slots = self._behind, self._in_flight_series, self._slots
        while queue and (n is None or len(timers) < n):
            # A batch of candidates, read with one scan: as many as are still wanted
            # (each may turn out cancelled), at most TAKE_BATCH at once.
            want = TAKE_BATCH if n is None else min(TAKE_BATCH, n - len(timers))
            popped = queue.pop_many(want)
            batch: list[HeldEntry] = []
            keys: list[bytes] = []
            chosen: set[str] = set()
            last_slot, prefix = -1, b""
            for entry in popped:
                slot, _, timer_id, since = entry
                if timer_id in in_flight:
                    continue  # held twice: it goes out once
                if behind and timer_id in behind:
                    # Held twice, the other delivered in an earlier round and left
                    # behind: its key is still there until forgotten, and is that
                    # delivery's (a request for the id would have forgotten it first).
                    continue
                if timer_id in chosen:  # decided once the batch's read tells which is live
                    queue.put_back_many(popped[popped.index(entry) :])
                    break
                if paused and timer_id in paused:  # paused while held: waits for its resume
                    self._park(timer_id, slot, topic, since)
                    continue
                if slot != last_slot:  # timer_key, its prefix made once a second
                    last_slot, prefix = slot, timer_key_prefix(slot)
                batch.append(entry)
                keys.append(prefix + timer_id.encode())
                chosen.add(timer_id)
            raws = self._read_clustered(keys)
            for (slot, _, timer_id, since), raw in zip(batch, raws, strict=True):
                if raw is None:
                    continue  # cancelled or rescheduled while held
                timer = unpack_timer(raw)
                timers.append(timer)
                if since != last_since:
                    if run:
                        runs.append((last_since, run))
                    last_since, run = since, 0
                run += 1
                in_flight.add(timer_id)
                if timer.recurrence is not None:
                    series.add(timer_id)
                else:
                    taken_ids.add(timer_id)
                if slot != timer.due:
                    slots[(timer_id, timer.due)] = slot
        if run:
            runs.append((last_since, run))
        if not queue:
            del self._held[topic]
        if timers:
            self._taken = True
        return timers, runs

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
