"""What should have happened to one timer, against what the fired topic says happened.

Pure logic, no Spark: one call per timer (one timer id on one request partition, the
unit a worker's wheel keys on), so it can be tested with plain lists.

The requests are replayed through the same rules as :class:`app.core.wheel.PartitionWheel`
applies, in offset order:

- a schedule makes its *version* (token, due second) the pending one; a different
  pending version is *superseded* from that moment;
- a cancel whose token matches the pending version (or an etf1 tombstone) cancels it
  from that moment; a wrong token changes nothing; a cancel with no pending timer is
  remembered, and a later schedule with that same token is dropped at once;
- a cancel the worker reported as ``already_fired`` (it lost the race with the tick),
  ``wrong_token`` or ``not_found`` changed nothing, whatever the replay would say.

A cancel takes effect at the worker's ``at_ms`` from its report on the fired topic, or
at the request's timestamp when there is no report. Then every fire is judged:

- **early**: fired before its due second (a spread timer's too: its window starts there);
- **fire after cancel** / **superseded fire**: its version was cancelled / replaced
  before the fire happened;
- **unrequested fire**: no request ever asked for that id, or for that version;
- **duplicate**: a version that fired more than once (the at-least-once window);
- **missing**: the final version is not cancelled, has not fired, and its due second
  (or its request, when that came later: a request for a past second fires at once)
  is more than the grace period before the audit's as-of time. A **spread** timer may
  fire anywhere in ``[due, due + spread]``: it is missing only once the end of that
  window is past by the grace period, and its lateness counts from the window's end
  (a fire inside the window is on time, lateness 0).

Identical fire records (same version, time and worker) are one fire written twice by a
producer retry, not two fires.

A **series** (a schedule with a recurrence) is one version — its token and its first
occurrence's due second — whose occurrences are each reconciled as a timer of their
own, by sequence number: a fire of occurrence *n* must carry *n*'s due second (else it
is unrequested), must not be early, must not come after the series was cancelled or
replaced, and must happen once; every occurrence due (plus grace) before the audit's
as-of time and before the series was cancelled or replaced must be accounted for — fired,
skipped by ``skip-after`` or folded by ``coalesce`` — or it is **missing**. Skipped and
coalesced occurrences are counted, not judged. A one-shot timer the policy skipped is
``skipped``, not missing.

A series is numbered from where the worker anchored it: at its request's timestamp,
unless the worker read the request more than
:data:`~app.core.recurrence.ANCHOR_SLACK_SECONDS` later (a producer clock far behind, an
outage), when it starts that long before the read. The audit has no worker clock: it
takes the timestamp's anchor when the series' first record came within the slack of
the timestamp (or there is none yet), and otherwise the anchor the records themselves
show, if it is one the worker could have used (see :func:`_worker_anchor`).

Under retention the audit judges a *window*, ``[since, as-of]`` (:class:`Rules`). Every
readable record is evidence, but only what happened in the window is a violation: a
fire at or after ``since`` (early, after cancel, superseded, unrequested, the second fire
of a duplicate), or a timer that became overdue (due, or requested, plus grace) at or
after ``since``. Daily windows therefore report each violation once. And a fire whose
request is not in the topic is *unrequested* only if nothing was ever deleted from its
request partition; where retention has deleted records the request may simply be gone:
status ``request_gone``, not a violation.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from typing import Any, NamedTuple, TypeVar

from app.core.errors import RejectedRequest
from app.core.recurrence import ANCHOR_SLACK_SECONDS, Recurrence

__all__ = [
    "MAX_OCCURRENCES_WALKED",
    "CancelReport",
    "FireEvent",
    "RequestEvent",
    "Rules",
    "SkipEvent",
    "Status",
    "Verdict",
    "Violation",
    "ViolationKind",
    "judge",
    "utc_text",
]

#: A version of a timer: its token and due second.
Version = tuple[str, int]

_NO_EFFECT = frozenset({"already_fired", "wrong_token", "not_found", "not_remembered"})
#: Most occurrences of one series the audit walks (an every-second series over the
#: default 7-day window is about 600,000).
MAX_OCCURRENCES_WALKED = 2_000_000


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
        }


_T = TypeVar("_T")


def utc_text(ms: int) -> str:
    """``1767225600123`` as ``2026-01-01 00:00:00.123Z``: details are read by people."""
    try:
        moment = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}Z"


def _distinct(items: Iterable[_T], key: Callable[[_T], Any]) -> list[_T]:
    """``items`` without exact repeats, ordered by ``key`` (most timers have 0 or 1)."""
    unique = list(items)
    if len(unique) < 2:
        return unique
    return sorted(set(unique), key=key)


class _Dead(NamedTuple):
    """A span of time in which one version must not fire."""

    start: int
    end: int | None
    kind: ViolationKind


class _Replay:
    """The request-side state of the worker's wheel for one timer id."""

    def __init__(self, reports: Iterable[CancelReport]) -> None:
        self.pending: Version | None = None
        #: Token of a cancel waiting for its request, or of the version it cancelled, and
        #: that version's due second (0 for a cancel in advance): the wheel's ``C`` entry.
        self.cancelled_token: str | None = None
        self.cancelled_due = 0
        self.final: RequestEvent | None = None
        #: When each version was first requested (the base of its lateness).
        self.first_requested: dict[Version, int] = {}
        #: When each version last became pending (the base of "missing").
        self.live_since: dict[Version, int] = {}
        #: The spread of each version, ms (its newest request's): fires within it are on
        #: time.
        self.spread_ms: dict[Version, int] = {}
        #: The recurrence of each series version, and the series versions by token.
        self.series: dict[Version, Recurrence] = {}
        self.series_by_token: dict[str, list[Version]] = defaultdict(list)
        self.dead: dict[Version, list[_Dead]] = defaultdict(list)
        self._reports: dict[str, deque[CancelReport]] = defaultdict(deque)
        for report in _distinct(reports, lambda r: r.at_ms):
            self._reports[report.token].append(report)

    def _kill(self, version: Version, at_ms: int, kind: ViolationKind) -> None:
        spans = self.dead[version]
        if spans and spans[-1].end is None:
            if spans[-1].kind is kind:
                return
            spans[-1] = spans[-1]._replace(end=at_ms)
        spans.append(_Dead(at_ms, None, kind))

    def _revive(self, version: Version, at_ms: int) -> None:
        spans = self.dead.get(version)
        if spans and spans[-1].end is None:
            spans[-1] = spans[-1]._replace(end=at_ms)

    def schedule(self, request: RequestEvent) -> None:
        assert request.due is not None
        version = (request.token, request.due)
        self.final = request
        self.first_requested.setdefault(version, request.ts_ms)
        if request.spread or version in self.spread_ms:
            self.spread_ms[version] = request.spread * 1000
        if request.recurrence is not None and version not in self.series:
            self.series[version] = request.recurrence
            self.series_by_token[request.token].append(version)
        if (
            self.pending is None
            and self.cancelled_token == request.token
            and self.cancelled_due in (0, request.due)
        ):
            # The wheel drops it: cancelled before it arrived, or this very version again.
            self.live_since.setdefault(version, request.ts_ms)
            self._kill(version, request.ts_ms, ViolationKind.FIRE_AFTER_CANCEL)
            return
        if self.pending != version:
            if self.pending is not None:
                self._kill(self.pending, request.ts_ms, ViolationKind.SUPERSEDED)
            self._revive(version, request.ts_ms)
            self.live_since[version] = request.ts_ms
        self.pending = version
        self.cancelled_token = None

    def cancel(self, request: RequestEvent) -> None:
        queue = self._reports.get(request.token)
        report = queue.popleft() if queue else None
        if report is not None and report.outcome in _NO_EFFECT:
            return
        effective_ms = report.at_ms if report is not None else request.ts_ms
        if self.pending is None:
            if request.check_token:
                self.cancelled_token, self.cancelled_due = request.token, 0
            return
        if request.token != self.pending[0]:
            return  # a tombstone (no token) cancels only a timer stored without one
        self._kill(self.pending, effective_ms, ViolationKind.FIRE_AFTER_CANCEL)
        self.cancelled_token, self.cancelled_due = self.pending
        self.pending = None

    def version_of(self, token: str, due: int, seq: int | None, at_ms: int) -> Version:
        """The version a fire or skip record belongs to: a series occurrence (``seq``
        set) to the series with its token requested last before ``at_ms``."""
        if seq is None:
            return (token, due)
        candidates = self.series_by_token.get(token)
        if not candidates:
            return (token, -1)  # no series with this token: unrequested
        before = [v for v in candidates if self.first_requested[v] <= at_ms]
        return before[-1] if before else candidates[0]

    def dead_span(self, version: Version, at_ms: int) -> _Dead | None:
        for span in self.dead.get(version, ()):
            if span.start <= at_ms and (span.end is None or at_ms < span.end):
                return span
        return None


