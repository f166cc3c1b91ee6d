"""The audit's judgement of one timer: replaying the wheel's rules, then judging fires."""

from __future__ import annotations

from app.core.debounce import Debounce
from kafka_timers_client.debounce import debounced_due
from kafka_timers_client.recurrence import Recurrence
from spark_audit.reconcile import judge
from spark_audit.verdicts import (
    CancelReport,
    ExtraAnswer,
    FireEvent,
    RequestEvent,
    Rules,
    SkipEvent,
    Status,
    Verdict,
    ViolationKind,
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


# -- series: each occurrence reconciled as a timer -------------------------------------

EVERY = 10
START = T0 + 100  # occurrence n is due at START + (n - 1) * EVERY


def series_request(
    offset: int = 0, token: str = "s1", count: int | None = None, ts_s: float = T0
) -> RequestEvent:
    rec = Recurrence.interval(EVERY, start=START, count=count).anchored(int(ts_s))
    return RequestEvent(offset, int(ts_s * 1000), "schedule", token, START, True, "cb", rec)


def occurrence(seq: int, late_ms: int = 30, token: str = "s1", coalesced: int = 0) -> FireEvent:
    due = START + (seq - 1) * EVERY
    return FireEvent(token, due, due * 1000 + late_ms, "cb", "w1", seq, coalesced)


def skip(seq: int, reason: str = "late", coalesced: int = 0) -> SkipEvent:
    due = START + (seq - 1) * EVERY
    return SkipEvent("s1", due, due * 1000 + 9000, reason, seq, coalesced)


def test_a_finished_series_fired_on_every_occurrence_is_clean() -> None:
    verdict = judge([series_request(count=4)], [occurrence(n) for n in (1, 2, 3, 4)], [], AS_OF)
    assert (verdict.status, kinds(verdict)) == (Status.FIRED, [])
    assert verdict.occurrences_fired == 4 and verdict.fire_count == 4


def test_a_running_series_is_pending_and_only_occurrences_due_plus_grace_are_expected() -> None:
    as_of = Rules(as_of_ms=(START + 100) * 1000, grace_ms=60_000)  # occurrences 1-5 expected
    verdict = judge([series_request()], [occurrence(n) for n in range(1, 6)], [], as_of)
    assert (verdict.status, kinds(verdict)) == (Status.PENDING, [])


def test_a_missing_occurrence_is_a_violation_named_by_its_number() -> None:
    fires = [occurrence(n) for n in (1, 2, 4)]
    verdict = judge([series_request(count=4)], fires, [], AS_OF)
    assert verdict.status is Status.MISSING
    assert kinds(verdict) == [ViolationKind.MISSING]
    assert verdict.violations[0].due == START + 2 * EVERY
    assert "occurrence 3" in verdict.violations[0].detail


def test_a_duplicate_and_an_early_occurrence_are_violations() -> None:
    fires = [occurrence(1), occurrence(2), occurrence(2, late_ms=800), occurrence(3, late_ms=-5)]
    verdict = judge([series_request(count=3)], fires, [], AS_OF)
    assert sorted(kinds(verdict)) == sorted([ViolationKind.DUPLICATE, ViolationKind.EARLY])


def test_an_occurrence_with_the_wrong_due_second_was_never_requested() -> None:
    wrong = FireEvent("s1", START + 5, (START + 5) * 1000, "cb", "w1", 1)
    verdict = judge([series_request(count=1)], [wrong], [], AS_OF)
    assert ViolationKind.UNREQUESTED in kinds(verdict)


def test_a_cancelled_series_expects_nothing_after_the_cancel_and_forbids_fires_then() -> None:
    cancel_s = START + 25  # occurrences 1-3 due before it
    requests = [series_request(), cancel(1, token="s1", ts_s=cancel_s)]
    report = CancelReport("s1", "cancelled", cancel_s * 1000 + 3)
    clean = judge(requests, [occurrence(n) for n in (1, 2, 3)], [report], AS_OF)
    assert (clean.status, kinds(clean)) == (Status.CANCELLED, [])
    after = judge(requests, [occurrence(n) for n in (1, 2, 3, 4)], [report], AS_OF)
    assert kinds(after) == [ViolationKind.FIRE_AFTER_CANCEL]
    # occurrence 1 was due more than the grace before the cancel: it had to fire
    long_cancel = [series_request(), cancel(1, token="s1", ts_s=START + 100)]
    report = CancelReport("s1", "cancelled", (START + 100) * 1000)
    lost = judge(long_cancel, [occurrence(n) for n in (2, 3, 4)], [report], AS_OF)
    assert kinds(lost) == [ViolationKind.MISSING]


def test_skipped_and_coalesced_occurrences_are_counted_not_violations() -> None:
    fires = [occurrence(1), occurrence(6, late_ms=900, coalesced=3), occurrence(7)]
    skips = [skip(2)]  # 2 skipped as late; 3-5 folded into 6
    verdict = judge([series_request(count=7)], fires, [], AS_OF, skips)
    assert (verdict.status, kinds(verdict)) == (Status.FIRED, [])
    assert (verdict.occurrences_fired, verdict.occurrences_skipped) == (3, 1)
    assert verdict.occurrences_coalesced == 3
    # a catch-up longer than a tick reports folded occurrences on their own record
    folded = [skip(3, reason="coalesced", coalesced=1)]
    verdict = judge(
        [series_request(count=5)], [occurrence(1), occurrence(5, coalesced=1)], [], AS_OF, folded
    )
    assert (verdict.status, kinds(verdict), verdict.occurrences_coalesced) == (Status.FIRED, [], 3)


def test_a_replaced_series_must_not_fire_afterwards() -> None:
    replaced_at = START + 15
    requests = [series_request(), series_request(1, token="s2", ts_s=replaced_at)]
    stale = occurrence(3)  # the old series' occurrence 3, due after the replacement
    verdict = judge(requests, [occurrence(1), occurrence(2), stale], [], AS_OF)
    assert ViolationKind.SUPERSEDED in kinds(verdict)


def test_a_one_shot_timer_skipped_by_its_policy_is_skipped_not_missing() -> None:
    skipped = SkipEvent("k1", DUE, DUE * 1000 + 9000, "late")
    verdict = judge([schedule(0)], [], [], AS_OF, [skipped])
    assert (verdict.status, kinds(verdict), verdict.occurrences_skipped) == (Status.SKIPPED, [], 1)


def test_a_series_refused_when_due_under_narrowed_rules_ends_there() -> None:
    # Occurrences 1-2 fired; the workers restarted with a narrower allow-list and refused
    # occurrence 3 (dead-lettered, reported not_allowed): nothing after it is expected.
    refused = skip(3, reason="not_allowed")
    fires = [occurrence(1), occurrence(2)]
    verdict = judge([series_request()], fires, [], AS_OF, [refused])
    assert kinds(verdict) == []
    assert verdict.occurrences_fired == 2 and verdict.occurrences_skipped == 1
    # without the refusal, the occurrences after 2 are missing
    assert ViolationKind.MISSING in kinds(judge([series_request()], fires, [], AS_OF))


def test_a_tombstone_does_not_cancel_a_timer_with_a_token() -> None:
    tombstone = RequestEvent(1, T0 * 1000 + 5, "cancel", "", None, False)
    verdict = judge([schedule(0), tombstone], [], [], AS_OF)
    assert verdict.status is Status.MISSING  # it still had to fire


def test_a_version_scheduled_again_after_its_cancel_must_fire() -> None:
    again = RequestEvent(2, T0 * 1000 + 9, "schedule", "k1", DUE + 60, True, "cb")
    requests = [schedule(0), cancel(1), again]
    report = CancelReport("k1", "cancelled", T0 * 1000 + 6)
    verdict = judge(requests, [], [report], AS_OF)
    assert verdict.status is Status.MISSING and kinds(verdict) == [ViolationKind.MISSING]


# -- triggers and backfills: fires out of schedule, judged by what they are -------------


def triggered(at_ms: int, token: str = "k1", due: int = DUE) -> FireEvent:
    """A one-shot timer's own fire, asked for by a trigger (its due second kept)."""
    return FireEvent(token, due, at_ms, "cb", "w1", extra="trigger")


def applied(kind: str, at_ms: int, token: str = "k1", offset: int = 5) -> ExtraAnswer:
    """The worker's answer to a trigger or a backfill it applied."""
    return ExtraAnswer(
        kind, token, "triggered" if kind == "trigger" else "backfilled", at_ms, offset
    )


def test_a_triggered_one_shot_fires_before_its_second_and_is_not_early() -> None:
    trigger_at = T0 * 1000 + 30_000  # 70 s before its due second
    fire = triggered(trigger_at + 700)
    verdict = judge([schedule(0)], [fire], [], AS_OF, answers=[applied("trigger", trigger_at)])
    assert (verdict.status, kinds(verdict)) == (Status.FIRED, [])
    assert (verdict.extra_triggered, verdict.extra_backfilled) == (1, 0)
    assert verdict.occurrences_fired == 1
    [row] = verdict.fires
    assert row["extra"] == "trigger" and row["lateness_ms"] == 700, "counted from the trigger"
    # without the answer (lost to retention) the audit cannot tell when: not early either
    assert kinds(judge([schedule(0)], [fire], [], AS_OF)) == []
    # an ordinary fire at that time is early
    assert kinds(judge([schedule(0)], [fire._replace(extra=None)], [], AS_OF)) == [
        ViolationKind.EARLY
    ]


def test_a_trigger_fire_before_the_trigger_was_applied_is_early() -> None:
    trigger_at = T0 * 1000 + 30_000
    verdict = judge(
        [schedule(0)],
        [triggered(trigger_at - 2000)],
        [],
        AS_OF,
        answers=[applied("trigger", trigger_at)],
    )
    assert kinds(verdict) == [ViolationKind.EARLY]
    assert "before its trigger was applied" in verdict.violations[0].detail


def test_a_triggered_one_shot_is_consumed_a_fire_at_its_second_too_is_a_duplicate() -> None:
    trigger_at = T0 * 1000 + 30_000
    fires = [triggered(trigger_at + 500), fire(DUE * 1000 + 20)]
    verdict = judge([schedule(0)], fires, [], AS_OF, answers=[applied("trigger", trigger_at)])
    assert kinds(verdict) == [ViolationKind.DUPLICATE]
    assert verdict.status is Status.FIRED


def series_extra(
    kind: str, number: int, at_ms: int, token: str = "s1", due: int | None = None
) -> FireEvent:
    """A series' extra fire, keyed under the series: a trigger's (``number`` its request
    offset, due the trigger's second) or a backfilled occurrence's (``number`` its second)."""
    if due is None:
        due = at_ms // 1000 if kind == "trigger" else number
    return FireEvent(token, due, at_ms, "cb", "w1", extra=kind, extra_n=number)


def test_a_series_trigger_and_backfilled_occurrences_are_extra_fires_not_unrequested() -> None:
    as_of = Rules(as_of_ms=(START + 45) * 1000, grace_ms=60_000)
    trigger_ms = (START + 12) * 1000 + 400
    extras = [
        series_extra("trigger", 7, trigger_ms + 900),
        series_extra("backfill", START - 3 * EVERY, trigger_ms + 1500),
        series_extra("backfill", START - 2 * EVERY, trigger_ms + 1500),
    ]
    answers = [applied("trigger", trigger_ms, "s1", 7), applied("backfill", trigger_ms, "s1", 8)]
    fires = [occurrence(n) for n in (1, 2, 3, 4)]
    verdict = judge([series_request()], [*fires, *extras], [], as_of, answers=answers)
    assert (verdict.status, kinds(verdict)) == (Status.PENDING, [])
    assert (verdict.extra_triggered, verdict.extra_backfilled) == (1, 2)
    assert verdict.occurrences_fired == 4 and verdict.fire_count == 4, "not occurrences"
    rows = [r for r in verdict.fires if r["extra"]]
    assert len(rows) == 3 and all(r["first"] for r in rows)
    assert [r["lateness_ms"] for r in rows] == [900, 1500, 1500]


def test_the_same_extra_fire_twice_is_a_duplicate_two_different_ones_are_not() -> None:
    ms = (START + 12) * 1000
    again = [
        series_extra("backfill", START - EVERY, ms),
        series_extra("backfill", START - EVERY, ms + 5000),
        series_extra("trigger", 7, ms),
        series_extra("trigger", 7, ms + 5000),
        series_extra("trigger", 9, ms + 5000),  # another trigger: its own fire
    ]
    verdict = judge([series_request(count=1)], [occurrence(1), *again], [], AS_OF)
    assert kinds(verdict) == [ViolationKind.DUPLICATE] * 2
    details = " ".join(v.detail for v in verdict.violations)
    assert "trigger at request offset 7 fired 2 times" in details
    assert "backfilled occurrence" in details
    assert (verdict.extra_triggered, verdict.extra_backfilled) == (2, 1)


def test_extra_fires_of_a_series_nobody_requested_are_unrequested() -> None:
    ms = (START + 12) * 1000
    stray = [series_extra("trigger", 7, ms), series_extra("backfill", START - EVERY, ms)]
    nothing = judge([], stray, [], AS_OF)
    assert kinds(nothing) == [ViolationKind.UNREQUESTED] * 2
    assert nothing.status is Status.UNREQUESTED
    other_token = judge([series_request(token="s2")], stray, [], AS_OF)
    assert ViolationKind.UNREQUESTED in kinds(other_token)
    one_shot = judge([schedule(0, token="s1")], stray, [], AS_OF)
    assert kinds(one_shot).count(ViolationKind.UNREQUESTED) == 2, "a one-shot has no series"
    wrong_due = series_extra("backfill", START - EVERY, ms, due=START - EVERY + 1)
    assert ViolationKind.UNREQUESTED in kinds(judge([series_request()], [wrong_due], [], AS_OF))
    # under retention the request may be gone: not a violation
    gone = Rules(as_of_ms=AS_OF.as_of_ms, grace_ms=60_000, requests_complete=False)
    assert judge([], stray, [], gone).status is Status.REQUEST_GONE


def test_a_series_trigger_fire_before_its_trigger_was_applied_is_early() -> None:
    ms = (START + 12) * 1000
    early = series_extra("trigger", 7, ms, due=START + 12)
    verdict = judge(
        [series_request()],
        [occurrence(1), early],
        [],
        AS_OF,
        answers=[applied("trigger", ms + 400, "s1", 7)],
    )
    assert ViolationKind.EARLY in kinds(verdict)


# -- debounced ids: N requests, one version, one fire --------------------------------------


def debounced(
    offset: int, ts_s: float, seconds: int = 10, max_wait: int | None = None, token: str = ""
) -> RequestEvent:
    """A debounced request as the audit parses it: due one debounce after its timestamp."""
    ts_ms = int(ts_s * 1000)
    window = Debounce(seconds, max_wait, ts_ms, 1, offset)
    due = debounced_due(ts_ms, seconds)
    return RequestEvent(offset, ts_ms, "schedule", token, due, True, "cb", None, 0, window)


def test_a_burst_of_debounced_requests_is_one_timer_fired_once() -> None:
    burst = [debounced(n, T0 + 2 * n) for n in range(5)]  # the last at T0 + 8: due T0 + 18
    verdict = judge(burst, [fire((T0 + 18) * 1000 + 30, "", T0 + 18)], [], AS_OF)
    assert (verdict.status, kinds(verdict)) == (Status.FIRED, [])
    assert (verdict.final_due, verdict.fires[0]["lateness_ms"]) == (T0 + 18, 30)


def test_a_burst_capped_by_its_max_wait_fires_at_the_bound_and_is_clean() -> None:
    """Due T0 + 10, then T0 + 14 and T0 + 18 each capped at T0 + 12 (T0 + 12 s after the
    first request): the fire at T0 + 12 is the burst's, and nothing is missing. Before,
    it was an unrequested fire and the last request's T0 + 18 was missing."""
    burst = [debounced(n, T0 + 4 * n, max_wait=12) for n in range(3)]
    verdict = judge(burst, [fire((T0 + 12) * 1000 + 30, "", T0 + 12)], [], AS_OF)
    assert (verdict.status, kinds(verdict)) == (Status.FIRED, [])
    assert verdict.final_due == T0 + 12
    never = judge(burst, [], [], AS_OF)
    assert (never.status, kinds(never)) == (Status.MISSING, [ViolationKind.MISSING])
    assert never.violations[0].due == T0 + 12


def test_a_burst_fired_before_its_last_request_plus_the_window_is_early() -> None:
    burst = [debounced(n, T0 + 4 * n) for n in range(3)]  # due T0 + 18
    verdict = judge(burst, [fire((T0 + 18) * 1000 - 400, "", T0 + 18)], [], AS_OF)
    assert kinds(verdict) == [ViolationKind.EARLY]
    wrong = judge(burst, [fire((T0 + 10) * 1000 + 5, "", T0 + 10)], [], AS_OF)
    # the first request's version fired and the burst's never did: the worker would have
    # merged the two requests after it (they came before it was due) and fired T0 + 18
    assert kinds(wrong) == [ViolationKind.MISSING]


def test_bursts_apart_in_time_each_fire_once_from_their_own_first_request() -> None:
    """A request after the pending debounce fired starts a new one: its max-wait runs
    from its own first request (merged into the fired one, it was due at T0 + 12)."""
    first = [debounced(0, T0, max_wait=12), debounced(1, T0 + 4, max_wait=12)]
    second = [debounced(2, T0 + 100, max_wait=12), debounced(3, T0 + 104, max_wait=12)]
    fires = [fire((T0 + 12) * 1000 + 20, "", T0 + 12), fire((T0 + 112) * 1000 + 20, "", T0 + 112)]
    verdict = judge(first + second, fires, [], AS_OF)
    assert (verdict.status, kinds(verdict)) == (Status.FIRED, [])
    assert verdict.final_due == T0 + 112


def test_a_debounce_restored_by_an_import_goes_on_from_its_first_request() -> None:
    restored = RequestEvent(
        0, T0 * 1000, "schedule", "", T0 + 20, True, "cb", None, 0,
        Debounce(10, 60, (T0 - 55) * 1000, 4, restored=True),
    )  # fmt: skip
    later = debounced(1, T0 + 1, max_wait=60)  # due T0 + 11, capped at T0 + 5
    verdict = judge([restored, later], [fire((T0 + 5) * 1000 + 9, "", T0 + 5)], [], AS_OF)
    assert (verdict.status, kinds(verdict)) == (Status.FIRED, [])
