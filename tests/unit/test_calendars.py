"""Series calendars: the dates a series skips, in its zone, and the skip/next policies.

The property tests hold the walk of :meth:`Recurrence.after` to a brute-force model: the
calendar-free series' slots, filtered by date (``skip``), plus each run of excluded
dates' first slot moved to the same local time on the day after the run (``next``).
"""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.firing import plan
from app.core.raw_record import RawRecord
from app.core.request_format import parse_request
from app.core.stored import pack_timer, unpack_timer
from app.core.timer import Timer
from kafka_timers_client import protowire
from kafka_timers_client import recurrence as recurrence_module
from kafka_timers_client.bounds import MAX_SKIP_DATES
from kafka_timers_client.calendars import Calendar, SkipPolicy, dates_from_ics
from kafka_timers_client.errors import KafkaTimersError, RejectedRequest, RejectReason
from kafka_timers_client.late import CatchUp, LatePolicy
from kafka_timers_client.recurrence import Recurrence

PARIS = ZoneInfo("Europe/Paris")
#: 2026-12-20T00:00:00Z, a Sunday.
DEC_20 = int(datetime(2026, 12, 20, tzinfo=timezone.utc).timestamp())


def local(second: int, zone: ZoneInfo = PARIS) -> datetime:
    return datetime.fromtimestamp(second, zone)


def walk(rec: Recurrence, n: int, through: int | None = None) -> list[int]:
    """The first ``n`` occurrences (or those due by ``through``)."""
    assert rec.start is not None
    out = []
    for _, due in rec.occurrences(rec.start, 1):
        if through is not None and due > through:
            break
        out.append(due)
        if len(out) >= n:
            break
    return out


def test_french_weekdays_skip_christmas_in_paris() -> None:
    calendar = Calendar.build("FR")
    rec = Recurrence.cron_series("0 0 9 * * MON-FRI", "Europe/Paris", calendar=calendar)
    fires = [local(d) for d in walk(rec.anchored(DEC_20), 5)]
    assert [(f.month, f.day, f.hour, f.minute) for f in fires] == [
        (12, 21, 9, 0),
        (12, 22, 9, 0),
        (12, 23, 9, 0),
        (12, 24, 9, 0),
        (12, 28, 9, 0),
    ]


def test_next_moves_the_first_slot_of_a_run_to_the_same_local_time_after_it() -> None:
    calendar = Calendar.build(None, ["2026-12-24", "2026-12-25"], "next")
    rec = Recurrence.cron_series("0 0 9,17 * * MON-FRI", "Europe/Paris", calendar=calendar)
    fires = [local(d) for d in walk(rec.anchored(DEC_20), 8)]
    assert [(f.day, f.hour) for f in fires] == [
        (21, 9),
        (21, 17),
        (22, 9),
        (22, 17),
        (23, 9),
        (23, 17),
        (26, 9),  # Thursday 24th 09:00, moved to Saturday (not skipped) at 09:00
        (28, 9),
    ]


def test_a_series_sent_inside_a_run_starts_with_the_day_after_in_order() -> None:
    """Sent inside a run: the run's first slot (17:00) moves to the day after, later
    than that day's own 09:00; each fires once, in order."""
    calendar = Calendar.build(None, ["2026-12-21"], "next")
    rec = Recurrence.cron_series("0 0 9,17 * * *", "Europe/Paris", calendar=calendar)
    sent = int(datetime(2026, 12, 21, 12, tzinfo=PARIS).timestamp())
    fires = [local(d) for d in walk(rec.anchored(sent), 3)]
    assert [(f.day, f.hour) for f in fires] == [(22, 9), (22, 17), (23, 9)]


def test_a_subdivision_has_its_own_holidays() -> None:
    """Epiphany (6 January) is a holiday in Bavaria, not in Berlin."""
    jan_5 = int(datetime(2027, 1, 5, tzinfo=timezone.utc).timestamp())
    for code, skipped in (("DE-BY", True), ("DE-BE", False)):
        rec = Recurrence.cron_series(
            "0 12 * * *", "Europe/Berlin", calendar=Calendar.build(code)
        ).anchored(jan_5)
        days = [local(d, ZoneInfo("Europe/Berlin")).day for d in walk(rec, 2)]
        assert days == ([5, 7] if skipped else [5, 6])


