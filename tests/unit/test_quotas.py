"""Pending-timer quotas (app.core.quotas): the settings' syntax, the counts a wheel keeps
as timers are stored, replaced, fired and cancelled, their rebuild on a load, the
decision against the quota, and the counts shared through the demand topic."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, cast

import pytest

from app.core.firing import plan
from app.core.quota_leases import WAIT_MOST_SECONDS
from app.core.quotas import REFUSE, WAIT, PartitionQuotas, QuotaBook, QuotaPolicy, parse_quotas
from app.core.timer import Cancel, Timer
from app.core.wheel import PartitionWheel, Scheduled
from app.kafka.demand import DemandPublisher, DemandTable
from app.settings import Settings
from app.worker.demand import DemandExchange
from app.worker.service import TimerService
from app.worker.topic_gates import TopicGates
from kafka_timers_client.errors import ConfigurationError
from kafka_timers_client.late import DEFAULT_POLICY
from kafka_timers_client.recurrence import Recurrence
from tests.support.memkv import MemoryKV

P = "KAFKA_TIMERS_"
POLICY = QuotaPolicy({"cb": 3}, "tenant", {"acme": 2, "*": 1})


def timer(timer_id: str, due: int, topic: str = "cb", tenant: str | None = None) -> Timer:
    headers = () if tenant is None else (("tenant", tenant.encode()),)
    return Timer(timer_id, due, topic, None, b"v", "tok", headers)


def wheel_with(policy: QuotaPolicy = POLICY) -> tuple[PartitionWheel, PartitionQuotas]:
    quotas = PartitionQuotas(policy)
    return PartitionWheel(MemoryKV(), quotas=quotas), quotas


def refusal(book: QuotaBook, partition: int, request: Timer) -> str | None:
    """The key the book refuses ``request`` for, None if admitted (never "wait": the
    partition is given the whole of every quota first, as one worker alone would win)."""
    for key in book.policy.keys_of(request):
        book.leases.shares.setdefault((partition, key), book.policy.limit(key))
    ruling = book.admit(partition, request, 0.0)
    assert ruling is None or ruling[0] == REFUSE, ruling
    return None if ruling is None else ruling[1]


def fire(wheel: PartitionWheel, second: int) -> list[str]:
    """Fire like the service does: each due timer, a series' successor stored."""
    due = wheel.begin_tick(second) or []
    successors = {}
    for t in due:
        steps = plan(t, second, second * 1000, DEFAULT_POLICY)
        if steps.successor is not None:
            successors[t.id] = steps.successor
    wheel.finish_tick(second, due, successors)
    return sorted(t.id for t in due)


# -- the settings ------------------------------------------------------------------------


def test_quotas_are_read_and_bad_ones_refused_in_one_line() -> None:
    assert parse_quotas(" a=1000, b = 0 ,", tenants=False) == {"a": 1000, "b": 0}
    assert parse_quotas("acme=1_000,*=500", tenants=True) == {"acme": 1000, "*": 500}
    settings = Settings.from_env(
        {
            P + "TOPIC_QUOTAS": "reminders=1000",
            P + "TENANT_HEADER": "tenant",
            P + "TENANT_QUOTAS": "acme=10,*=5",
        }
    )
    policy = settings.quota_policy()
    assert policy == QuotaPolicy({"reminders": 1000}, "tenant", {"acme": 10, "*": 5})
    assert Settings.from_env({}).quota_policy() is None
    assert Settings.from_env(settings.to_env()).quota_policy() == policy
    for env, words in (
        ({P + "TOPIC_QUOTAS": "reminders"}, "is not <name>=<timers>"),
        ({P + "TOPIC_QUOTAS": "a=-1"}, "from 0 to 1,000,000,000"),
        ({P + "TOPIC_QUOTAS": "a=1.5"}, "whole number"),
        ({P + "TOPIC_QUOTAS": "a=1,a=2"}, "named twice"),
        ({P + "TOPIC_QUOTAS": "bad topic=1"}, "not a legal topic name"),
        ({P + "TOPIC_QUOTAS": "*=1"}, "'*' names every tenant"),
        ({P + "TENANT_QUOTAS": "acme=1"}, "TENANT_HEADER is not"),
    ):
        with pytest.raises(ConfigurationError) as refused:
            Settings.from_env(env)
        message = str(refused.value)
        assert len(message.splitlines()) == 1 and words in message, message


