"""The worker's behaviour, between Faust's agents and the pure timer wheel.

Agents hand over decoded records; :class:`TimerService` parses and checks them, drives
one :class:`~app.core.wheel.PartitionWheel` per assigned partition, produces callbacks,
and returns only when everything it wrote is acknowledged — so a record is never
acknowledged to Kafka before its effects are durable (at-least-once).

The service is composed of its jobs, one module each, every one a class over the state
declared once in :mod:`app.worker.service_state`:

- :mod:`app.worker.service_requests`: request intake (parse, route, schedule, cancel,
  answer), one unit of work per batch;
- :mod:`app.worker.service_ticks`: ticks (held while this worker's clock is behind);
- :mod:`app.worker.service_gates`: rate limits and pauses per callback topic, the
  release rounds between ticks, and forgetting what they delivered;
- :mod:`app.worker.service_partitions`: partitions revoked, an orderly stop, an
  operator's change of one partition, the partitions' status;
- :mod:`app.worker.service_firing`: what a due timer produces, and a round delivered
  then forgotten (under the three jobs that fire);
- :mod:`app.worker.service_state`: the partitions loaded, the gauges.

Each module imports only the ones below it (an import-linter contract), and a request
goes down, not back and forth: ``tests/unit/test_request_path.py`` traces one through
:meth:`TimerService.handle_requests` and counts the times it comes back here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence

from app.core.clock_check import ClockSkewMonitor, OscillatorLead
from app.core.policy import RequestPolicy
from app.core.quotas import QuotaBook
from app.core.raw_record import RawRecord
from app.core.tick_gate import MAX_AHEAD_SECONDS, TickGate
from app.core.wheel import DEFAULT_MAX_CANCELS_IN_ADVANCE, DEFAULT_MEMORY_SECONDS
from app.worker.group_lease import GroupLease
from app.worker.metrics import WorkerMetrics
from app.worker.output_port import Output
from app.worker.service_gates import FORGET_MARGIN, FORGET_SECONDS, FORGET_SLICE, GateJob
from app.worker.service_partitions import PartitionJob
from app.worker.service_requests import UNIT_BUDGET_SECONDS, RequestJob
from app.worker.service_state import (
    CAUGHT_UP_INTERVAL,
    KEY_KINDS,
    OTHER_TOPICS,
    REREAD_PATIENCE_SECONDS,
)
from app.worker.service_ticks import RELEASE_SLACK, TickJob
from app.worker.stores import PartitionStore, StoreFactory
from app.worker.topic_directory import TopicDirectory
from app.worker.topic_gates import TopicGates
from app.worker.tracing import Tracing
from app.worker.unit_of_work import Commits
from kafka_timers_client.late import DEFAULT_POLICY, LatePolicy

__all__ = [
    "CAUGHT_UP_INTERVAL",
    "DEFAULT_MAX_TOPIC_LABELS",
    "FORGET_MARGIN",
    "FORGET_SECONDS",
    "FORGET_SLICE",
    "KEY_KINDS",
    "OTHER_TOPICS",
    "RELEASE_SLACK",
    "REREAD_PATIENCE_SECONDS",
    "UNIT_BUDGET_SECONDS",
    "TimerService",
]

#: Callback topics with a label of their own in ``kafka_timers_fired_total`` by default.
DEFAULT_MAX_TOPIC_LABELS = 100
#: Longest a batch waits for a share of a quota before it looks again, seconds (a share
#: comes with the demand exchange, every quarter second).
QUOTA_WAIT_SECONDS = 0.5


class TimerService(RequestJob, TickJob, GateJob, PartitionJob):
    """Handles request batches and ticks for the partitions this worker holds.

    The jobs' classes (see the module's docstring) hold the methods; this class sets
    the state they share and takes the request batches.
    """

    def __init__(
        self,
        *,
        policy: RequestPolicy,
        output: Output,
        metrics: WorkerMetrics,
        stores: StoreFactory,
        clock: Callable[[], float] = time.time,
        clock_skew_warn_seconds: float = 2.0,
        late_policy: LatePolicy = DEFAULT_POLICY,
        remember_seconds: int = DEFAULT_MEMORY_SECONDS,
        tick_tolerance_seconds: float = 0.0,
        tick_max_ahead_seconds: float = MAX_AHEAD_SECONDS,
        max_cancels_in_advance: int = DEFAULT_MAX_CANCELS_IN_ADVANCE,
        max_topic_labels: int = DEFAULT_MAX_TOPIC_LABELS,
        topics: TopicDirectory | None = None,
        request_partitions: int | None = None,
        lease: GroupLease | None = None,
        gates: TopicGates | None = None,
        tracing: Tracing | None = None,
        hop_secret: str | None = None,
        quotas: QuotaBook | None = None,
    ) -> None:
        self._policy = policy
        #: Pending-timer quotas per callback topic and tenant (app.core.quotas); None:
        #: none set, and a request pays one check of this attribute for them.
        self.quotas = quotas
        #: A unit ended at a request waiting for a share of a quota (app.core.quota_leases),
        #: and the event set when a share grows: the next unit waits for it, at most
        #: :data:`QUOTA_WAIT_SECONDS`.
        self._waiting_for_share = False
        self._share_grew = asyncio.Event()
        #: Signs the ``timer-hop`` of the copies this worker forwards and checks those it
        #: reads (app.core.routing): the deployment's control secret; None: unsigned.
        self._hop_secret = hop_secret
        #: Spans for schedules (here) and fires (the output's); None: tracing is off.
        self._tracing = tracing
        #: Rate limits and pauses per callback topic (app.worker.topic_gates): timers of a
        #: gated topic are held in their wheel and delivered as its partition's bucket
        #: allows, by the tick rounds and by :meth:`run_gated_release` between ticks.
        self.gates = gates or TopicGates(partitions=request_partitions or 1, clock=clock)
        #: Set when timers are held (or a gate changes): the release loop wakes.
        self._release_wanted = asyncio.Event()
        #: An orderly stop has begun (:meth:`begin_stopping`): no held timer goes out.
        self._stopping = False
        self.gates.on_change(self._release_wanted.set)
        #: Callback topics with a backlog gauge exported (set to 0 once drained).
        self._backlog_topics: set[str] = set()
        #: Until when the group cannot have given this worker's partitions away (None: not
        #: checked, as in unit tests): no tick fires after it ran out.
        self._lease = lease
        #: The request topic's partition count: a request read on a partition other than
        #: its id's owner is forwarded there (app.core.routing). None: applied where read.
        self._request_partitions = request_partitions
        #: Which callback topics exist (None: not checked, as in unit tests).
        self._topics = topics
        #: Callback topics found missing when the current tick's timers were looked up.
        self._absent: set[str] = set()
        #: The service's late-fire policy: what a timer's own policy leaves out.
        self._late = late_policy
        self._output = output
        self._metrics = metrics
        self._stores = stores
        self._clock = clock
        self._partitions = {}
        #: Every pairing of the output's commits with the stores' writes goes through it.
        self._commits = Commits(output, self._stores_held)
        self._locks: dict[int, asyncio.Lock] = {}
        self._pending: dict[int, int] = {}
        self._remember = remember_seconds
        self._max_in_advance = max_cancels_in_advance
        #: The callback topics with a ``callback_topic`` label of their own.
        self._labelled_topics: set[str] = set()
        self._max_topic_labels = max_topic_labels
        #: Tick second at which each partition's store was last marked caught up.
        self._marked: dict[int, int] = {}
        #: Where the next forget_behind starts among the partitions with some behind.
        self._forget_turn = 0
        self._skew = ClockSkewMonitor(metrics.clock_skew, clock_skew_warn_seconds, clock)
        self._lead = OscillatorLead(metrics.oscillator_ahead, clock_skew_warn_seconds)
        #: Ticks from further ahead than this worker's clock wait here (see tick_gate).
        self._gate = TickGate(tick_tolerance_seconds, tick_max_ahead_seconds)
        #: Ticks from the agent and releases of held ones never interleave.
        self._tick_lock = asyncio.Lock()
        #: Set when a tick is held, so the release loop starts waking every second.
        self._holding = asyncio.Event()
        #: Exactly-once mode runs one transaction at a time on the one producer.
        self._unit_lock = asyncio.Lock() if output.transactional else contextlib.nullcontext()

    def held_stores(self) -> dict[int, PartitionStore]:
        """The store of each partition this worker holds now (loaded), by partition."""
        return self._stores_held()

    async def handle_requests(self, records: Sequence[RawRecord]) -> None:
        """Apply a batch of request records; return once every effect is durable.

        Raises :class:`DeliveryFailure` if that cannot be established: the caller must
        then stop without acknowledging the batch. Each unit of work is
        :meth:`RequestJob._handle_requests <app.worker.service_requests.RequestJob>`.
        """
        rest = records
        while rest:
            async with self._unit_lock:
                rest = await self._handle_requests(rest)
            if self._waiting_for_share:
                # The unit ended at a request waiting for a share of a quota: the rest
                # follows once a share grows (or after a short while, to look again).
                self._waiting_for_share = False
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._share_grew.wait(), QUOTA_WAIT_SECONDS)

    def quota_shares_grew(self) -> None:
        """A share of a quota grew (app.worker.demand): a request waiting for one goes on."""
        self._share_grew.set()
