"""A cancel that answers (``cancel --wait``, ``TimerClient.cancel(wait=)``) and
``kafka-timers get``, against real processes on the broker."""

from __future__ import annotations

import json
import statistics
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, Producer

from app.core.fired import FiredRecord
from app.dev.broker import free_port
from app.dev.stack import wait_until_firing
from app.kafka.config import confluent_producer
from app.kafka.records import TopicReader
from app.settings import Settings
from kafka_timers_client import protowire
from kafka_timers_client.client import ScheduledTimer, TimerClient
from kafka_timers_client.errors import CancelNotAnswered
from kafka_timers_client.outcome import CancelOutcome
from kafka_timers_client.partitioner import partition_for
from tests.support.cli import run_cli
from tests.support.probes import Probed, start_probed
from tests.support.stack import Stack, fired_ids
from tests.support.waiting import wait_until

#: Generous: 2 shared cores; a cancel is answered in ~50 ms here when the machine is idle.
ANSWER_WAIT = "30"
FIRE_TIMEOUT = 60.0


def firing_client(stack: Stack, topic: str) -> TimerClient:
    """A client, once the stack's worker has joined and fires on every partition."""
    client = TimerClient(stack.settings)
    wait_until_firing(stack.settings, client, topic)
    return client


def probed_and_firing(stack: Stack, name: str, worker: str) -> tuple[str, Probed, TimerClient]:
    """An oscillator and the probed worker ``worker`` firing on the callback topic
    ``name`` (the test's own), and a client."""
    topic = stack.callback_topic(name)
    stack.oscillator()
    probed = start_probed(stack, "worker", worker)
    return topic, probed, firing_client(stack, topic)


def fire_now(stack: Stack, client: TimerClient, topic: str) -> tuple[str, str]:
    """A timer due now, returned once its callback has been delivered."""
    timer = client.schedule(topic, b"fires", at=time.time())
    client.flush()
    with stack.reader(topic) as reader:
        reader.wait_for(lambda rs: timer.id in fired_ids(rs), FIRE_TIMEOUT)
    return timer.id, timer.token


def to_be_answered(
    stack: Stack, name: str
) -> tuple[str, TimerClient, ScheduledTimer, ScheduledTimer]:
    """An oscillator and a worker firing on the callback topic ``name``, a client, and two
    timers due in 10 minutes (not flushed yet): one to cancel, one to cancel with
    another token."""
    topic = stack.callback_topic(name)
    stack.oscillator()
    stack.worker()
    client = firing_client(stack, topic)
    pending = client.schedule(topic, b"pending", delay=600)
    refused = client.schedule(topic, b"refused", delay=600)
    return topic, client, pending, refused


def test_librdkafka_puts_each_key_where_the_pure_partitioner_says(settings: Settings) -> None:
    # The client computes a timer's partition instead of asking: it must agree with the
    # murmur2_random partitioner every producer of the request topic uses.
    producer = Producer(confluent_producer(settings))
    placed: dict[bytes, int] = {}

    def delivered(err: KafkaError | None, msg: Message) -> None:
        assert err is None, err
        placed[msg.key() or b""] = msg.partition() or 0

    keys = [uuid.uuid4().hex.encode() for _ in range(300)] + [b"order-7", b"remind-42"]
    for key in keys:
        producer.produce(settings.topics.dlq, b"", key, on_delivery=delivered)
    assert producer.flush(15) == 0
    assert placed == {key: partition_for(key, settings.partitions) for key in keys}


