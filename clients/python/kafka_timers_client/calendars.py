"""Calendars of a series: the local dates on which it does not fire, and what it does instead.

A :class:`Calendar` excludes dates from a series, read in the series' time zone (its
``tz``): the public holidays of a country or of one of its subdivisions, from the
``holidays`` package (``FR``, ``US-CA``, ``DE-BY``), and explicit dates (``skip_dates``,
at most :data:`~kafka_timers_client.bounds.MAX_SKIP_DATES`), for instance read from an
iCalendar file by :func:`dates_from_ics`. A request carries the country code and the
dates themselves, never a file name: the worker that walks the series reads no file.

What an occurrence on an excluded date does is the calendar's :class:`SkipPolicy`
(:meth:`kafka_timers_client.recurrence.Recurrence.after` applies it).

The holidays are those the ``holidays`` package installed beside the worker knows when
an occurrence is computed: a release of the package that adds a holiday applies it to
series already stored. The package knows no holiday past its own last year (2100 in
its releases of 2025-2026): a series runs on through them as on ordinary dates.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import date, datetime, timedelta
from enum import Enum
from functools import lru_cache
from typing import Any

from kafka_timers_client.bounds import MAX_SKIP_DATES, MAX_SPEC_CHARS, checked_text
from kafka_timers_client.errors import KafkaTimersError, RejectedRequest, RejectReason

__all__ = ["Calendar", "SkipPolicy", "dates_from_ics", "parse_dates"]

#: A country code (ISO 3166-1 alpha-2 or alpha-3), optionally with a subdivision code
#: after a dash (ISO 3166-2's part after the country: ``US-CA``, ``DE-BY``, ``FR-57``).
_HOLIDAYS_CODE = re.compile(r"([A-Za-z]{2,3})(?:-([A-Za-z0-9]{1,10}))?")
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


class SkipPolicy(str, Enum):
    """What an occurrence that falls on an excluded date does."""

    #: Dropped: the series goes on with its next occurrence on an allowed date. It does
    #: not count towards the series' ``count``.
    SKIP = "skip"
    #: Moved to the same local time (by the wall clock of the series' zone) on the next
    #: date that is not excluded, which need not be a date the cron expression matches
    #: (a weekday series moved from a Friday holiday fires on the Saturday). A run of
    #: excluded dates delivers once: its first occurrence, moved; the others of the run
    #: are dropped. A moved occurrence that lands on a second the series fires at anyway
    #: fires once. It is never earlier than the slot it replaces (at least a day later),
    #: and the series' order holds: occurrences come in time order, each once. For cron
    #: series only: an interval series' next allowed slot is its next occurrence on an
    #: allowed date, which is what ``skip`` does.
    NEXT = "next"


@lru_cache(maxsize=64)
def _holidays(code: str) -> Any:
    """The ``holidays`` package's calendar for ``code`` (normalised: upper case)."""
    match = _HOLIDAYS_CODE.fullmatch(code)
    if match is None:
        raise RejectedRequest(
            RejectReason.INVALID_RECURRENCE,
            f"skip_holidays {code[:40]!r}: a country code (FR) or country-subdivision (US-CA)",
        )
    try:
        import holidays
    except ImportError as exc:  # the slim client without its [calendars] extra
        raise KafkaTimersError(
            "skip_holidays needs the holidays package: pip install 'kafka-timers-client[calendars]'"
        ) from exc
    country, subdivision = match.group(1), match.group(2)
    try:
        return holidays.country_holidays(country, subdiv=subdivision)
    except NotImplementedError as exc:
        raise RejectedRequest(
            RejectReason.INVALID_RECURRENCE,
            f"skip_holidays {code!r}: the holidays package does not know it ({exc})",
        ) from exc