def test_an_interval_series_skips_whole_local_days_and_keeps_its_grid() -> None:
    calendar = Calendar.build(None, ["2026-12-21"])
    rec = Recurrence.interval(5400, tz="Europe/Paris", calendar=calendar).anchored(DEC_20)
    fires = walk(rec, 40)
    assert all(local(d).date() != date(2026, 12, 21) for d in fires)
    assert all((d - fires[0]) % 5400 == 0 for d in fires)
    # 21 Dec 00:00 Paris is 20 Dec 23:00 UTC: the day skipped is Paris's, not UTC's.
    assert max(d for d in fires if local(d).day == 20) == DEC_20 + 5400 * 15
    # 22 Dec 00:00 Paris is 21 Dec 23:00 UTC: the first grid point from then.
    assert min(d for d in fires if local(d).day == 22) - DEC_20 == 5400 * 32


def test_count_counts_occurrences_that_fire() -> None:
    calendar = Calendar.build("FR")
    rec = Recurrence.cron_series(
        "0 0 9 * * MON-FRI", "Europe/Paris", count=5, calendar=calendar
    ).anchored(DEC_20)
    assert len(list(rec.occurrences(rec.start or 0, 1))) == 5


def test_a_series_ends_after_so_many_runs_of_skipped_dates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(recurrence_module, "MAX_EXCLUDED_RUNS", 5)
    leap_days = [date(year, 2, 29) for year in range(2028, 2052, 4)]
    rec = Recurrence.cron_series("0 9 29 2 *", "UTC", calendar=Calendar(None, leap_days[:4]))
    assert local(rec.anchored(DEC_20).start or 0).year == 2044
    rec = Recurrence.cron_series("0 9 29 2 *", "UTC", calendar=Calendar(None, leap_days))
    with pytest.raises(RejectedRequest) as refused:
        rec.anchored(DEC_20)
    assert refused.value.reason is RejectReason.NO_OCCURRENCE


@pytest.mark.parametrize(
    ("holidays", "dates", "policy"),
    [
        ("XX", (), None),
        ("US-ZZ", (), None),
        ("F R", (), None),
        (None, ["2026-13-01"], None),
        (None, ["26-12-01"], None),
        (None, ["2026-12-01"], "later"),
        (None, [f"{2000 + n // 365:04d}-01-01" for n in range(MAX_SKIP_DATES + 1)], None),
    ],
)
def test_a_bad_calendar_is_refused(
    holidays: str | None, dates: list[str], policy: str | None
) -> None:
    with pytest.raises(RejectedRequest) as refused:
        Calendar.build(holidays, dates, policy)
    assert refused.value.reason is RejectReason.INVALID_RECURRENCE


def test_the_date_bound_is_the_count_of_dates_given() -> None:
    days = [date(2000, 1, 1) + timedelta(days=n) for n in range(MAX_SKIP_DATES)]
    assert Calendar.build(None, days) is not None
    with pytest.raises(RejectedRequest):
        Calendar.build(None, [*days, date(1999, 1, 1)])


def test_next_is_for_cron_and_tz_with_every_needs_a_calendar() -> None:
    with pytest.raises(RejectedRequest):
        Recurrence.interval(60, calendar=Calendar.build("FR", policy="next"))
    with pytest.raises(RejectedRequest):
        Recurrence.interval(60, tz="Europe/Paris")
    assert Recurrence.interval(60, tz="Europe/Paris", calendar=Calendar.build("FR")).tz == (
        "Europe/Paris"
    )


# -- the walk against a brute-force model ----------------------------------------------