def test_cancel_wait_prints_each_of_the_five_answers(stack: Stack) -> None:
    topic, client, pending, refused = to_be_answered(stack, "answers-cli")
    client.flush()
    fired_id, fired_token = fire_now(stack, client, topic)
    client.close()
    tag = uuid.uuid4().hex[:8]
    cases = [
        (["--id", pending.id, "--token", pending.token], "cancelled"),
        (["--id", refused.id, "--token", "not-the-token"], "wrong_token"),
        (["--id", fired_id, "--token", fired_token], "already_fired"),
        (["--id", f"later-{tag}", "--token", "tok"], "cancelled_in_advance"),
        (["--id", f"nobody-{tag}", "--tombstone"], "not_found"),
    ]
    for args, expected in cases:
        result = run_cli(stack.settings, "cancel", *args, "--wait", ANSWER_WAIT)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == {"id": args[1], "outcome": expected}, result.stdout
    # without a number, --wait waits its default and answers the same way
    again = run_cli(
        stack.settings, "cancel", "--id", pending.id, "--token", pending.token, "--wait"
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["outcome"] == "cancelled"


def test_the_client_returns_the_same_answers(stack: Stack) -> None:
    topic, client, pending, refused = to_be_answered(stack, "answers-api")
    by_key = client.schedule(topic, b"by key", delay=600)
    client.flush()
    fired_id, fired_token = fire_now(stack, client, topic)
    tag = uuid.uuid4().hex[:8]
    assert client.cancel(pending.id, pending.token, wait=30) is CancelOutcome.CANCELLED
    # a client that got no answer in time and retries gets the same answer
    assert client.cancel(pending.id, pending.token, wait=30) is CancelOutcome.CANCELLED
    assert client.cancel(refused.id, "not-the-token", wait=30) is CancelOutcome.WRONG_TOKEN
    assert client.cancel(fired_id, fired_token, wait=30) is CancelOutcome.ALREADY_FIRED
    assert client.cancel(f"later-{tag}", "tok", wait=30) is CancelOutcome.CANCELLED_IN_ADVANCE
    assert client.tombstone(f"nobody-{tag}", wait=30) is CancelOutcome.NOT_FOUND
    # a tombstone carries no token: it cannot cancel a timer its producer protected
    assert client.tombstone(by_key.id, wait=30) is CancelOutcome.WRONG_TOKEN
    assert client.cancel("no-wait", "tok") is None  # without wait: sent, no answer read

    # How long an answer takes: send, the worker applies it, the client reads it back.
    took = []
    for _ in range(20):
        timer = client.schedule(topic, b"x", delay=600)
        client.flush()
        started = time.perf_counter()
        assert client.cancel(timer.id, timer.token, wait=30) is CancelOutcome.CANCELLED
        took.append((time.perf_counter() - started) * 1000)
    took.sort()
    print(
        f"\ncancel answered in p50 {statistics.median(took):.0f} ms, "
        f"max {took[-1]:.0f} ms (20 cancels, 1 worker, dev broker)"
    )
    client.close()


def sleep_until(moment: float) -> None:
    """Pace the race: send each cancel at its planned instant (not a wait for a result)."""
    time.sleep(max(0.0, moment - time.time()))


def test_a_cancel_racing_its_fire_says_who_won(stack: Stack) -> None:
    topic = stack.callback_topic("answers-race")
    stack.oscillator()
    stack.worker()
    client = firing_client(stack, topic)
    due = int(time.time()) + 4
    # Cancels sent from a second before the timers' second to 3 s after it: the first
    # ones win, the last ones lose (3 s: a tick late by seconds on a loaded machine
    # still fires first), the ones in between race the tick.
    offsets = [-1.0, -0.3, -0.1, -0.03, 0.0, 0.03, 0.06, 0.1, 0.2, 0.4, 3.0]
    timers = [client.schedule(topic, b"race", at=due) for _ in offsets]
    marker = client.schedule(topic, b"marker", at=due + 4)
    client.flush()
    answers: dict[str, CancelOutcome] = {}
    for timer, offset in zip(timers, offsets, strict=True):
        sleep_until(due + offset)
        answers[timer.id] = client.cancel(timer.id, timer.token, wait=30)
    with stack.reader(topic) as reader:
        # Every tick up to the marker's second has been handled once the marker fired.
        reader.wait_for(lambda rs: marker.id in fired_ids(rs), FIRE_TIMEOUT)
        delivered = set(fired_ids(reader.records))
    client.close()
    lost = {i for i, outcome in answers.items() if outcome is CancelOutcome.ALREADY_FIRED}
    won = {i for i, outcome in answers.items() if outcome is CancelOutcome.CANCELLED}
    assert won | lost == set(answers), answers
    assert lost == delivered & set(answers), "'already fired' exactly when it was delivered"
    assert not won & delivered, "a cancel that won never fires"
    assert timers[0].id in won and timers[-1].id in lost
    print(f"\nrace: {len(won)} cancels won, {len(lost)} lost, by offset {offsets}")


def test_a_cancel_nobody_answers_fails_with_one_line(settings: Settings) -> None:
    # A broker and topics, no worker: the cancel is sent, nobody answers it.
    started = time.monotonic()
    result = run_cli(settings, "cancel", "--id", "lonely", "--token", "tok", "--wait", "2")
    assert result.returncode == 3, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "no answer to the cancel of timer 'lonely' within 2s" in lines[0]
    assert result.stdout == ""
    assert time.monotonic() - started < 30
    with TimerClient(settings) as client, pytest.raises(CancelNotAnswered, match="is one running"):
        client.cancel("lonely", "tok", wait=1)


def get(settings: Settings, timer_id: str, *urls: str) -> tuple[int, dict[str, Any], str]:
    args = ["get", "--id", timer_id]
    for url in urls:
        args += ["--url", url]
    result = run_cli(settings, *args)
    assert result.stdout, result.stderr
    return result.returncode, json.loads(result.stdout), result.stderr


def test_get_shows_pending_fired_and_cancelled(stack: Stack) -> None:
    topic, worker, client = probed_and_firing(stack, "get-callbacks", "get-worker")
    settings = stack.settings
    pending = client.schedule(topic, b"secret payload", key="k", delay=600, token="secret-tok")
    cancelled = client.schedule(topic, b"x", delay=600)
    client.flush()
    assert client.cancel(cancelled.id, cancelled.token, wait=30) is CancelOutcome.CANCELLED
    fired_id, _ = fire_now(stack, client, topic)
    # A request produced straight to a partition murmur2 would not choose: the worker
    # that reads it forwards it to its id's owner (issue 28), where the timer lives and
    # where get looks.
    elsewhere = f"elsewhere-{uuid.uuid4().hex[:6]}"
    odd_partition = (
        partition_for(elsewhere.encode(), settings.partitions) + 1
    ) % settings.partitions
    producer = Producer(confluent_producer(settings))
    request = protowire.Future(
        callback_topic=topic, callback=b"x", id=elsewhere, token="t", due=int(time.time())
    )
    producer.produce(
        settings.topics.requests,
        protowire.encode(request),
        elsewhere.encode(),
        partition=odd_partition,
    )
    assert producer.flush(10) == 0
    client.close()

    code, shown, _ = get(settings, pending.id, worker.web)
    assert code == 0
    assert shown["state"] == "pending" and shown["due"] == pending.due
    assert shown["partition"] == partition_for(pending.id.encode(), 8)
    assert "secret" not in json.dumps(shown), "never a token or a payload"

    def fired_state(timer_id: str) -> dict[str, Any] | None:
        _, shown, _ = get(settings, timer_id, worker.web)
        return shown if shown["state"] == "fired" and "fired_at_ms" in shown else None

    fired = wait_until(lambda: fired_state(fired_id), FIRE_TIMEOUT, "get shows the fire")
    assert fired["fired_at_ms"] >= fired["due"] * 1000
    assert fired["sources"] == ["worker", "fired-topic"]
    odd = wait_until(lambda: fired_state(elsewhere), FIRE_TIMEOUT, "get shows that fire")
    assert odd["partition"] == partition_for(elsewhere.encode(), settings.partitions)

    code, shown, _ = get(settings, cancelled.id, worker.web)
    assert code == 0
    assert shown["state"] == "cancelled" and shown["due"] == cancelled.due
    assert shown["cancelled_at_ms"] > 0

    code, shown, _ = get(settings, "never-scheduled", worker.web)
    assert code == 1 and shown["state"] == "unknown"

    # Every fired-topic record sits on the partition it names.
    with TopicReader(settings, settings.topics.fired) as reader:
        records = reader.read_to_end()
    assert records
    assert all(r.partition == FiredRecord.from_json(r.value or b"").partition for r in records)

    # With no worker answering, the fired topic alone still tells fires and cancels.
    worker.process.stop()
    dead = f"http://127.0.0.1:{free_port()}"
    code, shown, warning = get(settings, fired_id, dead)
    assert code == 0 and shown["state"] == "fired"
    assert shown["fired_at_ms"] == fired["fired_at_ms"]
    assert shown["sources"] == ["fired-topic"]
    assert "no worker answered" in warning
    code, shown, _ = get(settings, cancelled.id, dead)
    assert code == 0 and shown["state"] == "cancelled"
    code, shown, _ = get(settings, pending.id, dead)
    assert code == 1 and shown["state"] == "unknown"


def test_a_request_dropped_after_its_cancel_is_answered_on_the_fired_topic(stack: Stack) -> None:
    """Issue 22: nothing is dropped without a word. The same version sent again after
    its cancel is not stored; the worker counts it and answers it like a cancel."""
    settings = stack.settings
    topic = stack.callback_topic(f"dropped-{settings.app_id}")
    stack.oscillator()
    stack.worker("dropped-worker")
    client = firing_client(stack, topic)
    timer = client.schedule(topic, b"x", delay=600, token="tok-dropped")
    client.flush()
    assert client.cancel(timer.id, "tok-dropped", wait=30) is CancelOutcome.CANCELLED
    again = client.schedule(topic, b"x", at=timer.due, timer_id=timer.id, token="tok-dropped")
    client.flush()
    client.close()
    assert again.id == timer.id
    with TopicReader(settings, settings.topics.fired) as reader:
        records = reader.wait_for(
            lambda rs: any(
                FiredRecord.from_json(r.value or b"").event.value == "dropped" for r in rs
            ),
            30,
        )
    (answer,) = [
        f
        for f in (FiredRecord.from_json(r.value or b"") for r in records)
        if f.event.value == "dropped"
    ]
    assert answer.id == timer.id and answer.outcome == "cancelled_earlier"
    assert answer.partition == partition_for(timer.id.encode(), settings.partitions)
    assert answer.request_offset is not None and answer.token != "tok-dropped"
