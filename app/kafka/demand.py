"""The demand topic: every worker's backlog of rate-limited timers, for every worker.

``<app id>-timer-demand`` (one partition, under the app id's prefix, so no timer can
name it as its callback topic) carries one small JSON record per worker every
:data:`REPORT_SECONDS` while any topic is limited: the timers each of its partitions
holds back per limited topic. Every worker tails it (:class:`DemandTable`) and shares
each limit among the partitions by their backlogs (:mod:`app.core.rate_shares`).

Records are keyed by worker id. The topic is compacted and deleted after an hour, and a
reader starts :data:`LOOKBACK` records before the end, not at the start: what it needs is
the last few seconds, so a start costs the same after years of traffic. A report counts
for :data:`STALE_SECONDS` after it was read (and not at all if it was written longer ago
than that): a worker that dies stops counting within that time, and its partitions'
share goes to the others.

The value, JSON: ``{"worker": "w1", "at": 1767225600.25, "held": {"3": {"billing":
3000}}}`` (partition, as text, to callback topic to timers held). While pending-timer
quotas are set (:mod:`app.core.quotas`) a report also carries ``"quota": {"3":
{"topic:reminders": 412}}``: each partition's pending timers per quota key, and reports
go out whether or not a topic is limited; and this worker's shares of the quotas
(:mod:`app.core.quota_leases`): ``"run"`` (random, one per worker process), ``"seq"``
(its reports' count), ``"claim"`` (partition to key to share, where more than the count)
and ``"want"`` (keys a partition of it waits for a share of). The quota state is read
from every report in the log's order, however old (:class:`~app.core.quota_leases.QuotaLedger`):
a partition's newest report stands until another names it.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from app.core.policy import DEMAND_SUFFIX
from app.core.quota_leases import LeaseReport, QuotaLedger
from app.kafka.config import confluent_consumer, confluent_producer
from app.settings import Settings

__all__ = [
    "DEMAND_CONFIG",
    "LOOKBACK",
    "REPORT_SECONDS",
    "STALE_SECONDS",
    "DemandPublisher",
    "DemandTable",
    "demand_topic",
]

log = logging.getLogger(__name__)
_LIBRDKAFKA_LOG = logging.getLogger("kafka_timers.librdkafka.demand")

#: How often a worker reports its backlogs and retunes its buckets, seconds.
REPORT_SECONDS = 0.25
#: How long a report counts after it was read (and the oldest it may be when read).
STALE_SECONDS = 2.0
#: Records a reader starts before the end: far more than the workers' last reports.
LOOKBACK = 1000
#: Compacted (the newest report of each worker) and deleted after an hour.
DEMAND_CONFIG = {
    "cleanup.policy": "compact,delete",
    "retention.ms": str(3_600_000),
    "segment.ms": str(600_000),
    "min.compaction.lag.ms": "0",
}


def demand_topic(settings: Settings) -> str:
    """``<app id>-timer-demand``: under the app id's prefix, and ending in
    :data:`~app.core.policy.DEMAND_SUFFIX`, which every deployment refuses as a callback
    topic."""
    return f"{settings.app_id}{DEMAND_SUFFIX}"


class DemandPublisher:
    """Sends this worker's reports (fire and forget: the next one is a quarter second away)."""

    def __init__(self, settings: Settings) -> None:
        self._topic = demand_topic(settings)
        self._worker = settings.worker_id
        self._producer = Producer(
            confluent_producer(
                settings,
                logger=_LIBRDKAFKA_LOG,
                **{"linger.ms": 0, "message.timeout.ms": int(STALE_SECONDS * 1000)},
            )
        )

    def publish(
        self,
        held: Mapping[int, Mapping[str, int]],
        now: float,
        quota: Mapping[int, Mapping[str, int]] | None = None,
        lease: tuple[str, LeaseReport] | None = None,
    ) -> None:
        """Send one report: ``held`` backlogs, ``quota`` counts, and the ``lease`` (this
        worker's run and its shares' report) where quotas are set."""
        report: dict[str, Any] = {
            "worker": self._worker,
            "at": now,
            "held": {str(p): dict(topics) for p, topics in held.items()},
        }
        if quota is not None:
            report["quota"] = {str(p): dict(keys) for p, keys in quota.items()}
        if lease is not None:
            run, shares = lease
            report["run"], report["seq"], report["want"] = run, shares.seq, shares.want
            report["claim"] = {str(p): keys for p, keys in shares.claims.items()}
        value = json.dumps(report, separators=(",", ":")).encode()
        try:
            self._producer.produce(self._topic, value=value, key=self._worker.encode())
        except (BufferError, KafkaException) as exc:
            log.warning("demand report not sent (%s): the next one follows", exc)
        self._producer.poll(0)

    def close(self) -> None:
        self._producer.flush(1.0)


class _Report:
    __slots__ = ("at", "claim", "held", "quota", "read_at", "run", "seq", "want", "worker")

    def __init__(
        self,
        worker: str,
        at: float,
        held: dict[int, dict[str, int]],
        read_at: float,
        quota: dict[int, dict[str, int]] | None = None,
    ):
        self.worker = worker
        self.at = at
        self.held = held
        self.read_at = read_at
        self.quota = quota or {}
        self.run: str | None = None
        self.seq: int | None = None
        self.claim: dict[int, dict[str, int]] = {}
        self.want: frozenset[str] = frozenset()