def test_a_timer_counts_under_its_topic_and_its_tenant() -> None:
    assert POLICY.keys_of(timer("a", 1)) == ("topic:cb",)
    assert POLICY.keys_of(timer("a", 1, "other")) == ()
    assert POLICY.keys_of(timer("a", 1, tenant="acme")) == ("topic:cb", "tenant:acme")
    assert POLICY.keys_of(timer("a", 1, "other", tenant="zed")) == ("tenant:zed",)
    only_acme = QuotaPolicy({}, "tenant", {"acme": 2})
    assert only_acme.keys_of(timer("a", 1, tenant="zed")) == ()  # no default quota
    assert [POLICY.limit(k) for k in ("topic:cb", "tenant:acme", "tenant:zed")] == [3, 2, 1]
    assert QuotaPolicy.build((), "tenant", ()) is None  # a header alone sets no quota


# -- counting in a partition --------------------------------------------------------------


def test_stores_replaces_fires_and_cancels_keep_the_count_exact() -> None:
    wheel, quotas = wheel_with()
    for i in range(3):
        assert wheel.schedule(timer(f"t{i}", 100 + i)).outcome is Scheduled.STORED
    wheel.schedule(timer("free", 100, "other"))
    assert quotas.counts == {"topic:cb": 3}
    wheel.schedule(timer("t0", 150))  # a replace of a pending id: counted once
    wheel.schedule(timer("t1", 160, tenant="acme"))  # now under its tenant too
    assert quotas.counts == {"topic:cb": 3, "tenant:acme": 1}
    wheel.schedule(timer("t2", 170, "other"))  # moved to another topic
    assert quotas.counts == {"topic:cb": 2, "tenant:acme": 1}
    assert wheel.cancel(Cancel("t1", "tok")).value == "cancelled"
    assert quotas.counts == {"topic:cb": 1}
    assert fire(wheel, 149) == ["free"]
    assert quotas.counts == {"topic:cb": 1}
    assert fire(wheel, 150) == ["t0"]
    assert quotas.counts == {}
    # A request replacing a pending timer that then fires at once: no longer counted.
    wheel.schedule(timer("late", 200))
    assert quotas.counts == {"topic:cb": 1}
    assert wheel.schedule(timer("late", 120)).outcome is Scheduled.FIRE_NOW
    assert quotas.counts == {}


def test_a_series_counts_once_while_it_lives() -> None:
    wheel, quotas = wheel_with()
    rec = Recurrence.interval(2, start=100, count=3).anchored(99)
    wheel.schedule(Timer("s", 100, "cb", None, b"v", "tok", recurrence=rec, seq=1))
    assert quotas.counts == {"topic:cb": 1}
    assert fire(wheel, 100) == ["s"]
    assert fire(wheel, 102) == ["s"]
    assert quotas.counts == {"topic:cb": 1}
    assert fire(wheel, 104) == ["s"]  # its last occurrence: the series ends
    assert quotas.counts == {}


def test_a_load_rebuilds_the_counts_from_the_store() -> None:
    kv = MemoryKV()
    wheel = PartitionWheel(kv, quotas=PartitionQuotas(POLICY))
    for i in range(5):
        wheel.schedule(timer(f"t{i}", 100 + i, tenant="acme" if i % 2 else None))
    wheel.cancel(Cancel("t4", "tok"))
    fire(wheel, 100)
    live = dict(wheel.quotas.counts) if wheel.quotas else {}
    assert live == {"topic:cb": 3, "tenant:acme": 2}
    again = PartitionWheel(kv, quotas=PartitionQuotas(POLICY))
    again.recount()
    assert again.quotas is not None and again.quotas.counts == live
    again.schedule(timer("t1", 300, tenant="acme"))  # its id is known: counted once
    assert again.quotas.counts == live


# -- the decision ---------------------------------------------------------------------------


def test_the_request_past_the_quota_is_refused_and_a_replace_is_not() -> None:
    policy = QuotaPolicy({"cb": 1000})
    book = QuotaBook(policy)
    wheel, quotas = wheel_with(policy)
    book.attach(0, quotas)
    for i in range(1000):
        request = timer(f"t{i}", 1000 + i)
        assert refusal(book, 0, request) is None
        wheel.schedule(request)
    assert refusal(book, 0, timer("t1000", 5000)) == "topic:cb"  # the 1,001st
    assert refusal(book, 0, timer("t7", 5000)) is None  # a reschedule of a counted one
    assert refusal(book, 0, timer("x", 5000, "other")) is None
    wheel.cancel(Cancel("t3", "tok"))
    assert refusal(book, 0, timer("t1000", 5000)) is None