def _in_window(violations: list[Violation], rules: Rules) -> list[Violation]:
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


def judge(
    requests: Iterable[RequestEvent],
    fires: Iterable[FireEvent],
    reports: Iterable[CancelReport],
    rules: Rules,
    skips: Iterable[SkipEvent] = (),
) -> Verdict:
    """The verdict on one timer; ``requests`` must be in offset order."""
    requests = list(requests)
    replay = _Replay(reports)
    for request in requests:
        if request.kind == "schedule":
            replay.schedule(request)
        else:
            replay.cancel(request)
    distinct = _distinct(fires, lambda f: (f.fired_at_ms, f.token, f.due))
    # A fire's version, and its occurrence within it (a series' due; a one-shot's own).
    versions = [replay.version_of(f.token, f.due, f.seq, f.fired_at_ms) for f in distinct]
    by_occurrence: dict[tuple[Version, int], list[FireEvent]] = defaultdict(list)
    for fire, version in zip(distinct, versions, strict=True):
        by_occurrence[(version, fire.due)].append(fire)

    violations: list[Violation] = []
    fire_rows: list[dict[str, Any]] = []
    for fire, version in zip(distinct, versions, strict=True):
        due_ms = fire.due * 1000
        since = replay.first_requested.get(version)
        lateness = fire.fired_at_ms - max(due_ms, since if since is not None else due_ms)
        window_ms = replay.spread_ms.get(version, 0)
        if window_ms and lateness > 0:  # a spread fire is on time anywhere in its window
            lateness = max(0, lateness - window_ms)
        first = by_occurrence[(version, fire.due)][0] is fire
        fire_rows.append(
            {
                "token": fire.token,
                "due": fire.due,
                "fired_at_ms": fire.fired_at_ms,
                "topic": fire.topic,
                "worker": fire.worker,
                "lateness_ms": lateness,
                "first": first,
            }
        )
        if fire.fired_at_ms < due_ms:
            violations.append(
                Violation(
                    ViolationKind.EARLY,
                    fire.token,
                    fire.due,
                    fire.fired_at_ms,
                    f"fired {due_ms - fire.fired_at_ms} ms before its due second",
                )
            )
        if replay.final is None:
            violations.append(
                Violation(
                    ViolationKind.UNREQUESTED,
                    fire.token,
                    fire.due,
                    fire.fired_at_ms,
                    "no schedule request for this id",
                )
            )
            continue
        if since is None:
            violations.append(
                Violation(
                    ViolationKind.UNREQUESTED,
                    fire.token,
                    fire.due,
                    fire.fired_at_ms,
                    "this version (token, due) was never requested"
                    if fire.seq is None
                    else "no series with this token was requested",
                )
            )
            continue
        span = replay.dead_span(version, fire.fired_at_ms)
        if span is not None:
            what = "cancelled" if span.kind is ViolationKind.FIRE_AFTER_CANCEL else "replaced"
            violations.append(
                Violation(
                    span.kind,
                    fire.token,
                    fire.due,
                    fire.fired_at_ms,
                    f"fired {fire.fired_at_ms - span.start} ms after it was {what}",
                )
            )
    for ((token, _), due), occurrence_fires in by_occurrence.items():
        if len(occurrence_fires) > 1:
            times = ", ".join(utc_text(f.fired_at_ms) for f in occurrence_fires)
            seq = occurrence_fires[0].seq
            which = "" if seq is None else f"occurrence {seq} "
            violations.append(
                Violation(
                    ViolationKind.DUPLICATE,
                    token,
                    due,
                    occurrence_fires[1].fired_at_ms,
                    f"{which}fired {len(occurrence_fires)} times (at {times})",
                )
            )

    violations = _in_window(violations, rules)
    skips = _distinct(skips, lambda s: (s.at_ms, s.token, s.due))
    skip_versions = [replay.version_of(k.token, k.due, k.seq, k.at_ms) for k in skips]
    final = replay.final
    if final is None:
        if not distinct:
            status = Status.CANCEL_ONLY
        else:
            status = Status.UNREQUESTED if rules.requests_complete else Status.REQUEST_GONE
        return Verdict(status, len(requests), fires=fire_rows, violations=violations)
    assert final.due is not None
    version = (final.token, final.due)
    since = replay.live_since[version]
    spans = replay.dead.get(version)
    cancel_at = spans[-1].start if spans and spans[-1].end is None else None
    final_fires = [f.fired_at_ms for f, v in zip(distinct, versions, strict=True) if v == version]
    verdict = Verdict(
        status=Status.PENDING,
        requests=len(requests),
        final_token=final.token,
        final_due=final.due,
        final_topic=final.topic,
        final_requested_ms=since,
        fire_count=len(final_fires),
        fire_times=final_fires,
        fires=fire_rows,
        violations=violations,
    )
    recurrence = replay.series.get(version)
    if recurrence is not None:
        mine = [f for f, v in zip(distinct, versions, strict=True) if v == version]
        my_skips = [k for k, v in zip(skips, skip_versions, strict=True) if v == version]
        window_ms = replay.spread_ms.get(version, 0)
        _judge_series(verdict, recurrence, since, cancel_at, mine, my_skips, rules, window_ms)
        return verdict
    expected_ms = max(final.due * 1000 + replay.spread_ms.get(version, 0), since)
    if final_fires and cancel_at is not None and final_fires[0] < cancel_at:
        cancel_at = None  # the cancel came after the fire: too late, nothing to cancel
    skipped = any(v == version for v in skip_versions)
    if cancel_at is not None:
        verdict.status = Status.CANCELLED
    elif final_fires:
        verdict.status = Status.FIRED
    elif skipped:
        verdict.status = Status.SKIPPED
    elif expected_ms + rules.grace_ms < rules.as_of_ms:
        verdict.status = Status.MISSING
        overdue_ms = expected_ms + rules.grace_ms
        if rules.since_ms is not None and overdue_ms < rules.since_ms:
            pass  # overdue before the window: the window before this one reported it
        else:
            violations.append(
                Violation(
                    ViolationKind.MISSING,
                    final.token,
                    final.due,
                    expected_ms,
                    f"not fired {(rules.as_of_ms - expected_ms) / 1000:.1f} s after it was due",
                )
            )
    verdict.cancelled = cancel_at is not None
    verdict.cancel_at_ms = cancel_at
    verdict.occurrences_fired = 1 if final_fires else 0
    verdict.occurrences_skipped = 1 if skipped and not final_fires else 0
    return verdict


