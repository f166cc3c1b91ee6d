"""Re-exported from :mod:`kafka_timers_client.partitioner`, its home: the slim client computes
what it sends with it, exactly as the worker reads it."""

from __future__ import annotations

from kafka_timers_client.partitioner import (
    murmur2,
    partition_for,
    placement_function,
)

__all__ = [
    "murmur2",
    "partition_for",
    "placement_function",
]
