"""What every job of :class:`app.worker.service.TimerService` shares: the partitions it
holds, the state declared once, and the gauges every job keeps up to date.

:class:`ServiceState` is the base of each job's class (:mod:`app.worker.service_requests`,
:mod:`~app.worker.service_ticks`, :mod:`~app.worker.service_gates`,
:mod:`~app.worker.service_partitions`, and :mod:`~app.worker.service_firing` under the
three that fire). It declares the service's attributes, which
:meth:`TimerService.__init__ <app.worker.service.TimerService>` sets and documents, and
names the two methods one job calls in a sibling (:meth:`ServiceState._through_gates`,
:meth:`ServiceState.forget_partitions`), so that each job's module reads alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from app.core.clock_check import ClockSkewMonitor, OscillatorLead
from app.core.forecast import PartitionForecast
from app.core.keys import APPLYING, BOOKKEEPING, ORIGIN, ORIGIN_END, REQUEST_OFFSET
from app.core.policy import RequestPolicy
from app.core.quotas import PartitionQuotas, QuotaBook
from app.core.tick_gate import TickGate
from app.core.timer import Timer
from app.core.wheel import PartitionWheel
from app.worker.group_lease import GroupLease
from app.worker.metrics import WorkerMetrics
from app.worker.output_port import Output
from app.worker.stores import PartitionStore, StoreFactory
from app.worker.topic_directory import TopicDirectory
from app.worker.topic_gates import TopicGates
from app.worker.tracing import Tracing
from app.worker.unit_of_work import Commits
from kafka_timers_client.late import LatePolicy

__all__ = [
    "CAUGHT_UP_INTERVAL",
    "KEY_KINDS",
    "OTHER_TOPICS",
    "REREAD_PATIENCE_SECONDS",
    "LoadedPartition",
    "ServiceState",
]

log = logging.getLogger(__name__)

#: How often (in tick seconds) a partition's store records that it is caught up: a store
#: whose record is older than the changelog's tombstone retention is rebuilt.
CAUGHT_UP_INTERVAL = 60
#: The kinds of store keys exported per partition (``kafka_timers_store_keys{kind}``).
KEY_KINDS = ("pending", "remembered", "bookkeeping")
#: How long a partition's ticks wait for the re-read of the requests it applied before a
#: crash (:attr:`LoadedPartition.rereading`); a re-read is one unit's worth of records.
REREAD_PATIENCE_SECONDS = 120
#: The ``callback_topic`` label of every topic past the first ``max_topic_labels``.
OTHER_TOPICS = "other"


class LoadedPartition:
    """A wheel and the store it writes through."""

    def __init__(self, wheel: PartitionWheel, kv: PartitionStore) -> None:
        self.wheel = wheel
        self.kv = kv
        #: The highest origin offset applied per origin partition, of the forwarded
        #: copies this partition received, as far as it is durable (app.core.routing):
        #: read from the store when the partition is loaded, advanced after each batch.
        self.origins: dict[int, int] = {
            int(key[len(ORIGIN) :]): int(value) for key, value in kv.scan(ORIGIN, ORIGIN_END)
        }
        #: Requests up to this offset read again are a re-read after a crash: the last
        #: offset of the unit that was being applied when the store was loaded (the
        #: ``A`` key, app.core.keys), or -1 once nothing is left to re-read (reading
        #: resumes past it). Until the re-read reaches it the store may hold an older
        #: version of an id beside the effects of newer ones, so the partition fires
        #: nothing meanwhile (:attr:`rereading`).
        applying = kv.get(APPLYING)
        resumed = kv.get(REQUEST_OFFSET)
        #: The offset of the newest request applied to this partition's wheel (durable
        #: or not yet), -1 before any: each fire's audit record carries it
        #: (``request_offset``), so an audit can tell a reschedule that reached the
        #: partition after the older version fired from one that was undone.
        self.applied_offset = int(resumed) if resumed is not None else -1
        through = int(applying) if applying is not None else -1
        if resumed is not None and int(resumed) >= through:
            through = -1
        self.reread_through = through
        self._reread_until = time.monotonic() + REREAD_PATIENCE_SECONDS

    @property
    def rereading(self) -> bool:
        """Whether requests applied before a crash are still being read again: the store
        is then between two states (an id's re-read older version may stand where its
        newer one will be put back a few records on), and a tick in between would fire
        the older version: a reschedule undone. Its ticks wait; the next one after the
        re-read fires everything due up to its second. If the re-read never reaches its
        end (the records were deleted from the request topic meanwhile), the partition
        fires again after :data:`REREAD_PATIENCE_SECONDS`: late, never lost."""
        if self.reread_through < 0:
            return False
        if time.monotonic() < self._reread_until:
            return True
        log.warning(
            "requests up to offset %d applied before a crash were not read again within "
            "%d s: firing without them",
            self.reread_through,
            REREAD_PATIENCE_SECONDS,
        )
        self.reread_through = -1
        return False


class ServiceState:
    """The service's state (set and documented by ``TimerService.__init__``), the
    partitions it loads, and the gauges and labels every job keeps."""

    _policy: RequestPolicy
    _hop_secret: str | None
    _tracing: Tracing | None
    gates: TopicGates
    _release_wanted: asyncio.Event
    _stopping: bool
    _backlog_topics: set[str]
    _lease: GroupLease | None
    _request_partitions: int | None
    _topics: TopicDirectory | None
    _absent: set[str]
    _late: LatePolicy
    _output: Output
    _metrics: WorkerMetrics
    _stores: StoreFactory
    _clock: Callable[[], float]
    _partitions: dict[int, LoadedPartition]
    _commits: Commits
    _locks: dict[int, asyncio.Lock]
    _pending: dict[int, int]
    quotas: QuotaBook | None
    _waiting_for_share: bool
    _share_grew: asyncio.Event
    _remember: int
    _max_in_advance: int
    _labelled_topics: set[str]
    _max_topic_labels: int
    _marked: dict[int, int]
    _forget_turn: int
    _skew: ClockSkewMonitor
    _lead: OscillatorLead
    _gate: TickGate
    _tick_lock: asyncio.Lock
    _holding: asyncio.Event
    _unit_lock: contextlib.AbstractAsyncContextManager[Any]

    # -- what one job calls in a sibling -----------------------------------------------

    def _through_gates(
        self, partition: int, wheel: PartitionWheel, timers: list[Timer]
    ) -> list[Timer]:
        """What of a round's due ``timers`` goes out now (app.worker.service_gates)."""
        raise NotImplementedError

    def forget_partitions(self, partitions: Iterable[int]) -> None:
        """Drop the wheels of ``partitions`` (app.worker.service_partitions)."""
        raise NotImplementedError

    # -- the partitions held -------------------------------------------------------------

    async def _partition(self, p: int) -> LoadedPartition:
        part = self._partitions.get(p)
        if part is not None:
            return part
        lock = self._locks.setdefault(p, asyncio.Lock())
        async with lock:
            part = self._partitions.get(p)
            if part is None:
                loop = asyncio.get_running_loop()
                kv = await loop.run_in_executor(None, self._stores.open, p)
                book = self.quotas
                wheel = PartitionWheel(
                    kv,
                    memory_seconds=self._remember,
                    clock=self._clock,
                    max_cancels_in_advance=self._max_in_advance,
                    forecast=PartitionForecast(max_topics=self._max_topic_labels),
                    quotas=None if book is None else PartitionQuotas(book.policy),
                )
                part = LoadedPartition(wheel, kv)
                counts = await loop.run_in_executor(None, wheel.recount)
                if book is not None and wheel.quotas is not None:
                    book.attach(p, wheel.quotas)  # its counts rebuilt by the recount
                self._pending[p] = counts.timers
                self._metrics.pending.set(sum(self._pending.values()))
                self._partitions[p] = part
                self._export_keys(p, part)
                self._export_paused()
        return part

    # -- gauges and labels ---------------------------------------------------------------

    def _topic_label(self, topic: str) -> str:
        """The ``callback_topic`` label of ``topic``: its own name for the first
        :attr:`max_topic_labels` topics this worker delivers to, ``other`` after that.

        Each label value is a time series for as long as the process lives: a producer
        that names a new topic in every request must not grow them without bound.
        """
        labelled = self._labelled_topics
        if topic in labelled:
            return topic
        if len(labelled) < self._max_topic_labels:
            labelled.add(topic)
            return topic
        return OTHER_TOPICS

    @staticmethod
    def _key_counts(part: LoadedPartition) -> dict[str, int]:
        counts = part.wheel.counts
        bookkeeping = sum(1 for key in BOOKKEEPING if part.kv.get(key) is not None)
        bookkeeping += part.wheel.delivered_batches + len(part.origins)
        return {
            "pending": counts.pending,
            "remembered": counts.remembered,
            "bookkeeping": bookkeeping,
        }

    def _export_keys(self, partition: int, part: LoadedPartition) -> None:
        """Set the store-key gauges of ``partition`` from the wheel's running counts."""
        for kind, count in self._key_counts(part).items():
            self._metrics.store_keys.labels(str(partition), kind).set(count)
        self._metrics.cancels_in_advance.labels(str(partition)).set(part.wheel.counts.in_advance)

    def _export_paused(self) -> None:
        self._metrics.timers_paused.set(
            sum(part.wheel.paused_count for part in self._partitions.values())
        )

    def _export_behind(self) -> None:
        self._metrics.forget_behind.set(
            sum(part.wheel.behind for part in self._partitions.values())
        )

    def _export_backlog(self) -> None:
        """The backlog gauge per gated topic: timers held on this worker's partitions."""
        backlog: dict[str, int] = {}
        for part in self._partitions.values():
            wheel = part.wheel
            if wheel.holding:
                for topic in wheel.held_topics():
                    label = self._topic_label(topic)
                    backlog[label] = backlog.get(label, 0) + wheel.held_count(topic)
        for label in self._backlog_topics - backlog.keys():
            self._metrics.rate_limit_backlog.labels(callback_topic=label).set(0)
        for label, n in backlog.items():
            self._metrics.rate_limit_backlog.labels(callback_topic=label).set(n)
        self._backlog_topics = set(backlog) | (self._backlog_topics & set(self.gates.gated))

    def _adjust_pending(self, partition: int, delta: int) -> None:
        self._pending[partition] = self._pending.get(partition, 0) + delta
        self._metrics.pending.set(sum(self._pending.values()))

    def _stores_held(self) -> dict[int, PartitionStore]:
        """The store of each partition loaded: what the unit of work pairs commits with."""
        return {p: part.kv for p, part in self._partitions.items()}

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)