def _counts(data: Any) -> dict[int, dict[str, int]]:
    """``{"3": {"name": 12}}`` read as partition -> name -> count (counts above 0)."""
    return {
        int(p): {str(t): int(n) for t, n in names.items() if int(n) > 0}
        for p, names in data.items()
    }


def _parse(value: bytes | None, read_at: float) -> _Report | None:
    """A report, or None for anything else (not a report: ignored)."""
    if not value or len(value) > 1_000_000:
        return None
    try:
        data = json.loads(value)
        worker = data["worker"]
        at = float(data["at"])
        held = _counts(data["held"])
        report = _Report(worker, at, held, read_at, _counts(data.get("quota") or {}))
        if "seq" in data:
            report.run, report.seq = str(data["run"]), int(data["seq"])
            report.claim = _counts(data.get("claim") or {})
            report.want = frozenset(str(key) for key in data.get("want") or ())
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError):
        return None  # Infinity as a count (int() overflows) included
    return report if isinstance(worker, str) else None


class DemandTable:
    """The latest report of every worker, read by a thread that tails the demand topic.

    :meth:`backlogs` gives, per limited topic, each partition's backlog from the newest
    current report naming the partition; :meth:`current` says whether this worker's own
    last report has been read back lately (else its view may be stale, and it falls
    back to the static split).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._topic = demand_topic(settings)
        self._me = settings.worker_id
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._reports: dict[str, _Report] = {}
        #: This worker process's mark on its reports (its shares are told from a previous
        #: run's by it), and the quota state read in the log's order (None: no quotas).
        self.run = secrets.token_hex(8)
        policy = settings.quota_policy()
        self._ledger = (
            None
            if policy is None
            else QuotaLedger(policy.limit, settings.partition_count, self._me, self.run)
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._tail, name="demand-tail", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)

    def apply(self, value: bytes | None) -> None:
        """Take one record's value (the tail calls this; so do tests): into the quota
        state whatever its age, and as the worker's latest report if it is current."""
        report = _parse(value, self._clock())
        if report is None:
            return
        wall = self._wall()
        with self._lock:
            if self._ledger is not None and report.quota:
                self._ledger.apply(
                    report.worker, report.run, report.seq, report.quota, report.claim
                )
            if wall - STALE_SECONDS <= report.at <= wall + STALE_SECONDS:
                self._reports[report.worker] = report

    def take_verdicts(self) -> list[tuple[int, frozenset[str]]]:
        """This worker's reports read back since the last call: (seq, keys whose claims
        fitted); none without quotas."""
        with self._lock:
            return [] if self._ledger is None else self._ledger.take_verdicts()

    def quota_view(
        self, mine: set[int]
    ) -> tuple[dict[str, dict[int, int]], dict[str, int], set[str]]:
        """What the log says of the quotas: per key each partition's newest count, per key
        the occupancy of the partitions not in ``mine``, and the keys other workers'
        current reports want."""
        now = self._clock()
        with self._lock:
            if self._ledger is None:
                return {}, {}, set()
            counts, occupied = self._ledger.counts(), self._ledger.occupied()
            want = {
                key
                for report in self._reports.values()
                if report.worker != self._me and now - report.read_at <= STALE_SECONDS
                for key in report.want
            }
        elsewhere = {
            key: total
            for key, by_partition in occupied.items()
            if (total := sum(n for p, n in by_partition.items() if p not in mine))
        }
        return counts, elsewhere, want

    def current(self) -> bool:
        """Whether this worker's own report was read back within :data:`STALE_SECONDS`."""
        with self._lock:
            mine = self._reports.get(self._me)
        return mine is not None and self._clock() - mine.read_at <= STALE_SECONDS

    def backlogs(self) -> dict[str, dict[int, int]]:
        """Per callback topic, the backlog of each partition, from current reports (the
        newest report naming a partition wins: after a move, its new owner's)."""
        return self._by_name(lambda report: report.held)

    def _by_name(
        self, part: Callable[[_Report], dict[int, dict[str, int]]]
    ) -> dict[str, dict[int, int]]:
        now = self._clock()
        newest: dict[int, tuple[float, dict[str, int]]] = {}
        with self._lock:
            reports = list(self._reports.values())
        for report in reports:
            if now - report.read_at > STALE_SECONDS:
                continue
            for partition, topics in part(report).items():
                seen = newest.get(partition)
                if seen is None or seen[0] < report.at:
                    newest[partition] = (report.at, topics)
        out: dict[str, dict[int, int]] = {}
        for partition, (_, topics) in newest.items():
            for topic, n in topics.items():
                out.setdefault(topic, {})[partition] = n
        return out

    def _tail(self) -> None:
        while not self._stop.is_set():
            try:
                self._follow()
            except Exception as exc:  # the next attempt starts over near the end
                log.warning("demand topic %s: %s; reading it again in 1 s", self._topic, exc)
                self._stop.wait(1.0)

    def _follow(self) -> None:
        conf: dict[str, Any] = confluent_consumer(
            self._settings,
            group_id=f"{self._settings.app_id}-demand-unused",
            logger=_LIBRDKAFKA_LOG,
            **{"enable.auto.commit": False, "fetch.wait.max.ms": 50},
        )
        consumer = Consumer(conf)
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(self._topic, 0), timeout=10)
            consumer.assign([TopicPartition(self._topic, 0, max(low, high - LOOKBACK))])
            while not self._stop.is_set():
                for msg in consumer.consume(500, 0.1):
                    if msg.error() is None:
                        self.apply(msg.value())
        finally:
            consumer.close()
