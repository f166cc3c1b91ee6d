"""The audit takes the worker's ``dropped`` answers: a schedule request refused over a
pending-timer quota (or for another token) was never stored, so it is neither expected
to fire nor a reschedule of the version before it; the answers the replay rules on
itself (``duplicate``, ``cancelled_earlier``) are not taken twice."""

from __future__ import annotations

import pyarrow as pa

from spark_audit.judging import (
    DROPPED_ANSWER,
    EVENT_FIELDS,
    SOURCE_FIRE,
    SOURCE_REPORT,
    SOURCE_REQUEST,
    judge_arrays,
)
from spark_audit.reconcile import judge
from spark_audit.report import console_summary, html_report
from spark_audit.verdicts import (
    DroppedAnswer,
    FireEvent,
    RequestEvent,
    Rules,
    Status,
    ViolationKind,
)
from tests.support.audit_summary import audit_summary

T0 = 1_767_225_600
DUE = T0 + 100
AS_OF = Rules(as_of_ms=(T0 + 3600) * 1000)


def schedule(offset: int, token: str, due: int, ts_s: float = T0) -> RequestEvent:
    return RequestEvent(offset, int(ts_s * 1000), "schedule", token, due, True, "cb")


def cancel(offset: int, token: str, ts_s: float = T0) -> RequestEvent:
    return RequestEvent(offset, int(ts_s * 1000), "cancel", token, None, True)


def fire(token: str, due: int, request_offset: int | None = None) -> FireEvent:
    return FireEvent(token, due, due * 1000 + 20, "cb", "w1", request_offset=request_offset)


def test_a_request_refused_over_quota_is_not_missing() -> None:
    verdict = judge(
        [schedule(7, "k", DUE)], [], [], AS_OF, dropped=[DroppedAnswer("over_quota", 7)]
    )
    assert verdict.violations == []
    assert verdict.status is Status.REFUSED
    assert (verdict.refused_over_quota, verdict.refused_wrong_token) == (1, 0)


def test_a_refused_reschedule_does_not_supersede_the_version_the_worker_kept() -> None:
    """v1 stored at offset 3; v2 refused over quota at 9: v1 fires, and is the final
    version, not a superseded one; v2 is not missing."""
    requests = [schedule(3, "v1", DUE), schedule(9, "v2", DUE + 60, DUE - 30)]
    fires = [fire("v1", DUE, 9)]
    verdict = judge(requests, fires, [], AS_OF, dropped=[DroppedAnswer("over_quota", 9)])
    assert verdict.violations == []
    assert verdict.status is Status.FIRED
    assert (verdict.final_token, verdict.final_due) == ("v1", DUE)
    assert verdict.refused_over_quota == 1


def test_a_reschedule_refused_for_another_token_does_not_replace_either() -> None:
    requests = [schedule(3, "v1", DUE), schedule(9, "v2", DUE + 60, DUE - 30)]
    verdict = judge(
        requests, [fire("v1", DUE, 9)], [], AS_OF, dropped=[DroppedAnswer("wrong_token", 9)]
    )
    assert verdict.violations == [] and verdict.status is Status.FIRED
    assert (verdict.refused_over_quota, verdict.refused_wrong_token) == (0, 1)


def test_an_answer_is_matched_by_offset_only() -> None:
    """An answer naming another request (another offset, or none) changes nothing: the
    request at 7 was stored, and is missing."""
    for answer in (DroppedAnswer("over_quota", 8), DroppedAnswer("over_quota", None)):
        verdict = judge([schedule(7, "k", DUE)], [], [], AS_OF, dropped=[answer])
        assert [v.kind for v in verdict.violations] == [ViolationKind.MISSING], answer
        assert verdict.refused_over_quota == 0


def test_the_same_answer_twice_counts_one_refusal_and_a_later_request_is_judged() -> None:
    """A worker that read its batch again answers again; the next request, stored, must
    fire."""
    requests = [schedule(7, "k", DUE), schedule(12, "k", DUE + 10)]
    answers = [DroppedAnswer("over_quota", 7), DroppedAnswer("over_quota", 7)]
    verdict = judge(requests, [], [], AS_OF, dropped=answers)
    assert verdict.refused_over_quota == 1
    assert [v.kind for v in verdict.violations] == [ViolationKind.MISSING]
    assert verdict.final_due == DUE + 10


