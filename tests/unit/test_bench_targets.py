"""The benchmark's verdicts against issue 15's targets: pure arithmetic on measured rates."""

from __future__ import annotations

from bench.context import Baselines
from bench.targets import fire_verdict, ingest_verdict, scale_out_verdict


def test_ingest_needs_the_floor_and_its_share_of_raw_produce() -> None:
    baselines = Baselines(raw_produce=600_000.0, faust_passthrough=5_000.0)
    baseline, target, met = ingest_verdict(120_000.0, baselines)
    assert met  # 120k ≥ 100k and 20% ≥ 15%
    assert "raw produce 600,000/s (20.0%)" in baseline
    assert "Faust 5,000/s (24.0x)" in baseline
    assert target == "≥ 100,000/s and ≥ 15% of raw produce"
    assert not ingest_verdict(99_999.0, baselines)[2]  # below the floor
    # Above the floor but under 15% of a fast broker's raw produce rate:
    assert not ingest_verdict(120_000.0, Baselines(raw_produce=1_000_000.0))[2]


def test_ingest_without_its_raw_baseline_is_not_met() -> None:
    baseline, _, met = ingest_verdict(500_000.0, Baselines())
    assert not met
    assert "raw produce baseline failed" in baseline
    assert "Faust baseline failed" in baseline


def test_fire_is_judged_on_the_floor_alone() -> None:
    baselines = Baselines(raw_produce=700_000.0, faust_passthrough=4_000.0)
    baseline, target, met = fire_verdict(100_000.0, baselines)
    assert met
    assert target == "≥ 100,000/s"
    assert baseline == "Faust 4,000/s (25.0x); raw produce 700,000/s"
    assert not fire_verdict(99_000.0, baselines)[2]


def test_scale_out_compares_two_workers_with_one() -> None:
    baseline, target, met = scale_out_verdict(51_000.0, 30_000.0)
    assert met  # exactly 1.7x
    assert baseline == "1 worker 30,000/s (1.70x)"
    assert target == "≥ 1.7x 1 worker"
    assert not scale_out_verdict(50_000.0, 30_000.0)[2]
    assert not scale_out_verdict(50_000.0, 0.0)[2]  # no one-worker figure: not met
