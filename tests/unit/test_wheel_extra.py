"""Triggers and backfills as the wheel applies them (app.core.wheel_extra), the requests
that carry them (JSON, protobuf) and the window a backfill walks (Recurrence.slots_in)."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from app.cli import main
from app.core.firing import next_occurrence
from app.core.raw_record import RawRecord
from app.core.request_format import parse_request
from app.core.timer import Cancel, Timer, TokenAction
from app.core.wheel import PartitionWheel, Scheduled
from kafka_timers_client import protowire
from kafka_timers_client.errors import RejectedRequest, RejectReason
from kafka_timers_client.extra_fires import MAX_BACKFILL, backfill_id, trigger_id
from kafka_timers_client.late import LatePolicy
from kafka_timers_client.outcome import BackfillOutcome, TriggerOutcome
from kafka_timers_client.recurrence import Recurrence
from tests.support.memkv import MemoryKV


def one_shot(timer_id: str, due: int, token: str = "tok") -> Timer:
    return Timer(id=timer_id, due=due, topic="cb", key=b"k", value=b"v", token=token)


def series(timer_id: str, every: int, start: int, token: str = "tok") -> Timer:
    rec = Recurrence.interval(every, start=start).anchored(start)
    return Timer(
        id=timer_id,
        due=start,
        topic="cb",
        key=b"k",
        value=b"v",
        token=token,
        headers=(("h", b"1"),),
        recurrence=rec,
        seq=1,
    )


def fire(wheel: PartitionWheel, second: int) -> list[Timer]:
    """Tick ``second``: what it fires (a series goes on with its next occurrence)."""
    due = wheel.begin_tick(second) or []
    successors = {}
    for timer in due:
        rec = timer.recurrence
        if rec is not None and (nxt := rec.after(timer.due, timer.seq)) is not None:
            successors[timer.id] = next_occurrence(timer, nxt)
    wheel.finish_tick(second, due, successors)
    return due


def trigger(wheel: PartitionWheel, timer_id: str, now: int, offset: int = 7, token: str = "tok"):
    return wheel.trigger(Cancel(timer_id, token, action=TokenAction.TRIGGER), now, offset)


def backfill(wheel: PartitionWheel, timer_id: str, low: int, high: int, now: int):
    request = Cancel(timer_id, "tok", action=TokenAction.BACKFILL, window=(low, high))
    return wheel.backfill(request, now)


def test_a_triggered_one_shot_fires_on_the_next_tick_once_and_never_at_its_second() -> None:
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(one_shot("a", 500))
    fire(wheel, 100)
    assert trigger(wheel, "a", 100) == (TriggerOutcome.TRIGGERED, 0)
    fired = fire(wheel, 101)
    assert [t.id for t in fired] == ["a"]
    # The callback it would have had at its second, marked as triggered.
    assert fired[0].due == 500 and fired[0].value == b"v"
    assert fired[0].headers[0] == ("timer-trigger", b"100")
    assert wheel.count_pending() == 0
    assert all(fire(wheel, s) == [] for s in range(102, 510))
    # Its version is remembered as fired: the same request again is a duplicate.
    assert wheel.schedule(one_shot("a", 500)).outcome is Scheduled.DUPLICATE
    assert trigger(wheel, "a", 600) == (TriggerOutcome.ALREADY_FIRED, 0)


def test_a_trigger_is_refused_without_the_token_and_for_an_unknown_id() -> None:
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(one_shot("a", 105))
    fire(wheel, 100)
    assert trigger(wheel, "a", 100, token="nope") == (TriggerOutcome.WRONG_TOKEN, 0)
    assert trigger(wheel, "ghost", 100) == (TriggerOutcome.NOT_FOUND, 0)
    assert fire(wheel, 101) == []
    assert [t.id for t in fire(wheel, 105)] == ["a"]  # at its second, as scheduled


def test_a_triggered_series_fires_one_extra_occurrence_and_keeps_its_schedule() -> None:
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(series("s", 10, 110))
    fire(wheel, 100)
    assert trigger(wheel, "s", 100, offset=42) == (TriggerOutcome.TRIGGERED, 1)
    extra = fire(wheel, 101)
    assert [t.id for t in extra] == [trigger_id("s", 42)] == ["s@trigger:42"]
    assert extra[0].due == 100 and extra[0].seq == 0 and extra[0].recurrence is None
    assert extra[0].headers == (("timer-trigger", b"100"), ("h", b"1"))
    assert extra[0].token == "tok" and extra[0].late == LatePolicy.parse("fire")
    on_schedule = [(t.id, t.due, t.seq) for s in range(102, 131) for t in fire(wheel, s)]
    assert on_schedule == [("s", 110, 1), ("s", 120, 2), ("s", 130, 3)]


def test_the_same_trigger_applied_twice_fires_once() -> None:
    """A redelivery or a re-read after a crash: its extra occurrence is named by the
    request's offset, so it replaces the pending one, or is a duplicate of the fired."""
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(series("s", 10, 110))
    fire(wheel, 100)
    assert trigger(wheel, "s", 100) == (TriggerOutcome.TRIGGERED, 1)
    assert trigger(wheel, "s", 100) == (TriggerOutcome.TRIGGERED, 0)
    assert len(fire(wheel, 101)) == 1
    assert trigger(wheel, "s", 102) == (TriggerOutcome.TRIGGERED, 0)
    assert fire(wheel, 103) == []


