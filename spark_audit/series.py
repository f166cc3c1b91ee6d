"""Judging a series: each occurrence of its final version, numbered as the worker numbered it."""

from __future__ import annotations

from kafka_timers_client.errors import RejectedRequest
from kafka_timers_client.recurrence import ANCHOR_SLACK_SECONDS, Recurrence
from spark_audit.verdicts import (
    FireEvent,
    Rules,
    SkipEvent,
    Status,
    Verdict,
    Violation,
    ViolationKind,
    in_window,
    utc_text,
)

__all__ = ["MAX_OCCURRENCES_WALKED", "judge_series"]


#: Most occurrences of one series the audit walks (an every-second series over the
#: default 7-day window is about 600,000).
MAX_OCCURRENCES_WALKED = 2_000_000


def judge_series(
    verdict: Verdict,
    recurrence: Recurrence,
    live_since: int,
    ended_ms: int | None,
    fires: list[FireEvent],
    skips: list[SkipEvent],
    rules: Rules,
    spread_ms: int = 0,
) -> None:
    """Reconcile each occurrence of the final series version (see :mod:`spark_audit.reconcile`);
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
                Violation.of_fire(
                    ViolationKind.UNREQUESTED,
                    got,
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
            Violation.of_fire(
                ViolationKind.UNREQUESTED,
                fire,
                f"occurrence {fire.seq}: the series has only {walked}",
            )
        )
    verdict.violations.extend(in_window(wrong, rules))
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
    :data:`~kafka_timers_client.recurrence.ANCHOR_SLACK_SECONDS`. The audit has no such clock, but
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
