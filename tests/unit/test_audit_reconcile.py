"""The audit's judgement of one timer: replaying the wheel's rules, then judging fires."""

from __future__ import annotations

from spark_audit.reconcile import (
    CancelReport,
    FireEvent,
    RequestEvent,
    Rules,
    Status,
    Verdict,
    ViolationKind,
    judge,
)

T0 = 1_767_225_600  # requests at T0 (s); timers due at DUE; the audit runs an hour later
DUE = T0 + 100
AS_OF = Rules(as_of_ms=(T0 + 3600) * 1000, grace_ms=60_000)


def schedule(offset: int, token: str = "k1", due: int = DUE, ts_s: float = T0) -> RequestEvent:
    return RequestEvent(offset, int(ts_s * 1000), "schedule", token, due, True, "cb")


def cancel(
    offset: int, token: str = "k1", ts_s: float = T0 + 1, check: bool = True
) -> RequestEvent:
    return RequestEvent(offset, int(ts_s * 1000), "cancel", token, None, check)


def fire(at_ms: int, token: str = "k1", due: int = DUE, worker: str = "w1") -> FireEvent:
    return FireEvent(token, due, at_ms, "cb", worker)


def kinds(verdict: Verdict) -> list[ViolationKind]:
    return [v.kind for v in verdict.violations]


def test_a_timer_that_fired_once_on_time_is_clean() -> None:
    verdict = judge([schedule(0)], [fire(DUE * 1000 + 40)], [], AS_OF)
    assert verdict.status is Status.FIRED
    assert kinds(verdict) == []
    assert (verdict.fire_count, verdict.fire_times) == (1, [DUE * 1000 + 40])
    assert verdict.fires[0]["lateness_ms"] == 40 and verdict.fires[0]["first"] is True


def test_a_timer_never_fired_is_missing_only_after_its_grace_period() -> None:
    missing = judge([schedule(0)], [], [], AS_OF)
    assert missing.status is Status.MISSING
    assert kinds(missing) == [ViolationKind.MISSING]
    assert missing.violations[0].at_ms == DUE * 1000
    within_grace = Rules(as_of_ms=DUE * 1000 + 59_000, grace_ms=60_000)
    pending = judge([schedule(0)], [], [], within_grace)
    assert (pending.status, kinds(pending)) == (Status.PENDING, [])


def test_a_request_for_a_past_second_is_expected_from_when_it_was_made() -> None:
    late_request = schedule(0, due=T0 - 3600, ts_s=AS_OF.as_of_ms / 1000 - 30)
    verdict = judge([late_request], [], [], AS_OF)
    assert verdict.status is Status.PENDING, "requested 30 s ago: still within grace"
    fired = judge([late_request], [fire(late_request.ts_ms + 25, due=T0 - 3600)], [], AS_OF)
    assert kinds(fired) == [] and fired.fires[0]["lateness_ms"] == 25


def test_two_fires_of_one_version_are_a_duplicate_but_one_record_written_twice_is_not() -> None:
    twice = judge([schedule(0)], [fire(DUE * 1000 + 5), fire(DUE * 1000 + 900)], [], AS_OF)
    assert kinds(twice) == [ViolationKind.DUPLICATE]
    assert twice.fire_count == 2
    assert [f["first"] for f in twice.fires] == [True, False]
    retried = judge([schedule(0)], [fire(DUE * 1000 + 5), fire(DUE * 1000 + 5)], [], AS_OF)
    assert kinds(retried) == [] and retried.fire_count == 1


def test_a_fire_before_its_second_is_early() -> None:
    verdict = judge([schedule(0)], [fire(DUE * 1000 - 1)], [], AS_OF)
    assert kinds(verdict) == [ViolationKind.EARLY]
    assert verdict.violations[0].at_ms == DUE * 1000 - 1


def test_a_cancelled_timer_is_not_missing_and_must_not_fire_afterwards() -> None:
    report = CancelReport("k1", "cancelled", T0 * 1000 + 1500)
    cancelled = judge([schedule(0), cancel(1)], [], [report], AS_OF)
    assert cancelled.status is Status.CANCELLED and kinds(cancelled) == []
    assert cancelled.cancel_at_ms == T0 * 1000 + 1500, "effective when the worker says"
    fired = judge([schedule(0), cancel(1)], [fire(DUE * 1000 + 3)], [report], AS_OF)
    assert kinds(fired) == [ViolationKind.FIRE_AFTER_CANCEL]


def test_without_a_report_a_cancel_takes_effect_at_its_request_time() -> None:
    verdict = judge([schedule(0), cancel(1, ts_s=T0 + 7)], [], [], AS_OF)
    assert verdict.cancel_at_ms == (T0 + 7) * 1000


def test_a_cancel_with_the_wrong_token_is_refused_and_the_timer_must_still_fire() -> None:
    report = CancelReport("other", "wrong_token", T0 * 1000 + 1500)
    refused = judge([schedule(0), cancel(1, token="other")], [], [report], AS_OF)
    assert refused.status is Status.MISSING and kinds(refused) == [ViolationKind.MISSING]
    fired = judge([schedule(0), cancel(1, token="other")], [fire(DUE * 1000)], [report], AS_OF)
    assert fired.status is Status.FIRED and kinds(fired) == []