def test_other_partitions_counts_are_taken_into_account() -> None:
    policy = QuotaPolicy({"cb": 10})
    book = QuotaBook(policy)
    here, mine = wheel_with(policy)
    there, other_local = wheel_with(policy)
    book.attach(0, mine)
    book.attach(1, other_local)
    for i in range(3):
        here.schedule(timer(f"a{i}", 100))
        there.schedule(timer(f"b{i}", 100))
    # Partitions 2 and 3 elsewhere; 0's own stale report is left out for its live count.
    book.set_elsewhere({"topic:cb": {0: 9, 2: 3, 3: 1}})
    assert book.pending("topic:cb") == 3 + 3 + 3 + 1
    assert refusal(book, 0, timer("new", 100)) == "topic:cb"
    book.set_elsewhere({"topic:cb": {2: 3}})
    assert refusal(book, 0, timer("new", 100)) is None
    book.detach(1)  # given away: its count now comes from the reports
    assert book.pending("topic:cb") == 3 + 3
    assert book.by_partition() == {0: {"topic:cb": 3}}


def test_the_demand_table_carries_each_partitions_quota_counts() -> None:
    """Each partition's counts as the newest report naming it (in the topic's order) gave
    them; the occupancy of the partitions another worker holds."""
    clock, wall = [10.0], [5000.0]
    table = DemandTable(
        replace(Settings(), worker_id="w1", topic_quotas=(("cb", 10),), partitions=8),
        clock=lambda: clock[0],
        wall=lambda: wall[0],
    )

    def report(worker: str, at: float, quota: dict[str, dict[str, int]]) -> bytes:
        return json.dumps({"worker": worker, "at": at, "held": {}, "quota": quota}).encode()

    table.apply(report("w2", 4999.0, {"3": {"topic:cb": 100}, "4": {"topic:cb": 7}}))
    table.apply(report("w1", 5000.0, {"3": {"topic:cb": 40, "tenant:a": 0}}))  # took 3 over
    table.apply(json.dumps({"worker": "w3", "at": 5000.0, "held": {}}).encode())  # no quotas
    counts, elsewhere, wanted = table.quota_view({3})
    assert counts == {"topic:cb": {3: 40, 4: 7}}
    assert (elsewhere, wanted) == ({"topic:cb": 7}, set())
    assert table.backlogs() == {}


def test_the_exchange_reports_the_counts_and_takes_the_others_in() -> None:
    """With quotas and no rate limit, the exchange still runs: it publishes this worker's
    counts, and takes the other workers' newest counts into the book."""
    clock, wall = [10.0], [5000.0]
    table = DemandTable(
        replace(Settings(), worker_id="w1", topic_quotas=(("cb", 10),), partitions=8),
        clock=lambda: clock[0],
        wall=lambda: wall[0],
    )
    policy = QuotaPolicy({"cb": 10})
    book = QuotaBook(policy)
    wheel, quotas = wheel_with(policy)
    book.attach(0, quotas)
    wheel.schedule(timer("a", 100))
    sent: list[bytes] = []
    publisher = DemandPublisher.__new__(DemandPublisher)
    publisher._worker, publisher._topic = "w1", "unused"

    class Producer:
        def produce(self, topic: str, value: bytes, key: bytes) -> None:
            sent.append(value)

        def poll(self, timeout: float) -> None:
            pass

    publisher._producer = cast(Any, Producer())

    class Service:
        gates = TopicGates({}, partitions=8)
        quotas = book
        grew = 0

        def held_by_partition(self, topics: object) -> dict[int, dict[str, int]]:
            raise AssertionError("no topic is limited")

        def quota_shares_grew(self) -> None:
            self.grew += 1

    service = Service()
    exchange = DemandExchange(
        cast(TimerService, service), publisher, table, 8, wall=lambda: wall[0]
    )
    exchange.exchange()
    assert json.loads(sent[-1])["quota"] == {"0": {"topic:cb": 1}}
    table.apply(sent[-1])  # read back
    table.apply(
        json.dumps(
            {"worker": "w2", "at": 5000.0, "held": {}, "quota": {"5": {"topic:cb": 9}}}
        ).encode()
    )
    assert book.pending("topic:cb") == 1  # not taken in yet
    exchange.exchange()
    assert book.pending("topic:cb") == 10
    assert book.admit(0, timer("b", 100), 0.0) == (REFUSE, "topic:cb")


