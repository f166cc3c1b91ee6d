"""Where a series starts (the anchor slack) and how far it catches up (issue 21, point 4).

A series is anchored at the later of its record's timestamp and the worker's clock less
:data:`ANCHOR_SLACK_SECONDS`; a series far behind catches up at most
:data:`MAX_CATCH_UP_SECONDS` of occurrences, with bounded work per tick; and the audit,
which has no worker clock, agrees with the worker from the series' fired records.
"""

from __future__ import annotations

import json
import time

import pytest

from app.core.firing import (
    CATCH_UP_PER_TICK,
    CRON_WALK_PER_TICK,
    MAX_CATCH_UP_SECONDS,
    Plan,
    StepKind,
    plan,
)
from app.core.raw_record import RawRecord
from app.core.request_format import parse_request
from app.core.timer import Timer
from kafka_timers_client.late import DEFAULT_POLICY, CatchUp, LatePolicy
from kafka_timers_client.recurrence import ANCHOR_SLACK_SECONDS, Recurrence
from spark_audit.reconcile import judge
from spark_audit.verdicts import FireEvent, RequestEvent, Rules, SkipEvent, Status

NOW = 1_767_225_600.25  # the worker's clock: 2026-01-01
FIRE_ALL = LatePolicy(0, CatchUp.ALL)


def request(doc: dict[str, object], ts_ms: int) -> RawRecord:
    return RawRecord("requests", 0, 7, ts_ms, b"s", json.dumps(doc).encode())


def series(doc: dict[str, object], ts_ms: int, now: float | None) -> Timer:
    timer = parse_request(request({"id": "s", "topic": "cb", **doc}, ts_ms), now)
    assert isinstance(timer, Timer) and timer.recurrence is not None
    return timer


# -- the anchor --------------------------------------------------------------------------


def test_a_series_sent_with_a_1970_timestamp_starts_near_the_workers_clock() -> None:
    timer = series({"every": "1s", "late": "all"}, ts_ms=0, now=NOW)
    floor = int(NOW) - ANCHOR_SLACK_SECONDS
    assert floor < timer.due <= floor + 1  # within slack + every of now
    assert timer.due == timer.recurrence.start and timer.seq == 1  # type: ignore[union-attr]
    # without a clock (the audit) it starts at the timestamp: the earliest possible
    assert series({"every": "1s"}, ts_ms=0, now=None).due == 1


def test_a_cron_series_sent_with_a_1970_timestamp_starts_near_the_workers_clock() -> None:
    timer = series({"cron": "*/5 * * * *", "tz": "Europe/Paris"}, ts_ms=0, now=NOW)
    floor = int(NOW) - ANCHOR_SLACK_SECONDS
    assert floor <= timer.due < floor + 300 and timer.due % 300 == 0