def test_a_cancel_that_lost_the_race_with_the_tick_is_no_violation() -> None:
    fired_ms = DUE * 1000 + 2
    late_cancel = cancel(1, ts_s=DUE)
    report = CancelReport("k1", "already_fired", fired_ms + 1)
    verdict = judge([schedule(0), late_cancel], [fire(fired_ms)], [report], AS_OF)
    assert verdict.status is Status.FIRED and not verdict.cancelled
    assert kinds(verdict) == []


def test_a_cancel_sent_after_the_fire_without_a_report_does_not_blame_the_fire() -> None:
    verdict = judge([schedule(0), cancel(1, ts_s=DUE + 5)], [fire(DUE * 1000 + 2)], [], AS_OF)
    assert verdict.status is Status.FIRED and kinds(verdict) == []


def test_a_cancel_in_advance_drops_the_request_that_comes_after_it() -> None:
    report = CancelReport("k1", "cancelled_in_advance", T0 * 1000)
    verdict = judge([cancel(0, ts_s=T0 - 5), schedule(1)], [], [report], AS_OF)
    assert verdict.status is Status.CANCELLED and kinds(verdict) == []
    fired = judge([cancel(0, ts_s=T0 - 5), schedule(1)], [fire(DUE * 1000)], [report], AS_OF)
    assert kinds(fired) == [ViolationKind.FIRE_AFTER_CANCEL]


def test_a_cancel_in_advance_with_another_token_does_not_stop_a_new_request() -> None:
    verdict = judge([cancel(0, token="zz", ts_s=T0 - 5), schedule(1)], [], [], AS_OF)
    assert verdict.status is Status.MISSING


def test_an_etf1_tombstone_cancels_without_a_token() -> None:
    etf1 = RequestEvent(0, T0 * 1000, "schedule", "", DUE, True, "cb")
    tombstone = RequestEvent(1, T0 * 1000 + 10, "cancel", "", None, False)
    verdict = judge([etf1, tombstone], [], [CancelReport("", "cancelled", T0 * 1000 + 20)], AS_OF)
    assert verdict.status is Status.CANCELLED and kinds(verdict) == []


def test_a_tombstone_for_nothing_pending_cancels_nothing_later() -> None:
    tombstone = RequestEvent(0, T0 * 1000 - 10, "cancel", "", None, False)
    etf1 = RequestEvent(1, T0 * 1000, "schedule", "", DUE, True, "cb")
    verdict = judge([tombstone, etf1], [], [CancelReport("", "not_found", T0 * 1000)], AS_OF)
    assert verdict.status is Status.MISSING


def test_a_reschedule_replaces_the_pending_version() -> None:
    new = schedule(1, token="k2", due=DUE + 30, ts_s=T0 + 5)
    clean = judge([schedule(0), new], [fire((DUE + 30) * 1000 + 8, "k2", DUE + 30)], [], AS_OF)
    assert clean.status is Status.FIRED and kinds(clean) == []
    assert (clean.final_token, clean.final_due) == ("k2", DUE + 30)
    old_fired = judge(
        [schedule(0), new],
        [fire(DUE * 1000 + 8), fire((DUE + 30) * 1000 + 8, "k2", DUE + 30)],
        [],
        AS_OF,
    )
    assert kinds(old_fired) == [ViolationKind.SUPERSEDED]
    assert old_fired.violations[0].token == "k1"


def test_a_version_that_fired_before_it_was_replaced_is_no_violation() -> None:
    again = schedule(1, token="k2", due=DUE + 300, ts_s=DUE + 10)
    verdict = judge(
        [schedule(0), again],
        [fire(DUE * 1000 + 8), fire((DUE + 300) * 1000 + 8, "k2", DUE + 300)],
        [],
        AS_OF,
    )
    assert verdict.status is Status.FIRED and kinds(verdict) == []


def test_the_final_version_of_a_reschedule_can_still_be_missing() -> None:
    new = schedule(1, token="k2", due=DUE + 30, ts_s=T0 + 5)
    verdict = judge([schedule(0), new], [], [], AS_OF)
    assert kinds(verdict) == [ViolationKind.MISSING]
    assert verdict.violations[0].token == "k2"


def test_fires_nobody_asked_for_are_unrequested() -> None:
    unknown_id = judge([], [fire(DUE * 1000)], [], AS_OF)
    assert unknown_id.status is Status.UNREQUESTED
    assert kinds(unknown_id) == [ViolationKind.UNREQUESTED]
    unknown_version = judge(
        [schedule(0)], [fire(DUE * 1000), fire(DUE * 1000, "forged")], [], AS_OF
    )
    assert kinds(unknown_version) == [ViolationKind.UNREQUESTED]
    assert unknown_version.violations[0].token == "forged"


def test_an_id_with_only_cancels_is_nothing_to_fire() -> None:
    verdict = judge([cancel(0)], [], [CancelReport("k1", "cancelled_in_advance", T0 * 1000)], AS_OF)
    assert (verdict.status, kinds(verdict)) == (Status.CANCEL_ONLY, [])
