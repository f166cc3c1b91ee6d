"""The late-fire policy and what a due timer or series does at a tick (pure logic)."""

from __future__ import annotations

import pytest

from app.core.debounce import Debounce
from app.core.firing import MISFIRE_MS, StepKind, next_occurrence, plan
from app.core.timer import Timer
from kafka_timers_client.errors import RejectedRequest, RejectReason
from kafka_timers_client.late import DEFAULT_POLICY, CatchUp, LatePolicy
from kafka_timers_client.recurrence import Recurrence

T0 = 1_767_225_600
FIRE_COALESCE = DEFAULT_POLICY
FIRE_ALL = LatePolicy(0, CatchUp.ALL)


def one_shot(due: int = T0, late: LatePolicy | None = None) -> Timer:
    return Timer("t", due, "cb", None, b"v", "tok", late=late)


def series(every: int = 2, count: int | None = None, cron: str | None = None) -> Timer:
    rec = (
        Recurrence.cron_series(cron, start=T0)
        if cron
        else Recurrence.interval(every, start=T0, count=count)
    )
    return Timer("s", T0, "cb", None, b"v", "tok", recurrence=rec.anchored(T0 - 1), seq=1)


def kinds(p: object) -> list[tuple[str, int, int, int]]:
    return [(s.kind.value, s.timer.seq, s.timer.due - T0, s.coalesced) for s in p.steps]  # type: ignore[attr-defined]


# -- the policy text -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "policy"),
    [
        ("fire", LatePolicy(0, None)),
        ("skip-after 5s", LatePolicy(5000, None)),
        ("skip-after 250ms", LatePolicy(250, None)),
        ("Skip-After  2m , ALL", LatePolicy(120_000, CatchUp.ALL)),
        ("coalesce", LatePolicy(None, CatchUp.COALESCE)),
        ("", LatePolicy()),
    ],
)
def test_policy_text_is_read(text: str, policy: LatePolicy) -> None:
    assert LatePolicy.parse(text) == policy
    assert LatePolicy.parse(policy.text()) == policy


@pytest.mark.parametrize(
    "text",
    [
        "sometimes",
        "skip-after",
        "skip-after soon",
        "skip-after 0s",
        "all, coalesce",
        "fire, skip-after 5s",
    ],
)
def test_bad_policy_text_is_refused(text: str) -> None:
    with pytest.raises(RejectedRequest) as refused:
        LatePolicy.parse(text)
    assert refused.value.reason is RejectReason.INVALID_LATE_POLICY


def test_a_timer_policy_fills_in_from_the_service_default() -> None:
    assert LatePolicy(5000).over(DEFAULT_POLICY) == LatePolicy(5000, CatchUp.COALESCE)
    assert LatePolicy(None, CatchUp.ALL).over(LatePolicy(7000, CatchUp.COALESCE)) == LatePolicy(
        7000, CatchUp.ALL
    )


# -- one-shot timers -------------------------------------------------------------------


def test_a_one_shot_timer_fires_however_late_by_default() -> None:
    p = plan(one_shot(), T0 + 3600, (T0 + 3600) * 1000, DEFAULT_POLICY)
    assert kinds(p) == [("deliver", 0, 0, 0)] and p.successor is None


def test_skip_after_skips_a_fire_later_than_that_and_only_then() -> None:
    policy = LatePolicy(5000).over(DEFAULT_POLICY)
    assert plan(one_shot(), T0, T0 * 1000 + 5000, policy).steps[0].kind is StepKind.DELIVER
    assert plan(one_shot(), T0 + 6, T0 * 1000 + 5001, policy).steps[0].kind is StepKind.SKIP_LATE


# -- series ----------------------------------------------------------------------------


def test_a_series_on_time_fires_its_occurrence_and_stores_the_next() -> None:
    p = plan(series(), T0, T0 * 1000 + 30, FIRE_COALESCE)
    assert kinds(p) == [("deliver", 1, 0, 0)]
    assert p.successor is not None
    assert (p.successor.seq, p.successor.due, p.successor.fired_before) == (2, T0 + 2, 1)


def test_a_series_ends_at_its_count() -> None:
    last = plan(series(count=1), T0, T0 * 1000, FIRE_COALESCE)
    assert kinds(last) == [("deliver", 1, 0, 0)] and last.successor is None


