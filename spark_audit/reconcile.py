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
  before the fire happened: by the requests its worker had applied when it fired (the
  fire's ``request_offset``: the cancel or the reschedule at or below it), or by time
  for a fire that does not name it. A fire of a version whose reschedule or cancel sits
  past its ``request_offset`` lost a race with a request held up on its way (a forwarding
  worker's failover, say): counted as ``reached_late``, not a violation;
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

A **debounced** id's requests merge as the wheel merges them (:mod:`spark_audit.replay`):
a burst of N requests is one version, expected to fire once, no earlier than its last
request plus the debounce or, capped, the first request plus the max-wait (its due
second), and late from there; the N-1 versions it went through are superseded, never
missing.

A schedule request the worker refused for a reason the audit cannot rule on — a
pending-timer quota (``over_quota``: the state of the whole deployment), a pending
version protected by another token (``wrong_token``) — is answered on the fired topic
(``"event": "dropped"``, with its ``request_offset`` where the worker applied it) and
never stored: the audit takes that answer, and replays the timer without the request
(no version expected from it, none superseded by it), counting it as refused. The
other ``dropped`` answers (``duplicate``, ``cancelled_earlier``) are rulings the replay
makes itself, from the requests.

A fire a trigger or a backfill asked for (its record's ``extra``) is judged by what it
is (:mod:`spark_audit.extras`): a triggered one-shot is not early for firing before its
second, and a series' extra fires (keyed under the series' id) are no occurrences of it.

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
:data:`~kafka_timers_client.recurrence.ANCHOR_SLACK_SECONDS` later (a producer clock far behind, an
outage), when it starts that long before the read. The audit has no worker clock: it
takes the timestamp's anchor when the series' first record came within the slack of
the timestamp (or there is none yet), and otherwise the anchor the records themselves
show, if it is one the worker could have used (see :mod:`spark_audit.series`).

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

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from kafka_timers_client.extra_fires import TRIGGER
from spark_audit.extras import judge_series_extras, trigger_early
from spark_audit.replay import Replay, without_repeats
from spark_audit.series import judge_series
from spark_audit.verdicts import (
    REFUSED_OUTCOMES,
    CancelReport,
    DroppedAnswer,
    ExtraAnswer,
    FireEvent,
    RequestEvent,
    Rules,
    SkipEvent,
    Status,
    Verdict,
    Version,
    Violation,
    ViolationKind,
    in_window,
    utc_text,
)

__all__ = ["judge"]


def judge(
    requests: Iterable[RequestEvent],
    fires: Iterable[FireEvent],
    reports: Iterable[CancelReport],
    rules: Rules,
    skips: Iterable[SkipEvent] = (),
    answers: Iterable[ExtraAnswer] = (),
    dropped: Iterable[DroppedAnswer] = (),
) -> Verdict:
    """The verdict on one timer; ``requests`` must be in offset order. ``answers``: the
    worker's answers to the triggers and backfills of it that it applied; ``fires``
    include the fires they asked for (:mod:`spark_audit.extras`). ``dropped``: the
    worker's ``dropped`` answers to its schedule requests (matched by offset)."""
    requests = list(requests)
    refusals = {
        d.request_offset: d.outcome
        for d in dropped
        if d.outcome in REFUSED_OUTCOMES and d.request_offset is not None
    }
    refused: Counter[str] = Counter()
    answers = list(answers)
    fires = list(fires)
    fired_ms: dict[Version, int] = {}  # each one-shot version's first fire
    for f in fires:
        if f.seq is None and f.extra_n is None:
            version = (f.token, f.due)
            fired_ms[version] = min(f.fired_at_ms, fired_ms.get(version, f.fired_at_ms))
    replay = Replay(reports, fired_ms)
    for request in requests:
        if request.kind == "schedule":
            outcome = refusals.get(request.offset)
            if outcome is not None:  # refused by the worker: never stored
                refused[outcome] += 1
                continue
            replay.schedule(request)
        else:
            replay.cancel(request)
    distinct = without_repeats(fires, lambda f: (f.fired_at_ms, f.token, f.due))
    # A series' extra fires are judged on their own; the rest are this timer's fires.
    extras = judge_series_extras([f for f in distinct if f.extra_n is not None], replay, answers)
    distinct = [f for f in distinct if f.extra_n is None]
    # A fire's version, and its occurrence within it (a series' due; a one-shot's own).
    versions = [replay.version_of(f.token, f.due, f.seq, f.fired_at_ms) for f in distinct]
    by_occurrence: dict[tuple[Version, int], list[FireEvent]] = defaultdict(list)
    for fire, version in zip(distinct, versions, strict=True):
        by_occurrence[(version, fire.due)].append(fire)

    violations: list[Violation] = []
    fire_rows: list[dict[str, Any]] = []
    reached_late = 0
    for fire, version in zip(distinct, versions, strict=True):
        due_ms = fire.due * 1000
        since = replay.first_requested.get(version)
        lateness = fire.fired_at_ms - max(due_ms, since if since is not None else due_ms)
        window_ms = replay.spread_ms.get(version, 0)
        if window_ms and lateness > 0:  # a spread fire is on time anywhere in its window
            lateness = max(0, lateness - window_ms)
        first = by_occurrence[(version, fire.due)][0] is fire
        if fire.extra == TRIGGER:  # a one-shot fired by a trigger, not by its second
            lateness, early = trigger_early(fire, answers)
            if early is not None:
                violations.append(Violation.of_fire(ViolationKind.EARLY, fire, early))
            extras.triggered += first
        fire_rows.append(
            {
                "token": fire.token,
                "due": fire.due,
                "fired_at_ms": fire.fired_at_ms,
                "topic": fire.topic,
                "worker": fire.worker,
                "lateness_ms": lateness,
                "first": first,
                "extra": fire.extra,
            }
        )
        if fire.fired_at_ms < due_ms and fire.extra != TRIGGER:
            violations.append(
                Violation.of_fire(
                    ViolationKind.EARLY,
                    fire,
                    f"fired {due_ms - fire.fired_at_ms} ms before its due second",
                )
            )
        if replay.final is None:
            violations.append(
                Violation.of_fire(
                    ViolationKind.UNREQUESTED,
                    fire,
                    "no schedule request for this id",
                )
            )
            continue
        if since is None:
            violations.append(
                Violation.of_fire(
                    ViolationKind.UNREQUESTED,
                    fire,
                    "this version (token, due) was never requested"
                    if fire.seq is None
                    else "no series with this token was requested",
                )
            )
            continue
        span = replay.dead_span(version, fire.fired_at_ms, fire.request_offset)
        if span is None and fire.request_offset is not None:
            # Replaced or cancelled by then, by time, but by a request the worker had not
            # applied yet: the request reached it late (held up on its way), a race.
            reached_late += replay.dead_span(version, fire.fired_at_ms) is not None
        if span is not None:
            what = "cancelled" if span.kind is ViolationKind.FIRE_AFTER_CANCEL else "replaced"
            detail = f"fired {fire.fired_at_ms - span.start} ms after it was {what}"
            if fire.request_offset is not None:
                detail += (
                    f" (at offset {span.offset}; its worker had applied the requests "
                    f"through {fire.request_offset})"
                )
            violations.append(Violation.of_fire(span.kind, fire, detail))
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

    fire_rows.extend(extras.rows)
    violations = in_window(violations + extras.violations, rules)
    skips = without_repeats(skips, lambda s: (s.at_ms, s.token, s.due))
    skip_versions = [replay.version_of(k.token, k.due, k.seq, k.at_ms) for k in skips]
    verdict = Verdict(
        Status.PENDING,
        len(requests),
        fires=fire_rows,
        violations=violations,
        extra_triggered=extras.triggered,
        extra_backfilled=extras.backfilled,
        reached_late=reached_late,
        refused_over_quota=refused["over_quota"],
        refused_wrong_token=refused["wrong_token"],
    )
    final = replay.final
    if final is None:
        if not distinct and not extras.rows:
            verdict.status = Status.REFUSED if refused else Status.CANCEL_ONLY
        else:
            verdict.status = Status.UNREQUESTED if rules.requests_complete else Status.REQUEST_GONE
        return verdict
    assert final.due is not None
    version = (final.token, final.due)
    since = replay.live_since[version]
    spans = replay.dead.get(version)
    cancel_at = spans[-1].start if spans and spans[-1].end is None else None
    final_fires = [f.fired_at_ms for f, v in zip(distinct, versions, strict=True) if v == version]
    verdict.final_token, verdict.final_due = final.token, final.due
    verdict.final_topic, verdict.final_requested_ms = final.topic, since
    verdict.fire_count, verdict.fire_times = len(final_fires), final_fires
    recurrence = replay.series.get(version)
    if recurrence is not None:
        mine = [f for f, v in zip(distinct, versions, strict=True) if v == version]
        my_skips = [k for k, v in zip(skips, skip_versions, strict=True) if v == version]
        window_ms = replay.spread_ms.get(version, 0)
        judge_series(verdict, recurrence, since, cancel_at, mine, my_skips, rules, window_ms)
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
