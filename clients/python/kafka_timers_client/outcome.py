"""What a cancel, a pause or a resume did: the answer a worker writes to the fired topic,
and a client reads."""

from __future__ import annotations

from enum import Enum

__all__ = ["CancelOutcome", "PauseOutcome"]


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
