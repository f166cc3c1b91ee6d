"""Fires asked for out of schedule: a trigger and a backfill, as the wheel applies them.

Both end in pending timers keyed under the next tick's second (:meth:`_slot_for`), so
they go out on that tick like any due timer: through the callback topic's gate (rate
limit, pause), in the tick's unit of work, at least once. Nothing is fired from the
request path itself, and nothing is keyed before the worker's clock (never early).

- A **trigger** of a one-shot timer moves it: the same timer (its ``due`` kept, so the
  callback is the one it would have had at its second and its version is remembered as
  fired, as at its second) keyed under the next tick, with a ``timer-trigger`` header.
  A trigger of a series stores one extra one-shot occurrence beside it, named by the
  request's offset (:func:`~kafka_timers_client.extra_fires.trigger_id`), so the same
  request applied again (a redelivery, a re-read after a crash) replaces it while it is
  pending and fires nothing once it fired; the series is untouched.
- A **backfill** stores one one-shot timer per occurrence the series would have had in
  the window (:meth:`~kafka_timers_client.recurrence.Recurrence.slots_in`), each named
  by its second (:func:`~kafka_timers_client.extra_fires.backfill_id`): the same
  backfill applied again (a redelivery, a re-read after a crash) replaces what is still
  pending and is dropped as a duplicate where it fired (:meth:`schedule`).

The extra timers carry the series' token and payload, the late policy ``fire`` (asked
for, they are delivered however late) and no spread.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from app.core.keys import INDEX_PENDING
from app.core.timer import Cancel, Timer
from app.core.wheel_rules import Accepted, Scheduled, owner_refusal
from app.core.wheel_store import WheelStore
from kafka_timers_client.extra_fires import (
    BACKFILL_HEADER,
    MAX_BACKFILL,
    TRIGGER_HEADER,
    backfill_id,
    trigger_id,
)
from kafka_timers_client.late import LatePolicy
from kafka_timers_client.outcome import BackfillOutcome, TriggerOutcome

__all__ = ["ExtraJob"]

#: The late policy of every extra fire: asked for, delivered however late.
_FIRE = LatePolicy.parse("fire")


def _extra(series: Timer, timer_id: str, due: int, mark: tuple[str, bytes]) -> Timer:
    """A one-shot fire of ``series``' payload, due at ``due``, marked with ``mark``."""
    return Timer(
        id=timer_id,
        due=due,
        topic=series.topic,
        key=series.key,
        value=series.value,
        token=series.token,
        headers=(mark, *series.headers),
        late=_FIRE,
        schema_id=series.schema_id,
    )


class ExtraJob(WheelStore):
    """The wheel's triggers and backfills."""

    if TYPE_CHECKING:

        def schedule(self, timer: Timer, *, reread: bool = False) -> Accepted: ...

        def _stored(self, slot: int, timer_id: str) -> Timer | None: ...

        def _drop_pending(self, timer_id: str, slot: int) -> None: ...

    def _pending_of(self, request: Cancel) -> tuple[str | None, Timer | None, int]:
        """``(refusal, timer, slot)``: why ``request`` cannot act on its timer (a
        :class:`~kafka_timers_client.outcome.PauseOutcome` value) or the pending timer
        and the second it is keyed under."""
        index = self._index(request.id)
        delivering = request.id in self._in_flight and request.id not in self._in_flight_series
        refused = owner_refusal(index, request, delivering)
        if refused is not None:
            return refused.value, None, 0
        assert index is not None
        stored = self._stored(index.due, request.id)
        if stored is None:  # an index entry pointing nowhere: nothing to act on
            return TriggerOutcome.NOT_FOUND.value, None, 0
        return None, stored, index.due

    def trigger(self, request: Cancel, now: int, request_offset: int) -> tuple[TriggerOutcome, int]:
        """Apply a trigger read at ``request_offset`` at second ``now`` (the worker's
        clock); return its outcome and how many timers it added to the pending count."""
        refused, stored, slot = self._pending_of(request)
        if stored is None:
            return TriggerOutcome(refused), 0
        mark = (TRIGGER_HEADER, b"%d" % now)
        if stored.recurrence is not None:
            extra_id = trigger_id(request.id, request_offset)
            applied = self._index(extra_id)
            if applied is not None and applied.state != INDEX_PENDING:
                return TriggerOutcome.TRIGGERED, 0  # this very request, applied and fired
            extra = _extra(stored, extra_id, now, mark)
            accepted = self.schedule(extra, reread=True)
            added = accepted.outcome is Scheduled.STORED and not accepted.replaced
            return TriggerOutcome.TRIGGERED, int(added)
        # The same one-shot, marked, delivered however late, keyed under the next tick.
        moved = replace(stored, headers=(mark, *stored.headers), late=_FIRE)
        index = self._index(request.id)
        self._drop_pending(request.id, slot)  # a pause ends with it: it was asked to fire
        self._store_occurrence(moved, self._slot_for(now))
        self._count_stored(was=index)
        return TriggerOutcome.TRIGGERED, 0

    def backfill(self, request: Cancel, now: int) -> tuple[BackfillOutcome, int]:
        """Apply a backfill at second ``now`` (the worker's clock): its window up to
        ``now`` included; return its outcome and how many timers it added."""
        assert request.window is not None
        refused, stored, _ = self._pending_of(request)
        if stored is None:
            return BackfillOutcome(refused), 0
        rec = stored.recurrence
        if rec is None:
            return BackfillOutcome.NOT_A_SERIES, 0
        low, high = request.window
        seconds = rec.slots_in(low, min(high, now + 1), MAX_BACKFILL)
        if seconds is None:
            return BackfillOutcome.TOO_MANY, 0
        added = 0
        for second in seconds:
            mark = (BACKFILL_HEADER, b"%d" % second)
            extra = _extra(stored, backfill_id(request.id, second), second, mark)
            accepted = self.schedule(extra, reread=True)
            added += accepted.outcome is Scheduled.STORED and not accepted.replaced
        return BackfillOutcome.BACKFILLED, added
