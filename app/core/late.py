"""Re-exported from :mod:`kafka_timers_client.late`, its home: the slim client computes
what it sends with it, exactly as the worker reads it."""

from __future__ import annotations

from kafka_timers_client.late import (
    DEFAULT_POLICY,
    FIRE_HOWEVER_LATE,
    CatchUp,
    LatePolicy,
)

__all__ = [
    "DEFAULT_POLICY",
    "FIRE_HOWEVER_LATE",
    "CatchUp",
    "LatePolicy",
]
