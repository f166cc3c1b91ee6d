"""The audit's vocabulary for one timer: the records it reads, its rules, and its verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from typing import Any, NamedTuple

from app.core.debounce import Debounce
from kafka_timers_client.recurrence import Recurrence

__all__ = [
    "REFUSED_OUTCOMES",
    "CancelReport",
    "DroppedAnswer",
    "ExtraAnswer",
    "FireEvent",
    "RequestEvent",
    "Rules",
    "SkipEvent",
    "Status",
    "Verdict",
    "Version",
    "Violation",
    "ViolationKind",
    "in_window",
    "utc_text",
]


#: A version of a timer: its token and due second.
Version = tuple[str, int]


class ViolationKind(str, Enum):
    """What went wrong; the audit's exit status counts these."""

    #: The final version is due (plus grace), not cancelled, and never fired.
    MISSING = "missing"
    #: One version fired more than once (at-least-once delivery allows it).
    DUPLICATE = "duplicate"
    #: A fire before its due second.
    EARLY = "early"
    #: A fire of a version after a cancel had removed it.
    FIRE_AFTER_CANCEL = "fire_after_cancel"
    #: A fire of a version after a newer schedule had replaced it.
    SUPERSEDED = "superseded_fire"
    #: A fire no request asked for (unknown id, or a version never requested).
    UNREQUESTED = "unrequested_fire"


class Status(str, Enum):
    """Where one timer stands at the audit's as-of time."""

    #: The final version fired.
    FIRED = "fired"
    #: The final version was cancelled (or dropped by an earlier cancel).
    CANCELLED = "cancelled"
    #: Not fired, but not yet due plus grace.
    PENDING = "pending"
    #: Due plus grace has passed and it never fired.
    MISSING = "missing"
    #: Only cancels were requested for this id.
    CANCEL_ONLY = "cancel_only"
    #: The late-fire policy skipped its fire (one-shot timers).
    SKIPPED = "skipped"
    #: Fired, but no request is left to judge it by: its request partition lost records
    #: to retention (the request was probably among them).
    REQUEST_GONE = "request_gone"
    #: Fired without any request.
    UNREQUESTED = "unrequested"
    #: Every schedule request for it was refused by the worker (answered ``dropped``,
    #: ``over_quota`` or ``wrong_token``): never stored, nothing expected.
    REFUSED = "refused"


class RequestEvent(NamedTuple):
    """One accepted request record of the timer, as parsed."""

    offset: int
    #: Record timestamp, epoch ms.
    ts_ms: int
    #: ``schedule`` or ``cancel``.
    kind: str
    token: str
    #: Due second (schedules only).
    due: int | None = None
    #: Whether a cancel must present the pending version's token (not etf1 tombstones).
    check_token: bool = True
    #: Callback topic (schedules only).
    topic: str | None = None
    #: The series, for a recurring schedule (its ``start`` is ``due``).
    recurrence: Recurrence | None = None
    #: Seconds after its due second the fire may come, on time (schedules only).
    spread: int = 0
    #: A debounced schedule's window (its ``first_ms`` is the request's own, merged 1),
    #: or a debounced timer restored whole by an import (``restored``: its first
    #: request's time and merged count): see :mod:`spark_audit.replay`.
    debounce: Debounce | None = None


class FireEvent(NamedTuple):
    """One ``fired`` record of the timer from the fired topic."""

    token: str
    due: int
    fired_at_ms: int
    topic: str | None = None
    worker: str | None = None
    #: The occurrence's number, for a series.
    seq: int | None = None
    #: Earlier occurrences folded into this fire by ``coalesce``.
    coalesced: int = 0
    #: ``trigger`` or ``backfill`` for a fire a trigger or a backfill asked for (the
    #: record's ``extra``), else ``None``.
    extra: str | None = None
    #: For a series' extra fire (its id ``<id>@trigger:<n>`` or ``<id>@backfill:<n>``,
    #: judged with series ``<id>``): the trigger's request offset or the backfilled
    #: second. ``None`` for a timer's own fire, a triggered one-shot's included.
    extra_n: int | None = None
    #: The newest request offset the firing worker had applied to the timer's partition
    #: (the record's ``request_offset``): requests past it had not reached the worker.
    #: ``None`` in records written before workers named it.
    request_offset: int | None = None


class ExtraAnswer(NamedTuple):
    """The worker's answer to a trigger or a backfill it applied (``triggered``,
    ``backfilled``): when, by its clock, what it fires was stored to go out."""

    #: ``trigger`` or ``backfill``.
    kind: str
    #: The token the request presented (a digest): the timer's, since it was applied.
    token: str
    outcome: str
    at_ms: int
    #: The request's offset on the timer's request partition.
    request_offset: int | None = None


class SkipEvent(NamedTuple):
    """One ``skipped`` record: a fire the late-fire policy did not deliver."""

    token: str
    due: int
    at_ms: int
    #: ``late`` (skip-after) or ``coalesced``.
    reason: str
    seq: int | None = None
    #: Earlier occurrences this record also stands for.
    coalesced: int = 0


class CancelReport(NamedTuple):
    """One ``cancel`` outcome record of the timer from the fired topic."""

    #: The token the cancel request presented ("" for etf1 tombstones).
    token: str
    #: ``cancelled``, ``wrong_token``, ``already_fired``, ``cancelled_in_advance``, ...
    outcome: str
    at_ms: int


