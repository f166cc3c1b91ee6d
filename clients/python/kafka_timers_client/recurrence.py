"""Recurring timers: when the occurrences of a series are due, to the second.

A :class:`Recurrence` is either a cron expression in an IANA time zone or a fixed
interval in seconds, with an optional end and maximum count. Its ``start`` is the due
second of its first occurrence: a request's own start (or the time it was sent) is
turned into that by :meth:`Recurrence.anchored` when the request is parsed, so the
stored series, the worker and the audit agree on occurrence 1. The worker anchors no
earlier than its own clock less :data:`ANCHOR_SLACK_SECONDS`, so a producer clock far
behind does not replay the series' history; the audit, which has no worker clock,
recovers that anchor from the series' records on the fired topic
(:mod:`spark_audit.series`).

Cron expressions are parsed and walked by cronsim (Debian cron's syntax: ranges,
steps, lists, names, ``L``, ``W``, ``#``). Five fields are minute to day of week; six
fields put the **seconds first** (Quartz/Spring order: ``0 0 9 * * MON-FRI`` is 09:00:00
on weekdays). Day of month and day of week combine as in Debian cron: if either starts
with ``*`` both must match, otherwise either may.

Cron times are local wall-clock times in the series' zone. cronsim walks them as naive
wall-clock times (no zone at all); this module maps each onto the time line, with two
rules for the hours a daylight-saving change skips or repeats:

- **a skipped local time** (spring forward: 02:30 does not exist in Paris on the last
  Sunday of March) fires at the first instant after the gap (03:00:00 local), as Vixie
  cron does for fixed-time jobs; several skipped times collapse into that one instant,
  so nothing fires twice at it and no day loses its 02:30 run.
- **a repeated local time** (fall back: 02:30 happens twice on the last Sunday of
  October) fires once, on its first pass. Every matching local time fires exactly once,
  so a cron series is silent during the repeated hour if all its times there already
  fired: a series that must keep a fixed rate through the change is an interval series.

An **interval** series is pure epoch arithmetic: occurrence *n* is due at
``start + (n - 1) * every``, whatever the time zone or daylight saving does.

A series may have a **calendar** (:class:`~kafka_timers_client.calendars.Calendar`): local
dates, in the series' zone, on which it does not fire (public holidays, explicit dates).
Its *slots* are the times above; its *occurrences* are the slots on allowed dates, and,
with the ``next`` policy, the first slot of each run of excluded dates moved to the same
local time on the first allowed date after the run. Occurrences are numbered, counted
(``count``) and bounded (``end``) after the calendar is applied: ``count=10`` is ten
occurrences that fire. An interval series with a calendar takes a ``tz`` (the zone its
dates are read in; UTC by default); its grid stays ``start + k * every``, and it takes
only the ``skip`` policy. A series whose next allowed occurrence lies more than
:data:`MAX_EXCLUDED_RUNS` runs of excluded dates ahead (or past the year 9999) ends.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from kafka_timers_client.bounds import MAX_SECONDS, MAX_SERIES_COUNT
from kafka_timers_client.calendars import Calendar, SkipPolicy
from kafka_timers_client.errors import RejectedRequest, RejectReason

__all__ = ["ANCHOR_SLACK_SECONDS", "MAX_EVERY_SECONDS", "MAX_EXCLUDED_RUNS", "Recurrence"]

#: Longest interval accepted: about 100 years (longer is not a series).
MAX_EVERY_SECONDS = 100 * 366 * 86400
#: How far behind the worker's clock a series may start: a series is anchored at the
#: later of its request's timestamp and the worker's clock, when it reads the request,
#: less this. One hour covers ordinary consumer lag and a worker's restart backlog
#: (a restore, a rebalance, a broker failover) with room to spare, so a series sent on
#: time starts at its timestamp; a producer clock hours or decades behind (a record
#: timestamp of 1970) does not replay its history. A series request read more than this
#: after it was sent (an outage longer than an hour) starts this long before it was
#: read: the occurrences before that were never scheduled, and are not reported.
ANCHOR_SLACK_SECONDS = 3600
#: Most runs of excluded dates one step of a series with a calendar walks over before
#: it gives up (the series ends there): a cron expression that matches only holidays
#: (``0 9 1 1 *`` with ``FR``) ends instead of searching forever.
MAX_EXCLUDED_RUNS = 1000
_DAY = timedelta(days=1)
_UTC = timezone.utc


#: What an IANA zone name looks like (``Europe/Paris``, ``America/Argentina/Buenos_Aires``,
#: ``Etc/GMT+5``, ``UTC``): checked before the name reaches the file system.
_ZONE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_+\-]{0,63}(/[A-Za-z0-9_+\-]{1,64}){0,3}")


@lru_cache(maxsize=256)
def _zone(name: str) -> ZoneInfo:
    try:
        if not _ZONE_NAME.fullmatch(name):
            raise ValueError("not an IANA name")
        return ZoneInfo(name)
    # OSError: a directory of the tz database ("America") is a name but not a zone.
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise RejectedRequest(
            RejectReason.UNKNOWN_TIME_ZONE, f"unknown time zone {name!r}: use an IANA name"
        ) from exc


@lru_cache(maxsize=1024)
def _checked_cron(expr: str) -> str:
    """``expr`` normalised (single spaces), or :class:`RejectedRequest` if cronsim refuses it."""
    fields = expr.split()
    if len(fields) not in (5, 6):
        raise RejectedRequest(
            RejectReason.INVALID_CRON,
            f"cron {expr!r} has {len(fields)} fields: use 5 (minute first) or 6 (seconds first)",
        )
    normalised = " ".join(fields)
    try:
        CronSim(normalised, datetime(2000, 1, 1))
    # cronsim is a parser of the producer's text: whatever it raises, the text is bad.
    except Exception as exc:
        raise RejectedRequest(RejectReason.INVALID_CRON, f"cron {expr!r}: {exc}") from exc
    return normalised


def _epoch(moment: datetime) -> int:
    return int(moment.timestamp())


def _utc_offset(second: int, zone: ZoneInfo) -> int:
    offset = datetime.fromtimestamp(second, zone).utcoffset()
    return int(offset.total_seconds()) if offset is not None else 0


def _wall_to_epoch(wall: datetime, zone: ZoneInfo) -> int:
    """The instant a naive local ``wall`` time names in ``zone``, by the two DST rules.

    A repeated time is its first pass (``fold=0``). A skipped time is the first instant
    after the gap: the gap lies between the two readings of ``wall`` (with the offset
    before and after the change), and is found by halving that span.
    """
    first_pass = _epoch(wall.replace(tzinfo=zone, fold=0))
    if datetime.fromtimestamp(first_pass, zone).replace(tzinfo=None) == wall:
        return first_pass  # it exists (the first pass, if it happens twice)
    low, high = sorted((first_pass, _epoch(wall.replace(tzinfo=zone, fold=1))))
    before = _utc_offset(low, zone)
    while high - low > 1:  # invariant: low has the old offset, high the new one
        mid = (low + high) // 2
        if _utc_offset(mid, zone) == before:
            low = mid
        else:
            high = mid
    return high


def _local_date(second: int, zone: ZoneInfo) -> date:
    return datetime.fromtimestamp(second, zone).date()


def _midnight(day: date, zone: ZoneInfo) -> int:
    """The first instant of local date ``day`` (after the gap, if midnight is skipped)."""
    return _wall_to_epoch(datetime(day.year, day.month, day.day), zone)


def _moved(second: int, day: date, zone: ZoneInfo) -> int:
    """The instant of ``second``'s local wall-clock time on local date ``day``."""
    wall = datetime.fromtimestamp(second, zone).replace(tzinfo=None)
    return _wall_to_epoch(datetime.combine(day, wall.time()), zone)