crons = st.sampled_from(
    ["0 0 9 * * MON-FRI", "0 30 2 * * *", "0 0 9,17 * * *", "0 0 */4 * * *", "0 0 0 * * *"]
)
zones = st.sampled_from(["Europe/Paris", "America/New_York", "Asia/Kolkata", "UTC"])
#: Dates around the end of October 2026 (Europe's change back from summer time).
window_dates = st.lists(
    st.integers(0, 40).map(lambda n: date(2026, 10, 10) + timedelta(days=n)), max_size=15
)
SENT = int(datetime(2026, 10, 12, tzinfo=timezone.utc).timestamp())
HORIZON = int(datetime(2026, 12, 1, tzinfo=timezone.utc).timestamp())


def model(base: Recurrence, calendar: Calendar, zone: ZoneInfo) -> list[int]:
    """Occurrences up to :data:`HORIZON`, by the definition: slots on allowed dates, and
    with ``next`` each run's first slot moved to the same local time after the run."""
    assert base.start is not None
    slots = walk(base, 10**6, HORIZON)
    out = set()
    previous_run_end: date | None = None
    for due in slots:
        day = datetime.fromtimestamp(due, zone).date()
        if not calendar.excludes(day):
            out.add(due)
            continue
        last = calendar.run_end(day)
        assert last is not None
        if calendar.policy is SkipPolicy.NEXT and last != previous_run_end:
            wall = datetime.fromtimestamp(due, zone).replace(tzinfo=None)
            moved = datetime.combine(last + timedelta(days=1), wall.time()).replace(tzinfo=zone)
            out.add(int(moved.timestamp()))
        previous_run_end = last
    return sorted(out)


@settings(max_examples=150, deadline=None)
@given(crons, zones, window_dates, st.sampled_from(SkipPolicy))
def test_a_cron_series_walks_as_the_model_says(
    cron: str, tz: str, dates: list[date], policy: SkipPolicy
) -> None:
    zone = ZoneInfo(tz)
    calendar = Calendar(None, dates, policy) if dates else Calendar(None, [date(2026, 10, 20)])
    first_slot = Recurrence.cron_series(cron, tz).anchored(SENT)
    try:
        rec = Recurrence.cron_series(cron, tz, calendar=calendar).anchored(SENT)
    except RejectedRequest:
        pytest.fail("a series with a few skipped dates has occurrences")
    got = walk(rec, 10**6, HORIZON - 3 * 86400)
    expected = [d for d in model(first_slot, calendar, zone) if d <= HORIZON - 3 * 86400]
    assert got == expected
    assert all(not calendar.excludes(datetime.fromtimestamp(d, zone).date()) for d in got)
    assert got == sorted(set(got))


@settings(max_examples=60, deadline=None)
@given(crons, zones, window_dates.filter(bool))
def test_next_is_never_earlier_than_the_slot_it_replaces(
    cron: str, tz: str, dates: list[date]
) -> None:
    """Each skipped slot is followed by an occurrence at least as late, on a later date
    (its moved slot, or a later one it collapsed into), and nothing fires on its date."""
    zone = ZoneInfo(tz)
    calendar = Calendar(None, dates, SkipPolicy.NEXT)
    rec = Recurrence.cron_series(cron, tz, calendar=calendar).anchored(SENT)
    fires = walk(rec, 400)
    plain = Recurrence.cron_series(cron, tz).anchored(SENT)
    for slot in walk(plain, 400):
        if slot > fires[-1] - 3 * 86400:
            break
        day = datetime.fromtimestamp(slot, zone).date()
        if calendar.excludes(day):
            later = [f for f in fires if f > slot]
            assert later and datetime.fromtimestamp(later[0], zone).date() > day


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([1800, 3600, 5400, 43200, 86400, 90000]), zones, window_dates.filter(bool))
def test_an_interval_series_is_its_grid_without_the_skipped_dates(
    every: int, tz: str, dates: list[date]
) -> None:
    zone = ZoneInfo(tz)
    calendar = Calendar(None, dates)
    rec = Recurrence.interval(every, tz=tz, calendar=calendar).anchored(SENT)
    got = walk(rec, 10**6, HORIZON)
    grid = range(SENT + every, HORIZON + 1, every)
    assert got == [d for d in grid if not calendar.excludes(datetime.fromtimestamp(d, zone).date())]


