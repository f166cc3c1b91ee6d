"""The performance targets, stated once, and how a figure is judged against them:
on the 2-core dev machine, each beside its baseline from the same run. The verdict
helpers are pure: they turn measured values into the table's baseline text, target
text and met/missed, and are unit-tested (``tests/unit/test_bench_targets.py``).
"""

from __future__ import annotations

from bench.context import Baselines
from bench.report import fmt_rate

__all__ = [
    "BURST_SECONDS",
    "BURST_SHARE",
    "DISK_BYTES_PER_TIMER",
    "FIRE_FLOOR",
    "IDLE_CORE_SHARE",
    "INGEST_FLOOR",
    "INGEST_RAW_SHARE",
    "KILL_MARGIN_SECONDS",
    "MEMORY_GROWTH_BYTES",
    "ROLLING_RESTART_SECONDS",
    "SCALE_OUT",
    "STEADY_MAX",
    "STEADY_P99",
    "fire_verdict",
    "ingest_verdict",
    "scale_out_verdict",
]

#: Ingest: requests stored per second by one worker process, and at least this share of
#: the same run's raw produce rate (the broker's own ceiling on this machine).
INGEST_FLOOR = 100_000
INGEST_RAW_SHARE = 0.15
#: Fire: callbacks delivered per second by one worker process.
FIRE_FLOOR = 100_000
#: Scale-out: two workers on two cores store at least this many times what one stores.
SCALE_OUT = 1.7
#: Steady (10,000/s due for 60 s, 2 workers): lateness p99 and max, seconds.
STEADY_P99 = 0.100
STEADY_MAX = 0.250
#: Burst (1,000,000 due in one second, 2 workers): all fired within this many seconds
#: of their second, no partition over this multiple of its fair share.
BURST_SECONDS = 15.0
BURST_SHARE = 1.2
#: Idle: CPU of a worker with 1,000,000 pending and nothing due, share of one core.
IDLE_CORE_SHARE = 0.02
#: Memory: RSS at 10,000,000 pending at most this much over RSS at 1,000,000 (bytes),
#: and disk per pending timer at 10,000,000 (bytes).
MEMORY_GROWTH_BYTES = 50e6
DISK_BYTES_PER_TIMER = 100
#: Restarts: a SIGTERM restart's partitions fire again within this many seconds; after
#: a kill -9, firing resumes within the session timeout plus this.
ROLLING_RESTART_SECONDS = 2.0
KILL_MARGIN_SECONDS = 3.0


def _faust(per_second: float, baselines: Baselines) -> str:
    faust = baselines.faust_passthrough
    if not faust:
        return "Faust baseline failed"
    return f"Faust {fmt_rate(faust)} ({per_second / faust:.1f}x)"


def ingest_verdict(per_second: float, baselines: Baselines) -> tuple[str, str, bool]:
    """(baseline text, target text, met) of an ingest rate: the floor, and the share of
    the same run's raw produce rate (not met if that baseline failed: the share cannot
    be shown)."""
    raw = baselines.raw_produce
    target = f"≥ {fmt_rate(INGEST_FLOOR)} and ≥ {INGEST_RAW_SHARE:.0%} of raw produce"
    if raw:
        share = per_second / raw
        parts = [f"raw produce {fmt_rate(raw)} ({share:.1%})"]
    else:
        share = 0.0
        parts = ["raw produce baseline failed"]
    parts.append(_faust(per_second, baselines))
    met = per_second >= INGEST_FLOOR and raw is not None and share >= INGEST_RAW_SHARE
    return "; ".join(parts), target, met


def fire_verdict(per_second: float, baselines: Baselines) -> tuple[str, str, bool]:
    """(baseline text, target text, met) of a fire rate (callbacks delivered per second)."""
    parts = [_faust(per_second, baselines)]
    if baselines.raw_produce:
        parts.append(f"raw produce {fmt_rate(baselines.raw_produce)}")
    return "; ".join(parts), f"≥ {fmt_rate(FIRE_FLOOR)}", per_second >= FIRE_FLOOR


def scale_out_verdict(two: float, one: float) -> tuple[str, str, bool]:
    """(baseline text, target text, met) of two workers' rate against one worker's."""
    ratio = two / one if one > 0 else 0.0
    return (
        f"1 worker {fmt_rate(one)} ({ratio:.2f}x)",
        f"≥ {SCALE_OUT}x 1 worker",
        ratio >= SCALE_OUT,
    )
