"""The worker's behaviour, between Faust's agents and the pure timer wheel.

Agents hand over decoded records; this class parses and checks them, drives one
:class:`~app.core.wheel.PartitionWheel` per assigned partition, produces callbacks, and
returns only when everything it wrote is acknowledged — so a record is never
acknowledged to Kafka before its effects are durable (at-least-once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from app.core.budget import check_fits
from app.core.clock_check import ClockSkewMonitor, OscillatorLead
from app.core.errors import RejectedRequest, RejectReason, SystemicFailure
from app.core.fired import SkipReason
from app.core.firing import StepKind, next_occurrence, plan
from app.core.forecast import PartitionForecast
from app.core.keys import (
    APPLYING,
    BOOKKEEPING,
    ORIGIN,
    ORIGIN_END,
    REQUEST_OFFSET,
    origin_key,
)
from app.core.late import DEFAULT_POLICY, LatePolicy
from app.core.policy import RequestPolicy
from app.core.raw_record import RawRecord
from app.core.request_format import parse_request
from app.core.routing import (
    Origin,
    check_forwardable,
    hop_value,
    is_replayed,
    owner_of,
    split_hop,
)
from app.core.tick_gate import MAX_AHEAD_SECONDS, TickGate
from app.core.timer import Cancel, Timer, TokenAction
from app.core.wheel import (
    DEFAULT_MAX_CANCELS_IN_ADVANCE,
    DEFAULT_MEMORY_SECONDS,
    CancelOutcome,
    PartitionWheel,
    PauseOutcome,
    Scheduled,
)
from app.worker.group_lease import GroupLease
from app.worker.isolation import is_systemic, rejection_for
from app.worker.metrics import WorkerMetrics, observe_many
from app.worker.output import DeliveryFailure, Output, TransactionAborted
from app.worker.stores import PartitionStore, StoreFactory
from app.worker.topic_directory import TopicDirectory
from app.worker.topic_gates import RELEASE_INTERVAL, TopicGates
from app.worker.tracing import Tracing
from app.worker.unit_of_work import Commits, Unit

__all__ = ["KEY_KINDS", "TimerService"]

log = logging.getLogger(__name__)

#: How often (in tick seconds) a partition's store records that it is caught up: a store
#: whose record is older than the changelog's tombstone retention is rebuilt.
CAUGHT_UP_INTERVAL = 60
#: The kinds of store keys exported per partition (``kafka_timers_store_keys{kind}``).
KEY_KINDS = ("pending", "remembered", "bookkeeping")
#: Work one request unit may do before it ends and lets the event loop run (ticks,
#: heartbeats, HTTP): the rest of the batch follows in the next unit.
UNIT_BUDGET_SECONDS = 0.02
#: How long a partition's ticks wait for the re-read of the requests it applied before a
#: crash (:attr:`_Partition.rereading`); a re-read is one unit's worth of records.
REREAD_PATIENCE_SECONDS = 120
#: Callback topics with a label of their own in ``kafka_timers_fired_total`` by default.
DEFAULT_MAX_TOPIC_LABELS = 100
#: The ``callback_topic`` label of every topic past them.
OTHER_TOPICS = "other"
#: Longest reason detail a dead letter carries (its ``dlq-detail`` header), bytes.
_DETAIL_BYTES = 1000
#: Added to each sleep of the release loop, so it wakes just past the second boundary.
RELEASE_SLACK = 0.001
#: Delivered held timers one partition forgets at a time (PartitionWheel.forget_behind):
#: a few milliseconds of work, so the next release round or tick waits little.
FORGET_SLICE = 64
#: Work a turn of the release loop spends forgetting once nothing is held, seconds,
#: before it lets the event loop run.
FORGET_SECONDS = 0.02
#: Spare time between two release rounds left unspent by forgetting, seconds.
FORGET_MARGIN = 0.005


def _delay_summary(metrics: WorkerMetrics, label: str) -> dict[str, Any]:
    """p50 and p99 (bucket upper bounds) and count of the gate's delay for ``label``."""
    cumulative: list[tuple[float, float]] = []
    for family in metrics.rate_limit_delay.collect():
        for sample in family.samples:
            if sample.name.endswith("_bucket") and sample.labels.get("callback_topic") == label:
                cumulative.append((float(sample.labels["le"]), sample.value))
    cumulative.sort()
    total = cumulative[-1][1] if cumulative else 0.0

    def quantile(q: float) -> float | None:
        for bound, n in cumulative:
            if total and n >= q * total:
                return bound
        return None

    return {"delay_p50": quantile(0.5), "delay_p99": quantile(0.99), "delayed": int(total)}


def _where(record: RawRecord) -> str:
    """``topic[partition]@offset``: how logs and errors name a request record."""
    return f"{record.topic}[{record.partition}]@{record.offset}"


@dataclass
class _Fired:
    """What one partition's tick delivered, and the successor of each series that goes on."""

    delivered: list[Timer] = field(default_factory=list)
    successors: dict[str, Timer] = field(default_factory=dict)


class _Partition:
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