def _judge_series(
    verdict: Verdict,
    recurrence: Recurrence,
    live_since: int,
    ended_ms: int | None,
    fires: list[FireEvent],
    skips: list[SkipEvent],
    rules: Rules,
    spread_ms: int = 0,
) -> None:
    """Reconcile each occurrence of the final series version (see the module doc);
    ``spread_ms``: how long after its due second each occurrence may fire, on time."""
    assert verdict.final_due is not None
    # A worker refused an occurrence under narrowed rules (``not_allowed``): the series
    # ended there, as if cancelled.
    refused = [k.at_ms for k in skips if k.reason == "not_allowed"]
    if refused:
        ended_ms = min(refused) if ended_ms is None else min(ended_ms, *refused)
    anchor = _worker_anchor(recurrence, verdict.final_due, live_since, fires, skips)
    if anchor != verdict.final_due:
        recurrence = recurrence.with_start(anchor)  # its calendar too
        verdict.final_due = anchor
    fired: dict[int, FireEvent] = {}
    skipped: set[int] = set()
    coalesced: set[int] = set()
    for fire in fires:
        if fire.seq is not None:
            fired.setdefault(fire.seq, fire)
            coalesced.update(range(fire.seq - fire.coalesced, fire.seq))
    for skip in skips:
        if skip.seq is None:
            continue
        if skip.reason == "coalesced":
            coalesced.update(range(skip.seq - skip.coalesced, skip.seq + 1))
        else:
            skipped.add(skip.seq)
            coalesced.update(range(skip.seq - skip.coalesced, skip.seq))
    last_recorded = max([*fired, *skipped, *coalesced], default=0)
    missing: list[tuple[int, int]] = []
    wrong: list[Violation] = []
    ended = False
    walked = 0
    for seq, due in recurrence.occurrences(verdict.final_due, 1):
        walked += 1
        got = fired.get(seq)
        if got is not None and got.due != due:
            wrong.append(
                Violation(
                    ViolationKind.UNREQUESTED,
                    got.token,
                    got.due,
                    got.fired_at_ms,
                    f"occurrence {seq} is due at {utc_text(due * 1000)}, not "
                    f"{utc_text(got.due * 1000)}",
                )
            )
        due_ms = due * 1000 + spread_ms  # a spread occurrence may fire as late as this
        expected = (ended_ms is None or due_ms + rules.grace_ms < ended_ms) and max(
            due_ms, live_since
        ) + rules.grace_ms < rules.as_of_ms
        overdue_before_window = (
            rules.since_ms is not None and max(due_ms, live_since) + rules.grace_ms < rules.since_ms
        )
        if (
            expected
            and got is None
            and seq not in skipped
            and seq not in coalesced
            and not overdue_before_window  # the window before this one reported it
        ):
            missing.append((seq, due))
        if not expected and seq > last_recorded:
            break
        if walked >= MAX_OCCURRENCES_WALKED:
            break
    else:
        ended = True  # the series ran out of occurrences (count or end)
    beyond = [f for s, f in fired.items() if s > walked]
    for fire in beyond if ended else ():
        wrong.append(
            Violation(
                ViolationKind.UNREQUESTED,
                fire.token,
                fire.due,
                fire.fired_at_ms,
                f"occurrence {fire.seq}: the series has only {walked}",
            )
        )
    verdict.violations.extend(_in_window(wrong, rules))
    for i, (seq, due) in enumerate(missing[:100]):  # one each; a long outage lists 100
        more = len(missing) - 100 if i == 99 else 0
        verdict.violations.append(
            Violation(
                ViolationKind.MISSING,
                verdict.final_token,
                due,
                max(due * 1000 + spread_ms, live_since),
                f"occurrence {seq} not fired" + (f" (and {more} more)" if more > 0 else ""),
            )
        )
    accounted = fired.keys() | skipped | coalesced
    verdict.cancelled = ended_ms is not None
    verdict.cancel_at_ms = ended_ms
    verdict.occurrences_fired = len(fired)
    verdict.occurrences_skipped = len(skipped - fired.keys())
    verdict.occurrences_coalesced = len(coalesced - fired.keys() - skipped)
    if missing:
        verdict.status = Status.MISSING
    elif ended_ms is not None:
        verdict.status = Status.CANCELLED
    elif ended and all(seq in accounted for seq in range(1, walked + 1)):
        verdict.status = Status.FIRED  # every occurrence of a finished series


