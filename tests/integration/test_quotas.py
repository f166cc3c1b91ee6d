"""Pending-timer quotas against real workers and an oscillator on the broker: a quota of
1,000 on a callback topic refuses the 1,001st request and answers it (``over_quota`` on
the fired topic and in the dead-letter topic), exactly 1,000 fire, and a fire frees its
place; across two workers, the counts each shares through the demand topic make a
request on the other worker's partition refused too; a worker killed and started again
rebuilds its counts from what is pending; tenant quotas count by the tenant header.

Requests go out at a fixed pace where the test says so (its input, not a wait for a
result); every wait for a result polls with a deadline.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

from app.core.routing import owner_of
from app.dev.stack import wait_until_firing
from app.kafka.demand import demand_topic
from app.kafka.records import Record, TopicReader
from app.settings import Settings
from kafka_timers_client.client import TimerClient
from kafka_timers_client.fired import FiredKind, FiredRecord
from kafka_timers_client.outcome import CancelOutcome
from tests.support.faults import FireWatch, owners, schedule_spread
from tests.support.probes import get_admitted, start_probed
from tests.support.stack import Stack, fired_records
from tests.support.waiting import wait_until

#: Generous: two shared cores, and other test runs beside this one.
TIMEOUT = 90.0


def ids_owned_by(partition: int, partitions: int, count: int, prefix: str) -> Iterator[str]:
    """``count`` timer ids whose owner partition is ``partition``."""
    n = found = 0
    while found < count:
        timer_id = f"{prefix}-{n}"
        n += 1
        if owner_of(timer_id, partitions) == partition:
            found += 1
            yield timer_id


def over_quota_answers(records: list[Record]) -> dict[str, FiredRecord]:
    """The fired topic's ``dropped`` answers with outcome ``over_quota``, by timer id."""
    return {
        a.id: a
        for a in fired_records(records)
        if a.event is FiredKind.DROPPED and a.outcome == "over_quota"
    }


def fired_ids(records: list[Record]) -> list[str]:
    return [(r.header("timer-id") or b"").decode() for r in records]


def test_a_quota_of_1000_refuses_the_1001st_request_and_answers_it(stack: Stack) -> None:
    settings = stack.settings
    topic = stack.callback_topic("quota")
    probe = stack.callback_topic("quota-probe")
    client = stack.firing_client(probe, topic_quotas=((topic, 1000),))
    tag = uuid.uuid4().hex[:8]
    ids = list(ids_owned_by(0, settings.partition_count, 1002, f"q{tag}"))
    accepted, refused, later = ids[:1000], ids[1000], ids[1001]
    due = int(time.time()) + 15
    with TopicReader(settings, settings.topics.fired) as answers:
        for timer_id in accepted:
            client.schedule(topic, timer_id.encode(), timer_id=timer_id, at=due)
        client.schedule(topic, refused.encode(), timer_id=refused, at=due)
        client.flush()
        sent = time.monotonic()
        answers.wait_for(lambda rs: refused in over_quota_answers(rs), TIMEOUT)
        answered_in = time.monotonic() - sent
        assert set(over_quota_answers(answers.records)) == {refused}
    with TopicReader(settings, settings.topics.dlq) as dlq:
        (dead,) = dlq.wait_for(lambda rs: len(rs) >= 1, TIMEOUT)
    assert dead.header("dlq-reason") == b"over_quota"
    detail = (dead.header("dlq-detail") or b"").decode()
    assert f"topic:{topic} has 1,000 timers pending, its quota is 1,000" in detail, detail

    with TopicReader(settings, topic) as callbacks:
        callbacks.wait_for(
            lambda rs: len(set(fired_ids(rs))) >= 1000 and time.time() > due + 3, TIMEOUT
        )
        fired = fired_ids(callbacks.records)
        assert set(fired) == set(accepted), "the 1,001st fired, or one of the 1,000 did not"
        # Fired, they no longer count: a request now is stored and fires.
        client.schedule(topic, b"later", timer_id=later, at=time.time() + 2)
        client.flush()
        callbacks.wait_for(lambda rs: later in fired_ids(rs), TIMEOUT)
    client.close()
    print(
        f"\nquota 1,000 on one partition: 1,000 stored and fired ({len(fired)} callbacks), "
        f"the 1,001st answered over_quota {answered_in:.2f}s after the requests were sent; "
        "after the fires, a new request fired"
    )


def exchanged(demand: TopicReader, partition: int, key: str, count: int) -> None:
    """Wait until worker-1's latest reports on the demand topic say ``count`` timers
    under quota ``key`` on ``partition``, and worker-2 has reported four times since the
    first of them (a second of its exchange: it tails the topic it reports to, in a
    thread of its own, app.kafka.demand)."""

    def counts(record: Record) -> tuple[str, int | None]:
        data = json.loads(record.value or b"{}")
        return data.get("worker", ""), data.get("quota", {}).get(str(partition), {}).get(key)

    def seen(records: list[Record]) -> bool:
        # From worker-1's first report of ``count`` since it last reported another (a
        # filling quota passes through the lower counts first).
        reports = [counts(r) for r in records]
        at = None
        for i, (w, n) in enumerate(reports):
            if w == "worker-1":
                at = (i if at is None else at) if n == count else None
        return at is not None and sum(w == "worker-2" for w, _ in reports[at + 1 :]) >= 4

    demand.wait_for(seen, TIMEOUT)


