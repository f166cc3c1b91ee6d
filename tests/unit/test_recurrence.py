"""Occurrences of recurring timers against real tz data, through daylight-saving changes.

Every expected instant is written in UTC; the comment beside it says what local time it
is. The 2026 transitions used:

- Europe/Paris: spring forward 2026-03-29 at 01:00 UTC (02:00 CET becomes 03:00 CEST),
  fall back 2026-10-25 at 01:00 UTC (03:00 CEST becomes 02:00 CET: 02:00-02:59 twice).
- America/New_York: spring forward 2026-03-08 at 07:00 UTC (02:00 EST becomes 03:00
  EDT), fall back 2026-11-01 at 06:00 UTC (02:00 EDT becomes 01:00 EST: 01:00-01:59
  twice).
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from kafka_timers_client.errors import RejectedRequest, RejectReason
from kafka_timers_client.recurrence import Recurrence


def utc(text: str) -> int:
    """Epoch second of a UTC time written ``2026-03-29 01:00:00``."""
    return int(datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp())


def iso(second: int) -> str:
    return datetime.fromtimestamp(second, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def walk(recurrence: Recurrence, after_utc: str, n: int) -> list[str]:
    """The next ``n`` occurrences strictly after ``after_utc``, as UTC text."""
    out, second = [], utc(after_utc)
    for seq in range(1, n + 1):
        nxt = recurrence.after(second, seq) if recurrence.count is None else None
        assert nxt is not None
        out.append(iso(nxt))
        second = nxt
    return out


def cron(expr: str, tz: str = "UTC") -> Recurrence:
    return Recurrence.cron_series(expr, tz)


# -- Europe/Paris ----------------------------------------------------------------------


def test_paris_spring_forward_a_skipped_time_fires_at_the_first_instant_after_the_gap() -> None:
    assert walk(cron("0 30 2 * * *", "Europe/Paris"), "2026-03-27 12:00:00", 3) == [
        "2026-03-28 01:30:00",  # 02:30 CET
        "2026-03-29 01:00:00",  # 02:30 does not exist: 03:00:00 CEST, the end of the gap
        "2026-03-30 00:30:00",  # 02:30 CEST
    ]


def test_paris_spring_forward_skipped_times_collapse_into_one_fire() -> None:
    # 02:00, 02:20 and 02:40 are all skipped: one fire at 03:00 CEST, then on schedule.
    assert walk(cron("0 */20 * * * *", "Europe/Paris"), "2026-03-29 00:30:00", 4) == [
        "2026-03-29 00:40:00",  # 01:40 CET
        "2026-03-29 01:00:00",  # 03:00 CEST (stands for 02:00, 02:20, 02:40 and 03:00)
        "2026-03-29 01:20:00",  # 03:20 CEST
        "2026-03-29 01:40:00",
    ]


def test_paris_fall_back_a_repeated_time_fires_once_on_its_first_pass() -> None:
    assert walk(cron("0 30 2 * * *", "Europe/Paris"), "2026-10-24 12:00:00", 2) == [
        "2026-10-25 00:30:00",  # 02:30 CEST, first pass; not again at 02:30 CET
        "2026-10-26 01:30:00",  # 02:30 CET
    ]


def test_paris_fall_back_the_repeated_hour_is_silent_for_a_wall_clock_series() -> None:
    assert walk(cron("0 */20 * * * *", "Europe/Paris"), "2026-10-24 23:50:00", 5) == [
        "2026-10-25 00:00:00",  # 02:00 CEST
        "2026-10-25 00:20:00",  # 02:20 CEST
        "2026-10-25 00:40:00",  # 02:40 CEST
        "2026-10-25 02:00:00",  # 03:00 CET: 02:00-02:40 CET already fired on the first pass
        "2026-10-25 02:20:00",
    ]


def test_paris_fall_back_from_inside_the_second_pass() -> None:
    # 01:10 UTC is 02:10 CET, the second pass: the next fire is 03:00 CET.
    assert walk(cron("0 */20 * * * *", "Europe/Paris"), "2026-10-25 01:10:00", 1) == [
        "2026-10-25 02:00:00"
    ]


def test_weekday_mornings_in_paris_across_the_spring_change() -> None:
    assert walk(cron("0 0 9 * * MON-FRI", "Europe/Paris"), "2026-03-26 12:00:00", 3) == [
        "2026-03-27 08:00:00",  # Friday 09:00 CET
        "2026-03-30 07:00:00",  # Monday 09:00 CEST: the weekend skipped, the offset changed
        "2026-03-31 07:00:00",
    ]


# -- America/New_York ------------------------------------------------------------------


def test_new_york_spring_forward_a_skipped_time_fires_at_the_first_instant_after_the_gap() -> None:
    assert walk(cron("30 2 * * *", "America/New_York"), "2026-03-06 12:00:00", 3) == [
        "2026-03-07 07:30:00",  # 02:30 EST
        "2026-03-08 07:00:00",  # 02:30 does not exist: 03:00:00 EDT
        "2026-03-09 06:30:00",  # 02:30 EDT
    ]


def test_new_york_fall_back_a_repeated_time_fires_once_on_its_first_pass() -> None:
    assert walk(cron("0 30 1 * * *", "America/New_York"), "2026-10-31 12:00:00", 2) == [
        "2026-11-01 05:30:00",  # 01:30 EDT, first pass; not again at 01:30 EST (06:30 UTC)
        "2026-11-02 06:30:00",  # 01:30 EST
    ]


def test_new_york_fall_back_every_ten_seconds_through_the_change() -> None:
    # The last seconds of the first pass, then 01:00:00 EST would repeat: silent until 02:00.
    assert walk(cron("*/10 * * * * *", "America/New_York"), "2026-11-01 05:59:35", 3) == [
        "2026-11-01 05:59:40",  # 01:59:40 EDT
        "2026-11-01 05:59:50",
        "2026-11-01 07:00:00",  # 02:00:00 EST, after the repeated hour
    ]


# -- other zones, seconds, intervals ---------------------------------------------------


def test_a_half_hour_gap_lord_howe() -> None:
    # Australia/Lord_Howe springs forward 30 minutes: 02:00 -> 02:30 local (+10:30 -> +11).
    assert walk(cron("0 15 2 * * *", "Australia/Lord_Howe"), "2026-10-03 00:00:00", 2) == [
        "2026-10-03 15:30:00",  # 02:15 +10:30 on 4 October: does not exist: 02:30 +11
        "2026-10-04 15:15:00",  # 02:15 +11
    ]


def test_a_six_field_cron_fires_on_its_seconds() -> None:
    assert walk(cron("15,45 * * * * *"), "2026-01-01 00:00:00", 4) == [
        "2026-01-01 00:00:15",
        "2026-01-01 00:00:45",
        "2026-01-01 00:01:15",
        "2026-01-01 00:01:45",
    ]


def test_a_five_field_cron_fires_on_second_zero() -> None:
    assert walk(cron("*/15 * * * *"), "2026-01-01 00:00:00", 2) == [
        "2026-01-01 00:15:00",
        "2026-01-01 00:30:00",
    ]


def test_an_interval_is_epoch_arithmetic_unaffected_by_daylight_saving() -> None:
    every = Recurrence.interval(3600, start=utc("2026-03-28 23:00:00")).anchored(0)
    assert walk(every, "2026-03-29 00:00:00", 3) == [
        "2026-03-29 01:00:00",
        "2026-03-29 02:00:00",
        "2026-03-29 03:00:00",
    ]


def test_anchoring_fixes_the_first_occurrence() -> None:
    sent = utc("2026-01-01 00:00:10")
    assert Recurrence.interval(30).anchored(sent).start == sent + 30
    assert Recurrence.interval(30, start=sent + 100).anchored(sent).start == sent + 100
    # a start in the past: the first second of its grid not before the request
    assert Recurrence.interval(30, start=sent - 100).anchored(sent).start == sent + 20
    paris = Recurrence.cron_series("0 0 9 * * *", "Europe/Paris").anchored(sent)
    assert paris.start == utc("2026-01-01 08:00:00")
    # a start that matches is itself the first occurrence
    on_time = Recurrence.cron_series("0 0 9 * * *", "UTC", start=utc("2026-01-02 09:00:00"))
    assert on_time.anchored(sent).start == utc("2026-01-02 09:00:00")


def test_count_and_end_end_the_series() -> None:
    sent = utc("2026-01-01 00:00:00")
    three = Recurrence.interval(10, count=3).anchored(sent)
    assert list(three.occurrences(sent + 10, 1)) == [(1, sent + 10), (2, sent + 20), (3, sent + 30)]
    ends = Recurrence.cron_series("0 0 * * * *", end=sent + 7200).anchored(sent)
    assert [due for _, due in ends.occurrences(sent + 3600, 1)] == [sent + 3600, sent + 7200]


def test_skip_to_jumps_over_missed_occurrences() -> None:
    sent = utc("2026-01-01 00:00:00")
    every = Recurrence.interval(2, count=100).anchored(sent)
    assert every.skip_to(sent + 2, 1, sent + 61) == (30, sent + 60)
    assert every.skip_to(sent + 2, 1, sent + 10_000) == (100, sent + 200)  # its count
    minutely = Recurrence.cron_series("0 * * * * *").anchored(sent)
    assert minutely.skip_to(sent + 60, 1, sent + 3600 + 59) == (60, sent + 3600)


@pytest.mark.parametrize(
    ("build", "reason"),
    [
        (lambda: Recurrence.cron_series("0 0 25 * * *"), RejectReason.INVALID_CRON),
        (lambda: Recurrence.cron_series("* * *"), RejectReason.INVALID_CRON),
        (lambda: Recurrence.cron_series("0 0 0 31 2 *"), RejectReason.INVALID_CRON),
        (
            lambda: Recurrence.cron_series("* * * * *", "Mars/Olympus"),
            RejectReason.UNKNOWN_TIME_ZONE,
        ),
        (lambda: Recurrence.interval(0), RejectReason.INVALID_RECURRENCE),
        (lambda: Recurrence.interval(5, start=100, end=50), RejectReason.INVALID_RECURRENCE),
        (lambda: Recurrence.interval(5, count=0), RejectReason.INVALID_RECURRENCE),
        (lambda: Recurrence.interval(5, end=50).anchored(100), RejectReason.NO_OCCURRENCE),
        (
            lambda: Recurrence.cron_series("0 0 0 1 1 *", end=utc("2026-06-01 00:00:00")).anchored(
                utc("2026-01-02 00:00:00")
            ),
            RejectReason.NO_OCCURRENCE,
        ),
    ],
)
def test_bad_recurrences_are_refused_with_a_reason(build: object, reason: RejectReason) -> None:
    with pytest.raises(RejectedRequest) as refused:
        build()  # type: ignore[operator]
    assert refused.value.reason is reason
