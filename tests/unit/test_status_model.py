"""The arithmetic behind the status page, without a broker: quantiles from Prometheus
histogram buckets, pending timers by due time, and several workers added up."""

from __future__ import annotations

import math
from typing import Any

import pytest

from app.status.model import PartitionScan, histogram_quantile, merge_snapshots, pending_by_due


def test_histogram_quantile_interpolates_like_prometheus() -> None:
    buckets = [(0.1, 50.0), (0.5, 90.0), (1.0, 100.0), (math.inf, 100.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1)
    assert histogram_quantile(0.7, buckets) == pytest.approx(0.3)  # halfway into (0.1, 0.5]
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.95)
    assert histogram_quantile(0.5, [(0.1, 0.0), (math.inf, 0.0)]) is None
    assert histogram_quantile(0.5, [(1.0, 0.0), (math.inf, 4.0)]) == 1.0  # +Inf: top bound


def test_pending_by_due_says_where_a_bounded_scan_stopped() -> None:
    now = 1_000_000.5
    scans = [
        PartitionScan(partition=0, dues=[999_990, 1_000_000, 1_000_015], pending=3),
        PartitionScan(partition=1, dues=[1_000_001, 1_007_200], pending=1000),  # cut short
    ]
    due = pending_by_due(scans, now)
    assert due["overdue"] == 1
    assert due["soon"]["start"] == 1_000_000
    assert due["soon"]["counts"][:3] == [2, 1, 0]
    assert {f["label"]: f["count"] for f in due["far"]}["1h-6h"] == 1
    assert (due["scanned"], due["unscanned"], due["exact_before"]) == (5, 998, 1_007_200)


def test_two_workers_snapshots_add_up() -> None:
    def snap(worker: str, now: float, pending: int, ticks: dict[str, float]) -> dict[str, Any]:
        start = int(now) // 10 * 10
        return {
            "worker": worker,
            "now": now,
            "totals": {"pending": pending, "fired": 2},
            "fired_by_topic": {"t": 2},
            "rejected_by_reason": {"malformed": 1},
            "last_tick": {p: {"second": s, "age": now - s} for p, s in ticks.items()},
            "lateness": {"buckets": [{"le": 0.1, "count": 2}, {"le": None, "count": 0}]},
            "pending_by_due": {
                "overdue": 0,
                "soon": {"start": start, "bucket_seconds": 10, "counts": [pending] + [0] * 59},
                "far": [],
                "scanned": pending,
                "unscanned": 0,
                "exact_before": None,
            },
        }

    merged = merge_snapshots(
        [snap("a", 1000.2, 3, {"0": 1000, "1": 990}), snap("b", 1011.0, 4, {"1": 1011})]
    )
    assert merged["totals"] == {"pending": 7, "fired": 4}
    assert merged["rejected_by_reason"] == {"malformed": 2}
    assert {p: t["second"] for p, t in merged["last_tick"].items()} == {"0": 1000, "1": 1011}
    soon = merged["pending_by_due"]["soon"]
    assert soon["start"] == 1000 and soon["counts"][:2] == [3, 4]
    assert sum(soon["counts"]) == 7
    assert merged["lateness"]["count"] == 4