def test_a_fire_of_a_refused_version_is_unrequested() -> None:
    verdict = judge(
        [schedule(7, "k", DUE)],
        [fire("k", DUE, 7)],
        [],
        AS_OF,
        [],
        [],
        [DroppedAnswer("over_quota", 7)],
    )
    assert [v.kind for v in verdict.violations] == [ViolationKind.UNREQUESTED]


def test_the_rulings_the_replay_makes_itself_are_not_taken_twice() -> None:
    """``cancelled_earlier`` and ``duplicate`` answers leave the replay as it was: the
    request is judged by the rules (cancelled; fired), and nothing is counted refused."""
    requests = [cancel(2, "k"), schedule(7, "k", DUE)]
    plain = judge(requests, [], [], AS_OF)
    answered = judge(requests, [], [], AS_OF, dropped=[DroppedAnswer("cancelled_earlier", 7)])
    assert plain.status is answered.status is Status.CANCELLED
    assert answered.violations == [] and answered.refused_over_quota == 0

    requests = [schedule(3, "k", DUE), schedule(7, "k", DUE)]
    answered = judge(
        requests, [fire("k", DUE, 3)], [], AS_OF, dropped=[DroppedAnswer("duplicate", 7)]
    )
    assert answered.status is Status.FIRED and answered.violations == []
    assert (answered.refused_over_quota, answered.refused_wrong_token) == (0, 0)


def test_judge_arrays_reads_dropped_answers_from_the_events() -> None:
    """The Spark path's (and the in-process baseline's) events: a ``dropped`` answer is a
    report whose ``occurrence`` is the request's offset."""

    def event(
        src: int, seq: int, kind: str, token: str, due: int | None, **more: object
    ) -> dict[str, object]:
        values: dict[str, object] = dict.fromkeys(EVENT_FIELDS)
        values.update(src=src, seq=seq, ts_ms=seq, kind=kind, token=token, due=due, topic="cb")
        values.update(check_token=True, worker="w1", **more)
        return values

    refused = [
        event(SOURCE_REQUEST, 7, "schedule", "k", DUE),
        event(
            SOURCE_REPORT, T0 * 1000, DROPPED_ANSWER, "k", None, outcome="over_quota", occurrence=7
        ),
    ]
    kept = [
        event(SOURCE_REQUEST, 3, "schedule", "v1", DUE),
        event(SOURCE_REQUEST, 9, "schedule", "v2", DUE + 60),
        event(SOURCE_FIRE, DUE * 1000 + 20, "fired", "v1", DUE, request_offset=9),
        event(
            SOURCE_REPORT, T0 * 1000, DROPPED_ANSWER, "v2", None, outcome="over_quota", occurrence=9
        ),
    ]
    struct = pa.struct(
        [
            (name, pa.int32() if name == "src" else pa.bool_() if name == "check_token" else kind)
            for name, kind in (
                (
                    n,
                    pa.string()
                    if n in ("kind", "token", "topic", "outcome", "worker", "series")
                    else pa.int64(),
                )
                for n in EVENT_FIELDS
            )
        ]
    )
    events = pa.array([refused, kept], pa.list_(struct))
    verdicts = judge_arrays(events, AS_OF).to_pylist()
    assert [v["status"] for v in verdicts] == ["refused", "fired"]
    assert [v["violations"] for v in verdicts] == [[], []]
    assert [v["refused_over_quota"] for v in verdicts] == [1, 1]


def test_the_reports_count_refusals_apart_from_the_violations() -> None:
    counted = audit_summary({}, refused={"over_quota": 3, "wrong_token": 0})
    text = console_summary(counted)
    assert "  refused by workers (not violations): over_quota=3  wrong_token=0" in text.splitlines()
    assert "<td>refused: over_quota</td><td>3</td>" in html_report(counted)
    assert "over_quota=0" in console_summary(audit_summary({}))
    assert counted.exit_code == 0