def two_workers(stack: Stack, topic: str, quota: int) -> list[str]:
    """Start an oscillator and two workers with a ``quota`` on ``topic``."""
    stack.oscillator()
    workers = ["worker-1", "worker-2"]
    for name in workers:
        stack.worker(name, topic_quotas=((topic, quota),))
    return workers


def settle(settings: Settings, watch: FireWatch, probe: str, workers: list[str], tag: str) -> None:
    """Wait until each worker last fired on half the partitions (probes on ``probe``,
    followed by ``watch``): the group has settled."""
    partitions = settings.partition_count

    def shared(w: FireWatch) -> bool:
        owned = list(owners(w.fires()).values())
        return len(owned) == partitions and all(
            owned.count(name) == partitions // 2 for name in workers
        )

    now = int(time.time())
    schedule_spread(settings, probe, 600, now + 3, now + 90, prefix=f"p{tag}-")
    watch.wait(shared, TIMEOUT, "both workers to own half the partitions")


def test_the_counts_of_another_workers_partitions_count(stack: Stack) -> None:
    """Two workers, each owning some partitions: a quota of 5 filled on one worker's
    partition refuses a request on the other's, once the exchange has carried the
    counts (the test waits for them on the demand topic); a cancel frees a place."""
    settings = stack.settings
    topic = stack.callback_topic("quota-shared")
    probe = stack.callback_topic("quota-shared-probe")
    workers = two_workers(stack, topic, 5)
    partitions = settings.partition_count
    client = TimerClient(settings)
    tag = uuid.uuid4().hex[:8]
    with FireWatch(settings, probe) as watch:
        settle(settings, watch, probe, workers, tag)
        owner = owners(watch.fires())
        first = next(p for p in range(partitions) if owner[p] == "worker-1")
        second = next(p for p in range(partitions) if owner[p] == "worker-2")
        filled = list(ids_owned_by(first, partitions, 5, f"a{tag}"))
        elsewhere, after_cancel, full = ids_owned_by(second, partitions, 3, f"b{tag}")
        due = time.time() + 3600
        tokens = {}
        key = f"topic:{topic}"
        with (
            TopicReader(settings, settings.topics.fired) as answers,
            TopicReader(settings, demand_topic(settings)) as demand,
        ):
            for timer_id in filled:
                tokens[timer_id] = client.schedule(topic, b"a", timer_id=timer_id, at=due).token
            client.flush()
            exchanged(demand, first, key, 5)
            client.schedule(topic, b"b", timer_id=elsewhere, at=due)
            client.flush()
            answers.wait_for(lambda rs: elsewhere in over_quota_answers(rs), TIMEOUT)
            refused = over_quota_answers(answers.records)[elsewhere]
            assert (refused.partition, refused.worker) == (second, "worker-2")
            # One of the five cancelled: a place is free, on the other worker's partition.
            cancelled = client.cancel(filled[0], tokens[filled[0]], wait=TIMEOUT)
            assert cancelled is CancelOutcome.CANCELLED
            exchanged(demand, first, key, 4)
            client.schedule(topic, b"c", timer_id=after_cancel, at=due)
            # The next on that partition is refused again: the place was taken (the
            # request before it was applied by then: one partition, read in order).
            client.schedule(topic, b"z", timer_id=full, at=due)
            client.flush()
            answers.wait_for(lambda rs: full in over_quota_answers(rs), TIMEOUT)
            assert after_cancel not in over_quota_answers(answers.records)
        # Still where they were: the counts crossed from one worker to the other.
        watch.poll(0.5)
        assert {p: owners(watch.fires())[p] for p in (first, second)} == {
            first: "worker-1",
            second: "worker-2",
        }
    client.close()
    print(
        f"\nquota 5, two workers: 5 stored on partition {first} (worker-1), the 6th on "
        f"partition {second} (worker-2) refused over_quota; after a cancel, one more stored "
        "there and the next refused"
    )


