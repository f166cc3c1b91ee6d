"""The Faust worker: two thin agents over co-partitioned topics sharing one table.

Ticks and requests have the same partition count, so Faust's assignor gives partition n
of both (and of the table's changelog) to the same worker. The ``requests`` agent stores
timers into partition n of the table; the ``ticks`` agent fires what partition n's wheel
says is due. Faust provides the RocksDB store per partition, recovery from the
changelog, consumer-group membership and graceful shutdown; the behaviour lives in
:class:`app.service.TimerService`.
"""

from __future__ import annotations

import json
import logging
from decimal import Decimal
from pathlib import Path
from typing import Any

import faust

from app.kafka_config import confluent_consumer, confluent_producer, faust_credentials
from app.metrics import WorkerMetrics
from app.output import OutputProducer
from app.policy import RequestPolicy
from app.request_format import RawRecord
from app.service import TimerService
from app.settings import Settings
from app.status import register_status_views
from app.topics import TABLE_NAME, changelog_topic

__all__ = ["WorkerApp", "build_worker"]

log = logging.getLogger(__name__)

#: How many request records one batch may hold, and how long to wait to fill it.
REQUEST_BATCH = 2000
REQUEST_BATCH_WITHIN = 0.02


class WorkerApp:
    """The Faust app of one worker process and the service it drives."""

    def __init__(self, app: faust.App, service: TimerService, metrics: WorkerMetrics) -> None:
        self.app = app
        self.service = service
        self.metrics = metrics


def _tick_second(event: Any) -> int | None:
    """The second a tick stands for: its key, a decimal epoch second (as in the article)."""
    key = event.message.key
    try:
        return int(Decimal(key.decode())) if key else None
    except (ArithmeticError, UnicodeDecodeError, ValueError):
        return None


def _tick_source(event: Any) -> str:
    """The oscillator that sent a tick (our ticks say so in their JSON value)."""
    try:
        return str(json.loads(event.value)["oscillator"])
    except (ValueError, KeyError, TypeError):
        return "unknown"


def _raw_record(event: Any) -> RawRecord:
    msg = event.message
    headers = tuple(
        (str(k), v.encode() if isinstance(v, str) else (v or b"")) for k, v in (msg.headers or ())
    )
    return RawRecord(
        topic=msg.topic,
        partition=msg.partition,
        offset=msg.offset,
        timestamp_ms=int(msg.timestamp * 1000),
        key=msg.key,
        value=msg.value,
        headers=headers,
    )


#: Longest a fetch may wait at the broker for new records, in milliseconds. Faust fixes
#: aiokafka's at 1,500 ms; a tick that lands while a fetch waits can then sit at the
#: broker until the wait ends (measured here: up to ~330 ms of added lateness).
FETCH_MAX_WAIT_MS = 50


def _shorten_fetch_wait(app: faust.App) -> None:
    """Lower the fetch wait of Faust's aiokafka consumer (Faust exposes no setting for it)."""
    fetcher = getattr(
        getattr(getattr(app.consumer, "_thread", None), "_consumer", None), "_fetcher", None
    )
    if fetcher is not None and hasattr(fetcher, "_fetch_max_wait_ms"):
        fetcher._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
    else:
        log.warning("could not shorten the consumer fetch wait: ticks may arrive late")


def build_worker(settings: Settings) -> WorkerApp:
    """Assemble the Faust app, its table and agents, and the service behind them."""
    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    app = faust.App(
        settings.app_id,
        broker=[f"kafka://{hp}" for hp in settings.bootstrap_servers.split(",")],
        broker_credentials=faust_credentials(settings),
        store="rocksdb://",
        datadir=settings.data_dir,
        web_enabled=True,
        web_port=settings.web_port,
        web_bind="0.0.0.0",
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication_factor,
        broker_session_timeout=settings.session_timeout,
        broker_heartbeat_interval=settings.heartbeat_interval,
        consumer_auto_offset_reset="earliest",
        table_standby_replicas=0,
        autodiscover=False,
        loghandlers=[],
    )
    ticks = app.topic(
        settings.topics.ticks,
        key_serializer="raw",
        value_serializer="raw",
        partitions=settings.partitions,
    )
    requests = app.topic(
        settings.topics.requests,
        key_serializer="raw",
        value_serializer="raw",
        partitions=settings.partitions,
    )
    table = app.Table(
        TABLE_NAME,
        partitions=settings.partitions,
        schema=faust.Schema(key_serializer="raw", value_serializer="raw"),
    )
    metrics = WorkerMetrics()
    policy = RequestPolicy.build(
        allow_patterns=settings.callback_allow,
        own_topics=(*settings.topics.all(), changelog_topic(settings)),
        app_id=settings.app_id,
        max_payload_bytes=settings.max_payload_bytes,
        horizon_seconds=settings.horizon_seconds,
    )
    output = OutputProducer(
        confluent_producer(settings, **{"client.id": f"kafka-timers-{settings.worker_id}"}),
        worker_id=settings.worker_id,
        fired_topic=settings.topics.fired,
        dlq_topic=settings.topics.dlq,
    )

    def db_for_partition(partition: int) -> Any:
        store: Any = table.data  # Faust keeps no public accessor for a partition's DB
        return store._db_for_partition(partition)

    service = TimerService(
        policy=policy,
        output=output,
        metrics=metrics,
        changelog_topic=changelog_topic(settings),
        db_for_partition=db_for_partition,
        catchup_consumer_conf=confluent_consumer(settings, group_id="unused"),
        clock_skew_warn_seconds=settings.clock_skew_warn_seconds,
    )

    @app.agent(requests, name="requests")
    async def handle_requests(stream: Any) -> None:
        async for events in stream.take_events(REQUEST_BATCH, within=REQUEST_BATCH_WITHIN):
            await service.handle_requests([_raw_record(e) for e in events])

    @app.agent(ticks, name="ticks")
    async def handle_ticks(stream: Any) -> None:
        async for event in stream.events():
            second = _tick_second(event)
            if second is None:
                log.warning(
                    "ignoring tick without an epoch-second key at %s[%d]@%d",
                    event.message.topic,
                    event.message.partition,
                    event.message.offset,
                )
                continue
            await service.handle_tick(
                event.message.partition, second, event.message.timestamp, _tick_source(event)
            )

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]
    async def on_revoked(app: faust.App, revoked: set[Any], **_: Any) -> None:
        service.forget_partitions({tp.partition for tp in revoked})

    @app.on_partitions_assigned.connect  # type: ignore[arg-type]
    async def on_assigned(app: faust.App, assigned: set[Any], **_: Any) -> None:
        # Recovery may rewrite the stores of newly assigned partitions: reload lazily.
        service.forget_partitions({tp.partition for tp in assigned})
        _shorten_fetch_wait(app)

    register_status_views(app, service, metrics, settings)
    return WorkerApp(app, service, metrics)
