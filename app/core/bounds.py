"""Re-exported from :mod:`kafka_timers_client.bounds`, its home: the slim client computes
what it sends with it, exactly as the worker reads it."""

from __future__ import annotations

from kafka_timers_client.bounds import (
    MAX_HEADER_NAME_CHARS,
    MAX_HEADERS,
    MAX_ID_CHARS,
    MAX_SECONDS,
    MAX_SERIES_COUNT,
    MAX_SPEC_CHARS,
    MAX_TOKEN_CHARS,
    RESERVED_HEADER_PREFIXES,
    checked_text,
)

__all__ = [
    "MAX_HEADERS",
    "MAX_HEADER_NAME_CHARS",
    "MAX_ID_CHARS",
    "MAX_SECONDS",
    "MAX_SERIES_COUNT",
    "MAX_SPEC_CHARS",
    "MAX_TOKEN_CHARS",
    "RESERVED_HEADER_PREFIXES",
    "checked_text",
]
