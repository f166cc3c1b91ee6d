"""The Faust worker: a tick agent and a librdkafka request reader sharing one table.

Ticks and requests have the same partition count, so Faust's assignor gives partition n
of the tick topic and of the table's changelog to the same worker, and the worker then
reads partition n of the request topic itself (:class:`app.worker.request_reader.RequestReader`:
Faust's per-event cost would cap requests at ~7,000/s). Requests store timers into
partition n of the table; the ``ticks`` agent fires what partition n's wheel says is
due. Faust provides the RocksDB store per partition, recovery from the changelog (which
the worker first brings up to date at librdkafka speed), consumer-group membership and
graceful shutdown; the behaviour lives in :class:`app.worker.service.TimerService`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, NoReturn

import faust
from confluent_kafka import Consumer

from app.core import proto
from app.core.fetch_pacing import TickWatch, tick_fetch_wait_ms
from app.core.quotas import QuotaBook
from app.core.raw_record import RawRecord
from app.kafka.config import confluent_consumer, worker_output_producer
from app.kafka.demand import DemandPublisher, DemandTable
from app.kafka.topic_config import BROKER_DEFAULT_DELETE_RETENTION_MS
from app.settings import TABLE_NAME, Settings
from app.worker.catch_up import CatchUpAbandoned, persisted_offset, stale_after
from app.worker.changelog_repair import ChangelogRepairer, RepairedStore
from app.worker.control import BulkCanceller, ControlFollower
from app.worker.demand import DemandExchange
from app.worker.descriptors import ROCKSDB_MAX_OPEN_FILES
from app.worker.faust_config import faust_credentials
from app.worker.faust_internals import apply_patches
from app.worker.faust_internals.group import watch_group_session
from app.worker.faust_internals.recovery import (
    before_table_recovery,
    recovery_start_offsets,
    watch_recovery,
)
from app.worker.faust_internals.stores import partition_db
from app.worker.faust_internals.streams import take_events_when_ready, tune_fetcher
from app.worker.faust_internals.web import web_routes
from app.worker.group_lease import GroupLease
from app.worker.health import FAUST_RECOVERY_STEP, Phase, RecoveryStalls, WorkerHealth
from app.worker.heap import settle_heap
from app.worker.metrics import WorkerMetrics
from app.worker.output import DeliveryFailure, OutputProducer
from app.worker.partition_store import RocksDBStores
from app.worker.request_progress import RequestProgress
from app.worker.request_reader import RequestReader
from app.worker.service import TimerService
from app.worker.tick_backlog import TickBacklog
from app.worker.tick_intake import TickIntake
from app.worker.topic_directory import TopicDirectory
from app.worker.topic_gates import TopicGates
from app.worker.tracing import tracing_for

__all__ = ["WEB_VIEWS_OFF", "WorkerApp", "build_worker"]

log = logging.getLogger(__name__)

#: How many request records one batch may hold, and how long to wait to fill it.
REQUEST_BATCH = 2000
REQUEST_BATCH_WITHIN = 0.02
#: Ticks taken together (a second brings one per partition and oscillator), and how long
#: to wait for the rest of a second's ticks once the first has arrived: the batch is taken
#: as soon as every assigned partition has its tick (``TickWatch.covers``). A second's
#: ticks often reach a worker in two or three fetches; taken apart, each later part
#: waited for the fire and the forgetting of the part before (measured in the steady
#: scenario: 47 of 52 later parts, tick-to-fire p99 ~220 ms).
TICK_BATCH = 256
TICK_BATCH_WITHIN = 0.04


class WorkerApp:
    """The Faust app of one worker process and the service it drives."""

    def __init__(
        self,
        app: faust.App,
        service: TimerService,
        metrics: WorkerMetrics,
        health: WorkerHealth,
    ) -> None:
        self.app = app
        self.service = service
        self.metrics = metrics
        #: Readiness and liveness, fed by the hooks below (``/readyz``, ``/livez``).
        self.health = health


#: RocksDB memory per partition. Faust's defaults (64 MiB write buffers x3 and a 2 GiB
#: block cache, per partition) keep a million pending timers in RAM (418 B each,
#: measured); timers are written once and read once, so small buffers lose little.
#: These bound RocksDB's RAM to about 8 x (2 x 1 + 2) MiB = 32 MiB per worker.
ROCKSDB_OPTIONS = {
    "write_buffer_size": 1024**2,
    "max_write_buffer_number": 2,
    "block_cache_size": 2 * 1024**2,
    "block_cache_compressed_size": 0,
    # Faust's default is 90% of the process's open-file limit for each partition.
    "max_open_files": ROCKSDB_MAX_OPEN_FILES,
}

#: Every built-in Faust web view that shows table data, the cluster or internals: off.
WEB_VIEWS_OFF: dict[str, Any] = {
    "web_tables_enabled": False,
    "web_router_enabled": False,
    "web_stats_enabled": False,
    "web_graph_enabled": False,
    "web_metrics_enabled": False,
}

#: How often every worker refreshes the request lag of every partition from the
#: informational group's committed offsets (two ListOffsets and one OffsetFetch each).
GROUP_LAG_INTERVAL = 5.0
#: How often an owner asks its changelogs' end offsets for another writer's late
#: records it would find only at its next write (one ListOffsets per partition held).
FOREIGN_WRITER_CHECK_SECONDS = 5.0

#: Longest the worker's start waits to read the control topic to its end.
CONTROL_LOAD_TIMEOUT = 30.0

#: Exit status when writes could not be made durable (EX_SOFTWARE): restart the worker.
EXIT_UNDURABLE = 70

#: librdkafka logs through Python's logging (the ``librdkafka`` logger), not straight to
#: stderr: the worker's log handlers then bound its connection-failure lines while the
#: broker is away (app.worker.log_limits), as they do aiokafka's.
LIBRDKAFKA_LOG: dict[str, Any] = {"logger": logging.getLogger("librdkafka")}

#: Longest the request reader's fetch may wait at the broker for new records, in
#: milliseconds. librdkafka reports a partition's end (and so an assignment's backlog
#: read) only after a fetch at the end has waited this long. The tick fetch wait is
#: ``Settings.tick_fetch_wait_ms``, paced by :mod:`app.core.fetch_pacing`.
FETCH_MAX_WAIT_MS = 50


def _exit_undurable(error: Exception) -> NoReturn:
    """Stop at once, committing nothing: a restart re-reads whatever was not durable."""
    log.critical("cannot make writes durable, exiting so nothing is acknowledged: %s", error)
    logging.shutdown()
    os._exit(EXIT_UNDURABLE)


def build_worker(
    settings: Settings,
    tombstone_retention: float = BROKER_DEFAULT_DELETE_RETENTION_MS / 1000,
    max_record_bytes: int | None = None,
) -> WorkerApp:
    """Assemble the Faust app, its table and agents, and the service behind them.

    ``tombstone_retention`` is the changelog's ``delete.retention.ms`` in seconds: a
    local store last caught up longer ago than that is rebuilt from the changelog.
    ``max_record_bytes`` is the largest record the worker can write to its own topics
    (:func:`app.kafka.topic_config.record_budget`; the producer's limit if not given).
    """
    apply_patches()
    if proto.IMPLEMENTATION != "upb":
        log.warning(
            "protobuf runs as %r, not upb: requests decode several times slower "
            "(install a protobuf wheel built with upb for this platform)",
            proto.IMPLEMENTATION,
        )
    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    app = faust.App(
        settings.app_id,
        broker=[f"kafka://{hp}" for hp in settings.bootstrap_servers.split(",")],
        broker_credentials=faust_credentials(settings),
        store="rocksdb://",
        datadir=settings.data_dir,
        web_enabled=True,
        web_port=settings.web_port,
        web_bind=settings.web_bind,
        # Faust's own views would undo what ours promise: /table/timers/<key>/ reads any
        # table entry (tokens, payloads), /router/ and /assignment/ show the cluster, /
        # (stats), /graph/ and /performance/ the internals. None is needed: the table is
        # never routed between workers. Passed explicitly, so APP_WEB_* variables in the
        # environment cannot turn them back on. Faust's plain "/" index stays.
        **WEB_VIEWS_OFF,
        topic_partitions=settings.partition_count,
        topic_replication_factor=settings.replication_factor,
        broker_session_timeout=settings.session_timeout,
        broker_heartbeat_interval=settings.heartbeat_interval,
        consumer_auto_offset_reset="earliest",
        table_standby_replicas=0,
        # The worker records the changelog offsets it wrote itself (acknowledged, true);
        # Faust compares them with ListOffsets, which on the dev broker is the newest
        # batch's base + 1, and would crash recovery with ConsistencyError. The
        # catch-up reads to the true end instead (see app.worker.partition_store).
        recovery_consistency_check=False,
        # The tick agent is the only stream: what Faust polls and buffers ahead of it is
        # read before a backlog can be skipped (app.worker.tick_backlog), so keep both
        # small. Faust's defaults (4,096 and 1,000) are seconds of its per-record path.
        stream_buffer_maxsize=TICK_BATCH,
        broker_max_poll_records=TICK_BATCH,
        autodiscover=False,
        loghandlers=[],
    )
    # Raw bytes: Faust decodes nothing that could raise; app.core.tick_record parses them.
    ticks = app.topic(
        settings.topics.ticks,
        key_serializer="raw",
        value_serializer="raw",
        partitions=settings.partition_count,
    )
    table = app.Table(
        TABLE_NAME,
        partitions=settings.partition_count,
        # Faust derives the changelog's serializers from key_type/value_type, not from
        # schema: without these its recovery JSON-decodes our raw keys, fails on every
        # record, and never completes (the worker then fires nothing at all).
        key_type=bytes,
        value_type=bytes,
        schema=faust.Schema(key_serializer="raw", value_serializer="raw"),
        options=dict(ROCKSDB_OPTIONS),
    )
    metrics = WorkerMetrics()
    health = WorkerHealth(settings.liveness_timeout)
    #: The newest tick of each assigned partition, for pacing the tick fetches.
    watch = TickWatch()
    intake = TickIntake(
        metrics,
        watch,
        max_ahead=settings.tick_max_ahead_seconds,
        max_sources=settings.tick_max_sources,
        silence=settings.tick_source_silence_seconds,
        clock=time.time,
    )
    policy = settings.request_policy()
    tracing = tracing_for(settings)  # None unless OTEL_EXPORTER_OTLP_ENDPOINT is set
    output = OutputProducer(
        worker_output_producer(
            settings, **{"client.id": f"kafka-timers-{settings.worker_id}", **LIBRDKAFKA_LOG}
        ),
        worker_id=settings.worker_id,
        fired_topic=settings.topics.fired,
        dlq_topic=settings.topics.dlq,
        transactional_id=(
            f"{settings.app_id}-{settings.worker_id}" if settings.exactly_once else None
        ),
        max_record_bytes=max_record_bytes,
        tracing=tracing,
    )

    catchup_conf = confluent_consumer(
        settings,
        group_id="unused",
        **LIBRDKAFKA_LOG,
        # Its own name in the broker's logs and request metrics (and for the test proxy
        # that stalls it: tests/integration/test_recovery_stall.py).
        **{"client.id": f"kafka-timers-{settings.worker_id}-catchup"},
    )

    def db_for_partition(partition: int) -> Any:
        return partition_db(table, partition)

    max_age = stale_after(tombstone_retention)
    # A catch-up that cannot finish is retried, never fatal: the worker stays up and not
    # ready, and says why (app.worker.catch_up.catch_up_until_done).
    metrics.not_ready_seconds.set_function(health.not_ready_for)
    lease = GroupLease(settings.session_timeout)

    def still_owns(store: RepairedStore) -> bool:
        # The lease, and the partition still held in that very store (not given away by
        # a rebalance while a changelog repair read the other writer's records).
        held: object = service.held_stores().get(store.partition)
        return lease.held() and held is store

    stores = RocksDBStores(
        db_for_partition,
        output,
        settings.changelog_topic,
        catchup_conf,
        max_age=max_age,
        stall_timeout=settings.catchup_stall_seconds,
        report=RecoveryStalls(health, metrics),
        should_stop=lambda: bool(app.should_stop),
        repairer=ChangelogRepairer(
            catchup_conf,
            settings.changelog_topic,
            owns=still_owns,
            repaired=metrics.changelog_repairs.inc,
        ),
    )
    watch_group_session(settings.app_id, lease)
    gates = TopicGates(dict(settings.topic_rate_limits), partitions=settings.partition_count)
    # Pauses and limits set at run time (the control topic, app.worker.control): read to
    # its end now, before anything can fire, then followed while the worker runs.
    control = ControlFollower(settings, gates, dict(settings.topic_rate_limits))
    control.load(CONTROL_LOAD_TIMEOUT, on_ignored=metrics.control_ignored.inc)
    quota_policy = settings.quota_policy()
    service = TimerService(
        policy=policy,
        output=output,
        metrics=metrics,
        stores=stores,
        clock_skew_warn_seconds=settings.clock_skew_warn_seconds,
        remember_seconds=settings.remember_seconds,
        max_cancels_in_advance=settings.max_cancels_in_advance,
        max_topic_labels=settings.max_topic_labels,
        tick_tolerance_seconds=settings.tick_tolerance_seconds,
        tick_max_ahead_seconds=settings.tick_max_ahead_seconds,
        late_policy=settings.default_late_policy(),
        topics=TopicDirectory(output.topic_names),
        lease=lease,
        request_partitions=settings.partition_count,
        hop_secret=settings.control_secret,
        # Pending-timer quotas per callback topic and tenant (app.core.quotas), their
        # counts shared across workers by the demand exchange below.
        quotas=None if quota_policy is None else QuotaBook(quota_policy),
        # Rate limits per callback topic, shared among the partitions by their backlogs
        # (the demand exchange below); the control path changes them (and pauses
        # topics) through service.gates.
        gates=gates,
        tracing=tracing,
    )

    # Bulk cancels on the control topic, run on the partitions this worker holds.
    canceller = BulkCanceller(
        settings, service, should_stop=lambda: bool(app.should_stop) or control.stopping
    )

    async def bulk_cancel(record: Any) -> None:
        try:
            await canceller.run(record)
        except DeliveryFailure as exc:
            _exit_undurable(exc)
        except Exception:
            log.exception("bulk cancel %s failed", record.topic)

    control.bulk = bulk_cancel

    async def handle_request_batch(records: list[RawRecord]) -> None:
        try:
            await service.handle_requests(records)
        except DeliveryFailure as exc:
            _exit_undurable(exc)

    progress = RequestProgress(
        # Only commits and reads offsets of the informational group; never subscribes.
        Consumer(confluent_consumer(settings, group_id=settings.request_group, **LIBRDKAFKA_LOG)),
        settings.topics.requests,
        settings.partition_count,
        metrics,
    )
    reader = RequestReader(
        # Never subscribes, so never joins the group: the app id as group id only lets
        # it find offsets a Faust-read worker committed (see RequestReader._committed).
        confluent_consumer(
            settings,
            group_id=settings.app_id,
            **LIBRDKAFKA_LOG,
            **{
                "fetch.wait.max.ms": FETCH_MAX_WAIT_MS,
                "isolation.level": (
                    "read_committed" if settings.exactly_once else "read_uncommitted"
                ),
            },
        ),
        settings.topics.requests,
        handle=handle_request_batch,
        resume_offset=service.request_offset,
        batch_size=REQUEST_BATCH,
        batch_wait=REQUEST_BATCH_WITHIN,
        progress=progress,
        lease=lease,
    )

    @app.timer(GROUP_LAG_INTERVAL, name="kafka_timers_request_group_lag")  # type: ignore[untyped-decorator,misc]
    async def refresh_group_lag() -> None:
        await asyncio.get_running_loop().run_in_executor(None, progress.refresh_group_lag)

    @app.task  # type: ignore[untyped-decorator]
    async def read_requests() -> None:
        try:
            await reader.run()
        finally:
            reader.close()
            progress.close()

    @app.timer(FOREIGN_WRITER_CHECK_SECONDS, name="kafka_timers_changelog_writers")  # type: ignore[untyped-decorator,misc]
    async def find_foreign_writers() -> None:
        # An idle owner's changelog ended by a stale owner's late records
        # (app.worker.changelog_repair); a busy one finds them at its next flush.
        if lease.held():
            await stores.find_foreign(service.held_stores())

    @app.task  # type: ignore[untyped-decorator]
    async def release_held_ticks() -> None:
        # Ticks from an oscillator whose clock runs ahead of this worker's wait for it.
        try:
            await service.run_tick_release()
        except DeliveryFailure as exc:
            _exit_undurable(exc)

    @app.task  # type: ignore[untyped-decorator]
    async def follow_control() -> None:
        # Records on the control topic after the start's read, applied on this loop.
        control.start(asyncio.get_running_loop())
        try:
            await asyncio.Event().wait()
        finally:
            control.stop()

    # Each limited topic's limit shared by backlog across the deployment (the demand
    # topic is created with the service topics: app.kafka.topics.ensure_topics).
    demand = DemandExchange(
        service, DemandPublisher(settings), DemandTable(settings), settings.partition_count
    )

    @app.task  # type: ignore[untyped-decorator]
    async def exchange_demand() -> None:
        await demand.run()

    @app.task  # type: ignore[untyped-decorator]
    async def release_gated() -> None:
        # Timers of rate-limited (or paused) topics go out between ticks, as allowed.
        try:
            await service.run_gated_release()
        except DeliveryFailure as exc:
            _exit_undurable(exc)

    @app.on_before_shutdown.connect  # type: ignore[arg-type]
    async def forget_before_stopping(app: faust.App, **_: Any) -> None:
        # Faust stops without revoking: the records of what rate-limited rounds
        # delivered and left to forget are made durable now, so that the next owner
        # reads them back (and forgets those timers) instead of delivering them again.
        try:
            await service.forget_all_behind()
        except Exception:  # the stop goes on: the worst case is a duplicate
            log.exception("recording delivered timers before stopping failed")

    @app.on_rebalance_complete.connect  # type: ignore[arg-type]
    async def on_rebalance_complete(app: faust.App, **_: Any) -> None:
        # Tables are recovered now: request partition n follows tick partition n. Faust
        # resumes the tick streams only after this returns, and assign() first applies
        # every request already waiting: requests sent before a tick still come first.
        ticks_held = {
            tp.partition for tp in app.consumer.assignment() if tp.topic == settings.topics.ticks
        }
        token = health.applying(ticks_held)
        watch.assigned(ticks_held)
        await reader.assign(ticks_held)
        health.ready(token, ticks_held)

    def log_web_routes(web: Any) -> None:
        # Faust's hook, called once every view is registered: what this worker serves,
        # in one line an operator (and the test that walks every route) can read.
        routes = [f"{method} {path}" for method, path in web_routes(web)]
        log.info(
            "web server on %s:%d serves routes %s",
            settings.web_bind,
            settings.web_port,
            json.dumps(routes),
        )

    app.on_webserver_init = log_web_routes  # type: ignore[method-assign]

    @app.agent(ticks, name="ticks")
    async def handle_ticks(stream: Any) -> None:
        # A second's ticks for all partitions arrive together: fire them with one flush.
        # Asleep between seconds (Faust's take_events would wake every 2 ms).
        settled = False
        backlog = TickBacklog(app.consumer, metrics.ticks_skipped)
        async for events in take_events_when_ready(
            stream, TICK_BATCH, TICK_BATCH_WITHIN, complete=intake.whole
        ):
            await backlog.skip_stale(events)  # a partition far behind reads its newest
            # Every record is read in bounded time, whatever it holds (tick_intake).
            ticks = intake.read(events)
            watch.ticked((partition, second) for partition, second, _, _ in ticks)
            if not settled:  # startup is over once ticks come: see app.worker.heap
                settled = True
                settle_heap()
            try:
                await service.handle_ticks(ticks)
            except DeliveryFailure as exc:
                _exit_undurable(exc)
            health.ticked()

    def tick_fetch_wait() -> int:
        # Asked before each fetch of ticks, in Faust's consumer thread: until the next
        # second boundary while idle, short while a tick is due or partitions move. Not
        # while the requests waiting on new partitions are applied (APPLYING): the tick
        # streams wait for that anyway, and a fetch every 10 ms in this thread took the
        # GIL from the batches being applied (a quick ingest of 150,000 requests, which
        # a starting worker applies in that phase: ~10,400 -> ~12,200/s).
        return tick_fetch_wait_ms(
            time.time(),
            watch.oldest,
            settings.tick_fetch_wait_ms,
            settling=health.phase in (Phase.JOINING, Phase.RECOVERING),
        )

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]
    async def on_revoked(app: faust.App, revoked: set[Any], **_: Any) -> None:
        health.rebalancing()
        await reader.revoke({tp.partition for tp in revoked})
        await service.revoke_partitions({tp.partition for tp in revoked})

    async def catch_up_assigned(assigned: set[Any]) -> None:
        # Bring the stores of every assigned partition to the changelog's end with
        # librdkafka, *before* Faust's recovery reads their persisted offsets: it then
        # finds nothing left to replay. Faust replays a changelog through its per-event
        # machinery (~10k records/s here: 23 s for a partner's 100k pending timers);
        # this reads it at librdkafka speed, in a thread: the event loop keeps answering
        # /livez, /readyz and the metrics, and Faust's recovery waits for it
        # (before_table_recovery). A catch-up that cannot reach the end is retried with
        # backoff until it does, the worker not ready meanwhile; it ends early only when
        # the worker stops, and then nothing is recovered.
        health.recovering(tp.partition for tp in assigned if tp.topic == settings.topics.ticks)
        changelog = settings.changelog_topic
        # Opened here, on the loop: Faust opens a partition's store lazily, unlocked.
        dbs = {
            tp.partition: db_for_partition(tp.partition) for tp in assigned if tp.topic == changelog
        }
        try:
            await asyncio.get_running_loop().run_in_executor(None, stores.catch_up, dbs)
        except CatchUpAbandoned:
            log.info("worker stopping: changelog catch-up of %s abandoned", sorted(dbs))

    before_table_recovery(app, catch_up_assigned, frozenset({settings.changelog_topic}))
    # Faust's recovery after it is started over when a broker request of it gets no
    # answer, instead of ending for good (faust_internals.recovery._recovery_wait).
    watch_recovery(RecoveryStalls(health, metrics, step=FAUST_RECOVERY_STEP))

    @app.on_partitions_assigned.connect  # type: ignore[arg-type]
    async def on_assigned(app: faust.App, assigned: set[Any], **_: Any) -> None:
        # The stores are at the changelog's end already (catch_up_assigned).
        changelog = settings.changelog_topic
        mine = [tp for tp in assigned if tp.topic == changelog]
        # Faust's recovery noted each store's offset after the catch-up
        # (before_table_recovery); should a Faust release note them earlier, move its
        # starting points to where the stores are now (it has no public way to be told).
        # Should it rename the attribute, Faust replays what the catch-up already
        # applied: the same values again, so slower, not wrong.
        starts = recovery_start_offsets(app)
        if starts is None:
            log.warning("Faust's recovery offsets not found: it will replay the changelog")
            starts = {}
        for tp in mine:
            offset = persisted_offset(db_for_partition(tp.partition))
            if offset is not None and tp in starts:
                starts[tp] = offset
        # Recovery may rewrite the stores of newly assigned partitions: reload lazily.
        service.forget_partitions({tp.partition for tp in assigned})
        if not tune_fetcher(
            app, fetch_wait_ms=tick_fetch_wait, read_committed=settings.exactly_once
        ):
            if settings.exactly_once:
                # Not a timeout, and not the broker: this Faust keeps its fetcher where
                # app.worker.faust_internals does not look (tests/unit/
                # test_faust_internals.py fails first). Reading ticks read_uncommitted
                # would fire from aborted transactions, so the worker must stop: no retry
                # can make it right.
                raise RuntimeError("cannot switch Faust's consumer to read_committed")
            log.warning("could not shorten the consumer fetch wait: ticks may arrive late")

    return WorkerApp(app, service, metrics, health)
