"""A schedule request's options, checked as the worker checks them, before sending.

Each turns what a caller gives (durations as text or seconds, an iCalendar file, cron
or interval fields) into the fields :meth:`~kafka_timers_client.client.TimerClient.schedule`
sends, or raises :class:`~kafka_timers_client.errors.KafkaTimersError` with one line
where the worker would dead-letter the request. Static, so the CLI and
:mod:`kafka_timers_client.series_preview` check options with no client and no broker
(``TimerClient.spread_seconds(...)``: :class:`TimerClient` inherits them).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date
from decimal import Decimal
from pathlib import Path

from kafka_timers_client.calendars import Calendar, SkipPolicy, dates_from_ics
from kafka_timers_client.debounce import checked_debounce, debounce_seconds
from kafka_timers_client.due import due_second, parse_at, parse_duration
from kafka_timers_client.errors import KafkaTimersError
from kafka_timers_client.recurrence import Recurrence
from kafka_timers_client.spread import MAX_SPREAD_SECONDS

__all__ = ["RequestOptions"]


class RequestOptions:
    """The checks of a schedule request's options (static: no client needed)."""

    @staticmethod
    def debounce_window(
        debounce: float | str | None, max_wait: float | str | None
    ) -> tuple[int, int | None]:
        """``(debounce, max_wait)`` in whole seconds, checked as the worker checks them:
        raises :class:`KafkaTimersError` with one line if they would be dead-lettered
        (``invalid_debounce``)."""
        checked = checked_debounce(
            None if debounce is None else debounce_seconds(debounce, "debounce"),
            None if max_wait is None else debounce_seconds(max_wait, "max_wait"),
        )
        if checked is None:
            raise KafkaTimersError("give debounce= (max_wait= alone is no debounce)")
        return checked

    @staticmethod
    def spread_seconds(spread: float | str | None, every: float | str | None = None) -> int:
        """``spread`` in whole seconds (0 for none), checked as the worker checks it:
        raises :class:`KafkaTimersError` with one line if it would be dead-lettered."""
        if spread is None:
            return 0
        seconds = parse_duration(str(spread))
        if seconds != int(seconds) or not 0 <= seconds <= MAX_SPREAD_SECONDS:
            raise KafkaTimersError(
                f"spread {spread!r}: whole seconds from 0 to {MAX_SPREAD_SECONDS} (a day)"
            )
        interval = None if every is None else parse_duration(str(every))
        if seconds and interval is not None and seconds >= interval:
            raise KafkaTimersError(f"spread {spread!r}: less than the interval ({every})")
        return int(seconds)

    @staticmethod
    def build_calendar(
        skip_holidays: str | None = None,
        skip_dates: Iterable[date | str] = (),
        skip_ics: str | Path | bytes | None = None,
        skip_policy: SkipPolicy | str | None = None,
    ) -> Calendar | None:
        """The calendar ``TimerClient.schedule`` sends (``None``: none); ``skip_ics`` is
        read here. Raises :class:`KafkaTimersError` with one line if it is not valid."""
        dates = list(skip_dates)
        if skip_ics is not None:
            if isinstance(skip_ics, bytes):
                data = skip_ics
            else:
                try:
                    data = Path(skip_ics).read_bytes()
                except OSError as exc:
                    raise KafkaTimersError(f"cannot read {skip_ics}: {exc.strerror}") from exc
            dates.extend(dates_from_ics(data))
        return Calendar.build(skip_holidays, dates, skip_policy)

    @staticmethod
    def build_recurrence(
        cron: str | None,
        tz: str | None,
        every: float | str | None,
        start: float | Decimal | str | None,
        end: float | Decimal | str | None,
        count: int | None,
        *,
        calendar: Calendar | None = None,
    ) -> Recurrence:
        """The recurrence ``TimerClient.schedule`` sends (not yet anchored); raises
        :class:`KafkaTimersError` with one line if it is not valid."""
        if cron is not None and every is not None:
            raise KafkaTimersError("give cron= or every=, not both")
        first = None if start is None else due_second(parse_at(str(start)))
        last = None if end is None else int(parse_at(str(end)) // 1)
        if cron is not None:
            return Recurrence.cron_series(
                cron, tz, start=first, end=last, count=count, calendar=calendar
            )
        if tz is not None and calendar is None:
            raise KafkaTimersError("tz= applies to cron=, or to every= with a calendar")
        seconds = parse_duration(every) if isinstance(every, str) else float(every or 0)
        if seconds != int(seconds):
            raise KafkaTimersError(f"every={every!r}: use whole seconds")
        return Recurrence.interval(
            int(seconds), start=first, end=last, count=count, calendar=calendar, tz=tz
        )