def test_all_fires_every_missed_occurrence_in_order() -> None:
    p = plan(series(), T0 + 6, (T0 + 20) * 1000, FIRE_ALL)
    assert kinds(p) == [("deliver", n, 2 * (n - 1), 0) for n in (1, 2, 3, 4)]
    assert p.successor is not None and (p.successor.seq, p.successor.due) == (5, T0 + 8)
    assert p.successor.fired_before == 4


def test_all_with_skip_after_skips_each_late_occurrence_and_delivers_the_rest() -> None:
    policy = LatePolicy(5000, CatchUp.ALL)
    p = plan(series(), T0 + 6, (T0 + 9) * 1000, policy)  # 9, 7, 5, 3 s late
    assert [s.kind for s in p.steps] == [StepKind.SKIP_LATE] * 2 + [StepKind.DELIVER] * 2


def test_coalesce_folds_an_outage_into_one_fire_as_the_newest_occurrence() -> None:
    p = plan(series(), T0 + 60, (T0 + 61) * 1000, FIRE_COALESCE)
    assert kinds(p) == [("deliver", 31, 60, 30)]  # occurrence 31 stands for 1-30 too
    assert p.successor is not None and (p.successor.seq, p.successor.due) == (32, T0 + 62)
    assert p.successor.fired_before == 1


def test_coalesce_does_not_fold_a_tick_that_is_only_a_little_late() -> None:
    now_ms = T0 * 1000 + MISFIRE_MS  # the oldest is exactly at the threshold
    p = plan(series(every=1), T0 + 2, now_ms, FIRE_COALESCE)
    assert [s.kind for s in p.steps] == [StepKind.DELIVER] * 3


def test_coalesce_then_skip_after_judges_the_one_fire_it_makes() -> None:
    policy = LatePolicy(5000, CatchUp.COALESCE)
    p = plan(series(), T0 + 60, (T0 + 62) * 1000, policy)  # newest is 2 s late: delivered
    assert kinds(p) == [("deliver", 31, 60, 30)]
    p = plan(series(), T0 + 60, (T0 + 70) * 1000, policy)  # newest is 10 s late: skipped
    assert kinds(p) == [("late", 31, 60, 30)]


def test_catch_up_is_bounded_per_tick_and_goes_on_from_where_it_stopped() -> None:
    p = plan(series(), T0 + 100, (T0 + 101) * 1000, FIRE_ALL, budget=10)
    assert len(p.steps) == 10
    assert p.successor is not None and (p.successor.seq, p.successor.due) == (11, T0 + 20)
    # a cron series coalescing: the walk is bounded too, and reported as folded
    p = plan(series(cron="* * * * * *"), T0 + 100, (T0 + 101) * 1000, FIRE_COALESCE, budget=10)
    assert kinds(p) == [("coalesced", 11, 10, 10)]
    assert p.successor is not None and (p.successor.seq, p.successor.due) == (12, T0 + 11)
    p = plan(p.successor, T0 + 100, (T0 + 102) * 1000, FIRE_COALESCE, budget=1000)
    assert kinds(p) == [("deliver", 101, 100, 89)]


def test_the_workers_shortcut_for_one_due_occurrence_is_the_plans_successor() -> None:
    timer = series()
    assert plan(timer, T0, T0 * 1000, FIRE_COALESCE).successor == next_occurrence(timer, T0 + 2)


@pytest.mark.parametrize("debounced", [False, True])
def test_the_next_occurrence_is_the_timer_built_with_its_fields(debounced: bool) -> None:
    """``next_occurrence`` copies the delivered occurrence's fields into a new Timer:
    the same timer, field for field (its instance dict too), as ``Timer(...)`` with them
    builds, a debounce window left behind."""
    fired = series()
    if debounced:
        fired.__dict__["debounce"] = Debounce(5, None, 1_000)
    nxt = next_occurrence(fired, T0 + 2)
    expected = Timer(
        fired.id,
        T0 + 2,
        fired.topic,
        fired.key,
        fired.value,
        fired.token,
        fired.headers,
        fired.recurrence,
        fired.seq + 1,
        fired.fired_before + 1,
        fired.late,
        fired.spread,
        fired.schema_id,
    )
    assert nxt == expected
    assert vars(nxt) == vars(expected)
    assert nxt.debounce is None
    assert fired.due == T0 and fired.seq == 1  # the delivered one is left as it was
