"""The oscillator process: create its topic, serve its metrics, tick until stopped."""

from __future__ import annotations

import functools
import logging
import threading

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from app.kafka.config import confluent_common, confluent_producer
from app.kafka.topics import ensure_topics, resolve_partitions
from app.settings import Settings
from app.telemetry import serve_metrics
from oscillator.broker_clock import BrokerClockCheck
from oscillator.health import LIVEZ_PATH, tick_liveness
from oscillator.metrics import OscillatorMetrics
from oscillator.ticker import Oscillator

__all__ = ["latest_append_time", "run_oscillator"]

log = logging.getLogger(__name__)


def run_oscillator(settings: Settings, stop: threading.Event, *, timeout: float = 15.0) -> None:
    """Tick the tick topic of ``settings`` until ``stop`` is set (SIGTERM, Ctrl-C)."""
    settings = resolve_partitions(settings, timeout=timeout)
    ensure_topics(settings, [settings.topics.ticks], timeout=timeout)
    metrics = OscillatorMetrics()
    admin = AdminClient(confluent_common(settings))
    oscillator = Oscillator(
        confluent_producer(settings),
        settings.topics.ticks,
        oscillator_id=settings.worker_id,
        metrics=metrics,
        clock_check=BrokerClockCheck(settings.topics.ticks, settings.clock_skew_warn_seconds),
        append_time=functools.partial(latest_append_time, admin, settings.topics.ticks),
    )
    serve_metrics(
        settings.metrics_port,
        metrics.registry,
        {LIVEZ_PATH: tick_liveness(oscillator, settings.liveness_timeout)},
        addr=settings.metrics_bind,
    )
    oscillator.run(stop)


def latest_append_time(admin: AdminClient, topic: str, partition: int, offset: int) -> int | None:
    """The broker's append time of record ``offset``, where ListOffsets "latest" tells it.

    Only some brokers do (the dev broker does; Apache Kafka answers -1): ``None`` when
    the answer is not that record's, or the broker gives no time, or does not answer.
    """
    tp = TopicPartition(topic, partition)
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    try:
        answer = admin.list_offsets({tp: latest}, request_timeout=1.0)[tp].result(timeout=2.0)
    except Exception as exc:  # a probe at start: never let it stop the ticking
        log.info("the broker's clock could not be read with ListOffsets: %s", exc)
        return None
    if answer.offset != offset + 1 or answer.timestamp < 0:
        return None
    timestamp: int = answer.timestamp
    return timestamp
