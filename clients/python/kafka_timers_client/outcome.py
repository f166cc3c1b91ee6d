"""What a cancel, a pause, a resume, a trigger or a backfill did: the answer a worker
writes to the fired topic, and a client reads."""

from __future__ import annotations

from enum import Enum

__all__ = ["BackfillOutcome", "CancelOutcome", "PauseOutcome", "TriggerOutcome"]


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
    #: No such timer, and the partition already remembers as many cancels in advance as
    #: it may (the worker's ``DEFAULT_MAX_CANCELS_IN_ADVANCE``): this one is not kept,
    #: so a request for the id that comes later is stored.
    NOT_REMEMBERED = "not_remembered"


class PauseOutcome(str, Enum):
    """What a pause or a resume did; answered on the fired topic like a cancel."""

    #: Paused: its occurrences wait when due (also the answer to a repeat).
    PAUSED = "paused"
    #: Resumed: what came due while paused fires now, by its late policy.
    RESUMED = "resumed"
    #: The token did not match the pending timer's: refused, nothing changed.
    WRONG_TOKEN = "wrong_token"
    #: The timer has fired (a one-shot, or a series that ended) or is firing right now.
    ALREADY_FIRED = "already_fired"
    #: No pending timer with that id (never scheduled, cancelled, or forgotten).
    NOT_FOUND = "not_found"


class TriggerOutcome(str, Enum):
    """What a trigger did; answered on the fired topic like a cancel."""

    #: Fired now: a one-shot's callback goes out on the next tick and the timer is gone;
    #: a series gets one extra occurrence and keeps its schedule.
    TRIGGERED = "triggered"
    #: The token did not match the pending timer's: refused, nothing fires.
    WRONG_TOKEN = "wrong_token"
    #: The timer has fired (a one-shot, or a series that ended) or is firing right now.
    ALREADY_FIRED = "already_fired"
    #: No pending timer with that id (never scheduled, cancelled, or forgotten).
    NOT_FOUND = "not_found"


class BackfillOutcome(str, Enum):
    """What a backfill did; answered on the fired topic like a cancel."""

    #: The series' occurrences in the window (none, perhaps) fire on the next tick.
    BACKFILLED = "backfilled"
    #: The window holds more occurrences than a backfill may fire
    #: (:data:`kafka_timers_client.extra_fires.MAX_BACKFILL`): nothing fires.
    TOO_MANY = "too_many"
    #: The timer is a one-shot: it has no occurrences to backfill.
    NOT_A_SERIES = "not_a_series"
    #: The token did not match the pending series': refused, nothing fires.
    WRONG_TOKEN = "wrong_token"
    #: The series has ended (or a one-shot is firing right now).
    ALREADY_FIRED = "already_fired"
    #: No pending timer with that id (never scheduled, cancelled, or forgotten).
    NOT_FOUND = "not_found"