class Calendar:
    """The dates a series skips (in its zone) and its :class:`SkipPolicy`. Immutable.

    Build one with :meth:`build`, which checks what a request may carry.
    """

    __slots__ = ("_ordinals", "dates", "holidays", "policy")

    #: ``holidays`` code (``FR``, ``US-CA``), upper case; ``None``: no public holidays.
    holidays: str | None
    #: Explicit excluded dates, sorted, each once.
    dates: tuple[date, ...]
    #: What an occurrence on an excluded date does.
    policy: SkipPolicy
    _ordinals: frozenset[int]

    def __init__(
        self,
        holidays: str | None = None,
        dates: Iterable[date] = (),
        policy: SkipPolicy = SkipPolicy.SKIP,
    ) -> None:
        object.__setattr__(self, "holidays", holidays)
        object.__setattr__(self, "dates", tuple(sorted(set(dates))))
        object.__setattr__(self, "policy", policy)
        object.__setattr__(self, "_ordinals", frozenset(d.toordinal() for d in self.dates))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Calendar is immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Calendar) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Calendar(holidays={self.holidays!r}, dates={self.dates!r}, policy={self.policy})"

    def _key(self) -> tuple[str | None, tuple[date, ...], SkipPolicy]:
        return self.holidays, self.dates, self.policy

    @classmethod
    def build(
        cls,
        holidays: str | None = None,
        dates: Iterable[date | str] = (),
        policy: SkipPolicy | str | None = None,
    ) -> Calendar | None:
        """A calendar from what a request carries; ``None`` if it excludes nothing.

        Raises :class:`RejectedRequest` (``invalid_recurrence``) for an unknown
        holidays code, a date that is not ``YYYY-MM-DD``, more than
        :data:`~kafka_timers_client.bounds.MAX_SKIP_DATES` dates, or an unknown policy;
        ``out_of_bounds`` for a code too long.
        """
        code = None
        if holidays:
            checked_text(holidays, "skip_holidays", MAX_SPEC_CHARS)
            code = holidays.upper()
            _holidays(code)
        days = parse_dates(dates)
        if policy is None or policy == "":
            chosen = SkipPolicy.SKIP
        else:
            try:
                chosen = SkipPolicy(policy)
            except ValueError:
                raise RejectedRequest(
                    RejectReason.INVALID_RECURRENCE,
                    f"skip_policy {str(policy)[:40]!r}: use skip or next",
                ) from None
        if code is None and not days:  # a policy alone (an empty file's dates) skips nothing
            return None
        return cls(code, days, chosen)

    def excludes(self, day: date) -> bool:
        """Whether the series skips local date ``day``."""
        if day.toordinal() in self._ordinals:
            return True
        return self.holidays is not None and day in _holidays(self.holidays)

    def run_end(self, day: date, limit: int = 4 * MAX_SKIP_DATES) -> date | None:
        """The last date of the run of excluded dates that starts at ``day`` (excluded);
        ``None`` past year 9999 or after ``limit`` dates (a run that long is no calendar
        a series could follow)."""
        for _ in range(limit):
            try:
                following = day + timedelta(days=1)
            except OverflowError:
                return None
            if not self.excludes(following):
                return day
            day = following
        return None

    def run_start(self, day: date, limit: int = 4 * MAX_SKIP_DATES) -> date:
        """The first date of the run of excluded dates that ends at ``day`` (excluded)."""
        for _ in range(limit):
            try:
                previous = day - timedelta(days=1)
            except OverflowError:
                return day
            if not self.excludes(previous):
                return day
            day = previous
        return day

    def describe(self) -> str:
        """E.g. ``skipping holidays FR and 2 dates``."""
        parts = []
        if self.holidays:
            parts.append(f"holidays {self.holidays}")
        if self.dates:
            parts.append(f"{len(self.dates)} date{'s' if len(self.dates) > 1 else ''}")
        policy = " (moved to the next allowed day)" if self.policy is SkipPolicy.NEXT else ""
        return "skipping " + " and ".join(parts) + policy


def parse_dates(dates: Iterable[date | str]) -> tuple[date, ...]:
    """``dates`` (``date`` objects or ``YYYY-MM-DD`` texts) as dates, sorted, each once;
    :class:`RejectedRequest` if one is not a date or there are too many."""
    out: set[date] = set()
    for count, item in enumerate(dates, 1):
        if count > MAX_SKIP_DATES:
            raise RejectedRequest(
                RejectReason.INVALID_RECURRENCE,
                f"more than {MAX_SKIP_DATES} skip_dates in one request",
            )
        if isinstance(item, datetime):
            raise RejectedRequest(
                RejectReason.INVALID_RECURRENCE, f"skip_dates: {item!r} is not a date"
            )
        if isinstance(item, date):
            out.add(item)
            continue
        if not isinstance(item, str) or not _ISO_DATE.fullmatch(item):
            raise RejectedRequest(
                RejectReason.INVALID_RECURRENCE,
                f"skip_dates: {str(item)[:40]!r} is not a date (YYYY-MM-DD)",
            )
        try:
            out.add(date.fromisoformat(item))
        except ValueError as exc:
            raise RejectedRequest(
                RejectReason.INVALID_RECURRENCE, f"skip_dates: {item!r}: {exc}"
            ) from exc
    return tuple(sorted(out))


