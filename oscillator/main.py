"""The oscillator process: create its topic, serve its metrics, tick until stopped."""

from __future__ import annotations

import threading

from app.kafka.config import confluent_producer
from app.kafka.topics import ensure_topics, resolve_partitions
from app.settings import Settings
from app.telemetry import serve_metrics
from oscillator.health import LIVEZ_PATH, tick_liveness
from oscillator.metrics import OscillatorMetrics
from oscillator.ticker import Oscillator

__all__ = ["run_oscillator"]


def run_oscillator(settings: Settings, stop: threading.Event, *, timeout: float = 15.0) -> None:
    """Tick the tick topic of ``settings`` until ``stop`` is set (SIGTERM, Ctrl-C)."""
    settings = resolve_partitions(settings, timeout=timeout)
    ensure_topics(settings, [settings.topics.ticks], timeout=timeout)
    metrics = OscillatorMetrics()
    oscillator = Oscillator(
        confluent_producer(settings),
        settings.topics.ticks,
        oscillator_id=settings.worker_id,
        metrics=metrics,
    )
    serve_metrics(
        settings.metrics_port,
        metrics.registry,
        {LIVEZ_PATH: tick_liveness(oscillator, settings.liveness_timeout)},
    )
    oscillator.run(stop)
