"""Fault-injection helpers: a timer load with known answers, a fire log, and the verdict.

A fault test schedules many timers whose ids, due seconds and partitions it knows, hurts
the running processes, and then checks every callback against that plan. The checks are
strict (nothing lost, nothing early, duplicates only inside the at-least-once window); the
waits are generous, because the machines are small and shared.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from confluent_kafka import Producer

from app.core.fired import FiredKind, FiredRecord
from app.core.routing import owner_of
from app.dev.stack import ServiceProcess
from app.kafka.config import confluent_producer
from app.kafka.records import Record, TopicReader
from app.settings import Settings
from kafka_timers_client import protowire
from tests.support.stack import Stack
from tests.support.waiting import keep_reading, wait_until

__all__ = [
    "FaultScene",
    "Fire",
    "FireWatch",
    "Planned",
    "Verdict",
    "deliberate_fault_window",
    "schedule_spread",
]


@dataclass(frozen=True)
class Planned:
    """One timer the test scheduled, and where it lives."""

    #: Timer id (also the request key and the ``timer-id`` header of its callback).
    id: str
    #: Epoch second it is due; a callback stamped before ``due * 1000`` ms is early.
    due: int
    #: Partition of the request topic, hence of the table and of the ticks that fire it.
    partition: int


@dataclass(frozen=True)
class Fire:
    """One ``fired`` audit record: who fired which timer, where, and when."""

    id: str
    due: int
    partition: int
    worker: str
    #: The firing worker's clock when it produced the callback, epoch ms.
    fired_at_ms: int


def schedule_spread(
    settings: Settings,
    callback_topic: str,
    count: int,
    first_due: int,
    last_due: int,
    prefix: str = "t",
) -> dict[str, Planned]:
    """Schedule ``count`` timers due evenly from ``first_due`` to ``last_due`` (inclusive).

    Requests are produced with librdkafka straight to the partition that owns each id
    (a request elsewhere would be forwarded there: app.core.routing), computed here, so
    the test knows each timer's partition without trusting a producer's partitioner. Each
    callback's key is ``p<partition>``: all callbacks of one table partition land on one
    callback partition, in the order the worker produced them, so per-partition firing
    order can be read back.
    """
    producer = Producer(confluent_producer(settings, **{"linger.ms": 20}))
    span = last_due - first_due + 1
    planned: dict[str, Planned] = {}
    for i in range(count):
        timer_id = f"{prefix}{i:05d}"
        due = first_due + i * span // count
        partition = owner_of(timer_id, settings.partitions)
        value = protowire.encode(
            protowire.Future(
                callback_topic=callback_topic,
                callback_key=f"p{partition}",
                callback=timer_id.encode(),
                id=timer_id,
                token="tok",
                due=due,
            )
        )
        while True:
            try:
                producer.produce(
                    settings.topics.requests, value, timer_id.encode(), partition=partition
                )
                break
            except BufferError:
                producer.poll(0.05)
        planned[timer_id] = Planned(timer_id, due, partition)
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} timer requests not acknowledged by the broker"
    return planned


def deliberate_fault_window(seconds: float) -> None:
    """Let a fault last ``seconds`` (an outage of fixed length), polling nothing.

    This is the fault itself, not a wait for a result: nothing is expected to happen
    during it, and the test checks afterwards that everything due inside it still fires.
    """
    time.sleep(seconds)


class FireWatch:
    """Follows the callback topic and the audit topic while a fault test runs."""

    def __init__(self, settings: Settings, callback_topic: str) -> None:
        self.callbacks = TopicReader(settings, callback_topic)
        self.audit = TopicReader(settings, settings.topics.fired)

    def poll(self, timeout: float = 0.1) -> None:
        self.callbacks.poll(timeout)
        self.audit.poll(timeout)

    def fires(self) -> list[Fire]:
        """Every ``fired`` audit record so far, in arrival order."""
        out = []
        for record in self.audit.records:
            fired = FiredRecord.from_json(record.value or b"{}")
            if fired.event is FiredKind.FIRED:
                assert fired.due is not None and fired.fired_at_ms is not None
                out.append(
                    Fire(fired.id, fired.due, fired.partition, fired.worker, fired.fired_at_ms)
                )
        return out

    def fired_ids(self) -> set[str]:
        return {(r.header("timer-id") or b"").decode() for r in self.callbacks.records}

    def wait(self, probe: Callable[[FireWatch], object], timeout: float, what: str) -> None:
        """Read on until ``probe(self)`` is truthy; fail with ``what`` at the deadline."""

        def state() -> str:
            return (
                f"{what}; {len(self.fired_ids())} timers fired so far, last owner by "
                f"partition {dict(sorted(owners(self.fires()).items()))}: see the worker logs"
            )

        wait_until(lambda: probe(self), timeout, state, between=self.poll)

    def wait_all_fired(self, ids: Iterable[str], timeout: float) -> None:
        """Read on until every id in ``ids`` has a callback, or the deadline passes.

        Does not fail at the deadline: the verdict then names exactly what was lost.
        """
        wanted = set(ids)
        with contextlib.suppress(AssertionError):
            wait_until(
                lambda: wanted <= self.fired_ids(),
                timeout,
                "every timer to fire",
                between=lambda: self.poll(0.2),
            )

    def drain_stragglers(self, seconds: float = 2.0) -> None:
        """Keep reading a little after the last expected callback: a duplicate on its
        way (a redelivered tick, a second oscillator) would arrive in this time."""
        keep_reading(self.poll, seconds)
        self.audit.read_to_end()
        self.callbacks.read_to_end()

    def close(self) -> None:
        self.callbacks.close()
        self.audit.close()

    def __enter__(self) -> FireWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class FaultScene:
    """What every fault test starts from: an oscillator or two, its workers, a plan of
    timers firing to its own callback topic, and a watch on callbacks and audit records.

    :meth:`start` returns once every partition has fired and every worker owns one: the
    group is stable and the fault can be injected. The caller closes :attr:`watch`.
    """

    stack: Stack
    #: The callback topic every planned timer fires to.
    topic: str
    oscillators: list[ServiceProcess]
    #: The workers started with the scene, by name.
    workers: dict[str, ServiceProcess]
    watch: FireWatch
    plan: dict[str, Planned]

    #: Recovery and catch-up are logged at info: a failing fault test must be
    #: diagnosable from the worker logs alone.
    LOGLEVEL = "info"

    @property
    def settings(self) -> Settings:
        return self.stack.settings

    def worker(self, name: str, *, log_name: str | None = None) -> ServiceProcess:
        """Start a worker (again): same name, so the same ``worker_id`` and data directory;
        ``log_name`` keeps a restarted worker's log apart from its predecessor's."""
        return self.stack.worker(name, loglevel=self.LOGLEVEL, log_name=log_name)

    def pending(self) -> int:
        """Planned timers without a callback yet."""
        return len(self.plan) - len(self.watch.fired_ids() & self.plan.keys())

    @classmethod
    def start(
        cls,
        stack: Stack,
        fault: str,
        *,
        workers: list[str],
        timers: int,
        last_due_in: int,
        startup_timeout: float,
        oscillators: tuple[str, ...] = ("oscillator-1",),
    ) -> FaultScene:
        """Start the processes, schedule ``timers`` due from 3 s to ``last_due_in`` s from
        now (see :func:`schedule_spread`), and wait until ``workers`` share every partition.
        """
        topic = stack.callback_topic(f"cb-{fault}-{stack.settings.app_id}")
        started_oscillators = [stack.oscillator(name) for name in oscillators]
        started_workers = {name: stack.worker(name, loglevel=cls.LOGLEVEL) for name in workers}
        watch = FireWatch(stack.settings, topic)
        try:
            now = int(time.time())
            plan = schedule_spread(stack.settings, topic, timers, now + 3, now + last_due_in)
            partitions = stack.settings.partitions
            watch.wait(
                lambda w: (
                    len(o := owners(w.fires())) == partitions and set(o.values()) == set(workers)
                ),
                startup_timeout,
                f"{sorted(workers)} to share all {partitions} partitions",
            )
        except BaseException:
            watch.close()
            raise
        return cls(stack, topic, started_oscillators, started_workers, watch, plan)


@dataclass
class Verdict:
    """Every callback checked against the plan."""

    scheduled: int
    #: Timers with no callback at all.
    lost: list[str]
    #: ``id@timestamp<due`` for every callback stamped before its second.
    early: list[str]
    #: Callbacks beyond the first, per timer id.
    extra: Counter[str]
    #: Callbacks for ids the test never scheduled.
    unknown: list[str]
    #: How many timers were lost, per partition (a lost partition shows at once).
    lost_by_partition: dict[int, int] = field(default_factory=dict)
    callbacks: list[Record] = field(default_factory=list, repr=False)

    @classmethod
    def of(cls, plan: dict[str, Planned], watch: FireWatch) -> Verdict:
        counts: Counter[str] = Counter()
        early, unknown = [], []
        for record in watch.callbacks.records:
            timer_id = (record.header("timer-id") or b"").decode()
            counts[timer_id] += 1
            timer = plan.get(timer_id)
            if timer is None:
                unknown.append(timer_id)
            elif record.timestamp_ms < timer.due * 1000:
                early.append(f"{timer_id}@{record.timestamp_ms}<{timer.due * 1000}")
        for fire in watch.fires():
            if fire.id in plan and fire.fired_at_ms < fire.due * 1000:
                early.append(f"{fire.id}@audit {fire.fired_at_ms}<{fire.due * 1000}")
        lost = sorted(set(plan) - set(counts))
        extra = Counter({k: n - 1 for k, n in counts.items() if n > 1})
        by_partition = dict(sorted(Counter(plan[i].partition for i in lost).items()))
        return cls(
            len(plan), lost, early, extra, unknown, by_partition, list(watch.callbacks.records)
        )

    @property
    def duplicates(self) -> int:
        return sum(self.extra.values())

    def assert_none_lost_early_or_unknown(self, report: str) -> None:
        """The promise every fault test checks: nothing lost, nothing early, nothing made up."""
        assert not self.lost, report
        assert not self.early, report
        assert not self.unknown, report

    def summary(self) -> str:
        return (
            f"scheduled={self.scheduled} lost={len(self.lost)} early={len(self.early)} "
            f"duplicates={self.duplicates} (timers fired twice or more: {len(self.extra)}) "
            f"unknown={len(self.unknown)}"
            + (
                f"; lost by partition {self.lost_by_partition}, e.g. {self.lost[:5]}"
                if self.lost
                else ""
            )
            + (f"; early e.g. {self.early[:5]}" if self.early else "")
        )


def first_fire_by_others(
    fires: list[Fire], partitions: set[int], not_worker: str, after_ms: int
) -> dict[int, int]:
    """Per partition, the first fire at or after ``after_ms`` by a worker other than
    ``not_worker``: when each of its former partitions was taken over."""
    first: dict[int, int] = {}
    for fire in fires:
        if (
            fire.partition in partitions
            and fire.worker != not_worker
            and fire.fired_at_ms >= after_ms
            and fire.fired_at_ms < first.get(fire.partition, 1 << 62)
        ):
            first[fire.partition] = fire.fired_at_ms
    return first


def owners(fires: list[Fire], before_ms: int | None = None) -> dict[int, str]:
    """Who last fired on each partition (before ``before_ms``): the partition's owner."""
    latest: dict[int, Fire] = {}
    for fire in fires:
        if before_ms is not None and fire.fired_at_ms >= before_ms:
            continue
        if fire.partition not in latest or fire.fired_at_ms >= latest[fire.partition].fired_at_ms:
            latest[fire.partition] = fire
    return {p: f.worker for p, f in latest.items()}