def dates_from_ics(data: bytes) -> tuple[date, ...]:
    """The dates the events of an iCalendar file cover, to exclude from a series.

    Each ``VEVENT`` covers the dates from its ``DTSTART`` to its end (``DTEND``, or
    ``DTSTART`` plus ``DURATION``; without either, its start date): an all-day event
    ending on the 26th covers the 24th and 25th (iCalendar's end is exclusive); a timed
    event covers each date it touches, read in its own zone (a floating time as
    written). An ``RRULE`` is expanded, with its ``EXDATE``\\ s removed; it must end
    (``COUNT`` or ``UNTIL``), since the request carries the dates themselves. Needs the
    ``icalendar`` package. Raises :class:`KafkaTimersError` with one line if the file is
    not iCalendar, a rule does not end, or it covers more than
    :data:`~kafka_timers_client.bounds.MAX_SKIP_DATES` dates.
    """
    try:
        import icalendar
    except ImportError as exc:
        raise KafkaTimersError(
            "reading an iCalendar file needs the icalendar package: "
            "pip install 'kafka-timers-client[calendars]'"
        ) from exc
    try:
        parsed = icalendar.Calendar.from_ical(data)
    except (ValueError, IndexError, KeyError) as exc:
        raise KafkaTimersError(f"not an iCalendar file: {exc}") from exc
    out: set[date] = set()
    for event in parsed.walk("VEVENT"):
        if event.get("DTSTART") is None:
            continue
        try:
            for start, end in _event_spans(event):
                out.update(_covered(start, end))
                if len(out) > MAX_SKIP_DATES:
                    raise KafkaTimersError(
                        f"the iCalendar file covers more than {MAX_SKIP_DATES} dates"
                    )
        except (ValueError, TypeError, OverflowError) as exc:
            raise KafkaTimersError(f"iCalendar event {event.get('SUMMARY', '')!s}: {exc}") from exc
    return tuple(sorted(out))


def _event_spans(event: Any) -> Iterable[tuple[date, date]]:
    """``(start, end)`` of each instance of ``event`` (its rule expanded)."""
    start = event.decoded("DTSTART")
    if event.get("DTEND") is not None:
        length = event.decoded("DTEND") - start
    elif event.get("DURATION") is not None:
        length = event.decoded("DURATION")
    else:
        length = timedelta(days=1) if not isinstance(start, datetime) else timedelta(0)
    rule = event.get("RRULE")
    if rule is None:
        yield start, start + length
        return
    from dateutil.rrule import rrulestr

    text = rule.to_ical().decode()
    if "COUNT=" not in text.upper() and "UNTIL=" not in text.upper():
        raise ValueError("an RRULE without COUNT or UNTIL never ends: give one")
    anchor = start if isinstance(start, datetime) else datetime.combine(start, datetime.min.time())
    excluded = set()
    for exdate in _as_list(event.get("EXDATE")):
        for item in exdate.dts:
            value = item.dt
            excluded.add(value.date() if isinstance(value, datetime) else value)
    for count, moment in enumerate(rrulestr(text, dtstart=anchor), 1):
        if count > MAX_SKIP_DATES:
            raise ValueError(f"an RRULE with more than {MAX_SKIP_DATES} instances")
        first = moment if isinstance(start, datetime) else moment.date()
        if (first.date() if isinstance(first, datetime) else first) in excluded:
            continue
        yield first, first + length


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _covered(start: date, end: date) -> list[date]:
    """The dates from ``start`` to ``end``: an all-day end is exclusive; a timed event
    covers each date it touches (a zero-length one its start date)."""
    if isinstance(start, datetime) and isinstance(end, datetime):
        first = start.date()
        last = (end - timedelta(microseconds=1)).date() if end > start else first
    else:
        first = start
        last = end - timedelta(days=1) if end > start else start
    days = (last - first).days
    if days > MAX_SKIP_DATES:
        raise ValueError(f"an event longer than {MAX_SKIP_DATES} days")
    return [first + timedelta(days=n) for n in range(days + 1)]
