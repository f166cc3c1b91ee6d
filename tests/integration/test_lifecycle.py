"""Cancel, reschedule and etf1-style input, with real processes on the broker."""

from __future__ import annotations

import json
import time

from app.kafka.records import TopicReader
from kafka_timers_client.client import TimerClient
from tests.support.stack import Stack, fired_ids

FIRE_TIMEOUT = 60.0


def audit_events(stack: Stack) -> list[dict[str, object]]:
    with TopicReader(stack.settings, stack.settings.topics.fired) as reader:
        return [json.loads(r.value or b"{}") for r in reader.read_to_end()]


def dlq_reasons(stack: Stack) -> list[str]:
    with TopicReader(stack.settings, stack.settings.topics.dlq) as reader:
        return [(r.header("dlq-reason") or b"").decode() for r in reader.read_to_end()]


def test_cancel_reschedule_and_wrong_token(stack: Stack) -> None:
    topic = stack.callback_topic("lifecycle-callbacks")
    stack.oscillator()
    stack.worker()
    client = TimerClient(stack.settings)
    soon = time.time() + 4
    cancelled = client.schedule(topic, b"cancelled", at=soon)
    wrong = client.schedule(topic, b"still fires", at=soon)
    moved = client.schedule(topic, b"old payload", at=soon, timer_id="moved")
    client.flush()
    client.cancel(cancelled.id, cancelled.token)
    client.cancel(wrong.id, "not-the-token")
    moved_again = client.schedule(
        topic, b"new payload", at=soon + 2, timer_id="moved", token=moved.token
    )
    # a cancel that arrives before its request still wins
    client.cancel("early-bird", "tok-early")
    client.flush()
    client.schedule(topic, b"never", at=soon, timer_id="early-bird", token="tok-early")
    marker = client.schedule(topic, b"marker", at=soon + 3)
    client.flush()
    with stack.reader(topic) as reader:
        reader.wait_for(lambda rs: marker.id in fired_ids(rs), FIRE_TIMEOUT)
        reader.poll(1.0)
        records = reader.records
    fired = fired_ids(records)
    assert cancelled.id not in fired
    assert "early-bird" not in fired
    assert fired.count(wrong.id) == 1
    assert fired.count("moved") == 1
    (moved_record,) = [r for r in records if r.header("timer-id") == b"moved"]
    assert moved_record.value == b"new payload"
    assert moved_record.header("timer-token") == moved_again.token.encode()
    assert moved_record.timestamp_ms >= moved_again.due * 1000
    outcomes = {(e["id"], e["outcome"]) for e in audit_events(stack) if e["event"] == "cancel"}
    assert (cancelled.id, "cancelled") in outcomes
    assert (wrong.id, "wrong_token") in outcomes
    assert ("early-bird", "cancelled_in_advance") in outcomes
    assert "wrong_token" in dlq_reasons(stack)


def test_cancel_after_fire_is_reported_as_a_no_op(stack: Stack) -> None:
    topic = stack.callback_topic("after-fire-callbacks")
    stack.oscillator()
    stack.worker()
    client = TimerClient(stack.settings)
    timer = client.schedule(topic, b"x", at=time.time())
    client.flush()
    with stack.reader(topic) as reader:
        reader.wait_for(lambda rs: fired_ids(rs) == [timer.id], FIRE_TIMEOUT)
    client.cancel(timer.id, timer.token)
    client.flush()
    with TopicReader(stack.settings, stack.settings.topics.fired) as audit:
        audit.wait_for(
            lambda rs: any(
                json.loads(r.value or b"{}").get("outcome") == "already_fired" for r in rs
            ),
            FIRE_TIMEOUT,
        )


def test_etf1_schedule_update_and_tombstone(stack: Stack) -> None:
    topic = stack.callback_topic("online-videos")
    stack.oscillator()
    stack.worker()
    producer = stack.producer()
    requests = stack.settings.topics.requests
    due = int(time.time()) + 4

    def schedule(key: bytes, value: bytes, epoch: int) -> None:
        headers = [
            ("scheduler-epoch", str(epoch).encode()),
            ("scheduler-target-topic", topic.encode()),
            ("scheduler-target-key", b"vid1"),
            ("customer-header", b"dummy"),
        ]
        producer.produce(requests, value, key, headers=headers)

    schedule(b"vid1-online", b"video 1 v1", due)
    schedule(b"vid1-online", b"video 1 v2", due + 1)  # a newer version replaces it
    schedule(b"vid2-online", b"video 2", due)
    producer.produce(requests, None, b"vid2-online")  # tombstone: cancelled
    schedule(b"vid3-online", b"video 3", due + 2)
    schedule(b"vid4-online", b"video 4", due)
    producer.produce(requests, None, b"vid4-online")  # tombstoned, then scheduled again:
    schedule(b"vid4-online", b"video 4 again", due + 3)  # a new version, it fires
    producer.flush(10)
    with stack.reader(topic) as reader:
        reader.wait_for(lambda rs: len(rs) >= 3, FIRE_TIMEOUT)
        reader.poll(1.0)
        records = reader.records
    by_value = {r.value: r for r in records}
    assert set(by_value) == {b"video 1 v2", b"video 3", b"video 4 again"}
    v1 = by_value[b"video 1 v2"]
    assert v1.key == b"vid1"
    assert v1.timestamp_ms >= (due + 1) * 1000
    assert v1.header("scheduler-key") == b"vid1-online"
    assert v1.header("scheduler-topic") == requests.encode()
    assert v1.header("scheduler-timestamp") is not None
    assert v1.header("customer-header") == b"dummy"
    assert v1.header("scheduler-epoch") is None, "scheduler-* request headers are not copied"