def _worker_anchor(
    recurrence: Recurrence,
    floor_due: int,
    requested_ms: int,
    fires: list[FireEvent],
    skips: list[SkipEvent],
) -> int:
    """Due second of occurrence 1 as the worker numbered the series.

    The request's timestamp gives ``floor_due``, the earliest the worker can have
    anchored it: it anchors no earlier than its clock, when it read the request, less
    :data:`~app.core.recurrence.ANCHOR_SLACK_SECONDS`. The audit has no such clock, but
    the worker read the request before it wrote any record of the series: if the first
    came within the slack of the timestamp, the anchor is ``floor_due``. Otherwise it is
    read off the records — the lowest-numbered occurrence, walked back to occurrence 1 —
    and accepted only between ``floor_due`` and the latest anchor the first record's time
    allows; outside that the worker numbered wrongly, and the records are judged
    against ``floor_due``. Without records the timestamp is taken as the read time.
    """
    numbered = [(f.seq, f.due, f.fired_at_ms) for f in fires if f.seq is not None]
    numbered += [(k.seq, k.due, k.at_ms) for k in skips if k.seq is not None]
    if not numbered:
        return floor_due
    sent = -(-requested_ms // 1000)
    latest_floor = min(at for _, _, at in numbered) // 1000 - ANCHOR_SLACK_SECONDS
    if latest_floor <= sent:
        return floor_due  # read within the slack: anchored at its timestamp
    seq, due, _ = min(numbered)
    anchor = recurrence.before(due, seq - 1, floor_due, limit=MAX_OCCURRENCES_WALKED)
    if anchor is None:
        return floor_due
    latest: int | None
    if recurrence.every is not None:
        latest = latest_floor + recurrence.every
    else:
        try:
            latest = (
                Recurrence(
                    recurrence.cron, recurrence.tz, start=floor_due, calendar=recurrence.calendar
                )
                .anchored(latest_floor)
                .start
            )
        except RejectedRequest:
            return floor_due
    return anchor if latest is not None and floor_due <= anchor <= latest else floor_due