class TimerService:
    """Handles request batches and ticks for the partitions this worker holds."""

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
    ) -> None:
        self._policy = policy
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
        self._partitions: dict[int, _Partition] = {}
        #: Every pairing of the output's commits with the stores' writes goes through it.
        self._commits = Commits(
            output, lambda: {p: part.kv for p, part in self._partitions.items()}
        )
        self._locks: dict[int, asyncio.Lock] = {}
        self._pending: dict[int, int] = {}
        self._remember = remember_seconds
        self._max_in_advance = max_cancels_in_advance
        #: The callback topics with a ``callback_topic`` label of their own.
        self._labelled_topics: set[str] = set()
        self._max_topic_labels = max_topic_labels
        #: Tick second at which each partition's store was last marked caught up.
        self._marked: dict[int, int] = {}
        self._skew = ClockSkewMonitor(metrics.clock_skew, clock_skew_warn_seconds, clock)
        self._lead = OscillatorLead(metrics.oscillator_ahead, clock_skew_warn_seconds)
        #: Ticks from further ahead than this worker's clock wait here (see tick_gate).
        self._gate = TickGate(tick_tolerance_seconds, tick_max_ahead_seconds)
        #: Ticks from the agent and releases of held ones never interleave.
        self._tick_lock = asyncio.Lock()
        #: Set when a tick is held, so the release loop starts waking every second.
        self._holding = asyncio.Event()
        #: Exactly-once mode runs one transaction at a time on the one producer.
        self._unit_lock: contextlib.AbstractAsyncContextManager[Any] = (
            asyncio.Lock() if output.transactional else contextlib.nullcontext()
        )

    # -- partition lifecycle ------------------------------------------------------

    def forget_partitions(self, partitions: Iterable[int]) -> None:
        """Drop wheels of partitions revoked or reassigned: Faust reopens their stores.

        A tick held for one of them is dropped too: held ticks are never fired on a
        partition this worker may no longer own, and the next tick holds again.
        """
        partitions = list(partitions)
        self._gate.forget(partitions)
        self.gates.forget(partitions)  # a later owner starts their buckets empty
        for p in partitions:
            self._partitions.pop(p, None)
            self._pending.pop(p, None)
            self._marked.pop(p, None)
            with contextlib.suppress(KeyError):  # a partition given away stops exporting it
                self._metrics.last_tick.remove(str(p))
            with contextlib.suppress(KeyError):
                self._metrics.cancels_in_advance.remove(str(p))
            for kind in KEY_KINDS:
                with contextlib.suppress(KeyError):
                    self._metrics.store_keys.remove(str(p), kind)
        self._metrics.pending.set(sum(self._pending.values()))
        self._export_paused()
        self._export_behind()
        if self._backlog_topics:
            self._export_backlog()

    def begin_stopping(self) -> None:
        """An orderly stop has begun (the first SIGTERM or SIGINT): deliver no more held
        timers (no release round, and ticks take none from the held ones) and forget
        nothing more left behind; :meth:`forget_all_behind` then makes what rounds left
        to forget durable for the next owner. Ticks go on firing the timers of topics
        with no limit until Faust stops them, each round forgotten with its own flush,
        as before. Without this, a worker in the middle of a limited backlog went on
        delivering held timers through Faust's whole stop sequence, ran out of its 10 s
        grace, and the rounds it delivered after the records were flushed went out
        again from the next owner. Held timers not delivered now are not lost: they
        are pending, below the watermark, and the next owner holds them again."""
        if not self._stopping:
            log.info("stopping: no held timer is delivered from now on")
        self._stopping = True

    async def revoke_partitions(self, partitions: Iterable[int]) -> None:
        """:meth:`forget_partitions` once no tick is being fired: a release of held ticks
        that is under way finishes before its partitions go (Faust waits for its agents
        before a revocation, but the release loop is not an agent). What rounds
        delivered and left to forget on them is made durable first (their records,
        :meth:`PartitionWheel._record_behind`), so that the next owner (this worker
        after a restart included) reads it back and forgets it, without delivering it
        again. It used to be forgotten here: about 20 µs a timer, so a rebalance in
        the middle of a limited million waited seconds for it, and a stop's 10 s grace
        ran out with half of 278,790 not forgotten (delivered twice by the next owner)."""
        partitions = set(partitions)
        async with self._tick_lock:
            await self._make_behind_durable(partitions)
            self.forget_partitions(partitions)

    async def forget_all_behind(self) -> None:
        """Make durable what rounds delivered and left to forget on every partition: an
        orderly stop calls this (Faust stops without revoking), so that the next owner
        reads it back instead of delivering those timers again."""
        async with self._tick_lock:
            await self._make_behind_durable(set(self._partitions))

    async def _make_behind_durable(self, partitions: set[int]) -> None:
        if not any(part.wheel.behind for p, part in self._partitions.items() if p in partitions):
            return
        try:
            await self._commits.flush()
        except DeliveryFailure as exc:  # the next owner delivers them again: at least once
            log.warning("timers delivered and left to forget not recorded durably: %s", exc)

    async def _partition(self, p: int) -> _Partition:
        part = self._partitions.get(p)
        if part is not None:
            return part
        lock = self._locks.setdefault(p, asyncio.Lock())
        async with lock:
            part = self._partitions.get(p)
            if part is None:
                loop = asyncio.get_running_loop()
                kv = await loop.run_in_executor(None, self._stores.open, p)
                wheel = PartitionWheel(
                    kv,
                    memory_seconds=self._remember,
                    clock=self._clock,
                    max_cancels_in_advance=self._max_in_advance,
                    forecast=PartitionForecast(max_topics=self._max_topic_labels),
                )
                part = _Partition(wheel, kv)
                counts = await loop.run_in_executor(None, wheel.recount)
                self._pending[p] = counts.timers
                self._metrics.pending.set(sum(self._pending.values()))
                self._partitions[p] = part
                self._export_keys(p, part)
                self._export_paused()
        return part

    # -- requests -------------------------------------------------------------------

    async def request_offset(self, p: int) -> int | None:
        """Offset of the last request applied to partition ``p`` (from its table)."""
        raw = (await self._partition(p)).kv.get(REQUEST_OFFSET)
        return int(raw) if raw is not None else None

    async def handle_requests(self, records: Sequence[RawRecord]) -> None:
        """Apply a batch of request records; return once every effect is durable.

        Raises :class:`DeliveryFailure` if that cannot be established: the caller must
        then stop without acknowledging the batch.
        """
        rest = records
        while rest:
            async with self._unit_lock:
                rest = await self._handle_requests(rest)

    async def _handle_requests(self, records: Sequence[RawRecord]) -> Sequence[RawRecord]:
        """Apply records of the batch as one unit; return those left for the next unit.

        Work between two awaits holds the event loop: a batch of large records (2,000
        cancels with 1 KB ids took 0.4 s) would hold back ticks, heartbeats and HTTP. So
        after each :data:`UNIT_BUDGET_SECONDS` of work the loop runs in between. In
        at-least-once mode the unit goes on after that pause: its local writes so far
        are applied first, as at a unit's end (a tick that runs meanwhile scans them),
        and the whole batch is still one flush. Ending the unit there instead cost a
        flush and its broker round trip per 20 ms of work (about six per 2,000-request
        batch: 439 flushes for 150,000 requests against 76, and 1.45 against 0.75 s of
        waiting in the quick ingest bench). In exactly-once mode a unit is a transaction
        holding the unit lock that ticks take, so it ends at the budget and the rest
        follows in the next one.
        """
        fired_now: list[tuple[_Partition, Timer]] = []
        delivered: list[Timer] = []
        now = self._clock()
        # Each partition is loaded (and caught up) before the unit, and looked up once per
        # batch: an await per record cost about a microsecond of a request's ~30.
        parts = {p: await self._partition(p) for p in {r.partition for r in records}}
        # Counted per batch and applied once at the end (the gauge sums every partition).
        scheduled = 0
        pending_delta = dict.fromkeys(parts, 0)
        check = self._policy.check
        max_record = self._output.max_record_bytes
        routed = self._request_partitions
        gated = self.gates.gated
        # The batch's local writes reach each partition's store as one write (one
        # RocksDB WriteBatch: well under a microsecond a key, where a put costs about 2),
        # and the wheel reads them back meanwhile. They are applied before the flush,
        # as single writes were, so what a failed flush leaves locally is unchanged.
        unit = self._commits.begin(part.kv for part in parts.values())
        unit.ahead_of_changelog()
        if not self._output.transactional:
            # Before anything the unit changes, in the changelog as in the store: a store
            # holding any of its effects knows the unit was under way (see reread).
            ends: dict[int, int] = {}
            for record in records:
                ends[record.partition] = record.offset
            for p, end in ends.items():
                parts[p].kv.put(APPLYING, b"%d" % end)
        deadline = time.perf_counter() + UNIT_BUDGET_SECONDS
        pause_within = not self._output.transactional
        handled = len(records)
        # The highest origin offsets applied so far, with this unit's copies: made
        # durable with the unit, and the partitions' own only once it is.
        applied: dict[int, dict[int, int]] = {}
        try:
            for i, record in enumerate(records):
                if not i & 15 and i and time.perf_counter() > deadline:
                    if not pause_within:
                        handled = i
                        break
                    await self._let_the_loop_run(unit)
                    deadline = time.perf_counter() + UNIT_BUDGET_SECONDS
                part = parts[record.partition]
                reread_through = part.reread_through
                if reread_through >= 0 and record.offset >= reread_through:
                    # The last request applied before the crash: the store is whole
                    # again after it, and this partition's ticks fire again.
                    part.reread_through = -1
                reread = record.offset <= reread_through
                # Everything one record causes happens inside this try: whatever it
                # raises, the record is dead-lettered and the next one is read, unless
                # the system itself is failing (app.worker.isolation draws the line).
                try:
                    if record.headers:
                        record, origin = split_hop(record, routed, self._hop_secret)
                        if origin is not None:
                            marks = applied.get(record.partition)
                            if marks is None:
                                marks = applied[record.partition] = dict(part.origins)
                            if is_replayed(origin, marks):
                                self._replayed(record, origin)
                                continue
                    request = parse_request(record, now)
                    if (
                        routed
                        and owner_of(request.id, routed) != record.partition
                        and self._forwarded(part, record, request)
                    ):
                        continue
                    if isinstance(request, Cancel):
                        self._cancel(part, record, request)
                        continue
                    if self._tracing is not None:
                        request = self._tracing.scheduled(record, request)
                    check(request, now)
                    check_fits(request, max_record)
                    # Read again after a crash, with the store perhaps holding what came
                    # after it: a request whose second passed waits for the next tick
                    # instead of firing at once, so a newer version later in the re-read
                    # replaces it again rather than following a fire of the old one.
                    accepted = part.wheel.schedule(request, reread=reread)
                    if accepted.outcome is Scheduled.STORED:
                        scheduled += 1
                        if not accepted.replaced:
                            pending_delta[record.partition] += 1
                    elif accepted.outcome is Scheduled.FIRE_NOW:
                        scheduled += 1
                        if gated and request.topic in gated:
                            # Its topic is limited or paused: held like a tick's timers
                            # (stored, the watermark below it), never fired past the gate.
                            part.wheel.hold_due(request, self._clock())
                            if not accepted.replaced:
                                pending_delta[record.partition] += 1
                            self._release_wanted.set()
                            continue
                        through = part.wheel.ticked_through
                        assert through is not None  # FIRE_NOW: its second has been ticked
                        sent, successor = self._fire(
                            request, through, record.partition, self._now_ms()
                        )
                        delivered.extend(sent)
                        if successor is not None:
                            # A series goes on: its next occurrence is stored in this unit,
                            # with the fire (never after it: a crash in between would end
                            # the series).
                            part.wheel.store_successor(successor)
                            if not accepted.replaced:
                                pending_delta[record.partition] += 1
                            continue
                        if accepted.replaced:
                            pending_delta[record.partition] -= 1
                        fired_now.append((part, request))
                    elif accepted.outcome is Scheduled.WRONG_TOKEN:
                        self._refused(record, request)
                    else:  # dropped: never silently
                        self._dropped(record, request, accepted.outcome)
                except Exception as exc:
                    if is_systemic(exc):
                        raise
                    self._reject(record, *rejection_for(exc, _where(record)))
        finally:
            unit.apply_local()
        if scheduled:
            self._metrics.scheduled.inc(scheduled)
        if any(pending_delta.values()):
            for p, delta in pending_delta.items():
                self._pending[p] = self._pending.get(p, 0) + delta
            self._metrics.pending.set(sum(self._pending.values()))
        if self._output.transactional:
            for part, timer in fired_now:  # atomically with the callbacks
                part.wheel.mark_fired(timer)
        # Where the next owner of each partition resumes (Unit.put_resume_offset). In
        # at-least-once mode produced after the flush, it is durable with the next one; a
        # crash before that reads the batch again, which is harmless (second copies are
        # dropped by their owner, a re-read fires nothing at once).
        records, rest = records[:handled], records[handled:]
        last: dict[int, int] = {}
        for record in records:
            last[record.partition] = max(record.offset, last.get(record.partition, -1))
        for p, offset in last.items():
            unit.put_resume_offset(parts[p].kv, b"%d" % offset)
        # Likewise the highest origin offsets of the forwarded copies applied: were they
        # written locally before the batch is durable, a worker restarting on its own
        # data would drop the copies the batch re-reads instead of applying them again.
        for p, key, value in self._advanced_origins(parts, applied):
            unit.put_after_commit(parts[p].kv, key, value)
        try:
            await unit.commit(record=False)
        except TransactionAborted as exc:
            raise DeliveryFailure(f"request batch not committed: {exc}") from exc
        for p, marks in applied.items():
            parts[p].origins = marks
        if not self._output.transactional:
            for part, timer in fired_now:  # only once delivered; durable with the next unit
                part.wheel.mark_fired(timer)
        self._account_fired(delivered)
        self._commits.record_persisted()
        for p, part in parts.items():
            self._export_keys(p, part)
        return rest

    @staticmethod
    def _advanced_origins(
        parts: dict[int, _Partition], applied: dict[int, dict[int, int]]
    ) -> list[tuple[int, bytes, bytes]]:
        """``(partition, key, value)`` of each origin offset this unit advanced."""
        return [
            (p, origin_key(origin), b"%d" % offset)
            for p, marks in applied.items()
            for origin, offset in marks.items()
            if parts[p].origins.get(origin) != offset
        ]

    def _replayed(self, record: RawRecord, origin: Origin) -> None:
        """Drop a forwarded copy its owner has applied already: its forwarder was stopped
        before its batch was durable and forwarded it again (see app.core.routing)."""
        self._metrics.forwards_replayed.inc()
        log.debug(
            "request %s dropped: a copy of %d@%d applied already",
            _where(record),
            origin.partition,
            origin.offset,
        )

    @staticmethod
    async def _let_the_loop_run(unit: Unit) -> None:
        """Pause a unit so the event loop runs (ticks, heartbeats, HTTP): Unit.pause."""
        await unit.pause()

    def _forwarded(self, part: _Partition, record: RawRecord, request: Timer | Cancel) -> bool:
        """Forward ``request``, read off its id's owner partition, to the owner; False
        when it stays: an id this partition still holds pending (see
        :mod:`app.core.routing`; a request without an id goes to its derived id's owner)."""
        held = part.wheel.lookup(request.id)
        if held is not None and held[0] == "pending":
            return False
        assert self._request_partitions is not None
        owner = owner_of(request.id, self._request_partitions)
        check_forwardable(record, self._output.max_record_bytes)
        self._output.forward(record, owner, hop_value(record, self._hop_secret))
        self._metrics.forwarded.inc()
        return True

    def _dropped(self, record: RawRecord, timer: Timer, outcome: Scheduled) -> None:
        """Count (``kafka_timers_dropped_total{reason}``), log and answer on the fired
        topic (like a cancel) a request not stored."""
        self._metrics.dropped.labels(reason=outcome.value).inc()
        self._output.dropped(timer, outcome.value, record.partition, record.offset)
        log.info(
            "request %s for timer %r dropped: %s",
            _where(record),
            timer.id[:80],
            "that version already fired"
            if outcome is Scheduled.DUPLICATE
            else "a cancel with its token came first",
        )

    def _refused(self, record: RawRecord, timer: Timer) -> None:
        """Answer and dead-letter a request that would have replaced a pending timer
        protected by another token (:meth:`PartitionWheel.schedule`): answered on the fired
        topic at the request's offset, as a cancel with a wrong token is (``"event":
        "dropped"``, outcome ``wrong_token``), and dead-lettered ``wrong_token``."""
        self._output.dropped(timer, Scheduled.WRONG_TOKEN.value, record.partition, record.offset)
        self._reject(
            record,
            RejectReason.WRONG_TOKEN,
            f"timer {timer.id[:80]!r} is pending under another token: not replaced",
        )

    def _cancel(self, part: _Partition, record: RawRecord, cancel: Cancel) -> None:
        if cancel.action is not TokenAction.CANCEL:
            self._pause_or_resume(part, record, cancel)
            return
        outcome = part.wheel.cancel(cancel)
        self._output.cancel_outcome(
            cancel.id, cancel.token, outcome.value, record.partition, record.offset
        )
        if outcome is CancelOutcome.CANCELLED:
            self._metrics.cancelled.inc()
            self._adjust_pending(record.partition, -1)
        elif outcome is CancelOutcome.NOT_REMEMBERED:
            self._metrics.cancels_not_remembered.inc()
        elif outcome is CancelOutcome.WRONG_TOKEN:
            self._reject(
                record, RejectReason.WRONG_TOKEN, f"token does not match timer {cancel.id!r}"
            )

    def _pause_or_resume(self, part: _Partition, record: RawRecord, request: Cancel) -> None:
        """Apply a timer owner's pause or resume and answer it on the fired topic (as a
        cancel is answered: at the request's offset, so a client can wait for it)."""
        wheel = part.wheel
        if request.action is TokenAction.PAUSE:
            outcome = wheel.pause(request)
        else:
            outcome = wheel.resume(request)
            if wheel.holding:
                self._release_wanted.set()  # what came due while paused goes out now
        self._output.pause_outcome(
            request.id,
            request.token,
            request.action.value,
            outcome.value,
            record.partition,
            record.offset,
        )
        self._metrics.timer_pauses.labels(action=request.action.value, outcome=outcome.value).inc()
        self._export_paused()
        if outcome is PauseOutcome.WRONG_TOKEN:
            self._reject(
                record, RejectReason.WRONG_TOKEN, f"token does not match timer {request.id!r}"
            )

    def _reject(self, record: RawRecord, reason: RejectReason, detail: str) -> None:
        """Dead-letter ``record``, total: if its copy cannot be produced (a bug, a size
        no check foresaw), a bare copy without its key, value and headers goes instead;
        if even that is refused, the system is failing (:class:`SystemicFailure`)."""
        # The detail quotes the record at most through repr: never a lone surrogate, never
        # more than the DLQ header holds.
        detail = detail.encode("utf-8", "backslashreplace")[:_DETAIL_BYTES].decode(
            "utf-8", "ignore"
        )
        log.warning("rejected %s: %s: %s", _where(record), reason.value, detail)
        self._metrics.rejected.labels(reason=reason.value).inc()
        try:
            self._output.dead_letter(record, reason, detail)
        except Exception as exc:
            if is_systemic(exc):
                raise
            bare = replace(record, key=None, value=None, headers=())
            note = f"{detail} (the full copy was refused: {type(exc).__name__})"
            try:
                self._output.dead_letter(bare, reason, note)
            except Exception as again:
                if is_systemic(again):
                    raise
                raise SystemicFailure(
                    f"the dead-letter topic refused a bare record: {type(again).__name__}"
                ) from again

    # -- ticks ----------------------------------------------------------------------

    async def handle_ticks(self, ticks: Sequence[tuple[int, int, float | None, str]]) -> int:
        """Fire everything due up to each tick's second on its partition; return how many.

        ``ticks`` are ``(partition, second, sent, source)``; ``sent`` (the oscillator's
        clock when it sent the tick, epoch s: the record timestamp for ticks that do not
        say) and ``source`` (the oscillator) feed the clock checks. A tick whose second
        this worker's clock has not reached yet is held
        (:class:`~app.core.tick_gate.TickGate`): only the seconds both clocks agree on
        fire now, and :meth:`run_tick_release` fires the rest as this worker's clock
        reaches them. Partitions are independent, so their callbacks can share a flush:
        with one flush per partition, a worker's fourth partition waited for three round
        trips before its own began (measured: ~25 ms each, so its callbacks left ~110 ms
        after the second). Only the newest tick per partition counts: it covers every
        second before it. In exactly-once mode each
        tick is its own transaction instead.
        """
        arrived = self._clock()
        for _, second, stamp, source in ticks:
            if stamp:
                self._skew.observe(source, stamp)
            self._lead.observe(source, second, arrived)
        async with self._tick_lock:
            now = self._clock()
            accepted = []
            for partition, second, _, source in ticks:
                admitted, held = self._gate.admit(partition, second, now)
                if held:
                    self._metrics.ticks_held.labels(source=source).inc()
                accepted.append((partition, admitted))
            if self._gate.holding:
                self._holding.set()
            return await self._fire_accepted(accepted)

    async def release_held_ticks(self) -> int:
        """Fire, on every partition holding a tick, up to what this worker's clock allows."""
        async with self._tick_lock:
            released = self._gate.release(self._clock())
            return await self._fire_accepted(list(released.items())) if released else 0

    async def run_tick_release(
        self, sleep: Callable[[float], Awaitable[object]] = asyncio.sleep
    ) -> None:
        """Release held ticks at each of this worker's second boundaries; run forever.

        Sleeps on an event while nothing is held. The boundary is read from this worker's
        wall clock on every round, so a clock that is stepped (NTP) is followed; waking a
        little early only costs a round that releases nothing.
        """
        while True:
            if not self._gate.holding:
                self._holding.clear()
                await self._holding.wait()
                continue
            await sleep(self._gate.seconds_to_next_release(self._clock()) + RELEASE_SLACK)
            await self.release_held_ticks()

    def held_ticks(self) -> dict[int, int]:
        """The held tick second of each partition that has one (for status)."""
        return self._gate.held()

    def oscillator_leads(self) -> dict[str, float]:
        """How far each oscillator heard from recently runs ahead of this worker's clock."""
        return self._lead.leads()

    async def _fire_accepted(self, accepted: Sequence[tuple[int, int]]) -> int:
        """Fire ``(partition, second)`` pairs this worker's clock has accepted, unless the
        group may have given its partitions away (:mod:`app.worker.group_lease`)."""
        if self._lease is not None and not self._lease.held():
            self._metrics.ticks_unowned.inc(len(accepted))
            log.warning(
                "no heartbeat answered for %.0f s past the session timeout: not firing "
                "until the broker confirms this worker still owns its partitions",
                self._lease.lapsed_for(),
            )
            return 0
        if self._output.transactional:
            fired = 0
            for partition, second in accepted:
                fired += await self._tick_in_transaction(partition, second)
            return fired
        newest: dict[int, int] = {}
        for partition, second in accepted:
            newest[partition] = max(second, newest.get(partition, second))
        return await self._fire_at_least_once(newest)

    async def _fire_at_least_once(self, newest: dict[int, int]) -> int:
        """Deliver the callbacks of every partition's tick with one flush, then forget the
        timers: a crash in between fires them again."""
        due: list[tuple[int, _Partition, int, list[Timer]]] = []
        gated = self.gates.gated
        for partition, second in newest.items():
            part = await self._partition(partition)
            if part.rereading:
                continue  # a later tick fires it all (_Partition.rereading)
            timers = part.wheel.begin_tick(second, hold=gated, since=self._clock())
            if timers is not None:
                if gated or part.wheel.holding:  # one check per round without limits
                    timers = self._through_gates(partition, part.wheel, timers)
                due.append((partition, part, second, timers))
        await self._look_up_topics(timer for _, _, _, timers in due for timer in timers)
        began = [
            (partition, part, second, timers, self._fire_all(partition, second, timers))
            for partition, part, second, timers in due
        ]
        count = await self._deliver_then_forget(began)
        if gated or self._backlog_topics:
            self._export_backlog()
        return count

    # -- gates: rate limits and pauses per callback topic ------------------------------

    def _through_gates(
        self, partition: int, wheel: PartitionWheel, timers: list[Timer]
    ) -> list[Timer]:
        """What of a round's due ``timers`` (and of the timers held before) ``partition``
        delivers now: those of topics no gate holds, and per gated topic as many as its
        bucket allows, oldest first. The rest is held in the wheel (pending, in the
        store) for a later round.

        A tick's scan holds the timers of gated topics itself
        (:meth:`PartitionWheel.begin_tick`'s ``hold``); one of a topic gated since is
        held here."""
        gated = self.gates.gated
        now = self._clock()
        if gated:
            free: list[Timer] = []
            held: list[Timer] = []
            for timer in timers:
                (held if timer.topic in gated else free).append(timer)
            if held:
                wheel.hold(held, now)
        else:
            free = timers
        if wheel.holding:
            self._release_wanted.set()
        if self._stopping:  # held timers wait for the next owner (begin_stopping)
            return free
        for topic in wheel.held_topics():
            budget = self.gates.budget(partition, topic)
            if budget == 0:
                continue
            taken = wheel.take_held(topic, budget)
            if not taken:
                continue
            if budget is not None:
                self.gates.spend(partition, topic, len(taken), waiting=wheel.held_count(topic))
            delay = self._metrics.rate_limit_delay.labels(callback_topic=self._topic_label(topic))
            since, run = taken[0][1], 0
            for timer, held_since in taken:  # held together, delayed alike: one observation
                if held_since != since:  # per run
                    observe_many(delay, max(0.0, now - since), run)
                    since, run = held_since, 0
                run += 1
                free.append(timer)
            observe_many(delay, max(0.0, now - since), run)
        return free

    async def release_gated(self) -> int:
        """Deliver, on every partition holding timers, what its buckets allow now (the
        rounds between ticks); return how many callbacks went out."""
        async with self._tick_lock:
            if self._stopping:
                return 0  # the next owner delivers them
            if self._lease is not None and not self._lease.held():
                return 0  # the next tick (or the new owner) delivers them
            ready = [
                (p, part)
                for p, part in self._partitions.items()
                if part.wheel.holding
                and part.wheel.fired_through is not None
                and not part.rereading
            ]
            if not ready:
                return 0
            if self._output.transactional:
                count = 0
                for p, part in ready:
                    count += await self._release_in_transaction(p, part)
            else:
                count = await self._release_at_least_once(ready)
            self._export_backlog()
            return count

    async def _release_at_least_once(self, ready: list[tuple[int, _Partition]]) -> int:
        began = []
        for p, part in ready:
            wheel = part.wheel
            through = wheel.fired_through
            assert through is not None
            timers = self._through_gates(p, wheel, [])
            if timers:
                await self._look_up_topics(timers)
                began.append((p, part, through, timers, self._fire_all(p, through, timers)))
        return await self._deliver_then_forget(began)

    async def _deliver_then_forget(
        self, began: list[tuple[int, _Partition, int, list[Timer], _Fired]]
    ) -> int:
        """Flush the callbacks of ``(partition, part, second, timers, fired)`` rounds, then
        forget what each delivered; return how many were delivered.

        The forgetting rides with the next flush; lost in a crash, it means a duplicate. A
        series' next occurrence is written before its fired one is deleted, so a crash
        loses neither (finish_tick). Locally it is one write per partition (a RocksDB
        WriteBatch), so a crash keeps all of it or none. A failed flush forgets nothing;
        rounds with no timers still advance their wheels, without a flush.
        """
        produced = any(timers for _, _, _, timers, _ in began)
        if produced:
            try:
                await self._commits.flush(record=False)
            except DeliveryFailure:
                for _, part, _, _, _ in began:
                    part.wheel.abort_tick()
                raise
        behind = False
        for partition, part, second, timers, fired in began:
            with self._commits.local_batch(part.kv):
                # Held timers taken this round may be forgotten in the release loop's
                # spare time (forget_behind): a limited topic then gets its limit, not
                # what delivering and forgetting together leave of a worker's CPU.
                part.wheel.finish_tick(second, timers, fired.successors, forget_taken_later=True)
            self._ticked(partition, part, second, timers, fired)
            behind = behind or part.wheel.behind > 0
        if produced:
            self._commits.record_persisted()
        if behind:
            self._export_behind()
            self._release_wanted.set()
        return sum(len(fired.delivered) for _, _, _, _, fired in began)

    async def forget_behind(self, seconds: float) -> int:
        """Forget delivered held timers left behind by at-least-once rounds
        (:meth:`PartitionWheel.forget_behind`), for about ``seconds`` of work in slices
        of :data:`FORGET_SLICE` a partition; return how many. Once none is left, flush:
        the forgetting is then durable, not only on its way with the next round's."""
        async with self._tick_lock:
            if self._stopping:
                return 0  # the next owner forgets them (their records say so)
            if self._output.transactional:
                return 0  # only inside a transaction: a tick's (PartitionWheel.finish_tick)
            deadline = time.perf_counter() + seconds
            done = 0
            left = [(p, part) for p, part in self._partitions.items() if part.wheel.behind]
            touched = list(left)
            while left:
                for _, part in left:
                    done += self._forget_slice(part, FORGET_SLICE)
                left = [(p, part) for p, part in left if part.wheel.behind]
                if time.perf_counter() >= deadline:
                    break
            for p, part in touched:
                self._export_keys(p, part)
            self._export_behind()
            if done and not left:
                await self._commits.flush()
            return done

    def _forget_slice(self, part: _Partition, n: int) -> int:
        """Forget up to ``n`` timers left behind on ``part``, its local writes as one."""
        with self._commits.local_batch(part.kv):
            return part.wheel.forget_behind(n)

    def _export_behind(self) -> None:
        self._metrics.forget_behind.set(
            sum(part.wheel.behind for part in self._partitions.values())
        )

    async def _release_in_transaction(self, p: int, part: _Partition) -> int:
        async with self._unit_lock:
            if self._partitions.get(p) is not part:
                return 0  # reloaded meanwhile (an aborted transaction): the tick rescans
            through = part.wheel.fired_through
            assert through is not None
            timers = self._through_gates(p, part.wheel, [])
            if not timers:
                return 0
            await self._look_up_topics(timers)
            fired = await self._fire_in_transaction(p, part, through, timers)
            if fired is None:
                return 0
        self._ticked(p, part, through, timers, fired)
        self._commits.record_persisted()
        return len(fired.delivered)

    async def run_gated_release(
        self, sleep: Callable[[float], Awaitable[object]] = asyncio.sleep
    ) -> None:
        """Deliver held timers every :data:`RELEASE_INTERVAL` seconds while any partition
        holds some, so a limited topic receives an even stream rather than its share at
        each second boundary; asleep on an event otherwise. Runs forever.

        The time between two rounds forgets delivered timers that rounds left behind
        (:meth:`forget_behind`), and once nothing is held the rest is forgotten.

        A round that took longer than the interval (its flush included) is followed at
        once: the buckets hold only a tenth of a second, so a fixed pause after a long
        round would leave tokens unused.
        """
        took = 0.0
        while True:
            if self._stopping:  # an orderly stop: no new round, nothing more forgotten
                await sleep(RELEASE_INTERVAL)
                continue
            parts = self._partitions.values()
            # Exactly-once mode leaves nothing behind; what a reload found recorded
            # there (a switch from at-least-once) goes in a tick's transaction.
            forgetting = not self._output.transactional
            if not any(part.wheel.holding for part in parts):
                if forgetting and any(part.wheel.behind for part in parts):
                    # Delivered, left to forget: forget them, a slice at a time.
                    await self.forget_behind(FORGET_SECONDS)
                    await sleep(0)
                    continue
                self._export_behind()  # 0, also where requests forgot the last of them
                self._release_wanted.clear()
                await self._release_wanted.wait()
                continue
            pause = RELEASE_INTERVAL - took
            if pause > FORGET_MARGIN and forgetting and any(part.wheel.behind for part in parts):
                # The spare time until the next round forgets what earlier rounds left.
                started = time.monotonic()
                await self.forget_behind(pause - FORGET_MARGIN)
                pause -= time.monotonic() - started
            await sleep(max(0.0, pause))
            started = time.monotonic()
            await self.release_gated()
            took = time.monotonic() - started

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

    def held_by_partition(self, topics: Iterable[str]) -> dict[int, dict[str, int]]:
        """Every partition this worker holds, with the timers it holds back per topic in
        ``topics`` (the limited ones): what the demand exchange reports
        (:mod:`app.worker.demand`). A partition holding none is listed with ``{}``."""
        wanted = set(topics)
        out: dict[int, dict[str, int]] = {}
        for p, part in self._partitions.items():
            wheel = part.wheel
            held = out[p] = {}
            if wheel.holding:
                for topic in wheel.held_topics():
                    if topic in wanted:
                        held[topic] = wheel.held_count(topic)
        return out

    def rate_limits(self) -> dict[str, dict[str, Any]]:
        """Each gated or backlogged callback topic: its limit (callbacks/s across the
        service), whether paused, timers held here, and the delay the gate added (p50,
        p99 and the observations, since start) — for the status page."""
        limits = self.gates.limits()
        paused = self.gates.paused()
        held: dict[str, int] = {}
        for part in self._partitions.values():
            for topic in part.wheel.held_topics():
                held[topic] = held.get(topic, 0) + part.wheel.held_count(topic)
        out: dict[str, dict[str, Any]] = {}
        for topic in sorted(set(limits) | paused | set(held)):
            out[topic] = {
                "limit_per_second": limits.get(topic),
                "paused": topic in paused,
                "backlog": held.get(topic, 0),
                **_delay_summary(self._metrics, self._topic_label(topic)),
            }
        return out

    def _fire(
        self, timer: Timer, through: int, partition: int, now_ms: int
    ) -> tuple[list[Timer], Timer | None]:
        """Produce what ``timer``, due by tick ``through``, does now: its callbacks and
        skipped records. Return the occurrences delivered and the series' successor.

        The service's rules are checked again first (:meth:`_refused_at_fire`): a timer
        stored under rules since narrowed is dead-lettered, not delivered.
        """
        if self._refused_at_fire(timer, partition):
            return [], None
        if timer.late is None and not self._late.skip_after_ms:  # the hot paths: nothing to skip
            rec = timer.recurrence
            if rec is None:
                self._output.callback(timer, partition=partition, fired_at_ms=now_ms)
                return [timer], None
            nxt = rec.after(timer.due, timer.seq)
            if nxt is None or nxt > through:  # one occurrence due: nothing to catch up
                self._output.callback(timer, partition=partition, fired_at_ms=now_ms)
                return [timer], None if nxt is None else next_occurrence(timer, nxt)
        policy = self._late if timer.late is None else timer.late.over(self._late)
        steps = plan(timer, through, now_ms, policy)
        delivered: list[Timer] = []
        for step in steps.steps:
            folded = step.coalesced + (step.kind is StepKind.FOLD)
            if folded:
                self._metrics.skipped.labels(reason=SkipReason.COALESCED.value).inc(folded)
            if step.kind is StepKind.DELIVER:
                self._output.callback(
                    step.timer, partition=partition, fired_at_ms=now_ms, coalesced=step.coalesced
                )
                delivered.append(step.timer)
                continue
            reason = SkipReason.LATE if step.kind is StepKind.SKIP_LATE else SkipReason.COALESCED
            if reason is SkipReason.LATE:
                self._metrics.skipped.labels(reason=reason.value).inc()
            self._output.skipped(step.timer, reason, partition=partition, coalesced=step.coalesced)
        return delivered, steps.successor

    async def _look_up_topics(self, timers: Iterable[Timer]) -> None:
        """Find which of the callback topics of ``timers`` do not exist (:attr:`_absent`).

        The worker's producer creates no topic, and a callback to a missing one would hold
        the flush of the whole tick. A set of the tick's topics costs ~40 ns a timer; the
        broker is asked only when one of them is new to the directory.
        """
        if self._topics is None:
            return
        topics = {timer.topic for timer in timers}
        self._absent = await self._topics.missing(topics) if self._topics.unseen(topics) else set()

    def _refused_at_fire(self, timer: Timer, partition: int) -> bool:
        """Whether ``timer`` may no longer be delivered: its topic is not allowed or does
        not exist, or its value is over the payload limit, under the rules this worker
        runs with now.

        An operator who narrows the allow-list (abuse, a topic retired) and restarts the
        workers stops every stored timer and series on its next due second, not only new
        requests. Such a timer is dead-lettered with the reason, reported ``skipped``
        (``not_allowed``) on the fired topic for the audit, and forgotten; a series ends.
        Costs a set lookup and a length per fire: topics that passed are remembered.
        """
        try:
            self._policy.check_topic(timer.topic)
            self._policy.check_payload(timer)
            if self._absent and timer.topic in self._absent:
                raise RejectedRequest(
                    RejectReason.UNKNOWN_TOPIC,
                    f"{timer.topic[:200]!r} does not exist (requests never create topics)",
                )
        except RejectedRequest as refused:
            log.warning(
                "timer %r refused when due, dead-lettered: %s: %s",
                timer.id[:80],
                refused.reason.value,
                refused.detail,
            )
            self._metrics.rejected.labels(reason=refused.reason.value).inc()
            self._metrics.skipped.labels(reason=SkipReason.NOT_ALLOWED.value).inc()
            self._output.dead_letter_timer(timer, refused.reason, refused.detail)
            self._output.skipped(timer, SkipReason.NOT_ALLOWED, partition=partition)
            return True
        return False

    def _fire_all(self, partition: int, second: int, timers: list[Timer]) -> _Fired:
        """:meth:`_fire` each of ``timers``; a one-shot timer with no late policy of its
        own, to a topic that passed the rules already, with a value within the limit (a
        burst's timers, nearly always), is one callback, produced here without the four
        calls through :meth:`_fire` and :meth:`_refused_at_fire` that decide as much."""
        fired = _Fired()
        now_ms = self._now_ms()
        delivered, successors = fired.delivered, fired.successors
        callback = self._output.callback
        passed = self._policy.passed_topics
        max_bytes = self._policy.max_payload_bytes
        absent = self._absent
        plain = not self._late.skip_after_ms
        for timer in timers:
            if (
                plain
                and timer.late is None
                and timer.recurrence is None
                and timer.topic in passed
                and not (absent and timer.topic in absent)
                and (timer.value is None or len(timer.value) <= max_bytes)
            ):
                callback(timer, partition=partition, fired_at_ms=now_ms)
                delivered.append(timer)
                continue
            sent, successor = self._fire(timer, second, partition, now_ms)
            delivered.extend(sent)
            if successor is not None:
                successors[timer.id] = successor
        self.gates.produced(partition)  # a limit's window counts them from now
        return fired

    async def _tick_in_transaction(self, partition: int, second: int) -> int:
        """One tick as one transaction; 0 if aborted (the next tick retries it)."""
        async with self._unit_lock:
            part = await self._partition(partition)
            timers = part.wheel.begin_tick(second, hold=self.gates.gated, since=self._clock())
            if timers is None:
                return 0
            if self.gates.gated or part.wheel.holding:
                timers = self._through_gates(partition, part.wheel, timers)
            await self._look_up_topics(timers)
            fired = await self._fire_in_transaction(partition, part, second, timers)
            if fired is None:
                return 0
        self._ticked(partition, part, second, timers, fired)
        if timers:
            self._commits.record_persisted()
        return len(fired.delivered)

    def _ticked(
        self, partition: int, part: _Partition, second: int, timers: list[Timer], fired: _Fired
    ) -> None:
        """The metrics and pending count after ``partition`` fired ``timers`` for ``second``."""
        if fired.delivered:
            self._account_fired(fired.delivered)
        ended = len(timers) - len(fired.successors)  # a series that goes on stays pending
        if ended:
            self._adjust_pending(partition, -ended)
        self._metrics.last_tick.labels(partition=str(partition)).set(second)
        self._export_keys(partition, part)
        if second - self._marked.get(partition, second - CAUGHT_UP_INTERVAL) >= CAUGHT_UP_INTERVAL:
            part.kv.mark_caught_up()
            self._marked[partition] = second

    async def _fire_in_transaction(
        self, partition: int, part: _Partition, second: int, timers: list[Timer]
    ) -> _Fired | None:
        """Callbacks, audit records, the forgetting and each series' next occurrence in
        one transaction; ``None`` if aborted."""
        unit = self._commits.begin([part.kv])
        if part.wheel.behind:
            # Recorded as delivered by at-least-once rounds before this worker ran in
            # exactly-once mode (which leaves nothing behind): forgotten in here.
            part.wheel.forget_behind(part.wheel.behind)
        fired = self._fire_all(partition, second, timers)
        part.wheel.finish_tick(second, timers, fired.successors)
        try:
            # Its local writes (the forgetting) only once committed: a crash before that
            # leaves the timers in place. Aborted, they are dropped.
            await unit.commit(record=False)
        except TransactionAborted as exc:
            log.error(
                "tick %d on partition %d aborted, retried on the next tick: %s",
                second,
                partition,
                exc,
            )
            self.forget_partitions([partition])  # reload the wheel from RocksDB as it was
            return None
        return fired

    # -- bookkeeping ----------------------------------------------------------------

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

    def _account_fired(self, timers: Sequence[Timer]) -> None:
        failures = self._output.take_failures()
        refused = {t.id for t, _ in failures}
        now = self._clock()
        # Counted per callback topic and per due second (timers of one second share their
        # lateness), then added once each: a label lookup and an observe per timer cost
        # ~2.5 µs of a fire's ~40.
        by_topic: dict[str, int] = {}
        by_due: dict[int, int] = {}
        for timer in timers:
            if refused and timer.id in refused:
                continue
            by_topic[timer.topic] = by_topic.get(timer.topic, 0) + 1
            # A spread timer is late from the second it fires at (Timer.fire_at, a
            # property call, only for those).
            fire_at = timer.fire_at if timer.spread else timer.due
            by_due[fire_at] = by_due.get(fire_at, 0) + 1
        for topic, n in by_topic.items():
            self._metrics.fired.labels(callback_topic=self._topic_label(topic)).inc(n)
        for due, n in by_due.items():
            observe_many(self._metrics.lateness, max(0.0, now - due), n)
        for timer, error in failures:
            log.error(
                "callback of timer %s to %s refused by the broker: %s", timer.id, timer.topic, error
            )
            self._metrics.rejected.labels(reason=RejectReason.DELIVERY_FAILED.value).inc()
            self._output.dead_letter_timer(timer, RejectReason.DELIVERY_FAILED, error)

    @staticmethod
    def _key_counts(part: _Partition) -> dict[str, int]:
        counts = part.wheel.counts
        bookkeeping = sum(1 for key in BOOKKEEPING if part.kv.get(key) is not None)
        bookkeeping += part.wheel.delivered_batches + len(part.origins)
        return {
            "pending": counts.pending,
            "remembered": counts.remembered,
            "bookkeeping": bookkeeping,
        }

    def _export_keys(self, partition: int, part: _Partition) -> None:
        """Set the store-key gauges of ``partition`` from the wheel's running counts."""
        for kind, count in self._key_counts(part).items():
            self._metrics.store_keys.labels(str(partition), kind).set(count)
        self._metrics.cancels_in_advance.labels(str(partition)).set(part.wheel.counts.in_advance)

    def store_keys_by_partition(self) -> dict[int, dict[str, int]]:
        """Store keys per held partition, by kind (for status): counted once when the
        partition loaded, then kept up to date by the wheel, never by a scan."""
        return {p: self._key_counts(part) for p, part in self._partitions.items()}

    def _export_paused(self) -> None:
        self._metrics.timers_paused.set(
            sum(part.wheel.paused_count for part in self._partitions.values())
        )

    def _adjust_pending(self, partition: int, delta: int) -> None:
        self._pending[partition] = self._pending.get(partition, 0) + delta
        self._metrics.pending.set(sum(self._pending.values()))

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    async def change_partition(
        self, partition: int, work: Callable[[PartitionWheel, Output], int]
    ) -> int | None:
        """Run ``work`` on ``partition``'s wheel as one unit of work, durable when this
        returns (its store writes and what it produced through the output): an
        operator's bulk cancel (app.worker.control). ``work`` is synchronous and returns
        how many pending timers it removed. ``None`` if the partition is not loaded here."""
        async with self._unit_lock:
            part = self._partitions.get(partition)
            if part is None:
                return None
            unit = self._commits.begin([part.kv])
            try:
                removed = work(part.wheel, self._output)
            finally:
                unit.apply_local()
            try:
                await unit.commit(record=False)
            except TransactionAborted as exc:
                raise DeliveryFailure(f"bulk change not committed: {exc}") from exc
        if removed:
            self._metrics.cancelled.inc(removed)
            self._adjust_pending(partition, -removed)
        self._commits.record_persisted()
        self._export_keys(partition, part)
        return removed

    def wheels(self) -> dict[int, PartitionWheel]:
        """The wheels of the partitions loaded so far, by partition (read-only use)."""
        return {p: part.wheel for p, part in self._partitions.items()}

    def pending_by_partition(self) -> dict[int, int]:
        """Pending timers per held partition (for status)."""
        return dict(self._pending)