# -- requests, the store, the worker's plan ----------------------------------------------


def request(value: bytes, ts: int = DEC_20 * 1000) -> RawRecord:
    return RawRecord("timer-request", 0, 0, ts, b"k", value)


def test_a_json_request_carries_its_calendar() -> None:
    doc = {
        "topic": "cb",
        "cron": "0 0 9 * * MON-FRI",
        "tz": "Europe/Paris",
        "skip_holidays": "fr",
        "skip_dates": ["2026-12-23", "2026-12-22"],
        "skip_policy": "next",
    }
    timer = parse_request(request(json.dumps(doc).encode()))
    assert isinstance(timer, Timer) and timer.recurrence is not None
    assert timer.recurrence.calendar == Calendar(
        "FR", [date(2026, 12, 22), date(2026, 12, 23)], SkipPolicy.NEXT
    )
    assert local(timer.due).day == 21
    every = {"topic": "cb", "every": "1h", "tz": "Europe/Paris", "skip_dates": ["2026-12-20"]}
    timer = parse_request(request(json.dumps(every).encode()))
    assert isinstance(timer, Timer) and timer.recurrence is not None
    assert local(timer.due) == datetime(2026, 12, 21, 0, tzinfo=PARIS)


@pytest.mark.parametrize(
    "extra",
    [
        {"skip_dates": "2026-12-24"},
        {"skip_dates": [str(date(2027, 1, 1) + timedelta(days=n)) for n in range(1001)]},
        {"skip_holidays": 33},
        {"skip_holidays": "Narnia"},
        {"skip_policy": "later"},
    ],
)
def test_a_json_request_with_a_bad_calendar_is_refused(extra: dict[str, object]) -> None:
    doc = {"topic": "cb", "cron": "0 0 9 * * MON-FRI", **extra}
    with pytest.raises(RejectedRequest):
        parse_request(request(json.dumps(doc).encode()))


def test_a_one_shot_with_a_calendar_is_refused() -> None:
    doc = {"topic": "cb", "at": DEC_20 + 60, "skip_holidays": "FR"}
    with pytest.raises(RejectedRequest) as refused:
        parse_request(request(json.dumps(doc).encode()))
    assert refused.value.reason is RejectReason.INVALID_RECURRENCE


def test_a_protobuf_request_carries_its_calendar() -> None:
    future = protowire.Future(
        callback_topic="cb",
        cron="0 0 9 * * MON-FRI",
        tz="Europe/Paris",
        skip_holidays="FR",
        skip_dates=["2026-12-21"],
    )
    timer = parse_request(request(protowire.encode(future)))
    assert isinstance(timer, Timer) and timer.recurrence is not None
    assert timer.recurrence.calendar == Calendar("FR", [date(2026, 12, 21)])
    assert local(timer.due).day == 22
    assert protowire.decode(protowire.encode(future)) == future


def test_protobuf_skip_dates_are_read_however_their_tag_is_written() -> None:
    """skip_dates is read only where its tag's first byte is in the value: the dates
    alone (no holidays, no policy) still make a calendar, also when the tag is written
    as an overlong varint (protobuf reads it so), and a one-shot with them is refused."""
    from app.core import proto

    series = proto.Future(callBackTopic="cb", every=86400, skip_dates=["2026-12-21"])
    value = series.SerializeToString()
    overlong = value.replace(b"\x92\x01", b"\x92\x81\x80\x00")
    assert overlong != value
    for sent in (value, overlong):
        timer = parse_request(request(sent))
        assert isinstance(timer, Timer) and timer.recurrence is not None
        assert timer.recurrence.calendar == Calendar(None, [date(2026, 12, 21)])
    one_shot = proto.Future(callBackTopic="cb", due=DEC_20 + 60, skip_dates=["2026-12-21"])
    with pytest.raises(RejectedRequest) as refused:
        parse_request(request(one_shot.SerializeToString()))
    assert refused.value.reason is RejectReason.INVALID_RECURRENCE
    # The byte elsewhere (a payload's) reads the field and finds none: a plain timer.
    plain = proto.Future(callBackTopic="cb", due=DEC_20 + 60, callBack=b"\x92\x92")
    timer = parse_request(request(plain.SerializeToString()))
    assert isinstance(timer, Timer) and timer.recurrence is None


