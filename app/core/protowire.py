"""Re-exported from :mod:`kafka_timers_client.protowire`, its home: the slim client computes
what it sends with it, exactly as the worker reads it."""

from __future__ import annotations

from kafka_timers_client.protowire import (
    ACTION_CANCEL,
    ACTION_PAUSE,
    ACTION_RESUME,
    ACTION_SCHEDULE,
    DecodeError,
    Future,
    decode,
    encode,
    encode_varint,
)

__all__ = [
    "ACTION_CANCEL",
    "ACTION_PAUSE",
    "ACTION_RESUME",
    "ACTION_SCHEDULE",
    "DecodeError",
    "Future",
    "decode",
    "encode",
    "encode_varint",
]
