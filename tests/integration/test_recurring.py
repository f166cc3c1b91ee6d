"""Recurring timers and the late-fire policy, with real processes on the broker.

Fire times are the worker's own (``timer-fired-at``, also each callback's record
timestamp): "early" means a callback stamped before its occurrence's due second.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from app.core.fired import FiredKind, FiredRecord
from app.dev.broker import free_port
from app.dev.stack import wait_until_firing
from app.kafka.records import Record, TopicReader
from kafka_timers_client.client import TimerClient
from tests.conftest import OPERATOR_TOKEN
from tests.support.faults import deliberate_fault_window
from tests.support.probes import get_admitted
from tests.support.stack import Stack
from tests.support.waiting import wait_until

#: Generous: a worker joins, recovers and ticks within this on a shared 2-core machine.
STARTUP_TIMEOUT = 90.0
FIRE_TIMEOUT = 60.0
#: How late "on its second" may be: a tick's trip through the broker and Faust, with
#: room for a busy machine. Early is never allowed.
MAX_LATENESS_MS = 5000


def occurrences(records: list[Record], timer_id: str) -> list[tuple[int, int, int]]:
    """``(seq, due, fired_at_ms)`` of ``timer_id``'s callbacks, in arrival order."""
    return [
        (
            int(r.header("timer-seq") or 0),
            int(r.header("timer-due") or 0),
            int(r.header("timer-fired-at") or 0),
        )
        for r in records
        if r.header("timer-id") == timer_id.encode()
    ]


def fired_topic_records(stack: Stack) -> list[FiredRecord]:
    with TopicReader(stack.settings, stack.settings.topics.fired) as reader:
        return [FiredRecord.from_json(r.value or b"{}") for r in reader.read_to_end()]


def start_firing(stack: Stack, topic: str) -> TimerClient:
    stack.oscillator()
    stack.worker()
    client = TimerClient(stack.settings)
    wait_until_firing(stack.settings, client, topic, probes=8, timeout=STARTUP_TIMEOUT)
    return client


def test_an_every_2s_series_fires_on_consecutive_occurrences_and_stops_at_once_on_cancel(
    stack: Stack,
) -> None:
    topic = stack.callback_topic("series-callbacks")
    client = start_firing(stack, topic)
    series = client.schedule(topic, b"tick", "k", every="2s")
    client.flush()
    assert series.recurrence is not None and series.recurrence.every == 2
    with stack.reader(topic) as reader:
        reader.wait_for(lambda rs: len(occurrences(rs, series.id)) >= 5, FIRE_TIMEOUT)
        client.cancel(series.id, series.token)
        client.flush()
        cancelled_at_ms = wait_until(
            lambda: next(
                (
                    r.at_ms
                    for r in fired_topic_records(stack)
                    if r.event is FiredKind.CANCEL and r.id == series.id
                ),
                None,
            ),
            FIRE_TIMEOUT,
            "the worker's report of the cancel",
        )
        deliberate_fault_window(5.0)  # two more periods: nothing may fire in them
        reader.poll(1.0)
        fires = occurrences(reader.records, series.id)
    first = fires[:5]
    assert [seq for seq, _, _ in first] == [1, 2, 3, 4, 5], "5 consecutive occurrences"
    assert [due for _, due, _ in first] == [series.due + 2 * n for n in range(5)]
    for seq, due, fired_at in fires:
        assert fired_at >= due * 1000, f"occurrence {seq} fired early"
        assert fired_at - due * 1000 < MAX_LATENESS_MS, f"occurrence {seq} not on its second"
    assert len({seq for seq, _, _ in fires}) == len(fires), "no occurrence fired twice"
    assert cancelled_at_ms is not None
    assert all(fired_at <= cancelled_at_ms for _, _, fired_at in fires), "fired after the cancel"
    outcomes = [r.outcome for r in fired_topic_records(stack) if r.event is FiredKind.CANCEL]
    assert outcomes == ["cancelled"]