def test_a_series_sent_on_time_starts_at_its_timestamp_whatever_the_lag() -> None:
    for lag in (0, 5, ANCHOR_SLACK_SECONDS - 1):
        ts_ms = int((NOW - lag) * 1000)
        on_time = series({"every": "10s"}, ts_ms, now=NOW)
        assert on_time == series({"every": "10s"}, ts_ms, now=None)
        assert on_time.due == -(-ts_ms // 1000) + 10


def test_a_series_with_a_start_keeps_its_grid_when_anchored_late() -> None:
    timer = series({"every": "7s", "start": 1000}, ts_ms=0, now=NOW)
    assert (timer.due - 1000) % 7 == 0
    assert int(NOW) - ANCHOR_SLACK_SECONDS <= timer.due < int(NOW) - ANCHOR_SLACK_SECONDS + 7


# -- the catch-up bound ------------------------------------------------------------------


def behind(every: int | None = 1, cron: str | None = None, since: int = 0) -> Timer:
    unanchored = Recurrence.cron_series(cron) if cron else Recurrence.interval(every or 1)
    rec = unanchored.anchored(since)
    assert rec.start is not None
    return Timer("s", rec.start, "cb", None, b"v", "tok", recurrence=rec, seq=1)


def timed_plan(timer: Timer, through: int, policy: LatePolicy) -> tuple[Plan, float]:
    started = time.thread_time()
    result = plan(timer, through, through * 1000 + 100, policy)
    return result, time.thread_time() - started


def test_all_far_behind_folds_the_backlog_in_one_step_and_delivers_at_most_the_bound() -> None:
    timer = behind(every=1)  # every second since 1970: 1.7 billion occurrences due
    through = int(NOW)
    p, seconds = timed_plan(timer, through, FIRE_ALL)
    # ~1,000 occurrences of plain Python (ms), whatever the backlog: a walk of the
    # backlog would take hours. The CPU time of this thread, so a neighbour's load does not count.
    assert seconds < 1.0
    fold, *delivered = p.steps
    assert fold.kind is StepKind.FOLD
    assert fold.timer.due == through - MAX_CATCH_UP_SECONDS - 1  # everything older
    assert fold.coalesced == fold.timer.seq - 1  # stands for occurrences 1 to its own
    assert len(p.steps) <= CATCH_UP_PER_TICK
    assert all(s.kind is StepKind.DELIVER for s in delivered)
    assert delivered[0].timer.seq == fold.timer.seq + 1
    # the next ticks deliver the rest of the last hour, a bounded number at a time
    total, tick, successor = len(delivered), through, p.successor
    while successor is not None and successor.due <= tick:
        tick += 1
        p = plan(successor, tick, tick * 1000, FIRE_ALL)
        assert StepKind.FOLD not in {s.kind for s in p.steps}
        assert len(p.steps) <= CATCH_UP_PER_TICK
        total += len(p.steps)
        successor = p.successor
    assert total == MAX_CATCH_UP_SECONDS + 1 + (tick - through)  # the last hour, and on
    assert successor is not None and successor.due == tick + 1


def test_a_cron_series_far_behind_walks_a_bounded_number_per_tick() -> None:
    timer = behind(cron="* * * * * *", since=int(NOW) - 86_400)  # a day behind
    through = int(NOW)
    for policy in (FIRE_ALL, DEFAULT_POLICY):
        p, seconds = timed_plan(timer, through, policy)
        assert seconds < 1.0  # CRON_WALK_PER_TICK cronsim steps (ms), not a day of them
        assert [s.kind for s in p.steps] == [StepKind.FOLD]
        fold = p.steps[0]
        assert CRON_WALK_PER_TICK - 1 <= fold.coalesced <= CRON_WALK_PER_TICK
        assert fold.coalesced == fold.timer.seq - 1
        assert p.successor is not None and p.successor.seq == fold.timer.seq + 1


def test_a_lone_missed_occurrence_older_than_the_bound_is_still_delivered() -> None:
    timer = behind(every=86_400, since=int(NOW) - 3 * 3600)  # daily, due 3 h ago
    p = plan(timer, int(NOW), NOW * 1000, FIRE_ALL)
    assert [s.kind for s in p.steps] == [StepKind.DELIVER]


# -- the audit agrees ----------------------------------------------------------------------


def run_worker(timer: Timer, read_at: int, ticks: int, policy: LatePolicy):  # type: ignore[no-untyped-def]
    """What the worker writes on the fired topic: the series read at ``read_at`` (due at
    once: it fires in the same unit), then one plan a tick."""
    fires: list[FireEvent] = []
    skips: list[SkipEvent] = []
    current: Timer | None = timer
    for tick in range(read_at, read_at + ticks):
        if current is None or current.due > tick:
            continue
        at_ms = tick * 1000 + 50
        p = plan(current, tick, at_ms, policy)
        for step in p.steps:
            t = step.timer
            if step.kind is StepKind.DELIVER:
                fires.append(FireEvent(t.token, t.due, at_ms, "cb", "w1", t.seq, step.coalesced))
            else:
                reason = "late" if step.kind is StepKind.SKIP_LATE else "coalesced"
                skips.append(SkipEvent(t.token, t.due, at_ms, reason, t.seq, step.coalesced))
        current = p.successor
    return fires, skips


@pytest.mark.parametrize(
    ("doc", "policy"),
    [
        ({"every": "1s", "late": "all"}, FIRE_ALL),
        ({"every": "1s"}, DEFAULT_POLICY),
        ({"every": "7s", "start": 1000}, FIRE_ALL),
        ({"cron": "*/5 * * * * *", "tz": "Europe/Paris"}, FIRE_ALL),
        ({"cron": "*/5 * * * * *"}, DEFAULT_POLICY),
    ],
)
@pytest.mark.parametrize("ts_ms", [0, int((NOW - 2 * ANCHOR_SLACK_SECONDS) * 1000)])
def test_the_audit_finds_no_violation_in_a_series_the_worker_anchored_late(
    doc: dict[str, object], policy: LatePolicy, ts_ms: int
) -> None:
    read_at = int(NOW)
    timer = series(doc, ts_ms, now=NOW)
    audited = series(doc, ts_ms, now=None)  # the audit parses without a clock
    fires, skips = run_worker(timer, read_at, 120, policy)
    req = RequestEvent(0, ts_ms, "schedule", "", audited.due, True, "cb", audited.recurrence)
    rules = Rules(as_of_ms=(read_at + 120) * 1000 + 60_000, grace_ms=60_000)
    verdict = judge([req], fires, [], rules, skips)
    if fires or skips:
        assert verdict.final_due == timer.due
    assert verdict.violations == []
    assert verdict.status is Status.PENDING


def test_the_audit_still_catches_a_series_numbered_from_the_wrong_place() -> None:
    ts_ms = int((NOW - 60) * 1000)  # read within the slack: occurrence 1 is at ts + 10
    audited = series({"every": "10s"}, ts_ms, now=None)
    req = RequestEvent(0, ts_ms, "schedule", "", audited.due, True, "cb", audited.recurrence)
    wrong = FireEvent("", audited.due + 30, (audited.due + 30) * 1000, "cb", "w1", 1)
    rules = Rules(as_of_ms=(audited.due + 40) * 1000 + 60_000, grace_ms=60_000)
    verdict = judge([req], [wrong], [], rules)
    assert verdict.final_due == audited.due
    assert {v.kind.value for v in verdict.violations} >= {"unrequested_fire", "missing"}
