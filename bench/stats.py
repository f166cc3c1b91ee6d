"""Small, dependency-free statistics for benchmark figures: percentiles, summaries, rates.

Written out rather than taken from :mod:`statistics` so that the method is stated:
percentiles use the nearest-rank rule (a reported p99 is a value that was observed),
which is what a reader expects of a latency figure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Summary", "percentile", "rate", "summarize"]


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of ``values``.

    Raises:
        ValueError: if ``values`` is empty or ``q`` is out of range.
    """
    if not values:
        raise ValueError("percentile of no values")
    if not 0 < q <= 100:
        raise ValueError(f"percentile {q} is not in (0, 100]")
    ordered = sorted(values)
    rank = math.ceil(q / 100 * len(ordered))
    return ordered[max(rank, 1) - 1]


@dataclass(frozen=True)
class Summary:
    """The distribution figures a latency target is stated in."""

    #: Number of observations.
    count: int
    p50: float
    p99: float
    max: float
    min: float

    def as_dict(self) -> dict[str, float | int]:
        return {
            "count": self.count,
            "p50": self.p50,
            "p99": self.p99,
            "max": self.max,
            "min": self.min,
        }


def summarize(values: Sequence[float]) -> Summary:
    """p50, p99, max and min of ``values`` (which must not be empty)."""
    ordered = sorted(values)
    return Summary(
        count=len(ordered),
        p50=percentile(ordered, 50),
        p99=percentile(ordered, 99),
        max=ordered[-1],
        min=ordered[0],
    )


def rate(count: int, seconds: float) -> float:
    """``count`` per second over ``seconds``; ``inf`` if no time passed (never divide by 0)."""
    if count <= 0:
        return 0.0
    return count / seconds if seconds > 0 else math.inf