def test_a_report_stays_small_whatever_tenants_the_requests_name() -> None:
    """Long tenant names are keyed by their digest, and a report carries at most
    ``most`` counts, the topic quotas' first: a producer naming a new tenant in every
    request cannot make a report too large to be read (1 MB), which would stop the
    rate limits' shares too."""
    long_name = "x" * 1000
    policy = QuotaPolicy({"cb": 100}, "tenant", {long_name: 7, "*": 3})
    (key,) = policy.keys_of(timer("a", 1, "other", tenant=long_name))
    assert len(key) < 60 and policy.limit(key) == 7
    (other,) = policy.keys_of(timer("a", 1, "other", tenant="y" * 1000))
    assert other != key and policy.limit(other) == 3
    book = QuotaBook(policy)
    wheel, quotas = wheel_with(policy)
    book.attach(0, quotas)
    for i in range(50):  # the topic's one timer counted last
        wheel.schedule(timer(f"t{i}", 100, "other" if i < 49 else "cb", tenant=f"tenant-{i}"))
    report = book.by_partition(most=10)[0]
    assert len(report) == 10 and report["topic:cb"] == 1
    assert len(book.by_partition()[0]) == 51


def test_a_request_without_a_share_waits_and_is_refused_after_the_longest_wait() -> None:
    """Below the quota but with no share of it to spare, a request waits (its partition
    wanted in the next report); once a share comes it is admitted, and one that waits
    :data:`WAIT_MOST_SECONDS` for none is refused."""
    policy = QuotaPolicy({"cb": 10})
    book = QuotaBook(policy)
    _, quotas = wheel_with(policy)
    book.attach(0, quotas)
    assert book.admit(0, timer("a", 100), 5.0) == (WAIT, "topic:cb")
    assert book.leases.wanted == {(0, "topic:cb"): 5.0}
    assert book.admit(0, timer("a", 100), 5.0 + WAIT_MOST_SECONDS - 0.1) == (WAIT, "topic:cb")
    book.leases.shares[(0, "topic:cb")] = 1
    assert book.admit(0, timer("a", 100), 6.0) is None
    assert book.leases.wanted == {}
    book.leases.shares[(0, "topic:cb")] = 0
    assert book.admit(0, timer("b", 100), 7.0) == (WAIT, "topic:cb")
    assert book.admit(0, timer("b", 100), 7.0 + WAIT_MOST_SECONDS) == (REFUSE, "topic:cb")
    assert book.leases.wanted == {}


def test_after_a_request_waited_its_longest_the_next_are_refused_at_once() -> None:
    """The demand topic unreadable: one request waits its longest and is refused; the
    next ones for that quota on that partition are refused at once (a worker's requests
    are not held 10 s each), until a report of this worker's is read back."""
    book = QuotaBook(QuotaPolicy({"cb": 10}))
    _, quotas = wheel_with(book.policy)
    book.attach(0, quotas)
    assert book.admit(0, timer("a", 100), 0.0) == (WAIT, "topic:cb")
    assert book.admit(0, timer("a", 100), WAIT_MOST_SECONDS) == (REFUSE, "topic:cb")
    assert book.admit(0, timer("b", 100), WAIT_MOST_SECONDS + 0.1) == (REFUSE, "topic:cb")
    book.leases.verdicts([(1, frozenset())], {0})  # read back, nothing granted
    assert book.admit(0, timer("b", 100), WAIT_MOST_SECONDS + 0.2) == (WAIT, "topic:cb")


def test_a_report_that_is_not_one_is_ignored_and_the_next_read() -> None:
    """Infinity or NaN as a count, 10,000 digits as a sequence number, a list as a claim:
    ignored, and the reports after them still count (before, Infinity raised out of
    the tail thread, which read the same record again for ever)."""
    table = DemandTable(
        replace(Settings(), worker_id="w1", topic_quotas=(("cb", 10),), partitions=1)
    )
    for bad in (
        b'{"worker": "w2", "at": 5000, "held": {}, "quota": {"0": {"topic:cb": Infinity}}}',
        b'{"worker": "w2", "at": 5000, "held": {}, "quota": {"0": {"topic:cb": NaN}}}',
        b'{"worker": "w2", "at": 5000, "held": {}, "quota": {"0": {}}, "run": "r", "seq": '
        + b"9" * 10_000
        + b"}",
        b'{"worker": "w2", "at": 5000, "held": {}, "quota": {"0": {}}, "run": "r", "seq": 1, '
        b'"claim": [1]}',
    ):
        table.apply(bad)
    assert table.quota_view(set())[0] == {}
    table.apply(b'{"worker": "w2", "at": 5000, "held": {}, "quota": {"0": {"topic:cb": 4}}}')
    assert table.quota_view(set())[0] == {"topic:cb": {0: 4}}