def test_two_workers_refuse_the_1001st_of_a_burst_over_every_partition(stack: Stack) -> None:
    """Two workers, a quota of 1,000, and 1,001 requests sent at once over every partition
    (so over both workers): exactly 1,000 are stored and fire, and one is refused and
    answered. Each partition stores only within its share of the quota, claimed on the
    demand topic (app.core.quota_leases): before shares, 2 workers took up to twice the
    quota from such a burst."""
    settings = stack.settings
    topic = stack.callback_topic("quota-burst")
    probe = stack.callback_topic("quota-burst-probe")
    workers = two_workers(stack, topic, 1000)
    partitions = settings.partition_count
    client = TimerClient(settings)
    tag = uuid.uuid4().hex[:8]
    with FireWatch(settings, probe) as watch:
        settle(settings, watch, probe, workers, tag)
    ids = [f"s{tag}-{i}" for i in range(1001)]
    assert len({owner_of(i, partitions) for i in ids}) == partitions
    due = int(time.time()) + 40
    with (
        TopicReader(settings, settings.topics.fired) as answers,
        TopicReader(settings, topic) as callbacks,
    ):
        for timer_id in ids:
            client.schedule(topic, timer_id.encode(), timer_id=timer_id, at=due)
        client.flush()
        sent = time.monotonic()
        answers.wait_for(lambda rs: len(over_quota_answers(rs)) >= 1, TIMEOUT)
        answered_in = time.monotonic() - sent
        callbacks.wait_for(
            lambda rs: len(set(fired_ids(rs))) >= 1000 and time.time() > due + 3, TIMEOUT + 40
        )
        fired = set(fired_ids(callbacks.records))
        answers.poll()
        (refused,) = over_quota_answers(answers.records)  # and no other, 40 s on
    client.close()
    assert refused not in fired
    assert fired == set(ids) - {refused}, "more or fewer than the 1,000 admitted fired"
    print(
        f"\nquota 1,000, two workers, 1,001 requests at once over {partitions} partitions: "
        f"1,000 stored and fired, {refused} answered over_quota {answered_in:.2f}s after the "
        "requests were sent"
    )


def test_a_worker_killed_and_started_again_counts_what_is_pending(stack: Stack) -> None:
    """The counts live in memory: a worker killed (-9) with its quota full and started
    again on its data rebuilds them from its pending timers, and refuses the next."""
    settings = stack.settings
    topic = stack.callback_topic("quota-restart")
    probe = stack.callback_topic("quota-restart-probe")
    stack.oscillator()
    data_dir = stack.base_dir / "quota-worker"
    quota = ((topic, 20),)
    worker = start_probed(stack, "worker", "quota-worker", data_dir=data_dir, topic_quotas=quota)
    client = TimerClient(settings)
    wait_until_firing(settings, client, probe)
    tag = uuid.uuid4().hex[:8]
    *filled, refused = ids_owned_by(0, settings.partition_count, 21, f"r{tag}")
    due = time.time() + 3600
    for timer_id in filled:
        client.schedule(topic, b"r", timer_id=timer_id, at=due)
    client.flush()

    def pending(url: str, timer_id: str) -> bool:
        status, doc = get_admitted(f"{url}/timers/{timer_id}", settings.operator_token)
        return status == 200 and isinstance(doc, dict) and doc.get("state") == "pending"

    # The last of one partition's requests pending: all twenty were applied.
    wait_until(lambda: pending(worker.web, filled[-1]), TIMEOUT, "the twenty requests applied")
    worker.process.kill()
    start_probed(
        stack, "worker", "quota-worker", data_dir=data_dir, topic_quotas=quota, log_name="again"
    )
    with (
        TopicReader(settings, settings.topics.fired) as answers,
        TopicReader(settings, settings.topics.dlq) as dlq,
    ):
        client.schedule(topic, b"r", timer_id=refused, at=due)
        client.flush()
        sent = time.monotonic()
        answers.wait_for(lambda rs: refused in over_quota_answers(rs), TIMEOUT)
        (dead,) = dlq.wait_for(lambda rs: len(rs) >= 1, TIMEOUT)
    client.close()
    # Refused by the count rebuilt from the store, not for want of a share.
    detail = (dead.header("dlq-detail") or b"").decode()
    assert f"topic:{topic} has 20 timers pending, its quota is 20" in detail, detail
    print(
        f"\nquota 20, worker killed -9 with 20 pending and started again: the 21st answered "
        f"over_quota {time.monotonic() - sent:.2f}s after it was sent (restart included)"
    )


def test_tenant_quotas_count_by_the_tenant_header(stack: Stack) -> None:
    """``acme=3,*=1`` on the header ``tenant``: acme's 4th is refused, another tenant's
    2nd, and a request without the header counts under no tenant."""
    settings = stack.settings
    topic = stack.callback_topic("quota-tenants")
    probe = stack.callback_topic("quota-tenants-probe")
    client = stack.firing_client(
        probe, tenant_header="tenant", tenant_quotas=(("acme", 3), ("*", 1))
    )
    tag = uuid.uuid4().hex[:8]
    ids = list(ids_owned_by(0, settings.partition_count, 10, f"t{tag}"))
    plan = [("acme", 4), ("zed", 2), (None, 3), ("acme", 1)]  # one partition, in order
    sent: list[tuple[str, str | None]] = []
    due = time.time() + 3600
    with TopicReader(settings, settings.topics.fired) as answers:
        for tenant, count in plan:
            for _ in range(count):
                timer_id = ids[len(sent)]
                headers = {} if tenant is None else {"tenant": tenant}
                client.schedule(topic, b"t", timer_id=timer_id, at=due, headers=headers)
                sent.append((timer_id, tenant))
        client.flush()
        last = sent[-1][0]
        answers.wait_for(lambda rs: last in over_quota_answers(rs), TIMEOUT)
        refused = set(over_quota_answers(answers.records))
    client.close()
    # acme: 3 stored, the 4th and the last refused; zed: 1 stored, the 2nd refused.
    assert refused == {sent[3][0], sent[5][0], last}, (sent, refused)
