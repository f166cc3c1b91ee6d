"""Re-exported from :mod:`kafka_timers_client.recurrence`, its home: the slim client computes
what it sends with it, exactly as the worker reads it."""

from __future__ import annotations

from kafka_timers_client.recurrence import (
    ANCHOR_SLACK_SECONDS,
    MAX_EVERY_SECONDS,
    Recurrence,
)

__all__ = [
    "ANCHOR_SLACK_SECONDS",
    "MAX_EVERY_SECONDS",
    "Recurrence",
]
