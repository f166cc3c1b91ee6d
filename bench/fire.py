"""Fire: callbacks one worker produces per second when a large bucket comes due.

Runs on the worker the ingest scenario just filled (see :mod:`bench.ingest`): N timers,
all due in the same second, far in the future. Once all are stored, the benchmark sends
that second's tick, as an oscillator would, and times the callbacks. The rate is N over
the time from the tick to the last callback's timestamp: it includes the scan, the
callbacks and their audit records, the flush and the forgetting — everything a real due
bucket costs.
"""

from __future__ import annotations

from typing import Any

from bench.context import Baselines
from bench.report import Figure, fmt_rate, fmt_seconds
from bench.scan import TopicFollower, timestamp_ms
from bench.stack import BenchStack
from bench.stats import rate
from bench.targets import rate_verdict
from bench.ticks import send_tick

__all__ = ["figures", "fire_bucket"]

#: Fire target, callbacks per second per worker process.
TARGET = 20_000


def fire_bucket(stack: BenchStack, callbacks: str, due: int, count: int) -> dict[str, Any]:
    """Tick ``due`` and wait for the ``count`` callbacks; return the timings."""
    with TopicFollower(stack.settings, callbacks, timestamp_ms) as follower:
        follower.poll(0.5)  # take the assignment before the first callback
        tick_at = send_tick(stack.producer(), stack.settings.topics.ticks, stack.partitions, due)
        follower.wait_for_count(count, 60 + count / 500, "callbacks")
        follower.poll(1.0)  # anything extra (a duplicate) would show here
        stamps = follower.items
    seconds = max(stamps) / 1000 - tick_at
    return {
        "timers": count,
        "callbacks": len(stamps),
        "tick_to_last_seconds": seconds,
        "tick_to_first_seconds": min(stamps) / 1000 - tick_at,
        "rate": rate(count, seconds),
        "first_to_last_rate": rate(len(stamps) - 1, (max(stamps) - min(stamps)) / 1000),
    }


def figures(fired: dict[str, Any], baselines: Baselines) -> list[Figure]:
    """The fire rows: callbacks per second, and the time the whole bucket took."""
    per_second = fired["rate"]
    baseline, target, met = rate_verdict(per_second, baselines, TARGET)
    return [
        Figure(
            "fire",
            f"callbacks/s, 1 worker, {fired['timers']:,} due at once",
            fmt_rate(per_second),
            baseline,
            target,
            met,
            value=per_second,
            detail=fired,
        ),
        Figure(
            "fire",
            "tick to last callback",
            fmt_seconds(fired["tick_to_last_seconds"]),
            value=fired["tick_to_last_seconds"],
        ),
    ]
