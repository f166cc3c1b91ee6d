"""observe_many must leave a histogram exactly as that many single observations do.

It writes prometheus_client's private ``_sum``/``_buckets``: should a release rename
them, the fallback keeps the values right, and this test says so.
"""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Histogram

from app.worker.metrics import LATENESS_BUCKETS, WorkerMetrics, observe_many


def _samples(h: Histogram) -> dict[tuple[str, str], float]:
    return {
        (s.name, s.labels.get("le", "")): s.value
        for metric in h.collect()
        for s in metric.samples
        if not s.name.endswith("_created")
    }


def _pair() -> tuple[Histogram, Histogram]:
    r1, r2 = CollectorRegistry(), CollectorRegistry()
    return (
        Histogram("lat", "l", buckets=LATENESS_BUCKETS, registry=r1),
        Histogram("lat", "l", buckets=LATENESS_BUCKETS, registry=r2),
    )


@pytest.mark.parametrize("amount", [0.0, 0.004, 0.005, 0.25, 1.0, 7.5, 300.0, 1e6])
def test_many_at_once_equals_one_at_a_time(amount: float) -> None:
    one, many = _pair()
    for _ in range(8):
        one.observe(amount)
    observe_many(many, amount, 8)
    assert _samples(one) == pytest.approx(_samples(many))
    assert _samples(many)[("lat_count", "")] == 8


def test_the_private_attributes_it_uses_are_there() -> None:
    lateness = WorkerMetrics().lateness
    for name in ("_upper_bounds", "_buckets", "_sum"):
        assert hasattr(lateness, name), f"prometheus_client renamed Histogram.{name}"