def test_a_six_field_cron_fires_on_its_seconds(stack: Stack) -> None:
    topic = stack.callback_topic("cron-callbacks")
    client = start_firing(stack, topic)
    now = int(time.time())
    seconds = sorted({(now + 6) % 60, (now + 9) % 60, (now + 14) % 60})
    expr = ",".join(map(str, seconds)) + " * * * * *"
    series = client.schedule(topic, b"cron", cron=expr, tz="Europe/Paris", count=3)
    client.flush()
    with stack.reader(topic) as reader:
        reader.wait_for(lambda rs: len(occurrences(rs, series.id)) >= 3, FIRE_TIMEOUT)
        reader.poll(2.0)
        fires = occurrences(reader.records, series.id)
    assert [seq for seq, _, _ in fires] == [1, 2, 3]
    assert fires[0][1] == series.due
    for _, due, fired_at in fires:
        assert due % 60 in seconds, "on one of its seconds"
        assert 0 <= fired_at - due * 1000 < MAX_LATENESS_MS
    assert len({due // 60 * 60 + due % 60 for _, due, _ in fires}) == 3


def test_with_the_oscillators_stopped_skip_after_skips_and_the_default_fires_late(
    stack: Stack,
) -> None:
    topic = stack.callback_topic("skip-after-callbacks")
    oscillator = stack.oscillator()
    stack.worker()
    client = TimerClient(stack.settings)
    wait_until_firing(stack.settings, client, topic, probes=8, timeout=STARTUP_TIMEOUT)
    due = time.time() + 3
    strict = client.schedule(topic, b"strict", at=due, late="skip-after 5s")
    lenient = client.schedule(topic, b"lenient", at=due)
    client.flush()
    oscillator.stop()  # before the second they are due
    deliberate_fault_window(20.0)
    stack.oscillator("oscillator-2")
    with stack.reader(topic) as reader:
        reader.wait_for(lambda rs: bool(occurrences(rs, lenient.id)), FIRE_TIMEOUT)

        def skipped() -> list[FiredRecord]:
            return [
                r
                for r in fired_topic_records(stack)
                if r.event is FiredKind.SKIPPED and r.id == strict.id
            ]

        (report,) = wait_until(skipped, FIRE_TIMEOUT, "the skipped record of the strict timer")
        reader.poll(1.0)
        assert occurrences(reader.records, strict.id) == [], "a skipped timer is not delivered"
        ((_, _, fired_at),) = occurrences(reader.records, lenient.id)
    assert fired_at - lenient.due * 1000 > 5000, "the default timer fired, late"
    assert report.reason == "late" and report.due == strict.due
    assert report.at_ms is not None and report.at_ms - strict.due * 1000 > 5000


# -- daylight saving on moved clocks ---------------------------------------------------

PARIS = ZoneInfo("Europe/Paris")
#: How long before the change the moved clocks start: a worker joins and ticks in less,
#: with 22 s to spare (checked: measured 10 s, beside a nemesis run on 2 cores).
LEAD_SECONDS = 45


def next_transitions(zone: ZoneInfo, after: float) -> dict[str, int]:
    """The next spring-forward and fall-back instants of ``zone`` after ``after``."""
    found: dict[str, int] = {}
    day = datetime.fromtimestamp(after, timezone.utc)
    while len(found) < 2:
        nxt = day + timedelta(days=1)
        before, later = day.astimezone(zone).utcoffset(), nxt.astimezone(zone).utcoffset()
        if before != later and before is not None and later is not None:
            low, high = int(day.timestamp()), int(nxt.timestamp())
            while high - low > 1:
                mid = (low + high) // 2
                if datetime.fromtimestamp(mid, zone).utcoffset() == before:
                    low = mid
                else:
                    high = mid
            found.setdefault("spring" if later > before else "fall", high)
        day = nxt
    return found


def timer_status(port: int, timer_id: str) -> dict[str, Any]:
    status, doc = get_admitted(f"http://127.0.0.1:{port}/timers/{timer_id}", OPERATOR_TOKEN)
    assert status == 200, (status, doc)
    assert isinstance(doc, dict)
    return doc


@pytest.mark.parametrize("change", ["spring", "fall"])
def test_cron_series_cross_a_daylight_saving_change_on_moved_clocks(
    stack: Stack, change: str
) -> None:
    """Oscillator, worker and client run a minute or so before Paris's next change of
    that kind; a series every 10 s of Paris wall-clock time starts 20 s before it."""
    transition = next_transitions(PARIS, time.time())[change]
    offset = transition - LEAD_SECONDS - time.time()
    topic = stack.callback_topic("dst-callbacks")
    port = free_port()
    stack.oscillator(clock_offset=offset)
    stack.worker(clock_offset=offset, web_port=port)

    def moved_now() -> float:
        return time.time() + offset

    client = TimerClient(stack.settings, clock=moved_now)
    probe = client.schedule(topic, b"probe", at=moved_now())
    client.flush()
    with stack.reader(topic) as reader:
        reader.wait_for(lambda rs: bool(occurrences(rs, probe.id)), STARTUP_TIMEOUT)
    assert moved_now() < transition - 22, "the stack took too long to start: raise LEAD_SECONDS"
    ten = client.schedule(
        topic, b"ten", cron="*/10 * * * * *", tz="Europe/Paris", start=transition - 20, count=4
    )
    # 02:30:00 every day: skipped in spring, repeated in autumn
    half_past_two = client.schedule(topic, b"2:30", cron="0 30 2 * * *", tz="Europe/Paris")
    client.flush()
    assert ten.due == transition - 20
    if change == "spring":
        # 02:30 does not exist today: the first instant after the gap, 03:00:00 CEST
        assert half_past_two.due == transition
        with stack.reader(topic) as reader:
            reader.wait_for(
                lambda rs: (
                    len(occurrences(rs, ten.id)) >= 4 and bool(occurrences(rs, half_past_two.id))
                ),
                FIRE_TIMEOUT + LEAD_SECONDS,
            )
            reader.poll(1.0)
            fires = occurrences(reader.records, ten.id)
            fired_230 = occurrences(reader.records, half_past_two.id)
        # 01:59:40 and 01:59:50 CET, then 02:00:00-02:59:50 do not exist: 03:00:00 CEST
        assert [(seq, due) for seq, due, _ in fires] == [
            (1, transition - 20),
            (2, transition - 10),
            (3, transition),
            (4, transition + 10),
        ]
        assert [(seq, due) for seq, due, _ in fired_230] == [(1, transition)]
        status = timer_status(port, half_past_two.id)
        # tomorrow's 02:30 CEST: 23.5 hours after today's 03:00 CEST
        assert status["series"]["next_due"] == transition + 86400 - 1800
        fires += fired_230
    else:
        # 02:30 CEST (the first pass) is over by now, so not again at 02:30 CET: tomorrow
        tomorrow = datetime.fromtimestamp(transition, PARIS) + timedelta(days=1)
        expected = int(tomorrow.replace(hour=2, minute=30, second=0).timestamp())
        assert half_past_two.due == expected
        with stack.reader(topic) as reader:
            reader.wait_for(
                lambda rs: len(occurrences(rs, ten.id)) >= 2, FIRE_TIMEOUT + LEAD_SECONDS
            )
            # 02:00:00 and 02:00:10 CET (the change, and 10 s after) repeat times that
            # fired an hour ago: watch them pass
            wait_until(lambda: moved_now() > transition + 15, 60.0, "the change to pass")
            reader.poll(2.0)
            fires = occurrences(reader.records, ten.id)
        assert [(seq, due) for seq, due, _ in fires] == [(1, transition - 20), (2, transition - 10)]
        status = timer_status(port, ten.id)
        assert status["series"]["next_due"] == transition + 3600, "03:00:00 CET"
        assert (status["series"]["next_seq"], status["series"]["fired"]) == (3, 2)
        assert timer_status(port, half_past_two.id)["due"] == expected
    for seq, due, fired_at in fires:
        assert 0 <= fired_at - due * 1000 < MAX_LATENESS_MS, f"occurrence {seq}: {fired_at}"
