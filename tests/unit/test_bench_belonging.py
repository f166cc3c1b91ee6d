"""The signed hop's figure: its cost set beside the CPU of the request that pays it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.belonging import _forwarded_figure
from bench.config import QUICK
from bench.context import RunContext
from bench.hop import per_forwarded_us


def test_per_forwarded_takes_the_requests_on_their_owner_out_at_ingests_cost() -> None:
    # 8 requests at 100 µs each: 2 on their owner at 40 µs, so 6 forwarded at 120 µs.
    assert per_forwarded_us(100.0, 8, 6, 40.0) == pytest.approx(120.0)
    assert per_forwarded_us(100.0, 8, 0, 40.0) is None
    assert per_forwarded_us(100.0, 8, 6, None) is None


def _context(forwarded: float | None, owner: float | None) -> RunContext:
    ctx = RunContext(config=QUICK, work_dir=Path("/nonexistent"))
    ctx.baselines.forwarded_cpu_us = forwarded
    ctx.baselines.ingest_cpu_us = owner
    return ctx


def test_the_hops_cost_is_judged_against_a_forwarded_requests_cpu() -> None:
    figure = _forwarded_figure(4.0, 1.5, _context(forwarded=150.0, owner=50.0))
    assert figure.met is True  # 2.5 of 150 µs: 1.7%
    assert "1.7% of the worker's 150.0 µs per forwarded request stored" in figure.baseline
    assert "5.0% of one on its owner's 50.0 µs" in figure.baseline
    assert figure.target == "≤ 2% of a forwarded request's CPU"
    assert _forwarded_figure(5.0, 1.5, _context(forwarded=150.0, owner=50.0)).met is False


def test_without_the_hop_scenario_it_is_judged_against_a_request_on_its_owner() -> None:
    figure = _forwarded_figure(4.0, 1.5, _context(forwarded=None, owner=50.0))
    assert figure.met is False  # 2.5 of 50 µs: 5%
    assert "5.0% of the worker's 50.0 µs per request" in figure.baseline
