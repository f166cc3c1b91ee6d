"""Re-exported from :mod:`kafka_timers_client.due`, its home: the slim client computes
what it sends with it, exactly as the worker reads it."""

from __future__ import annotations

from kafka_timers_client.due import (
    due_second,
    parse_at,
    parse_duration,
    parse_epoch,
)

__all__ = [
    "due_second",
    "parse_at",
    "parse_duration",
    "parse_epoch",
]
