"""Re-exported from :mod:`kafka_timers_client.calendars`, its home: the client checks and
anchors a series with a calendar exactly as the worker walks it."""

from __future__ import annotations

from kafka_timers_client.calendars import Calendar, SkipPolicy, dates_from_ics, parse_dates

__all__ = ["Calendar", "SkipPolicy", "dates_from_ics", "parse_dates"]
