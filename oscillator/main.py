"""The oscillator process: create its topic, serve its metrics, tick until stopped."""

from __future__ import annotations

import threading

from app.kafka.config import confluent_producer
from app.kafka.topics import ensure_topics
from app.settings import Settings
from app.telemetry import serve_metrics
from oscillator.broker_clock import BrokerClockCheck
from oscillator.metrics import OscillatorMetrics
from oscillator.ticker import Oscillator

__all__ = ["run_oscillator"]


def run_oscillator(settings: Settings, stop: threading.Event, *, timeout: float = 15.0) -> None:
    """Tick the tick topic of ``settings`` until ``stop`` is set (SIGTERM, Ctrl-C)."""
    ensure_topics(settings, [settings.topics.ticks], timeout=timeout)
    metrics = OscillatorMetrics()
    serve_metrics(settings.metrics_port, metrics.registry, settings.metrics_bind)
    Oscillator(
        confluent_producer(settings),
        settings.topics.ticks,
        oscillator_id=settings.worker_id,
        metrics=metrics,
        clock_check=BrokerClockCheck(settings.topics.ticks, settings.clock_skew_warn_seconds),
    ).run(stop)
