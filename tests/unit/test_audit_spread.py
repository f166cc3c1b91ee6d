"""The audit and spread (issue 24.2): a spread timer fired anywhere in [due, due + spread]
is on time (not early, lateness 0 inside the window, missing only once the window's end
is past by the grace period); its request carries the spread through Spark's columns."""

from __future__ import annotations

import json

from app.core.raw_record import RawRecord
from app.settings import Settings
from kafka_timers_client.recurrence import Recurrence
from kafka_timers_client.spread import spread_second
from spark_audit.judging import EVENT_FIELDS, SOURCE_FIRE, SOURCE_REQUEST, judge_one
from spark_audit.parsing import ParsedColumns, judge_request, policy_for
from spark_audit.reconcile import judge
from spark_audit.verdicts import FireEvent, RequestEvent, Rules, Status, ViolationKind

DUE = 1_800_000_000
DUE_MS = DUE * 1000
SPREAD = 20


def schedule(spread: int = SPREAD, recurrence: Recurrence | None = None) -> RequestEvent:
    return RequestEvent(
        0, DUE_MS - 60_000, "schedule", "k", DUE, True, "cb", recurrence, spread=spread
    )


def fire(at_ms: int, due: int = DUE, seq: int | None = None) -> FireEvent:
    return FireEvent("k", due, at_ms, "cb", "w1", seq)


def kinds(verdict: object) -> list[str]:
    return [v.kind.value for v in verdict.violations]  # type: ignore[attr-defined]


def test_a_fire_inside_the_window_is_on_time_and_one_after_it_is_late_by_the_excess() -> None:
    rules = Rules(as_of_ms=DUE_MS + 3_600_000)
    inside = judge([schedule()], [fire(DUE_MS + 15_040)], [], rules)
    assert inside.status is Status.FIRED and kinds(inside) == []
    assert inside.fires[0]["lateness_ms"] == 0
    after = judge([schedule()], [fire(DUE_MS + 23_500)], [], rules)
    assert kinds(after) == [] and after.fires[0]["lateness_ms"] == 3_500
    plain = judge([schedule(spread=0)], [fire(DUE_MS + 15_040)], [], rules)
    assert plain.fires[0]["lateness_ms"] == 15_040  # without a spread: 15 s late
    early = judge([schedule()], [fire(DUE_MS - 1)], [], rules)
    assert kinds(early) == [ViolationKind.EARLY.value]
    assert early.fires[0]["lateness_ms"] == -1


def test_a_spread_timer_is_missing_only_after_its_window_and_the_grace() -> None:
    requests = [schedule()]
    within = judge(requests, [], [], Rules(as_of_ms=DUE_MS + 75_000))  # window end + 55 s
    assert within.status is Status.PENDING and kinds(within) == []
    past = judge(requests, [], [], Rules(as_of_ms=DUE_MS + 81_000))
    assert past.status is Status.MISSING and kinds(past) == [ViolationKind.MISSING.value]
    plain = judge([schedule(spread=0)], [], [], Rules(as_of_ms=DUE_MS + 75_000))
    assert plain.status is Status.MISSING  # the same request without a spread


def test_a_spread_series_is_judged_occurrence_by_occurrence() -> None:
    rec = Recurrence.interval(30, start=DUE, count=4).anchored(DUE - 60)
    fires = [
        fire(
            spread_second("s", seq, DUE + (seq - 1) * 30, SPREAD) * 1000 + 40,
            DUE + (seq - 1) * 30,
            seq,
        )
        for seq in (1, 2, 3)
    ]
    rules = Rules(as_of_ms=DUE_MS + 90_000 + 75_000)  # occurrence 4 (due +90 s) in its window
    verdict = judge([schedule(recurrence=rec)], fires, [], rules)
    assert kinds(verdict) == [] and verdict.status is Status.PENDING
    assert [f["lateness_ms"] for f in verdict.fires] == [0, 0, 0]
    later = judge([schedule(recurrence=rec)], fires, [], Rules(as_of_ms=DUE_MS + 200_000))
    assert kinds(later) == [ViolationKind.MISSING.value]  # occurrence 4, window and grace past


def test_the_spread_travels_from_the_request_record_to_the_judge() -> None:
    out = ParsedColumns.empty()
    doc = {"topic": "cb", "value": "v", "at": DUE, "id": "a", "token": "k", "spread": "20s"}
    record = RawRecord("requests", 0, 5, DUE_MS - 60_000, b"a", json.dumps(doc).encode())
    judge_request(record, policy_for(Settings()), out)
    row = out.to_arrow().to_pylist()[0]
    assert row["reject"] is None and row["spread"] == SPREAD
    request = [SOURCE_REQUEST, 5, DUE_MS - 60_000, "schedule", row["token"], DUE, True, "cb"]
    request += [None, None, None, None, None, row["spread"], None]
    fired = [SOURCE_FIRE, DUE_MS + 12_000, DUE_MS + 12_000, "fired", row["token"], DUE, None]
    fired += ["cb", None, "w1", None, None, None, None, None]
    columns = {name: [a, b] for name, a, b in zip(EVENT_FIELDS, request, fired, strict=True)}
    verdict = judge_one(columns, 0, 2, Rules(as_of_ms=DUE_MS + 3_600_000))
    assert verdict["status"] == "fired" and verdict["violations"] == []
    assert verdict["fires"][0]["lateness_ms"] == 0