@dataclass(frozen=True)
class Recurrence:
    """When a series' occurrences are due: a cron expression or a fixed interval.

    Build one with :meth:`cron_series` or :meth:`interval`, then :meth:`anchored` to fix
    its first occurrence; :meth:`after` gives each next one.
    """

    #: Cron expression (5 fields, or 6 with the seconds first); ``None`` for an interval.
    cron: str | None = None
    #: IANA time zone the cron expression's local times are in.
    tz: str = "UTC"
    #: Interval in seconds; ``None`` for a cron series.
    every: int | None = None
    #: Due second of the first occurrence once anchored; before that, the earliest
    #: second a first occurrence may have (``None``: from when the request was sent).
    start: int | None = None
    #: No occurrence is due after this epoch second (``None``: no end).
    end: int | None = None
    #: At most this many occurrences (``None``: no limit).
    count: int | None = None
    #: Dates the series skips, in ``tz`` (``None``: none).
    calendar: Calendar | None = None

    def __init__(
        self,
        cron: str | None = None,
        tz: str = "UTC",
        every: int | None = None,
        start: int | None = None,
        end: int | None = None,
        count: int | None = None,
        calendar: Calendar | None = None,
    ) -> None:
        # Straight into the instance's dict, as the dataclass's own would with six
        # object.__setattr__ calls (frozen stops assignment, not construction): a worker
        # builds one per series occurrence it reads from its store, a third of what
        # reading the occurrence costs more than reading a one-shot timer.
        self.__dict__.update(
            cron=cron, tz=tz, every=every, start=start, end=end, count=count, calendar=calendar
        )

    @property
    def arithmetic(self) -> bool:
        """Whether occurrences are pure epoch arithmetic (an interval series without a
        calendar): callers may then jump over any number of them at O(1)."""
        return self.every is not None and self.calendar is None

    def with_start(self, start: int | None) -> Recurrence:
        """This recurrence with another ``start`` (everything else kept)."""
        return Recurrence(
            self.cron, self.tz, self.every, start, self.end, self.count, self.calendar
        )

    # -- building ---------------------------------------------------------------------

    @classmethod
    def cron_series(
        cls,
        expr: str,
        tz: str | None = None,
        *,
        start: int | None = None,
        end: int | None = None,
        count: int | None = None,
        calendar: Calendar | None = None,
    ) -> Recurrence:
        """A cron series; raise :class:`RejectedRequest` if the expression or zone is bad."""
        zone = tz or "UTC"
        _zone(zone)
        recurrence = cls(
            cron=_checked_cron(expr),
            tz=zone,
            start=start,
            end=end,
            count=count,
            calendar=calendar,
        )
        recurrence._check_bounds()
        return recurrence

    @classmethod
    def interval(
        cls,
        every: int,
        *,
        start: int | None = None,
        end: int | None = None,
        count: int | None = None,
        calendar: Calendar | None = None,
        tz: str | None = None,
    ) -> Recurrence:
        """An interval series of ``every`` seconds (whole seconds, at least 1); ``tz``
        (the zone its calendar's dates are read in) only with a ``calendar``."""
        if every < 1 or every > MAX_EVERY_SECONDS:
            raise RejectedRequest(
                RejectReason.INVALID_RECURRENCE,
                f"interval {every}s: use whole seconds from 1s to about 100 years",
            )
        if tz is not None and calendar is None:
            raise RejectedRequest(
                RejectReason.INVALID_RECURRENCE,
                "tz applies to cron, or to an interval series with a calendar",
            )
        if calendar is not None and calendar.policy is SkipPolicy.NEXT:
            raise RejectedRequest(
                RejectReason.INVALID_RECURRENCE,
                "skip_policy next is for cron series: an interval series skips",
            )
        zone = tz or "UTC"
        _zone(zone)
        recurrence = cls(
            every=int(every), tz=zone, start=start, end=end, count=count, calendar=calendar
        )
        recurrence._check_bounds()
        return recurrence

    def _check_bounds(self) -> None:
        """The bounds a series is held to, before any arithmetic on it: the worker's
        reader and :class:`~kafka_timers_client.TimerClient` both build series through
        :meth:`cron_series` and :meth:`interval`, so both refuse the same ones."""
        for name, number in (("start", self.start), ("end", self.end)):
            if number is not None and not 0 <= number <= MAX_SECONDS:
                raise RejectedRequest(
                    RejectReason.INVALID_RECURRENCE,
                    f"{name} is not an epoch second from 0 to 10^12",
                )
        if self.count is not None and self.count > MAX_SERIES_COUNT:
            raise RejectedRequest(
                RejectReason.INVALID_RECURRENCE, f"count is more than {MAX_SERIES_COUNT}"
            )
        if self.count is not None and self.count < 1:
            raise RejectedRequest(
                RejectReason.INVALID_RECURRENCE, f"count {self.count}: at least 1 occurrence"
            )
        if self.start is not None and self.end is not None and self.end < self.start:
            raise RejectedRequest(
                RejectReason.INVALID_RECURRENCE,
                f"end {self.end} is before start {self.start}",
            )

    def anchored(self, sent_second: int) -> Recurrence:
        """This recurrence with ``start`` set to its first occurrence's due second.

        The first occurrence is the first at or after both the requested start and
        ``sent_second`` (a series does not replay its past): for a cron series, the first
        matching second; for an interval series, ``start`` itself (or the first second of
        its grid not before ``sent_second``), or ``sent_second + every`` without a start.
        Raises :class:`RejectedRequest` if there is no such occurrence before ``end``.
        """
        floor = sent_second if self.start is None else max(self.start, sent_second)
        if self.every is not None:
            if self.start is None:
                first = sent_second + self.every
            elif self.start >= sent_second:
                first = self.start
            else:
                behind = sent_second - self.start
                first = self.start + -(-behind // self.every) * self.every
        else:
            found = self._cron_after(floor - 1)
            if found is None:
                raise RejectedRequest(
                    RejectReason.NO_OCCURRENCE, f"cron {self.cron!r} never matches a future time"
                )
            first = found
        if self.calendar is not None:
            # The first slot is the grid's origin (an interval series) and the floor of
            # the slots counted; the first occurrence is the first the calendar allows.
            found = self.with_start(first)._match_after(first - 1)
            if found is None:
                raise RejectedRequest(
                    RejectReason.NO_OCCURRENCE,
                    f"no occurrence from {floor} on a date the calendar allows",
                )
            first = found
        if self.end is not None and first > self.end:
            raise RejectedRequest(
                RejectReason.NO_OCCURRENCE,
                f"no occurrence between {floor} and the end {self.end}",
            )
        # The constructor, not dataclasses.replace: this runs once per request (5x faster).
        return Recurrence(
            self.cron, self.tz, self.every, first, self.end, self.count, self.calendar
        )

    # -- occurrences ------------------------------------------------------------------

    def after(self, due: int, seq: int) -> int | None:
        """Due second of the occurrence after occurrence ``seq`` (due at ``due``), or
        ``None`` when the series ends there (count reached, or past its end)."""
        if self.count is not None and seq >= self.count:
            return None
        if self.calendar is not None:
            nxt: int | None = self._match_after(due)
        elif self.every is not None:
            nxt = due + self.every
        else:
            nxt = self._cron_after(due)
        if nxt is None or (self.end is not None and nxt > self.end):
            return None
        return nxt

    def occurrences(self, due: int, seq: int) -> Iterator[tuple[int, int]]:
        """``(seq, due)`` of occurrence ``seq`` (due at ``due``) and every one after it."""
        current: int | None = due
        while current is not None:
            yield seq, current
            current = self.after(current, seq)
            seq += 1

    def skip_to(self, due: int, seq: int, through: int) -> tuple[int, int]:
        """``(seq, due)`` of the last occurrence at or before ``through``, walking from
        occurrence ``seq`` (due at ``due``, itself at or before ``through``).

        O(1) for an interval series without a calendar (:attr:`arithmetic`); any other
        is walked one occurrence at a time (callers bound how far, see
        :mod:`app.core.firing`).
        """
        if not self.arithmetic:
            last = (seq, due)
            for item in self.occurrences(due, seq):
                if item[1] > through:
                    break
                last = item
            return last
        every = self.every
        assert every is not None
        steps = (through - due) // every
        if self.count is not None:
            steps = min(steps, self.count - seq)
        if self.end is not None:
            steps = min(steps, (self.end - due) // every)
        steps = max(steps, 0)
        return seq + steps, due + steps * every

    def before(self, due: int, steps: int, floor: int, *, limit: int = 100_000) -> int | None:
        """Due second of the occurrence ``steps`` before the one due at ``due``, counting
        this recurrence's matches (its count and end aside) at or after ``floor``; ``None``
        if there are not that many, or finding them would walk more than ``limit``.

        How the audit recovers where the worker started a series from one of its
        numbered occurrences: O(1) for an interval series; a cron series is walked
        forward over windows growing back from ``due``.
        """
        if steps <= 0:
            return due
        if self.arithmetic:
            assert self.every is not None
            first = due - steps * self.every
            return first if first >= floor else None
        window = 64
        while True:
            low = max(floor, due - window)
            found: list[int] = []
            current = self._next_slot(low - 1)
            while current is not None and current < due:
                found.append(current)
                if len(found) > limit:
                    return None
                current = self._next_slot(current)
            if len(found) >= steps:
                return found[-steps]
            if low == floor or window > MAX_EVERY_SECONDS:
                return None
            window *= 8

    def slots_in(self, low: int, high: int, limit: int) -> list[int] | None:
        """Due seconds in ``[low, high)`` by the schedule and the calendar (the count, the
        start and the end aside), or ``None`` if there are more than ``limit``.

        What a backfill fires: the occurrences the series would have had in a window,
        also one before it started (an interval series' grid goes on back from its
        ``start``). Walked one occurrence at a time: ``limit`` bounds the work.
        """
        if self.cron is not None and self.calendar is None:
            return self._cron_slots(low, high, limit)
        rec = self
        if self.start is not None and low < self.start:
            if self.every is None:
                rec = self.with_start(low)
            else:
                back = -(-(self.start - low) // self.every) * self.every
                rec = self.with_start(self.start - back)
        found: list[int] = []
        current = rec._next_slot(low - 1)
        while current is not None and current < high:
            if len(found) >= limit:
                return None
            found.append(current)
            current = rec._next_slot(current)
        return found

    def _cron_slots(self, low: int, high: int, limit: int) -> list[int] | None:
        """:meth:`slots_in` of a cron series without a calendar: one cronsim walk (a
        seventh of the cost of a search per occurrence), skipping what :meth:`_cron_after`
        skips (a repeated hour's second pass, a skipped time's collapsed instant)."""
        assert self.cron is not None
        zone = _zone(self.tz)
        found: list[int] = []
        last = low - 1
        try:
            wall = datetime.fromtimestamp(last, zone).replace(tzinfo=None)
            for candidate in CronSim(self.cron, wall):
                instant = _wall_to_epoch(candidate, zone)
                if instant <= last:
                    continue
                if instant >= high:
                    break
                if len(found) >= limit:
                    return None
                found.append(instant)
                last = instant
        except (StopIteration, CronSimError, ValueError, OverflowError, OSError):
            pass  # cronsim gives up after 50 years; past datetime's year 9999
        return found

    def _next_slot(self, second: int) -> int | None:
        """The first occurrence strictly after ``second`` by the schedule and the
        calendar (the count and the end aside): what :meth:`before` walks."""
        if self.calendar is not None:
            return self._match_after(second)
        if self.every is not None:
            return self._slot_after(second)
        return self._cron_after(second)

    def _slot_after(self, second: int) -> int | None:
        """The first slot (calendar aside) strictly after ``second``: an interval
        series' grid point from its ``start``, a cron series' match."""
        if self.every is None:
            return self._cron_after(second)
        origin = second + 1 if self.start is None else self.start
        if second < origin:
            return origin
        return origin + ((second - origin) // self.every + 1) * self.every

    def _match_after(self, second: int) -> int | None:
        """The first occurrence strictly after ``second`` under the calendar (the count
        and the end aside), by the rules of the module doc and :class:`SkipPolicy`.

        The slots counted start at ``start`` (a run of excluded dates before it moves
        nothing). ``None`` when there is none within :data:`MAX_EXCLUDED_RUNS` runs.
        """
        calendar = self.calendar
        assert calendar is not None
        zone = _zone(self.tz)
        try:
            return self._calendar_after(second, calendar, zone)
        except (ValueError, OverflowError, OSError):  # past datetime's year 9999
            return None

    def _calendar_after(self, second: int, calendar: Calendar, zone: ZoneInfo) -> int | None:
        moving = calendar.policy is SkipPolicy.NEXT
        best: int | None = None
        resume = second
        if moving:
            # A run of excluded dates holding ``second``, or ending the day before it,
            # delivers its first slot moved to the day after the run: maybe after
            # ``second`` (an earlier slot of that day fired, or ``second`` is in the run).
            day = _local_date(second, zone)
            probe = day if calendar.excludes(day) else day - _DAY
            if calendar.excludes(probe):
                last = calendar.run_end(probe)
                if last is None:
                    return None
                first_day = calendar.run_start(probe)
                after_run = _midnight(last + _DAY, zone)
                floor = second + 1 if self.start is None else self.start
                slot = self._slot_after(max(floor - 1, _midnight(first_day, zone) - 1))
                if slot is not None and slot < after_run:
                    moved = _moved(slot, last + _DAY, zone)
                    if moved > second:
                        best = moved
                resume = max(second, after_run - 1)
        current = self._slot_after(resume)
        for _ in range(MAX_EXCLUDED_RUNS):
            if current is None:
                return best
            day = _local_date(current, zone)
            if not calendar.excludes(day):
                return current if best is None else min(best, current)
            last = calendar.run_end(day)
            if last is None:
                return best
            after_run = _midnight(last + _DAY, zone)
            if moving:  # this run's first slot, moved; or a slot of the day after, if earlier
                moved = _moved(current, last + _DAY, zone)
                best = moved if best is None else min(best, moved)
                following = self._slot_after(after_run - 1)
                if following is None or calendar.excludes(_local_date(following, zone)):
                    return best
                return min(best, following)
            current = self._slot_after(after_run - 1)
        return None

    def _cron_after(self, second: int) -> int | None:
        """The first second strictly after ``second`` whose local time matches the cron."""
        assert self.cron is not None
        zone = _zone(self.tz)
        try:
            wall = datetime.fromtimestamp(second, zone).replace(tzinfo=None)
            for candidate in CronSim(self.cron, wall):
                instant = _wall_to_epoch(candidate, zone)
                # Past instants: wall times of a repeated hour already fired on its first
                # pass, or skipped times that collapsed into an instant already used.
                if instant > second:
                    return instant
        except (StopIteration, CronSimError):  # cronsim gives up after 50 years
            return None
        except (ValueError, OverflowError, OSError):  # past datetime's year 9999
            return None
        return None

    # -- presentation -----------------------------------------------------------------

    def describe(self) -> str:
        """One line for logs and the status page, e.g. ``cron '0 0 9 * * MON-FRI' Europe/Paris``."""
        what = f"cron {self.cron!r} {self.tz}" if self.cron else f"every {self.every}s"
        if self.end is not None:
            what += f" until {datetime.fromtimestamp(self.end, _UTC):%Y-%m-%dT%H:%M:%SZ}"
        if self.count is not None:
            what += f", {self.count} times"
        if self.calendar is not None:
            if self.cron is None and self.tz != "UTC":
                what += f" {self.tz}"
            what += f", {self.calendar.describe()}"
        return what
