"""``kafka-timers get``: which fired-topic record completes a worker's answer, and the
state shown from both."""

from __future__ import annotations

from app.core.fired import FiredKind, FiredRecord
from app.status.timer_state import CLOCK_SLACK_MS, describe, search_plan

NOW_MS = 1_767_225_600_000
DAY_MS = 86_400_000


def fired(due: int, at_ms: int, worker: str = "w2") -> FiredRecord:
    return FiredRecord(
        FiredKind.FIRED, "t1", "tok", 5, worker, due=due, fired_at_ms=at_ms, topic="cb"
    )


def cancel_report(outcome: str, at_ms: int = NOW_MS - 5000) -> FiredRecord:
    return FiredRecord.cancel(
        "t1", "tok", outcome, partition=5, worker="w1", at_ms=at_ms, request_offset=9
    )


def test_a_pending_timer_needs_no_fired_topic_read() -> None:
    answer = {"id": "t1", "state": "pending", "partition": 5, "due": 1_767_300_000}
    assert search_plan(answer, NOW_MS, DAY_MS) is None
    shown = describe("t1", 5, answer, None)
    assert shown["state"] == "pending" and shown["due"] == 1_767_300_000
    assert shown["due_at"] == "2026-01-01T20:40:00.000Z"
    assert shown["sources"] == ["worker"]


def test_a_fired_timer_is_looked_up_from_its_due_second_on() -> None:
    due = 1_767_000_000
    plan = search_plan({"state": "fired", "due": due, "partition": 5}, NOW_MS, DAY_MS)
    assert plan is not None
    assert plan.floor_ms == due * 1000 - CLOCK_SLACK_MS  # further back than --since
    assert plan.accept(fired(due, due * 1000 + 20))
    assert not plan.accept(fired(due - 60, due * 1000))  # an earlier version's fire
    assert not plan.accept(cancel_report("already_fired"))
    shown = describe("t1", 5, {"state": "fired", "due": due}, fired(due, due * 1000 + 20))
    assert shown["state"] == "fired" and shown["fired_by"] == "w2"
    assert shown["fired_at"] == "2025-12-29T09:20:00.020Z"
    assert shown["sources"] == ["worker", "fired-topic"]


def test_a_cancelled_timer_takes_the_cancel_that_removed_it() -> None:
    plan = search_plan({"state": "cancelled", "due": 1}, NOW_MS, DAY_MS)
    assert plan is not None and plan.floor_ms == NOW_MS - DAY_MS
    assert plan.accept(cancel_report("cancelled"))
    assert not plan.accept(cancel_report("wrong_token"))
    shown = describe("t1", 5, {"state": "cancelled", "due": 1}, cancel_report("cancelled"))
    assert shown["state"] == "cancelled" and shown["cancelled_by"] == "w1"
    assert shown["cancelled_at_ms"] == NOW_MS - 5000


def test_without_a_worker_the_newest_state_defining_record_decides() -> None:
    plan = search_plan(None, NOW_MS, DAY_MS)
    assert plan is not None
    assert plan.accept(fired(1, 1000))
    assert plan.accept(cancel_report("cancelled"))
    assert plan.accept(cancel_report("cancelled_in_advance"))
    for no_effect in ("wrong_token", "already_fired", "not_found"):
        assert not plan.accept(cancel_report(no_effect))
    assert describe("t1", 5, None, fired(7, 7000))["state"] == "fired"
    assert describe("t1", 5, None, cancel_report("cancelled"))["state"] == "cancelled"
    in_advance = describe("t1", 5, None, cancel_report("cancelled_in_advance"))
    assert in_advance["state"] == "cancelled_in_advance"
    assert in_advance["sources"] == ["fired-topic"]


def test_nothing_known_is_unknown_and_nothing_secret_is_shown() -> None:
    assert describe("t1", 5, None, None) == {
        "id": "t1",
        "state": "unknown",
        "partition": 5,
        "sources": [],
    }
    shown = describe("t1", 5, {"state": "pending", "token": "secret", "due": 9}, None)
    assert "token" not in shown
    assert "tok" not in str(describe("t1", 5, None, fired(7, 7000)))


def series_fire(seq: int) -> FiredRecord:
    return FiredRecord(
        FiredKind.FIRED, "t1", "tok", 5, "w2", due=7, fired_at_ms=7020, topic="cb", seq=seq
    )


def test_a_series_fire_is_not_the_state_when_no_worker_holding_it_answered() -> None:
    """Issue 25: after a fire a series has its next occurrence pending, on the worker
    nobody reached; the fired topic cannot say it ended."""
    shown = describe("t1", 5, None, series_fire(3), unheld="no worker answered")
    assert shown["state"] == "unknown"
    assert shown["reason"].startswith("no worker answered")
    assert shown["last_fire"]["seq"] == 3 and shown["last_fire"]["fired_by"] == "w2"
    # The worker holding the partition answered without it: the series is over.
    assert describe("t1", 5, None, series_fire(3))["state"] == "fired"
    # A one-shot fire and a cancel are final whoever answered.
    assert describe("t1", 5, None, fired(7, 7000), unheld="no worker answered")["state"] == (
        "fired"
    )
    nothing = describe("t1", 5, None, None, unheld="no worker answered")
    assert nothing["state"] == "unknown" and nothing["reason"] == "no worker answered"
