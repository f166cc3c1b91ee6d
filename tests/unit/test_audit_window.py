"""The audit under retention: a window [since, as-of], and requests retention deleted.

Consecutive windows must report each violation exactly once, nothing outside its window,
and never call a fire "unrequested" when its request may be one retention deleted.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from kafka_timers_client.errors import InvalidTimeSpec
from spark_audit.errors import AuditError
from spark_audit.options import parse_options
from spark_audit.reconcile import judge
from spark_audit.verdicts import Rules, Status, ViolationKind
from tests.unit.test_audit_reconcile import DUE, T0, cancel, fire, kinds, schedule

DAY_MS = 86_400_000
GRACE = 60_000


def window(start_ms: int, end_ms: int) -> Rules:
    return Rules(as_of_ms=end_ms, grace_ms=GRACE, since_ms=start_ms)


def daily_windows(first_ms: int, days: int) -> list[Rules]:
    return [window(first_ms + d * DAY_MS, first_ms + (d + 1) * DAY_MS) for d in range(days)]


def test_fire_violations_count_only_in_the_window_of_the_fire() -> None:
    early = fire(DUE * 1000 - 500)
    twice = [fire(DUE * 1000 + 10), fire(DUE * 1000 + 20, worker="w2")]
    days = daily_windows(DUE * 1000 - DAY_MS // 2, 3)
    found = [kinds(judge([schedule(0)], [early], [], rules)) for rules in days]
    assert found == [[ViolationKind.EARLY], [], []]
    found = [kinds(judge([schedule(0)], twice, [], rules)) for rules in days]
    assert found == [[ViolationKind.DUPLICATE], [], []]


def test_a_missing_timer_is_reported_by_the_window_in_which_it_became_overdue() -> None:
    overdue_ms = DUE * 1000 + GRACE
    # windows whose boundary falls between the due second and the end of the grace
    days = daily_windows(DUE * 1000 + GRACE // 2 - DAY_MS, 3)
    found = [kinds(judge([schedule(0)], [], [], rules)) for rules in days]
    assert found == [[], [ViolationKind.MISSING], []]
    assert days[1].since_ms is not None and days[1].since_ms <= overdue_ms


def test_a_timer_still_pending_at_the_end_of_the_window_is_not_missing() -> None:
    rules = window(T0 * 1000, DUE * 1000 + GRACE - 1)
    verdict = judge([schedule(0)], [], [], rules)
    assert (verdict.status, kinds(verdict)) == (Status.PENDING, [])


def test_a_fire_whose_request_retention_deleted_is_not_a_violation() -> None:
    rules = window(DUE * 1000 - DAY_MS, DUE * 1000 + DAY_MS)
    gone = replace(rules, requests_complete=False)
    orphan = [fire(DUE * 1000 + 30)]
    assert judge([], orphan, [], rules).status is Status.UNREQUESTED
    assert kinds(judge([], orphan, [], rules)) == [ViolationKind.UNREQUESTED]
    verdict = judge([], orphan, [], gone)
    assert (verdict.status, kinds(verdict)) == (Status.REQUEST_GONE, [])
    # a later request of the same id survived, the version that fired did not
    later = [schedule(5, token="k2", due=DUE + 500, ts_s=DUE + 100)]
    fired_later = fire((DUE + 500) * 1000 + 5, token="k2", due=DUE + 500)
    assert kinds(judge(later, [*orphan, fired_later], [], gone)) == []
    assert kinds(judge(later, [*orphan, fired_later], [], rules)) == [ViolationKind.UNREQUESTED]
    # what needs no request is still checked: an early fire
    assert kinds(judge([], [fire(DUE * 1000 - 1)], [], gone)) == [ViolationKind.EARLY]


def test_requests_before_the_window_are_still_evidence() -> None:
    rules = window(DUE * 1000 - 10_000, DUE * 1000 + DAY_MS)  # requested long before
    assert kinds(judge([schedule(0)], [fire(DUE * 1000 + 5)], [], rules)) == []
    after_cancel = judge([schedule(0), cancel(1)], [fire(DUE * 1000 + 5)], [], rules)
    assert kinds(after_cancel) == [ViolationKind.FIRE_AFTER_CANCEL]


def test_since_defaults_to_seven_days_before_as_of_and_reads_three_forms() -> None:
    as_of = 1_767_225_600.0
    assert parse_options(["--as-of", str(as_of)]).since_ms == int((as_of - 7 * 86400) * 1000)
    assert parse_options(["--as-of", str(as_of), "--since", "1d"]).since_ms == int(
        (as_of - 86400) * 1000
    )
    assert parse_options(["--as-of", str(as_of), "--since", "1767000000"]).since_ms == (
        1_767_000_000_000
    )
    assert (
        parse_options(["--as-of", str(as_of), "--since", "2025-12-31T00:00:00Z"]).since_ms
        == 1_767_139_200_000
    )
    assert parse_options(["--since", "all"]).since_ms is None
    with pytest.raises(AuditError):
        parse_options(["--as-of", str(as_of), "--since", "1767225700"])
    with pytest.raises((AuditError, InvalidTimeSpec)):
        parse_options(["--since", "yesterday-ish"])
