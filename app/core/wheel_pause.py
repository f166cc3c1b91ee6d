"""Pause and resume, by a timer's owner: paused timers wait when due (they are parked).

A pause is an ``S<id>`` key (:mod:`app.core.keys`), so it holds across restarts and new
owners. A paused timer that comes due is *parked*: it stays pending in the store, the
watermark kept below it like a held one, until :meth:`PauseJob.resume` hands it to the
held queues (:mod:`app.core.wheel_held`), where its late policy applies as to any late
fire. An occurrence already on its way out goes out; a new version of the timer
(scheduled again) is not paused.
"""

from __future__ import annotations

from app.core.keys import paused_key
from app.core.timer import Cancel, Timer
from app.core.wheel_rules import owner_refusal
from app.core.wheel_store import Parked, WheelStore
from kafka_timers_client.outcome import PauseOutcome

__all__ = ["PauseJob"]


class PauseJob(WheelStore):
    """The wheel's pauses: the ``S`` keys, and the paused timers that came due."""

    def _init_pause(self) -> None:
        #: Ids paused by their owners: their ``S`` keys, read by ``recount``.
        self._paused = set()
        #: Paused timers that came due, by id: pending in the store and kept above the
        #: watermark like held ones, until :meth:`resume` hands them to the held queues.
        self._parked = {}
        #: The oldest slot among :attr:`_parked` (None: work it out again).
        self._parked_floor = None

    def pause(self, request: Cancel) -> PauseOutcome:
        """Pause the pending timer ``request.id`` (a one-shot or a series) if the token
        matches: from now on its occurrences wait when due, in the store, across
        restarts and new owners, until :meth:`resume`. An occurrence on its way out goes
        out. A new version of the timer (scheduled again) is not paused."""
        outcome = self._refusal(request)
        if outcome is not None:
            return outcome
        if request.id not in self._paused:
            self._kv.put(paused_key(request.id), b"")
            self._paused.add(request.id)
            self.counts.pending += 1
        return PauseOutcome.PAUSED

    def resume(self, request: Cancel) -> PauseOutcome:
        """Resume the paused timer ``request.id`` if the token matches: an occurrence
        that came due meanwhile is held for delivery at once (``take_held``), where
        its late policy applies as to any late fire; resuming one not paused is a no-op
        answered ``resumed``."""
        outcome = self._refusal(request)
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

    def _refusal(self, request: Cancel) -> PauseOutcome | None:
        index = self._index(request.id)
        delivering = request.id in self._in_flight and request.id not in self._in_flight_series
        return owner_refusal(index, request, delivering)

    def _unpause(self, timer_id: str) -> None:
        self._paused.discard(timer_id)
        if self._parked.pop(timer_id, None) is not None:
            self._parked_floor = None
        self._kv.delete(paused_key(timer_id))
        self.counts.pending -= 1

    def _park(self, timer_id: str, slot: int, topic: str, since: float) -> None:
        self._in_flight.discard(timer_id)
        self._in_flight_series.discard(timer_id)
        self._parked[timer_id] = Parked(slot, topic, since)
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

    def _oldest_parked(self) -> int | None:
        """The oldest slot a parked timer is stored under, or None."""
        if not self._parked:
            return None
        if self._parked_floor is None:
            self._parked_floor = min(p.slot for p in self._parked.values())
        return self._parked_floor
