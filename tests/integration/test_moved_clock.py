"""Timers fire at their second when the processes' clocks are days and years ahead.

A timer service must work the same next year and in nine years: no epoch arithmetic that
overflows, no key layout that stops sorting, no horizon measured from the wrong clock.
The oscillator and the worker run as real, separately started processes whose wall
clocks are moved forward (``tests/support/clock.py``: time-machine from a
``sitecustomize``); the test itself stays on real time and reads the moved clock as
``time.time() + offset``.

What a moved clock does not move: record timestamps librdkafka sets itself. So "when
did it fire" is read from the worker: the ``fired_at_ms`` of its audit record and the
``timer-fired-at`` header of the callback, which the callback's record timestamp must
now equal (the worker sets it, see ``OutputProducer.callback``); likewise each tick's
record timestamp is the oscillator's send time, so the worker sees no clock skew.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from app.core.fired import FiredKind, FiredRecord
from app.kafka.records import TopicReader
from kafka_timers_client.client import TimerClient
from tests.support.stack import Stack, fired_ids

DAY = 86_400
#: Generous: a worker joins, recovers and ticks within this on a shared 2-core machine.
STARTUP_TIMEOUT = 90.0
FIRE_TIMEOUT = 60.0
#: How late "at its second" may be: one tick's trip through the broker and Faust's fetch
#: wait (up to 1.5 s), with room for a busy machine. Early is never allowed.
MAX_LATENESS_MS = 5000


@pytest.mark.parametrize(
    "offset", [400 * DAY, 9 * 365 * DAY + 2 * DAY], ids=["plus-400-days", "plus-9-years"]
)
def test_timers_fire_at_their_second_on_moved_clocks(stack: Stack, offset: int) -> None:
    topic = stack.callback_topic("moved-clock-callbacks")
    stack.oscillator(clock_offset=offset)
    stack.worker(clock_offset=offset)

    def moved_now() -> float:
        return time.time() + offset

    client = TimerClient(stack.settings, clock=moved_now)
    probe = client.schedule(topic, b"probe", at=moved_now())
    client.flush()
    with stack.reader(topic) as reader:  # the worker is up and firing on the moved clock
        reader.wait_for(lambda rs: probe.id in fired_ids(rs), STARTUP_TIMEOUT)

    sent_real_ms = int(time.time() * 1000)
    start = moved_now()
    timers = {
        t.id: t
        for t in (
            client.schedule(topic, b"v%d" % i, f"k{i}", at=start + 3 + i * 0.5) for i in range(8)
        )
    }
    client.flush()
    with stack.reader(topic) as reader:
        reader.wait_for(lambda rs: set(fired_ids(rs)) >= timers.keys(), FIRE_TIMEOUT)
        reader.poll(1.0)  # a duplicate on its way would arrive in this time
        callbacks = [r for r in reader.records if (r.header("timer-id") or b"").decode() in timers]
    done_real_ms = int(time.time() * 1000)
    with TopicReader(stack.settings, stack.settings.topics.fired) as audit:
        fires = [
            fired
            for r in audit.read_to_end()
            if (fired := FiredRecord.from_json(r.value or b"{}")).event is FiredKind.FIRED
            and fired.id in timers
        ]

    once = Counter(dict.fromkeys(timers, 1))
    assert Counter(fired_ids(callbacks)) == once, "every timer fired exactly once"
    assert Counter(f.id for f in fires) == once, "one audit record per timer"
    for fire in fires:
        assert fire.fired_at_ms is not None
        due_ms = timers[fire.id].due * 1000
        # The worker's clock is the moved one: its fire times are offset from real time.
        assert sent_real_ms <= fire.fired_at_ms - offset * 1000 <= done_real_ms, fire
        assert due_ms <= fire.fired_at_ms, f"fired before its second: {fire}"
        assert fire.fired_at_ms - due_ms < MAX_LATENESS_MS, f"not at its second: {fire}"
    with TopicReader(stack.settings, stack.settings.topics.ticks) as tick_reader:
        ticks = tick_reader.read_to_end()
    read_real_ms = int(time.time() * 1000)
    assert ticks, "the oscillator ticked"
    for tick in ticks:  # sent on the moved clock, which the value says
        sent_ms = json.loads(tick.value or b"{}")["sent_ms"]
        assert int(tick.key or b"0") * 1000 <= sent_ms
        assert sent_real_ms - 120_000 <= sent_ms - offset * 1000 <= read_real_ms
    for record in callbacks:
        timer = timers[(record.header("timer-id") or b"").decode()]
        fired_at = int(record.header("timer-fired-at") or 0)
        assert record.header("timer-due") == str(timer.due).encode()
        assert fired_at >= timer.due * 1000, "callback stamped before its second"
        # The record timestamp is librdkafka's, on real time: a broker may refuse one
        # set from a moved clock (Kafka 4 bounds future timestamps to an hour).
        assert sent_real_ms <= record.timestamp_ms <= read_real_ms
