"""Re-exported from :mod:`kafka_timers_client.spread`, its home: the slim client computes
what it sends with it, exactly as the worker reads it."""

from __future__ import annotations

from kafka_timers_client.spread import (
    MAX_SPREAD_SECONDS,
    spread_offset,
    spread_second,
)

__all__ = [
    "MAX_SPREAD_SECONDS",
    "spread_offset",
    "spread_second",
]
