"""Requests meet by id whatever partition they land on (issue 28), on real processes.

Timers are scheduled by confluent-kafka's default producer (librdkafka's
``consistent_random``: CRC32 of the key), keyed by the id or by a business key, by a
producer naming a partition the id's murmur2 would not choose, and by ``TimerClient``,
mixed. Every cancel with the right token sent by ``TimerClient`` is answered
``cancelled`` and its callback never comes; every reschedule replaces (one callback, the
new version); ``kafka-timers get`` tells the truth afterwards.
"""

from __future__ import annotations

import json
import time
import urllib.request
import zlib
from typing import Any

from confluent_kafka import Producer

from app.core.routing import owner_of
from app.kafka.config import confluent_common
from kafka_timers_client.outcome import CancelOutcome
from tests.integration.test_cancel_answers import get, probed_and_firing
from tests.support.probes import Probed, get_admitted
from tests.support.stack import Stack, fired_ids
from tests.support.waiting import wait_until


def librdkafka_default_partition(key: bytes, partitions: int) -> int:
    """Where librdkafka's default partitioner puts a keyed record (CRC32 of the key)."""
    return zlib.crc32(key) % partitions


def pending(worker: Probed) -> float:
    """The timers ``worker`` has pending, as its metrics port says."""
    with urllib.request.urlopen(f"{worker.metrics}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("kafka_timers_pending ")
    )


def test_requests_from_any_producer_meet_by_id(stack: Stack) -> None:
    settings = stack.settings
    topic, worker, client = probed_and_firing(stack, f"routed-{settings.app_id}", "routing-worker")
    # The default confluent-kafka producer: no partitioner set, so librdkafka's own.
    plain = Producer(confluent_common(settings))
    n = settings.partitions

    def json_request(timer_id: str, due: int, **fields: Any) -> bytes:
        body = {"id": timer_id, "topic": topic, "value": f"{timer_id}@{due}", "token": "tok"}
        return json.dumps({**body, "at": due, **fields}).encode()

    # Ids whose CRC32 placement differs from their owner: these requests land elsewhere.
    ids = [f"order-{i}" for i in range(400)]
    astray = [i for i in ids if librdkafka_default_partition(i.encode(), n) != owner_of(i, n)]
    assert len(astray) > 40
    due_far = int(time.time()) + 600
    cancelled: list[str] = []
    for timer_id in astray[:10]:  # keyed by id, librdkafka's placement
        plain.produce(settings.topics.requests, json_request(timer_id, due_far), timer_id.encode())
        cancelled.append(timer_id)
    for k, timer_id in enumerate(astray[10:20]):  # keyed by a business key
        plain.produce(settings.topics.requests, json_request(timer_id, due_far), b"customer-%d" % k)
        cancelled.append(timer_id)
    for timer_id in astray[20:30]:  # produced to a partition murmur2 would not choose
        wrong = (owner_of(timer_id, n) + 1) % n
        plain.produce(settings.topics.requests, json_request(timer_id, due_far), partition=wrong)
        cancelled.append(timer_id)
    for timer_id in ids[-10:]:  # and the project's own client
        client.schedule(topic, b"x", at=due_far, timer_id=timer_id, token="tok")
        cancelled.append(timer_id)
    assert plain.flush(10) == 0
    client.flush()

    # Each cancel, sent by TimerClient to the owner, meets its timer once the timer is
    # stored there (a cancel that reaches the owner before a forwarded schedule is
    # answered cancelled_in_advance, and that timer never fires either).
    # 120 s: once, on a loaded CI machine, 60 s were not enough (the whole test takes
    # about 40 s here).
    # The message says how many were stored by then, so a timeout tells load from loss.
    seen: list[float] = [0.0]

    def all_stored() -> bool:
        seen[0] = pending(worker)
        return seen[0] >= len(cancelled)

    wait_until(
        all_stored,
        120,
        lambda: f"every timer stored at its owner: {seen[0]:.0f} of {len(cancelled)} pending",
    )
    outcomes = {timer_id: client.cancel(timer_id, "tok", wait=30) for timer_id in cancelled}
    assert set(outcomes.values()) == {CancelOutcome.CANCELLED}, outcomes

    # Reschedules: the first version from a producer that places it elsewhere, the second
    # from TimerClient (at the owner), once the first is stored. Twelve seconds leave room
    # for a loaded machine's forwarding before the first version would come due; the
    # worker is asked over HTTP (what `get` asks), not through ten CLI processes, which
    # took 2-3 s apiece on a busy machine and outlasted the twelve.
    soon = int(time.time()) + 12
    rescheduled = astray[30:40]
    for timer_id in rescheduled:
        plain.produce(settings.topics.requests, json_request(timer_id, soon), timer_id.encode())
    assert plain.flush(10) == 0

    # Asked of the worker's own route, all ten in one look: a `kafka-timers get` each (a
    # process start, 1-3 s apiece on a loaded machine) let the last first versions come
    # due and fire before they were looked at.
    def stored(timer_id: str) -> bool:
        url = f"{worker.web}/timers/{timer_id}"
        status, shown = get_admitted(url, settings.operator_token)
        return status == 200 and shown.get("state") == "pending" and shown.get("due") == soon

    wait_until(
        lambda: all(stored(t) for t in rescheduled), 30, "every first version stored at its owner"
    )
    later = soon + 2
    for timer_id in rescheduled:
        client.schedule(
            topic, f"{timer_id}@{later}".encode(), at=later, timer_id=timer_id, token="tok"
        )
    client.flush()
    # And one cancel produced by the plain producer keyed by a business key, on the
    # timer's wrong partition: forwarded, it cancels too. Its timer is due far ahead, so
    # that only the cancel can end it (a near due raced the forwarding on a slow machine).
    stray_cancel = astray[40]
    plain.produce(
        settings.topics.requests, json_request(stray_cancel, due_far), stray_cancel.encode()
    )
    assert plain.flush(10) == 0
    wait_until(
        lambda: get(settings, stray_cancel, worker.web)[1].get("state") == "pending", 30, "stored"
    )
    cancel = json.dumps({"cancel": stray_cancel, "token": "tok"}).encode()
    plain.produce(settings.topics.requests, cancel, b"customer-x")
    assert plain.flush(10) == 0
    wait_until(
        lambda: get(settings, stray_cancel, worker.web)[1].get("state") == "cancelled",
        30,
        "the stray cancel forwarded to its timer's owner",
    )

    with stack.reader(topic) as reader:
        records = reader.wait_for(lambda rs: set(fired_ids(rs)) >= set(rescheduled), 60)
        # A marker due after everything else: once it fired, nothing more is coming.
        marker = client.schedule(topic, b"marker", at=later + 2)
        client.flush()
        records = reader.wait_for(lambda rs: marker.id in fired_ids(rs), 60)
    fired = [r for r in records if r.header("timer-id") != marker.id.encode()]
    by_id: dict[str, list[bytes]] = {}
    for record in fired:
        by_id.setdefault((record.header("timer-id") or b"").decode(), []).append(
            record.value or b""
        )
    ours = set(cancelled) | set(rescheduled) | {stray_cancel}  # not the client's probes
    assert set(by_id) & ours == set(rescheduled), "a cancelled timer fired, or one never came"
    for timer_id in rescheduled:
        assert by_id[timer_id] == [f"{timer_id}@{later}".encode()], "both versions fired"

    # `get` tells the truth afterwards: cancelled ones cancelled, rescheduled ones fired.
    for timer_id in [*cancelled[::7], stray_cancel]:
        _, shown, _ = get(settings, timer_id, worker.web)
        assert shown["state"] == "cancelled", (timer_id, shown)
    for timer_id in rescheduled[:3]:
        _, shown, _ = get(settings, timer_id, worker.web)
        assert shown["state"] == "fired" and shown["due"] == later, (timer_id, shown)
    assert client.cancel(rescheduled[0], "tok", wait=30) is CancelOutcome.ALREADY_FIRED
    client.close()


