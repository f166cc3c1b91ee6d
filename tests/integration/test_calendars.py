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

from app.client import TimerClient
from app.dev.stack import wait_until_firing
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
