"""Triggers and backfills on the request path: applied to the owner's wheel, answered.

A trigger or a backfill travels as a cancel does (routed by id, refused without the
timer's token, answered on the fired topic at the request's offset); what it fires is
stored by the wheel (:mod:`app.core.wheel_extra`) in the request's unit of work and
goes out on the next tick, through the callback topic's gate like any due timer.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from app.core.raw_record import RawRecord
from app.core.timer import Cancel, TokenAction
from app.worker.service_firing import FiringJob
from app.worker.service_state import LoadedPartition
from kafka_timers_client.errors import RejectReason
from kafka_timers_client.outcome import BackfillOutcome, TriggerOutcome

__all__ = ["EXTRA_ACTIONS", "ExtraRequestJob"]

log = logging.getLogger(__name__)

#: The token actions :meth:`ExtraRequestJob._extra_fire` applies.
EXTRA_ACTIONS = frozenset({TokenAction.TRIGGER, TokenAction.BACKFILL})
#: The answer every token-checked request gives a wrong token.
WRONG_TOKEN = TriggerOutcome.WRONG_TOKEN.value


class ExtraRequestJob(FiringJob):
    """Apply a trigger or a backfill to its timer's wheel and answer it."""

    if TYPE_CHECKING:  # app.worker.service_requests.RequestJob's

        def _reject(self, record: RawRecord, reason: RejectReason, detail: str) -> None: ...

    def _extra_fire(self, part: LoadedPartition, record: RawRecord, request: Cancel) -> None:
        """Apply ``request`` (a trigger or a backfill, read at ``record``) to the wheel of
        its timer's owner, and answer it on the fired topic at the request's offset."""
        now = int(self._clock())
        outcome: TriggerOutcome | BackfillOutcome
        if request.action is TokenAction.TRIGGER:
            outcome, added = part.wheel.trigger(request, now, record.offset)
            done = outcome is TriggerOutcome.TRIGGERED
        else:
            outcome, added = part.wheel.backfill(request, now)
            done = outcome is BackfillOutcome.BACKFILLED
        self._answer_owner_request(record, request, outcome.value)
        if added:
            self._adjust_pending(record.partition, added)
        if done:
            log.info(
                "%s of timer %r applied at %d: %d timers to fire on the next tick",
                request.action.value,
                request.id[:80],
                now,
                added or (request.action is TokenAction.TRIGGER),
            )

    def _answer_owner_request(self, record: RawRecord, request: Cancel, outcome: str) -> None:
        """Answer a token holder's request (a pause, a resume, a trigger, a backfill) on
        the fired topic at its offset, so a client can wait for it; one with the wrong
        token is also dead-lettered, as a cancel's is."""
        self._output.pause_outcome(
            request.id,
            request.token,
            request.action.value,
            outcome,
            record.partition,
            record.offset,
        )
        if outcome == WRONG_TOKEN:
            self._reject(
                record, RejectReason.WRONG_TOKEN, f"token does not match timer {request.id!r}"
            )