def test_a_stored_series_keeps_its_calendar_and_an_old_one_reads_without() -> None:
    calendar = Calendar("US-CA", [date(2026, 12, 24)], SkipPolicy.NEXT)
    rec = Recurrence.cron_series("0 9 * * *", "America/Los_Angeles", calendar=calendar)
    series = Timer("s", DEC_20, "cb", None, b"v", "t", recurrence=rec.anchored(DEC_20), seq=1)
    packed = pack_timer(series)
    assert packed[0] == 3 and unpack_timer(packed) == series
    old = Timer("s", DEC_20, "cb", None, b"v", "t", recurrence=Recurrence.interval(60), seq=1)
    assert pack_timer(old)[0] == 2
    assert unpack_timer(pack_timer(old)).recurrence == Recurrence.interval(60)
    assert unpack_timer(pack_timer(old)).recurrence.calendar is None  # type: ignore[union-attr]


def test_the_worker_s_successor_honours_the_calendar() -> None:
    calendar = Calendar(None, [date(2026, 12, 21)])
    last_of_20th = int(datetime(2026, 12, 20, 23, 59, tzinfo=PARIS).timestamp())
    rec = Recurrence.interval(60, start=last_of_20th, tz="Europe/Paris", calendar=calendar)
    rec = rec.anchored(last_of_20th - 10)
    timer = Timer("s", last_of_20th, "cb", None, b"v", "t", recurrence=rec, seq=1)
    fired = plan(timer, last_of_20th, last_of_20th * 1000, LatePolicy(None, CatchUp.ALL))
    assert [step.timer.due for step in fired.steps] == [last_of_20th]
    assert fired.successor is not None and fired.successor.seq == 2
    assert local(fired.successor.due) == datetime(2026, 12, 22, 0, 0, tzinfo=PARIS)


# -- iCalendar files ---------------------------------------------------------------------

ICS = b"""BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//test//EN
BEGIN:VEVENT
UID:1
SUMMARY:Closed
DTSTART;VALUE=DATE:20261224
DTEND;VALUE=DATE:20261226
END:VEVENT
BEGIN:VEVENT
UID:2
SUMMARY:Offsite
DTSTART;TZID=Europe/Paris:20261230T220000
DTEND;TZID=Europe/Paris:20261231T020000
END:VEVENT
BEGIN:VEVENT
UID:3
SUMMARY:Inventory
DTSTART;VALUE=DATE:20270105
RRULE:FREQ=WEEKLY;COUNT=3
EXDATE;VALUE=DATE:20270112
END:VEVENT
END:VCALENDAR
"""


def test_an_ics_file_gives_the_dates_its_events_cover() -> None:
    assert dates_from_ics(ICS) == (
        date(2026, 12, 24),
        date(2026, 12, 25),  # the end of an all-day event is exclusive
        date(2026, 12, 30),
        date(2026, 12, 31),  # a timed event covers each date it touches
        date(2027, 1, 5),
        date(2027, 1, 19),  # the rule's 12th is an EXDATE
    )


def test_an_ics_rule_that_never_ends_is_refused() -> None:
    endless = ICS.replace(b"FREQ=WEEKLY;COUNT=3", b"FREQ=WEEKLY")
    with pytest.raises(KafkaTimersError, match="COUNT or UNTIL"):
        dates_from_ics(endless)
    with pytest.raises(KafkaTimersError):
        dates_from_ics(b"not a calendar")
