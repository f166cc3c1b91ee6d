"""Prometheus metrics of an oscillator, on a registry of its own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

__all__ = ["OscillatorMetrics"]


class OscillatorMetrics:
    """Counters an oscillator exports."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.ticks = Counter("kafka_timers_oscillator_ticks", "Ticks sent.", registry=r)
        self.tick_delay = Histogram(
            "kafka_timers_oscillator_tick_delay_seconds",
            "How long after its second boundary each tick was sent.",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0),
            registry=r,
        )
