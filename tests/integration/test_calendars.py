"""Series calendars on real processes: a series every second whose calendar excludes
today (and tomorrow, so a run across midnight UTC proves the same) fires nothing while a
control series without one fires every second; the excluded series is pending at the
worker all along (a cancel finds it), never dead-lettered.

Requests come three ways: ``kafka-timers schedule --skip-ics`` (the CLI reads the file,
the protobuf request carries the dates), the Python client (``skip_dates``, a cron
series) and a raw JSON record (``"skip_dates"``).
"""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

from app.dev.stack import wait_until_firing
from app.kafka.records import Record
from kafka_timers_client.client import TimerClient
from kafka_timers_client.outcome import CancelOutcome
from tests.support.cli import run_cli
from tests.support.stack import Stack, fired_ids

STARTUP_TIMEOUT = 90.0
FIRE_TIMEOUT = 60.0
#: Fires of the control series to wait for: the excluded ones had as many seconds.
CONTROL_FIRES = 6


def ics_of(days: list[date]) -> bytes:
    events = "".join(
        "BEGIN:VEVENT\r\n"
        f"UID:closed-{day}\r\n"
        "SUMMARY:Closed\r\n"
        f"DTSTART;VALUE=DATE:{day:%Y%m%d}\r\n"
        f"DTEND;VALUE=DATE:{day + timedelta(days=1):%Y%m%d}\r\n"
        "END:VEVENT\r\n"
        for day in days
    )
    return (
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//kafka-timers tests//EN\r\n"
        f"{events}END:VCALENDAR\r\n"
    ).encode()


def test_a_series_excluded_today_fires_nothing_while_its_control_fires(
    stack: Stack, tmp_path: Path
) -> None:
    topic = stack.callback_topic("calendar-callbacks")
    stack.oscillator()
    stack.worker()
    client = TimerClient(stack.settings)
    wait_until_firing(stack.settings, client, stack.callback_topic("calendar-probes"))
    today = datetime.now(timezone.utc).date()
    closed = [today, today + timedelta(days=1)]
    reopening = datetime.combine(today + timedelta(days=2), datetime.min.time(), timezone.utc)

    ics = tmp_path / "closed.ics"
    ics.write_bytes(ics_of(closed))
    by_cli = run_cli(
        stack.settings,
        "schedule",
        "--topic",
        topic,
        "--value",
        "cli",
        "--every",
        "1s",
        "--skip-ics",
        str(ics),
        "--skip-policy",
        "skip",
        "--id",
        "cal-cli",
    )
    assert by_cli.returncode == 0, by_cli.stderr
    printed = json.loads(by_cli.stdout)
    assert printed["due"] == int(reopening.timestamp()), "first occurrence: the day after"
    by_client = client.schedule(
        topic, b"client", cron="* * * * * *", skip_dates=closed, timer_id="cal-client"
    )
    assert by_client.due == int(reopening.timestamp())
    producer = stack.producer()
    doc = {
        "topic": topic,
        "value": "json",
        "every": "1s",
        "id": "cal-json",
        "token": "tj",
        "skip_dates": [str(day) for day in closed],
    }
    producer.produce(stack.settings.topics.requests, json.dumps(doc).encode(), b"cal-json")
    producer.flush(10)
    control = client.schedule(topic, b"control", every="1s", timer_id="cal-control")
    client.flush()

    with stack.reader(topic) as reader:
        reader.wait_for(
            lambda rs: fired_ids(rs).count("cal-control") >= CONTROL_FIRES, FIRE_TIMEOUT
        )
        fired = fired_ids(reader.records)
    excluded = {"cal-cli", "cal-client", "cal-json"}
    print(
        f"control fired {fired.count('cal-control')} times; excluded series fired "
        f"{sum(1 for i in fired if i in excluded)} times"
    )
    assert not excluded & set(fired), "a series fired on a date its calendar excludes"
    # Each is pending at the worker (accepted, stored, due the day after): a cancel finds it.
    answers = {
        timer_id: client.cancel(timer_id, token, wait=FIRE_TIMEOUT)
        for timer_id, token in (
            ("cal-cli", printed["token"]),
            ("cal-client", by_client.token),
            ("cal-json", "tj"),
            ("cal-control", control.token),
        )
    }
    assert set(answers.values()) == {CancelOutcome.CANCELLED}, answers


#: Seconds before a (moved) midnight UTC the processes start at: time to join and fire
#: (usually 10-30 s here) with the series running for a while before the day changes
#: (checked: at least 5 of its seconds before midnight).
BEFORE_MIDNIGHT = 50


def test_the_worker_s_successors_skip_the_excluded_day_across_midnight(stack: Stack) -> None:
    """The worker's own successors, across a day boundary: worker and oscillator run on
    clocks moved to just before a midnight UTC; a series every second that excludes the
    day after fires, occurrence by occurrence, until the last second of its day, then
    nothing while its control fires on into the excluded day; it is pending, due the
    day after that."""
    excluded = datetime.now(timezone.utc).date() + timedelta(days=10)
    midnight = int(datetime.combine(excluded, datetime.min.time(), timezone.utc).timestamp())
    offset = midnight - BEFORE_MIDNIGHT - int(datetime.now(timezone.utc).timestamp())
    topic = stack.callback_topic("calendar-midnight-callbacks")
    stack.oscillator(clock_offset=offset)
    stack.worker(clock_offset=offset)

    def moved_now() -> float:
        return datetime.now(timezone.utc).timestamp() + offset

    client = TimerClient(stack.settings, clock=moved_now)
    probe = client.schedule(topic, b"probe", at=moved_now())
    client.flush()
    with stack.reader(topic) as reader:
        reader.wait_for(lambda rs: probe.id in fired_ids(rs), STARTUP_TIMEOUT)
    start = int(moved_now()) + 3
    assert start < midnight - 5, "the stack took too long to start: no second before midnight"
    skipping = client.schedule(
        topic, b"skip", every="1s", start=start, skip_dates=[excluded], timer_id="cal-mid"
    )
    control = client.schedule(topic, b"ctl", every="1s", start=start, timer_id="cal-mid-ctl")
    client.flush()
    assert skipping.due == control.due == start

    def dues(records: list[Record], timer_id: str) -> list[int]:
        return [
            int(r.header("timer-due") or 0)
            for r in records
            if r.header("timer-id") == timer_id.encode()
        ]

    deadline = BEFORE_MIDNIGHT + FIRE_TIMEOUT
    with stack.reader(topic) as reader:
        reader.wait_for(
            lambda rs: len([d for d in dues(rs, "cal-mid-ctl") if d >= midnight]) >= 5,
            deadline,
        )
        records = reader.records
    skipped, controlled = dues(records, "cal-mid"), dues(records, "cal-mid-ctl")
    print(
        f"before midnight: series {len([d for d in skipped if d < midnight])}, control "
        f"{len([d for d in controlled if d < midnight])} fires; after: series "
        f"{len([d for d in skipped if d >= midnight])}, control "
        f"{len([d for d in controlled if d >= midnight])}"
    )
    assert skipped == list(range(start, midnight)), "every second of its day, then none"
    assert controlled[: midnight - start] == list(range(start, midnight))
    answer = client.cancel("cal-mid", skipping.token, wait=FIRE_TIMEOUT)
    assert answer is CancelOutcome.CANCELLED, "the series is pending (due the day after)"
