"""Bad input never stops the worker: junk goes to the DLQ with a reason, the rest fires."""

from __future__ import annotations

import json
import random
import time

from app.core.policy import RequestPolicy
from app.core.raw_record import RawRecord
from app.core.request_format import parse_request
from app.core.timer import Timer
from app.kafka.records import TopicReader
from kafka_timers_client import protowire
from kafka_timers_client.errors import RejectedRequest
from tests.support.stack import Stack, fired_ids


def garbled(rng: random.Random, valid: bytes) -> bytes:
    kind = rng.randrange(6)
    if kind == 0:
        return rng.randbytes(rng.randrange(1, 64))
    if kind == 1:
        return valid[: rng.randrange(1, max(2, len(valid) - 1))]  # truncated protobuf
    if kind == 2:
        return b"{" + rng.randbytes(rng.randrange(0, 30))  # broken JSON
    if kind == 3:
        return json.dumps({"topic": rng.choice(["", "bad topic", 7]), "at": 1}).encode()
    if kind == 4:
        flipped = bytearray(valid)
        flipped[rng.randrange(len(flipped))] ^= 0xFF
        return bytes(flipped)
    return json.dumps({"topic": "fuzz-callbacks", "at": "not a time"}).encode()


def is_rejected(policy: RequestPolicy, topic: str, key: bytes, value: bytes) -> bool:
    """What the worker will do with this record, by the worker's own rules."""
    try:
        request = parse_request(RawRecord(topic, 0, 0, int(time.time() * 1000), key, value))
        if isinstance(request, Timer):
            policy.check(request, time.time())
    except RejectedRequest:
        return True
    return False


def test_fuzzed_requests_are_dead_lettered_and_valid_ones_fire(stack: Stack) -> None:
    topic = stack.callback_topic("fuzz-callbacks")
    stack.oscillator()
    stack.worker()
    rng = random.Random(20261123)
    producer = stack.producer()
    requests = stack.settings.topics.requests
    due = int(time.time()) + 5
    valid_ids: set[str] = set()
    expected_dead: set[bytes] = set()
    policy = stack.settings.request_policy()
    for i in range(3000):
        timer_id = f"ok-{i}"
        valid = protowire.encode(
            protowire.Future(callback_topic=topic, callback=b"v", id=timer_id, due=due + i % 3)
        )
        if i % 3 == 0:
            producer.produce(requests, valid, timer_id.encode())
            valid_ids.add(timer_id)
        else:
            junk, key = garbled(rng, valid), f"junk-{i}".encode()
            producer.produce(requests, junk, key)
            if is_rejected(policy, requests, key, junk):
                expected_dead.add(key)
        producer.poll(0)
    producer.flush(30)
    with stack.reader(topic) as reader:
        reader.wait_for(lambda rs: set(fired_ids(rs)) >= valid_ids, 90)
    with TopicReader(stack.settings, stack.settings.topics.dlq) as dlq:
        dead = dlq.read_to_end()
    # A garbled record may still be a well-formed timer (a flipped byte in the payload or
    # the due second) or cancel; every record the worker's own parser and policy reject
    # must be in the DLQ, each with a reason, and nothing else (but refused cancels).
    dead_keys = {r.key for r in dead if r.header("dlq-reason") != b"wrong_token"}
    assert len(expected_dead) > 1500
    assert dead_keys == expected_dead
    assert all(r.header("dlq-reason") for r in dead)
    assert all(r.header("dlq-source-offset") is not None for r in dead)
    assert stack.services[1].alive, "the worker kept running"


def test_requests_aimed_at_internal_topics_are_refused(stack: Stack) -> None:
    settings = stack.settings
    allowed = stack.callback_topic("allowed-callbacks")
    stack.oscillator()
    stack.worker()
    forbidden = [
        "__consumer_offsets",
        settings.topics.requests,
        settings.topics.ticks,
        settings.topics.fired,
        settings.topics.dlq,
        settings.changelog_topic,
        # Refused by construction: another deployment's table, any app's repartition
        # topic, Schema Registry's (issue 22).
        "other-deployment-timers-changelog",
        "wordcount-KSTREAM-AGGREGATE-0000000003-repartition",
        "_schemas",
    ]
    producer = stack.producer()
    now = int(time.time())
    for n, name in enumerate([*forbidden, allowed]):
        value = protowire.encode(
            protowire.Future(callback_topic=name, callback=b"attack", id=f"a{n}", due=now)
        )
        producer.produce(settings.topics.requests, value, f"a{n}".encode())
    producer.flush(10)
    with stack.reader(allowed) as reader:
        reader.wait_for(lambda rs: len(rs) == 1, 60)
    with TopicReader(settings, settings.topics.dlq) as dlq:
        dead = dlq.wait_for(lambda rs: len(rs) >= len(forbidden), 30)
    assert {(r.header("dlq-reason") or b"").decode() for r in dead} == {"topic_not_allowed"}
    assert len(dead) == len(forbidden)
    for name in (settings.topics.ticks, settings.topics.fired, settings.changelog_topic):
        with TopicReader(settings, name) as reader:
            assert not any(r.value == b"attack" for r in reader.read_to_end()), name


