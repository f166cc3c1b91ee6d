"""What a request does to a partition's state: the token rule, dedup and refusals.

Pure functions over an id's index entry (:class:`app.core.keys.IndexEntry`) and the
request: no store, no clock. :class:`app.core.wheel.PartitionWheel` reads the entry,
asks here what the request does, and writes the answer. Kept apart so that the rules a
reader must know (and :mod:`spark_audit.reconcile` restates on purpose) are in one
short place, testable without a store.

A token means it for every change. A pending timer stored with a token is replaced,
cancelled, paused or resumed only by a request carrying that very token; a pending
timer stored without one is "cancel/replace by id" on purpose (etf1's schedules, a JSON
request naming no token). Fired and cancelled ids are not protected: their token guards
the version that ended, and another version with another token is a new timer.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from app.core.keys import INDEX_CANCELLED, INDEX_FIRED, INDEX_PENDING, IndexEntry
from app.core.timer import Cancel, Timer
from kafka_timers_client.outcome import CancelOutcome, PauseOutcome

__all__ = [
    "CANCELLED_EARLIER",
    "DUPLICATE",
    "FIRE_NOW_NEW",
    "FIRE_NOW_REPLACED",
    "STORED_NEW",
    "STORED_REPLACED",
    "WRONG_TOKEN",
    "Accepted",
    "Scheduled",
    "cancel_ruling",
    "owner_refusal",
    "schedule_refusal",
    "series_restarted",
]


class Scheduled(str, Enum):
    """What happened to an accepted timer request."""

    #: Stored; it fires on the first tick at or after its second.
    STORED = "stored"
    #: Its second has already been ticked on this partition: fire it now (late, never lost).
    FIRE_NOW = "fire_now"
    #: A cancel for this id and token arrived first; the request is dropped.
    CANCELLED_EARLIER = "cancelled_earlier"
    #: The very same version (id, token, due) already fired: a redelivered duplicate.
    #: Also a series whose very version (id, token, first occurrence) is pending past
    #: its first occurrence: starting it over would fire those occurrences again.
    DUPLICATE = "duplicate"
    #: The id's pending timer is protected by a token this request does not carry: the
    #: request is refused and the pending timer (and its pause) stays as it was.
    WRONG_TOKEN = "wrong_token"


@dataclass(frozen=True)
class Accepted:
    """Outcome of :meth:`app.core.wheel.PartitionWheel.schedule`."""

    #: What happens to the timer.
    outcome: Scheduled
    #: Whether an older pending version of the same id was replaced.
    replaced: bool = False


#: Outcomes are immutable, so the wheel hands out shared ones (one request each).
STORED_NEW = Accepted(Scheduled.STORED, False)
STORED_REPLACED = Accepted(Scheduled.STORED, True)
FIRE_NOW_NEW = Accepted(Scheduled.FIRE_NOW, False)
FIRE_NOW_REPLACED = Accepted(Scheduled.FIRE_NOW, True)
CANCELLED_EARLIER = Accepted(Scheduled.CANCELLED_EARLIER)
DUPLICATE = Accepted(Scheduled.DUPLICATE)
WRONG_TOKEN = Accepted(Scheduled.WRONG_TOKEN)


def schedule_refusal(index: IndexEntry | None, timer: Timer) -> Accepted | None:
    """Why a request for ``timer`` changes nothing, given its id's ``index`` entry; None:
    it is stored (replacing the pending version, if ``index`` is pending), unless
    :func:`series_restarted` says the series is under way already."""
    if index is None:
        return None
    if (
        index.state == INDEX_CANCELLED
        and index.token == timer.token
        and (index.due == 0 or index.due == timer.version_due)
    ):
        # A cancel that came first, or this very version again after its cancel.
        # Another version of a cancelled id (an etf1 key scheduled again after its
        # tombstone, with a new due time) is a new timer.
        return CANCELLED_EARLIER
    if index.state == INDEX_FIRED and index.token == timer.token and index.due == timer.version_due:
        return DUPLICATE
    if index.state == INDEX_PENDING and index.token and index.token != timer.token:
        return WRONG_TOKEN
    return None


def series_restarted(stored: Timer | None, timer: Timer) -> bool:
    """Whether ``timer`` (a series, same id and token as the pending ``stored``) is the
    very version stored (same first occurrence) after it fired at least once: a
    redelivery or an import run twice, which would fire those occurrences again."""
    return stored is not None and stored.seq > 1 and stored.version_due == timer.version_due


def cancel_ruling(
    index: IndexEntry | None, cancel: Cancel, delivering: bool
) -> CancelOutcome | None:
    """What ``cancel`` does to its id, whose index entry is ``index``; ``delivering``:
    a one-shot version of the id is on its way out in this round.

    None: remove the pending version. :attr:`CancelOutcome.CANCELLED` here is a repeat of
    the cancel that removed it (a retry, a redelivery): the same answer, nothing written.
    :attr:`CancelOutcome.CANCELLED_IN_ADVANCE`: remember the cancel for a timer not seen
    yet (the caller applies the cap, and writes nothing for the same cancel again).
    """
    if delivering:
        # On its way out: too late, whatever the index says (a request that fired it at
        # once left none, or the state of an earlier version of its id).
        return CancelOutcome.ALREADY_FIRED
    if (
        index is not None
        and index.state == INDEX_CANCELLED
        and index.due != 0
        and index.token == cancel.token
    ):
        return CancelOutcome.CANCELLED
    if index is None or index.state == INDEX_CANCELLED:
        if not cancel.check_token:
            return CancelOutcome.NOT_FOUND
        return CancelOutcome.CANCELLED_IN_ADVANCE
    if index.state == INDEX_FIRED:
        # (A series being delivered is still cancelled, ``delivering`` False: the
        # occurrence on its way goes out, the ones after it never do.)
        return CancelOutcome.ALREADY_FIRED
    if cancel.token != index.token:
        # A tombstone carries no token: it cancels only a timer stored without one
        # (etf1's own), never one its producer protected with a token.
        return CancelOutcome.WRONG_TOKEN
    return None


def owner_refusal(
    index: IndexEntry | None, request: Cancel, delivering: bool
) -> PauseOutcome | None:
    """Why ``request`` (a pause or a resume) cannot act on its timer, or None."""
    if index is None or index.state == INDEX_CANCELLED:
        return PauseOutcome.NOT_FOUND
    if index.state == INDEX_FIRED or delivering:
        return PauseOutcome.ALREADY_FIRED
    if request.token != index.token:
        return PauseOutcome.WRONG_TOKEN
    return None
