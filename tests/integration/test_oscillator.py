"""The oscillator's choices, proven on the broker: every partition, every second, never early."""

from __future__ import annotations

import json
import time
from collections import defaultdict

from app.kafka.records import Record
from tests.support.stack import Stack


def seconds_by_partition(records: list[Record]) -> dict[int, list[int]]:
    by_partition: dict[int, list[int]] = defaultdict(list)
    for r in records:
        by_partition[r.partition].append(int(r.key or b"0"))
    return by_partition


def test_each_tick_reaches_every_partition_at_or_after_its_second(stack: Stack) -> None:
    stack.oscillator()
    with stack.reader(stack.settings.topics.ticks) as reader:
        reader.wait_for(lambda rs: len({int(r.key or b"0") for r in rs}) >= 4, 30)
        records = list(reader.records)
    by_partition = seconds_by_partition(records)
    full_seconds = sorted({int(r.key or b"0") for r in records})[:-1]  # the newest may be in flight
    for p in range(stack.settings.partitions):
        assert set(full_seconds) <= set(by_partition[p]), f"partition {p} missed a tick"
    for r in records:
        sent_ms = json.loads(r.value or b"{}")["sent_ms"]
        assert sent_ms >= int(r.key or b"0") * 1000, "tick sent before its second began"
        assert r.timestamp_ms >= int(r.key or b"0") * 1000


def test_killing_one_of_two_oscillators_loses_no_tick(stack: Stack) -> None:
    stack.oscillator("osc-a")
    doomed = stack.oscillator("osc-b")
    with stack.reader(stack.settings.topics.ticks) as reader:
        reader.wait_for(
            lambda rs: (
                {json.loads(r.value or b"{}")["oscillator"] for r in rs} == {"osc-a", "osc-b"}
            ),
            30,
        )
        doomed.kill()
        killed_at = int(time.time())
        reader.wait_for(lambda rs: max(int(r.key or b"0") for r in rs) >= killed_at + 4, 30)
        records = list(reader.records)
    by_partition = seconds_by_partition(records)
    first = min(int(r.key or b"0") for r in records) + 1
    for p in range(stack.settings.partitions):
        seen = set(by_partition[p])
        expected = set(range(first, killed_at + 4))
        assert expected <= seen, f"partition {p} lost ticks {sorted(expected - seen)}"


def test_two_oscillators_fire_nothing_twice(stack: Stack) -> None:
    from kafka_timers_client.client import TimerClient
    from tests.support.stack import fired_ids

    topic = stack.callback_topic("redundant-callbacks")
    stack.oscillator("osc-a")
    stack.oscillator("osc-b")
    stack.worker()
    client = TimerClient(stack.settings)
    ids = {client.schedule(topic, b"x", at=time.time() + 2 + i % 4).id for i in range(30)}
    client.flush()
    with stack.reader(topic) as reader:
        reader.wait_for(lambda rs: set(fired_ids(rs)) >= ids, 60)
        reader.poll(1.5)  # a second tick of the same second arrives within a second, if at all
        assert sorted(fired_ids(reader.records)) == sorted(ids)