def test_narrowing_the_allow_list_stops_stored_timers_and_series(stack: Stack) -> None:
    """Issue 22: the rules are checked again when a timer comes due. Timers stored while
    a topic was allowed, a one-shot and a series, are dead-lettered once the workers run
    with an allow-list that leaves the topic out, and the series ends."""
    settings = stack.settings
    banned = stack.callback_topic(f"abused-{settings.app_id}")
    kept = stack.callback_topic(f"kept-{settings.app_id}")
    data_dir = stack.base_dir / "w"
    stack.oscillator()
    first = stack.worker("w-wide", data_dir=data_dir)
    producer = stack.producer()
    due = int(time.time()) + 25  # after the restart below

    def request(timer_id: str, topic: str, **fields: object) -> None:
        body = {"id": timer_id, "topic": topic, "value": timer_id, "token": "t", **fields}
        producer.produce(settings.topics.requests, json.dumps(body).encode(), timer_id.encode())

    request("one-shot", banned, at=due)
    request("kept", kept, at=due)
    request("series", banned, every="1s")
    producer.flush(10)
    with stack.reader(banned) as reader:
        reader.wait_for(lambda rs: any(r.header("timer-id") == b"series" for r in rs), 60)
    assert first.stop() == 0
    stack.worker("w-narrow", data_dir=data_dir, callback_allow=(f"kept-{settings.app_id}",))
    with stack.reader(kept) as reader:
        reader.wait_for(lambda rs: len(rs) == 1, 90)  # past the one-shot's second
    with TopicReader(settings, settings.topics.dlq) as dlq:
        dead = dlq.wait_for(
            lambda rs: {r.header("timer-id") for r in rs} >= {b"one-shot", b"series"}, 30
        )
    assert {r.header("dlq-reason") for r in dead} == {b"topic_not_allowed"}
    with stack.reader(banned) as reader:
        before = len(reader.read_to_end())
    # A marker due three seconds on: once it has fired, the ticks in which the series
    # would have fired three more times have been handled.
    request("marker", kept, at=int(time.time()) + 3)
    producer.flush(10)
    with stack.reader(kept) as marks:
        marks.wait_for(lambda rs: any(r.header("timer-id") == b"marker" for r in rs), 60)
    with stack.reader(banned) as reader:  # a fresh reader: to the end as it is now
        after = reader.read_to_end()
    assert len(after) == before, "the series went on after the allow-list left its topic out"
    assert not any(r.header("timer-id") == b"one-shot" for r in after)


def test_requests_to_topics_that_do_not_exist_create_none(stack: Stack) -> None:
    """Issue 22: 200 requests naming 200 new topics create no topic and at most N
    ``callback_topic`` label values; they are dead-lettered ``unknown_topic`` when due, and
    a timer due in the same second to a topic that exists is not held up by them."""
    from confluent_kafka.admin import AdminClient

    from app.kafka.config import confluent_common
    from tests.support.probes import get_json, start_probed
    from tests.support.waiting import wait_until

    settings = stack.settings
    kept = stack.callback_topic(f"kept-{settings.app_id}")
    stack.oscillator()
    worker = start_probed(stack, "worker", "w-topics", max_topic_labels=5)
    # Ready first: the bound below is for the missing topics, not for a worker's start
    # (on a loaded machine a start alone can pass the 4 s to the due second).
    wait_until(lambda: get_json(f"{worker.web}/readyz")[0] == 200, 60, "the worker ready")
    names = [f"nowhere-{settings.app_id}-{i}" for i in range(200)]
    producer = stack.producer()
    due = int(time.time()) + 4

    def request(timer_id: str, topic: str) -> None:
        body = {"id": timer_id, "topic": topic, "value": timer_id, "token": "t", "at": due}
        producer.produce(settings.topics.requests, json.dumps(body).encode(), timer_id.encode())

    for i, name in enumerate(names):
        request(f"lost-{i}", name)
    request("kept", kept)
    producer.flush(10)
    with stack.reader(kept) as reader:
        got = reader.wait_for(lambda rs: len(rs) == 1, 60)
    late = time.time() - due
    with TopicReader(settings, settings.topics.dlq) as dlq:
        dead = dlq.wait_for(lambda rs: len(rs) >= len(names), 30)
    assert {r.header("dlq-reason") for r in dead} == {b"unknown_topic"}
    assert {(r.header("timer-id") or b"").decode() for r in dead} == {
        f"lost-{i}" for i in range(200)
    }
    assert got[0].header("timer-id") == b"kept"
    assert late < 5, f"the timer to an existing topic waited {late:.1f} s for missing ones"
    listed = AdminClient(confluent_common(settings)).list_topics(timeout=10).topics
    assert not [name for name in names if name in listed], "a request created a topic"

    def label_values() -> set[str]:
        import urllib.request

        with urllib.request.urlopen(f"{worker.metrics}/metrics", timeout=5) as response:
            text = response.read().decode()
        return {
            line.split('callback_topic="')[1].split('"')[0]
            for line in text.splitlines()
            if line.startswith("kafka_timers_fired_total{")
        }

    wait_until(lambda: kept in label_values(), 30, "the kept topic's fired_total label")
    assert len(label_values()) <= 5
