"""Timers fire end to end: real oscillator and worker processes on a real broker."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from app.dev.stack import wait_until_firing
from app.kafka.records import TopicReader
from kafka_timers_client import protowire
from kafka_timers_client.client import TimerClient
from kafka_timers_client.partitioner import partition_for
from tests.support.stack import Stack, fired_ids

#: Runs alone, in ``make test``'s serial part: it gates a past-due request's fire at 1 s after
#: its send, which another test's load beside it would move.
pytestmark = pytest.mark.serial

FIRE_TIMEOUT = 60.0
#: "At once" for a request whose second is past: the worker's request reader waits up to
#: librdkafka's fetch.wait.max.ms (500 ms) for it, then fires it in the same batch.
AT_ONCE_MS = 1000


def test_timers_fire_once_at_or_after_their_second(stack: Stack) -> None:
    topic = stack.callback_topic("e2e-callbacks")
    stack.oscillator()
    stack.worker()
    client = TimerClient(stack.settings)
    start = time.time()
    scheduled = {}
    for i in range(40):
        timer = client.schedule(
            topic,
            f"v{i}".encode(),
            f"k{i}",
            at=start + 2 + (i % 8) * 0.5 + 0.3,
            headers={"trace": f"t{i}"},
        )
        scheduled[timer.id] = timer
    client.flush()
    with stack.reader(topic) as reader:
        reader.wait_for(lambda rs: set(fired_ids(rs)) >= set(scheduled), FIRE_TIMEOUT)
        reader.poll(1.0)  # anything extra that was on its way: a duplicate would show here
        records = reader.records
    counts = Counter(fired_ids(records))
    assert counts == Counter(dict.fromkeys(scheduled, 1))
    for record in records:
        timer = scheduled[(record.header("timer-id") or b"").decode()]
        assert record.timestamp_ms >= timer.due * 1000, "fired before its second"
        assert record.header("timer-token") == timer.token.encode()
        assert record.header("timer-due") == str(timer.due).encode()
        assert int(record.header("timer-fired-at") or 0) >= timer.due * 1000
        i = int((record.key or b"k-1")[1:])
        assert record.value == f"v{i}".encode()
        assert record.header("trace") == f"t{i}".encode()
    with TopicReader(stack.settings, stack.settings.topics.fired) as audit:
        audit_records = [json.loads(r.value or b"{}") for r in audit.read_to_end()]
    assert Counter(a["id"] for a in audit_records if a["event"] == "fired") == counts
    assert all(a["fired_at_ms"] >= a["due"] * 1000 for a in audit_records)


def test_a_request_in_the_articles_exact_wire_format_fires(stack: Stack) -> None:
    topic = stack.callback_topic("article-callbacks")
    stack.oscillator()
    stack.worker()
    due = int(time.time()) + 2
    # Exactly what the article's producers send: Future{1,2,3}, key = expiry second.
    value = protowire.encode(
        protowire.Future(callback_topic=topic, callback_key="order-42", callback=b"\x08\x96\x01")
    )
    producer = stack.producer()
    producer.produce(stack.settings.topics.requests, value, str(due).encode())
    producer.flush(10)
    with stack.reader(topic) as reader:
        (record,) = reader.wait_for(lambda rs: len(rs) >= 1, FIRE_TIMEOUT)
    assert (record.key, record.value) == (b"order-42", b"\x08\x96\x01")
    assert record.timestamp_ms >= due * 1000


def test_a_request_for_a_past_second_fires_at_once(stack: Stack) -> None:
    """Not on the next tick, not after a catch-up: while the request is stored."""
    topic = stack.callback_topic("late-callbacks")
    stack.oscillator()
    stack.worker()
    client = TimerClient(stack.settings)
    # Measure from a worker that is up: every partition it serves has fired a probe.
    wait_until_firing(stack.settings, client, stack.callback_topic("late-probes"))
    sent_ms = int(time.time() * 1000)
    timer = client.schedule(topic, b"late", at=time.time() - 3600)
    client.flush()
    with stack.reader(topic) as reader:
        (record,) = reader.wait_for(lambda rs: fired_ids(rs) == [timer.id], FIRE_TIMEOUT)
    fired_at_ms = int(record.header("timer-fired-at") or 0)
    print(f"a request for a past second fired {fired_at_ms - sent_ms} ms after it was sent")
    assert record.header("timer-due") == str(timer.due).encode()
    assert 0 <= fired_at_ms - sent_ms <= AT_ONCE_MS, (
        f"fired {fired_at_ms - sent_ms} ms after the request was sent"
    )


def test_with_two_workers_every_partition_gets_its_ticks(stack: Stack) -> None:
    topic = stack.callback_topic("spread-callbacks")
    stack.oscillator()
    stack.worker("worker-a")
    stack.worker("worker-b")
    due = int(time.time()) + 3
    producer = stack.producer()
    partitions = range(stack.settings.partitions)
    # One timer owned by every partition (a timer lives where its id's murmur2 puts it).
    owned = {partition_for(f"id-{n}".encode(), len(partitions)): f"id-{n}" for n in range(200)}
    for p in partitions:
        value = protowire.encode(
            protowire.Future(callback_topic=topic, callback=b"x", id=owned[p], due=due)
        )
        producer.produce(stack.settings.topics.requests, value, owned[p].encode(), partition=p)
    producer.flush(10)
    with stack.reader(topic) as reader:
        reader.wait_for(lambda rs: len(set(fired_ids(rs))) == len(partitions), FIRE_TIMEOUT)
    with TopicReader(stack.settings, stack.settings.topics.fired) as audit:
        fired = [json.loads(r.value or b"{}") for r in audit.read_to_end()]
    assert sorted(f["partition"] for f in fired) == list(partitions)
    assert {f["worker"] for f in fired} == {"worker-a", "worker-b"}, "both workers serve partitions"
