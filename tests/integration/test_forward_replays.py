"""Forwarding across ``kill -9``: a forwarded request that arrives again never undoes a
reschedule, on real processes against the broker.

Bursts of 30,000 ids are produced over 6 s by librdkafka's default partitioner (CRC32
of the id, so about seven in eight land off their owner and are forwarded), each id scheduled
(``v1``, due ``T1``) and at once rescheduled (``v2``, due ``T1 + 40``, another payload).
Two workers share the partitions; in each burst one of them is killed while it forwards,
shortly before ``T1``, and started again on its data after ``T1``. What it had forwarded
but not made durable is read and forwarded again (by the other worker, which takes its
partitions over after a session timeout, or by itself when it is back), and those
second copies reach owners that kept ticking past ``T1``, where ``v2`` stands. Applied,
a second copy of ``v1`` puts ``v1`` back and, its second past, fires it at once: a
reschedule undone. The test fails if no kill found a copy to forward again (nothing
tested).

An *undone reschedule* is a callback of ``v1`` produced after the owner had written
``v2`` as the id's pending version to the changelog: the store had the newer version,
then fired the older one. (A ``v1`` fired before its ``v2`` was applied is not one: an id
read for the first time after ``T1`` fires ``v1`` at once and stores ``v2``, as it
should.)
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
import zlib
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Producer

from app.core.routing import owner_of
from app.kafka.config import confluent_common
from app.kafka.records import TopicReader
from tests.integration.test_cancel_answers import firing_client
from tests.support.probes import Probed, metric_total, start_probed
from tests.support.stack import Stack
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.fault, pytest.mark.timeout(900)]

#: Ids a burst schedules and reschedules.
BURST_IDS = 30_000
BURSTS = 2
#: Ids whose v1 requests go out before their v2 requests: an id's two versions are a few
#: hundred records apart on its partition, so both can be in one unit of work.
CHUNK = 50
#: A burst is produced over this long (paced), so that it is still being forwarded when
#: the kill comes, from ``V1_LEAD - KILL_BEFORE_V1`` after its start: produced all at
#: once, it was forwarded within about two seconds, and the kill found every copy
#: acknowledged and nothing to forward again (0 requests forwarded twice, measured).
PRODUCE_SECONDS = 6.0
#: From a burst's start to its v1 second; v2 comes this much later.
V1_LEAD = 8
#: The kill comes no sooner than this before T1: the other worker takes the killed one's
#: partitions over (and forwards its records again) a session timeout later, after T1.
KILL_BEFORE_V1 = 5
V2_AFTER = 40
#: Generous: 2 shared cores, a worker restart waits out the killed member's session.
TIMEOUT = 120.0


@dataclass
class Burst:
    tag: str
    ids: list[str]
    v1_due: int
    v2_due: int
    forwards: int
    kills: list[float] = field(default_factory=list)


def requests_of(burst: Burst, topic: str) -> list[tuple[bytes, bytes]]:
    """``(key, value)`` of each request, in the order they are produced."""
    out: list[tuple[bytes, bytes]] = []
    for start in range(0, len(burst.ids), CHUNK):
        chunk = burst.ids[start : start + CHUNK]
        for version, due in ((b"v1", burst.v1_due), (b"v2", burst.v2_due)):
            for timer_id in chunk:
                body = {
                    "id": timer_id,
                    "topic": topic,
                    "value": version.decode(),
                    "token": "tok",
                    "at": due,
                }
                out.append((timer_id.encode(), json.dumps(body).encode()))
    return out


def forwarded(worker: Probed) -> float:
    return metric_total(worker.metrics, "kafka_timers_requests_forwarded")


def replays_dropped(worker: Probed) -> float:
    return metric_total(worker.metrics, "kafka_timers_requests_forward_replays")


@pytest.mark.xfail(
    strict=False,
    reason="watched: before the last two fixes (a round leaves out a version replaced "
    "during its await; a late request gives way to its next version read with it) one "
    "run in about four undid 1 reschedule of 60,000; after them 0 in 7 of 7 runs. "
    "Non-strict until it has held in CI; the test prints any undone id's story",
)
def test_kill_9_while_forwarding_undoes_no_reschedule(stack: Stack) -> None:
    settings = stack.settings
    assert settings.partitions is not None
    n = settings.partitions
    topic = stack.callback_topic(f"replays-{settings.app_id}")
    stack.oscillator()
    workers = {name: start_probed(stack, "worker", name) for name in ("w-one", "w-two")}
    firing_client(stack, topic).close()
    producer = Producer(
        {**confluent_common(settings), "linger.ms": 20, "queue.buffering.max.messages": 500_000}
    )
    dropped = 0.0
    bursts: list[Burst] = []

    def kill_one_while_forwarding(burst: Burst) -> str:
        """Kill the worker that forwards most of the burst, shortly before T1 (it may not
        hold partitions again yet after its last restart: groups settle slowly here)."""
        nonlocal dropped
        share = burst.forwards * 0.05

        def forwarding() -> str | None:
            if time.time() < burst.v1_due - KILL_BEFORE_V1:
                return None
            counts = {name: forwarded(w) for name, w in workers.items()}
            busiest = max(counts, key=lambda name: counts[name])
            return busiest if counts[busiest] >= share else None

        victim = wait_until(forwarding, TIMEOUT, f"{share:.0f} requests forwarded")
        assert victim is not None
        dropped += sum(replays_dropped(w) for w in workers.values())
        burst.kills.append(time.time())
        workers[victim].process.kill()
        return victim

    def produce_paced(requests: list[tuple[bytes, bytes]]) -> None:
        began = time.time()
        for i, (key, value) in enumerate(requests):
            if i % 500 == 0:  # pacing the input over PRODUCE_SECONDS, not waiting for a result
                time.sleep(max(0.0, began + PRODUCE_SECONDS * i / len(requests) - time.time()))
            producer.produce(settings.topics.requests, value, key)
            producer.poll(0)

    for b in range(BURSTS):
        start = int(time.time())
        tag = uuid.uuid4().hex[:6]
        ids = [f"order-{tag}-{i}" for i in range(BURST_IDS)]
        astray = sum(zlib.crc32(i.encode()) % n != owner_of(i, n) for i in ids)
        burst = Burst(tag, ids, start + V1_LEAD, start + V1_LEAD + V2_AFTER, 2 * astray)
        bursts.append(burst)
        sent = threading.Thread(target=produce_paced, args=(requests_of(burst, topic),))
        sent.start()
        try:
            victim = kill_one_while_forwarding(burst)
        finally:
            sent.join()
        assert producer.flush(30) == 0
        pause = burst.v1_due + 2 - time.time()
        time.sleep(max(0.0, pause))  # pacing the fault, not waiting for a result
        workers[victim] = start_probed(stack, "worker", victim, log_name=f"{victim}-{b}")
        print(f"burst {b}: {victim} killed {burst.kills[0] - start:.1f} s after its start")

    everything = {i: burst for burst in bursts for i in burst.ids}
    v2_fired: dict[str, int] = {}
    v1_fired: dict[str, list[int]] = {}
    with TopicReader(settings, topic) as reader:

        def all_v2() -> bool:
            for r in reader.poll(0.5):
                timer_id = (r.header("timer-id") or b"").decode()
                if timer_id not in everything:
                    continue
                if r.value == b"v2":
                    v2_fired[timer_id] = v2_fired.get(timer_id, 0) + 1
                    assert r.timestamp_ms >= everything[timer_id].v2_due * 1000, "early"
                else:
                    v1_fired.setdefault(timer_id, []).append(r.timestamp_ms)
            return len(v2_fired) == len(everything)

        last = max(burst.v2_due for burst in bursts)
        with contextlib.suppress(AssertionError):  # judged below, with what the topics say
            wait_until(all_v2, last - time.time() + TIMEOUT, "every id's v2 fired", interval=0)
    dropped += sum(replays_dropped(w) for w in workers.values())
    # When each id's v2 first stood as its pending version, from the owner's changelog.
    missing = sorted(set(everything) - set(v2_fired))
    # Every id's story, told for the ids that went wrong: changelog, requests, dead letters.
    history: dict[str, list[str]] = {i: [] for i in everything}
    v2_stood: dict[str, int] = {}
    with TopicReader(settings, settings.changelog_topic) as changelog:
        for r in changelog.read_to_end(timeout=TIMEOUT):
            if not r.key or r.key[:1] not in b"IT":
                continue
            if r.key[:1] == b"T":
                timer_id = r.key[14:].decode()
                if timer_id in history:
                    history[timer_id].append(
                        f"cl {r.partition}@{r.offset} {r.key[:13]!r}={r.value is not None}"
                        f"@{r.timestamp_ms}"
                    )
                continue
            timer_id = r.key[1:].decode()
            if timer_id in history:
                history[timer_id].append(
                    f"cl {r.partition}@{r.offset} I={(r.value or b'-')[:13]!r}@{r.timestamp_ms}"
                )
            burst_of = everything.get(timer_id)
            if (
                burst_of is not None
                and r.value is not None
                and r.value.startswith(b"P%012d" % burst_of.v2_due)
            ):
                v2_stood.setdefault(timer_id, r.timestamp_ms)
    # How many records were forwarded twice: copies on the owners naming one origin.
    hops: dict[bytes, int] = {}
    with TopicReader(settings, settings.topics.requests) as requests:
        for r in requests.read_to_end(timeout=TIMEOUT):
            hop = r.header("timer-hop")
            if hop is not None:
                hops[hop] = hops.get(hop, 0) + 1
            timer_id = (r.key or b"").decode()
            if timer_id in history:
                version = json.loads(r.value or b"{}").get("value")
                history[timer_id].append(f"req {r.partition}@{r.offset} {version} hop={hop!r}")
    twice = sum(1 for c in hops.values() if c > 1)
    with TopicReader(settings, settings.topics.dlq) as dlq:
        for r in dlq.read_to_end(timeout=TIMEOUT):
            timer_id = (r.key or b"").decode()
            if timer_id in history:
                history[timer_id].append(f"dlq {r.header('dlq-reason')!r}")
    undone = sorted(
        timer_id
        for timer_id, fires in v1_fired.items()
        if timer_id in v2_stood and max(fires) > v2_stood[timer_id]
    )
    for what, ids in (("missing", missing[:5]), ("undone", undone[:5])):
        for timer_id in ids:
            fired = v1_fired.get(timer_id)
            print(f"{what} {timer_id} (v1 fired at {fired}): {history[timer_id]}")
    print(f"kills at {[b.kills for b in bursts]}; worker logs in {stack.base_dir}")
    report = (
        f"[kill -9 while forwarding] {BURSTS} bursts of {BURST_IDS:,} ids rescheduled "
        f"({sum(b.forwards for b in bursts):,} of {4 * BURST_IDS:,} requests forwarded), "
        f"{sum(len(b.kills) for b in bursts)} kills, {twice:,} requests forwarded twice: "
        f"reschedules undone {len(undone)}; "
        f"v1 fired before its v2 was applied (read after T1): "
        f"{len(v1_fired) - len(undone)} (of them fired twice: "
        f"{sum(1 for f in v1_fired.values() if len(f) > 1)}); v2 fired twice: "
        f"{sum(1 for c in v2_fired.values() if c > 1)}; second copies dropped (counted "
        f"by the processes read before each kill): {dropped:.0f}"
    )
    print(report)
    assert not missing, f"{report}; {len(missing)} ids never fired v2, e.g. {missing[:5]}"
    # Else nothing was tested: every kill came after its copies were acknowledged.
    assert twice > 0, f"{report}: no kill came while copies were unacknowledged"
    assert not undone, f"{report}; e.g. {undone[:5]}"