def test_a_backfill_fires_each_occurrence_of_the_window_once_with_its_second() -> None:
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(series("s", 60, 10_000))
    fire(wheel, 5_000)
    # Before the series' start: its grid goes on back from it.
    assert backfill(wheel, "s", 9_700, 10_000, 5_000) == (BackfillOutcome.BACKFILLED, 0)
    assert backfill(wheel, "s", 4_000, 4_300, 5_000) == (BackfillOutcome.BACKFILLED, 5)
    fired = fire(wheel, 5_001)
    assert sorted(t.due for t in fired) == [4_000, 4_060, 4_120, 4_180, 4_240]
    assert {t.id for t in fired} == {
        backfill_id("s", s) for s in (4_000, 4_060, 4_120, 4_180, 4_240)
    }
    assert all(t.headers[0] == ("timer-backfill", b"%d" % t.due) for t in fired)
    # Again: what fired is a duplicate, nothing fires twice.
    assert backfill(wheel, "s", 4_000, 4_300, 5_002) == (BackfillOutcome.BACKFILLED, 0)
    assert fire(wheel, 5_003) == []
    assert wheel.count_pending() == 1  # the series itself


def test_a_backfill_never_fires_an_occurrence_after_the_workers_clock() -> None:
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(series("s", 60, 6_000))
    fire(wheel, 5_000)
    assert backfill(wheel, "s", 4_800, 90_000, 5_000) == (BackfillOutcome.BACKFILLED, 4)
    assert sorted(t.due for t in fire(wheel, 5_001)) == [4_800, 4_860, 4_920, 4_980]


def test_a_window_over_the_bound_is_refused_whole() -> None:
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(series("s", 1, 2_000_000))
    fire(wheel, 1_000_000)
    too_wide = (1_000_000 - MAX_BACKFILL - 1, 1_000_000)
    assert backfill(wheel, "s", *too_wide, 1_000_000) == (BackfillOutcome.TOO_MANY, 0)
    assert fire(wheel, 1_000_001) == []
    widest = (1_000_000 - MAX_BACKFILL, 1_000_000)
    assert backfill(wheel, "s", *widest, 1_000_000) == (BackfillOutcome.BACKFILLED, MAX_BACKFILL)
    assert len(fire(wheel, 1_000_002)) == MAX_BACKFILL


def test_a_backfill_is_refused_for_a_one_shot_a_wrong_token_and_an_unknown_id() -> None:
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(one_shot("a", 500))
    wheel.schedule(series("s", 60, 6_000))
    fire(wheel, 100)
    assert backfill(wheel, "a", 0, 100, 100) == (BackfillOutcome.NOT_A_SERIES, 0)
    assert backfill(wheel, "ghost", 0, 100, 100) == (BackfillOutcome.NOT_FOUND, 0)
    wrong = Cancel("s", "nope", action=TokenAction.BACKFILL, window=(0, 100))
    assert wheel.backfill(wrong, 100) == (BackfillOutcome.WRONG_TOKEN, 0)