def unexplained_duplicates(fires: list[Fire], extra: Iterable[str], window_ms: int) -> list[str]:
    """Duplicates outside the at-least-once window.

    A duplicate is explained only when a partition changed hands: the first fire was by
    the old owner, within ``window_ms`` of its last fire on that partition before the
    second (the tick in flight when it lost the partition), and the second by another
    worker. Anything else
    — the same worker firing twice, or a refire of something fired long before the
    handover — is a bug, not at-least-once.
    """
    by_id: dict[str, list[Fire]] = defaultdict(list)
    for fire in fires:
        by_id[fire.id].append(fire)
    times_by_owner: dict[tuple[str, int], list[int]] = defaultdict(list)
    for fire in fires:
        times_by_owner[(fire.worker, fire.partition)].append(fire.fired_at_ms)
    bad = []
    for timer_id in extra:
        seen = sorted(by_id[timer_id], key=lambda f: f.fired_at_ms)
        if len(seen) < 2:
            bad.append(f"{timer_id}: {len(seen)} audit record(s) for a duplicated callback")
            continue
        first, rest = seen[0], seen[1:]
        # The old owner's last fire on that partition before the new owner fired it again:
        # a worker may get the partition back later (a thawed one, after the rebalance),
        # and its fires after that say nothing of the handover.
        handover_end = max(
            (t for t in times_by_owner[(first.worker, first.partition)] if t < rest[0].fired_at_ms),
            default=first.fired_at_ms,
        )
        if any(f.worker == first.worker for f in rest):
            bad.append(f"{timer_id}: fired twice by {first.worker}")
        elif handover_end - first.fired_at_ms > window_ms:
            bad.append(
                f"{timer_id}: first fired by {first.worker} "
                f"{handover_end - first.fired_at_ms} ms before it last fired on "
                f"partition {first.partition}: outside the at-least-once window"
            )
    return bad
