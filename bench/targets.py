"""The issue's targets, stated once, and how a figure is judged against them."""

from __future__ import annotations

from bench.context import Baselines
from bench.report import fmt_rate

__all__ = ["BASELINE_MULTIPLE", "rate_verdict"]

#: Ingest and fire must each be at least this many times the Faust passthrough rate.
BASELINE_MULTIPLE = 2.0


def rate_verdict(per_second: float, baselines: Baselines, floor: float) -> tuple[str, str, bool]:
    """(baseline text, target text, met) for a rate that must beat ``floor`` and 2x Faust."""
    faust = baselines.faust_passthrough
    target = f"≥ {fmt_rate(floor)} and ≥ {BASELINE_MULTIPLE:.0f}x Faust"
    parts = []
    if faust:
        parts.append(f"Faust {fmt_rate(faust)} ({per_second / faust:.1f}x)")
    else:
        parts.append("Faust baseline failed")
    if baselines.raw_produce:
        parts.append(f"raw {fmt_rate(baselines.raw_produce)}")
    # Without its baseline the 2x half of the target cannot be shown, so it is not met.
    met = per_second >= floor and faust is not None and per_second >= BASELINE_MULTIPLE * faust
    return "; ".join(parts), target, met