def test_slots_in_a_cron_series_window_in_its_zone() -> None:
    rec = Recurrence.cron_series("0 9 * * *", "Europe/Paris").anchored(1_767_225_600)
    # 2025-12-01 to 2025-12-04 (UTC): 09:00 in Paris is 08:00 UTC in winter.
    low, high = 1_764_547_200, 1_764_806_400
    assert rec.slots_in(low, high, 10) == [1_764_576_000, 1_764_662_400, 1_764_748_800]
    assert rec.slots_in(low, high, 2) is None


def stepwise(rec: Recurrence, low: int, high: int) -> list[int]:
    """Occurrences in ``[low, high)`` one search each, as the worker walks a series."""
    found, current = [], rec.with_start(low)._next_slot(low - 1)
    while current is not None and current < high:
        found.append(current)
        current = rec._next_slot(current)
    return found


@settings(max_examples=300, deadline=None)
@given(
    expr=st.sampled_from(
        ["30 2 * * *", "0,30 1-3 * * *", "*/15 * * * *", "0 0 9 * * MON-FRI", "59 1 * * SUN"]
    ),
    tz=st.sampled_from(["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe"]),
    low=st.integers(1_774_000_000, 1_800_000_000),  # 2026, both daylight-saving changes
    width=st.integers(1, 4 * 86_400),
)
@example(expr="0,30 1-3 * * *", tz="Europe/Paris", low=1_774_738_800, width=86_400)  # spring
@example(expr="0,30 1-3 * * *", tz="Europe/Paris", low=1_792_882_800, width=86_400)  # autumn
@example(expr="30 2 * * *", tz="America/New_York", low=1_772_942_400, width=2 * 86_400)
@example(expr="*/15 * * * *", tz="Australia/Lord_Howe", low=1_775_300_000, width=86_400)
def test_a_cron_window_is_walked_as_the_worker_walks_it_across_dst(
    expr: str, tz: str, low: int, width: int
) -> None:
    rec = Recurrence.cron_series(expr, tz).anchored(1_800_000_000)
    assert rec.slots_in(low, low + width, 10_000) == stepwise(rec, low, low + width)


def request(value: bytes) -> Cancel:
    parsed = parse_request(RawRecord("timer-request", 0, 1, 1_000, b"k", value))
    assert isinstance(parsed, Cancel)
    return parsed


def test_trigger_and_backfill_requests_in_json_and_protobuf() -> None:
    assert request(b'{"trigger": "a", "token": "t"}') == Cancel(
        "a", "t", action=TokenAction.TRIGGER
    )
    backfill_json = b'{"backfill": "a", "token": "t", "from": 60, "to": "1970-01-01T00:02:00Z"}'
    assert request(backfill_json).window == (60, 120)
    wire = protowire.Future(id="a", token="t", action=protowire.ACTION_TRIGGER)
    assert request(protowire.encode(wire)).action is TokenAction.TRIGGER
    wire = protowire.Future(
        id="a", token="t", action=protowire.ACTION_BACKFILL, backfill_from=5, backfill_to=9
    )
    assert request(protowire.encode(wire)).window == (5, 9)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b'{"backfill": "a", "token": "t", "from": 60}', RejectReason.MALFORMED),
        (b'{"backfill": "a", "token": "t", "from": 60, "to": 60}', RejectReason.OUT_OF_BOUNDS),
        (b'{"backfill": "a", "token": "t", "from": -5, "to": 60}', RejectReason.OUT_OF_BOUNDS),
        (b'{"backfill": "a", "token": "t", "from": [], "to": 60}', RejectReason.UNKNOWN_FORMAT),
    ],
)
def test_a_backfill_without_a_window_is_dead_lettered(value: bytes, reason: RejectReason) -> None:
    with pytest.raises(RejectedRequest) as refused:
        parse_request(RawRecord("timer-request", 0, 1, 1_000, b"k", value))
    assert refused.value.reason is reason


def test_the_cli_refuses_a_window_in_the_future_or_empty_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["backfill", "--id", "x", "--token", "t", "--timeout", "1"]
    assert main([*args, "--from", "0", "--to", "4000000000"]) == 2
    assert main([*args, "--from", "60", "--to", "60"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2
    assert "in the future" in lines[0] and "is empty" in lines[1]