#: The ``dropped`` answers of a schedule request the worker refused, which the audit
#: cannot rule on itself: ``over_quota`` (a pending-timer quota, a state of the whole
#: deployment) and ``wrong_token`` (a pending version protected by another token). The
#: other ``dropped`` outcomes, ``duplicate`` and ``cancelled_earlier``, are rulings the
#: replay makes itself (:mod:`spark_audit.replay`): taking their answers too would count
#: them twice.
REFUSED_OUTCOMES = ("over_quota", "wrong_token")


class DroppedAnswer(NamedTuple):
    """One ``dropped`` record of the timer from the fired topic: a schedule request the
    worker answered, and did not store."""

    #: ``over_quota``, ``wrong_token``, ``duplicate``, ``cancelled_earlier``.
    outcome: str
    #: The request's offset on the partition where the worker applied it (a forwarded
    #: request's: its copy's), the request the answer is matched to; ``None``: not named.
    request_offset: int | None


@dataclass(frozen=True)
class Rules:
    """When a timer counts as missing."""

    #: The audit's "now", epoch ms: nothing that happens later is expected.
    as_of_ms: int
    #: How long after its due second a fire may come before it is missing, ms.
    grace_ms: int = 60_000
    #: Start of the audit window, epoch ms: what happened before it is evidence, not a
    #: violation (``None``: no window, everything counts).
    since_ms: int | None = None
    #: Whether every request ever sent to this timer's partition is still readable (its
    #: low watermark is 0). If not, a fire without a request is ``request_gone``.
    requests_complete: bool = True


@dataclass(frozen=True)
class Violation:
    """One finding about one timer."""

    kind: ViolationKind
    token: str | None
    due: int | None
    #: When it happened (the fire's time; for a missing fire, when it was expected).
    at_ms: int | None
    detail: str

    @classmethod
    def of_fire(cls, kind: ViolationKind, fire: FireEvent, detail: str) -> Violation:
        """A finding about one fire: its token, due second and time."""
        return cls(kind, fire.token, fire.due, fire.fired_at_ms, detail)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "token": self.token,
            "due": self.due,
            "at_ms": self.at_ms,
            "detail": self.detail,
        }


@dataclass
class Verdict:
    """Everything the audit reports about one timer."""

    status: Status
    #: Request records (schedules and cancels) for this timer.
    requests: int
    final_token: str | None = None
    final_due: int | None = None
    final_topic: str | None = None
    #: Since when the final version has been pending (its request's timestamp), ms.
    final_requested_ms: int | None = None
    cancelled: bool = False
    #: When the final version was cancelled, ms.
    cancel_at_ms: int | None = None
    #: Fires of the final version, and their times.
    fire_count: int = 0
    fire_times: list[int] = field(default_factory=list)
    #: Every distinct fire of any version, with its lateness and whether it came first.
    fires: list[dict[str, Any]] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    #: Occurrences (a one-shot timer is one) delivered, skipped by ``skip-after`` and
    #: folded by ``coalesce``: the policy's work, counted, not violations.
    occurrences_fired: int = 0
    occurrences_skipped: int = 0
    occurrences_coalesced: int = 0
    #: Fires a trigger asked for (a one-shot's own, a series' extra occurrence) and
    #: occurrences a backfill fired, each extra id once: counted, not occurrences.
    extra_triggered: int = 0
    extra_backfilled: int = 0
    #: Fires of a version whose reschedule or cancel the firing worker had not applied
    #: yet (at an offset past the fire's ``request_offset``): races, not violations.
    reached_late: int = 0
    #: Schedule requests the worker refused and answered ``dropped`` (see
    #: :data:`REFUSED_OUTCOMES`), by outcome: never stored, so neither expected to fire
    #: nor replacing the version before them.
    refused_over_quota: int = 0
    refused_wrong_token: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "requests": self.requests,
            "final_token": self.final_token,
            "final_due": self.final_due,
            "final_topic": self.final_topic,
            "final_requested_ms": self.final_requested_ms,
            "cancelled": self.cancelled,
            "cancel_at_ms": self.cancel_at_ms,
            "fire_count": self.fire_count,
            "fire_times": self.fire_times,
            "fires": self.fires,
            "violations": [v.to_dict() for v in self.violations],
            "occurrences_fired": self.occurrences_fired,
            "occurrences_skipped": self.occurrences_skipped,
            "occurrences_coalesced": self.occurrences_coalesced,
            "extra_triggered": self.extra_triggered,
            "extra_backfilled": self.extra_backfilled,
            "reached_late": self.reached_late,
            "refused_over_quota": self.refused_over_quota,
            "refused_wrong_token": self.refused_wrong_token,
        }


def utc_text(ms: int) -> str:
    """``1767225600123`` as ``2026-01-01 00:00:00.123Z``: details are read by people."""
    try:
        moment = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}Z"


def in_window(violations: list[Violation], rules: Rules) -> list[Violation]:
    """The fire violations that count under ``rules``: in the window, and provable.

    Every kind but ``missing`` is about a fire, and ``at_ms`` is that fire's time.
    """
    kept = []
    for v in violations:
        if rules.since_ms is not None and v.at_ms is not None and v.at_ms < rules.since_ms:
            continue
        if v.kind is ViolationKind.UNREQUESTED and not rules.requests_complete:
            continue  # the request may be one retention deleted
        kept.append(v)
    return kept