def test_a_request_without_an_id_is_cancelled_by_its_derived_id(stack: Stack) -> None:
    """A JSON request without an id gets ``<request topic>-<partition>-<offset>`` of where
    it was sent; it is stored at that id's owner, so ``cancel`` and ``get`` by that id
    reach it: each cancel is answered ``cancelled`` and no callback ever comes."""
    settings = stack.settings
    topic, worker, client = probed_and_firing(stack, f"idless-{settings.app_id}", "idless-worker")
    plain = Producer(confluent_common(settings))
    n = settings.partitions
    sent: list[tuple[int, int]] = []

    def delivered(err: object, msg: Any) -> None:
        assert err is None, err
        sent.append((msg.partition(), msg.offset()))

    # Far enough ahead for every cancel to come first on a loaded 2-core machine (checked
    # below); the test then waits for the due second, so no more than that.
    due = int(time.time()) + 45
    body = json.dumps({"topic": topic, "at": due, "value": "must never fire"}).encode()
    for i in range(4 * n):
        plain.produce(settings.topics.requests, body, partition=i % n, on_delivery=delivered)
    assert plain.flush(10) == 0
    derived = [f"{settings.topics.requests}-{p}-{o}" for p, o in sent]
    moved = [d for d, (p, _) in zip(derived, sent, strict=True) if owner_of(d, n) != p]
    assert moved, "some derived ids are owned by another partition than their landing one"

    wait_until(lambda: pending(worker) >= len(derived), 60, "every id-less timer stored")
    outcomes = {timer_id: client.cancel(timer_id, "", wait=30) for timer_id in derived}
    assert time.time() < due, "the cancels were answered after the timers' due second"
    assert set(outcomes.values()) == {CancelOutcome.CANCELLED}, outcomes
    for timer_id in moved[:3]:
        assert get(settings, timer_id, worker.web)[1].get("state") == "cancelled", timer_id
    with stack.reader(topic) as reader:
        marker = client.schedule(topic, b"marker", at=due + 2)
        client.flush()
        records = reader.wait_for(lambda rs: marker.id in fired_ids(rs), 150)
    assert not set(fired_ids(records)) & set(derived), "a cancelled timer fired"
    assert not [r for r in records if r.value == b"must never fire"]
    client.close()
