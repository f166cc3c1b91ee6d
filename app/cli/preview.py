"""``kafka-timers preview``, and the calendar options of ``kafka-timers schedule``.

``preview`` prints a series' next fires without a broker: one line per occurrence, its
number in the series, its local time in the series' zone (with the weekday and the
zone's abbreviation), the same instant in UTC and as an epoch second, and with a spread
the second it fires at (``--id`` fixes it; without one, the window). It walks what the
worker walks (:func:`kafka_timers_client.preview`), for a request sent at ``--from``.

The schedule options (:func:`add_calendar_options`) read ``--skip-ics`` files here, in
the CLI: the request carries the dates, and the worker reads no file.
"""

from __future__ import annotations

import argparse
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from app.cli.parsing import AddCommand

if TYPE_CHECKING:
    from kafka_timers_client.calendars import Calendar

__all__ = ["add_calendar_options", "calendar_options", "cmd_preview", "register"]


def add_calendar_options(parser: argparse.ArgumentParser) -> None:
    """``--skip-holidays``, ``--skip-date``, ``--skip-ics`` and ``--skip-policy``."""
    parser.add_argument(
        "--skip-holidays",
        metavar="CODE",
        help="recurring: skip the public holidays of a country (FR) or country-subdivision "
        "(US-CA, DE-BY), dates read in --tz",
    )
    parser.add_argument(
        "--skip-date",
        action="append",
        metavar="YYYY-MM-DD",
        help="recurring: skip this date in --tz (repeatable)",
    )
    parser.add_argument(
        "--skip-ics",
        action="append",
        metavar="FILE",
        help="recurring: skip the dates the events of this iCalendar file cover (read here; "
        "the request carries the dates; repeatable)",
    )
    parser.add_argument(
        "--skip-policy",
        choices=("skip", "next"),
        help="an occurrence on a skipped date: skip (dropped; default) or next (cron only: "
        "the same local time on the next date not skipped)",
    )


def calendar_options(args: argparse.Namespace) -> tuple[dict[str, Any], Calendar | None]:
    """The keyword arguments of :meth:`TimerClient.schedule` the calendar options give,
    and the calendar they make: checked (and the iCalendar files read) before any broker
    is asked."""
    from kafka_timers_client.client import TimerClient

    dates: list[Any] = list(args.skip_date or [])
    for path in args.skip_ics or []:
        calendar = TimerClient.build_calendar(skip_ics=path)
        dates.extend(calendar.dates if calendar is not None else ())
    options: dict[str, Any] = {
        "skip_holidays": args.skip_holidays,
        "skip_dates": dates,
        "skip_policy": args.skip_policy,
    }
    return options, TimerClient.build_calendar(args.skip_holidays, dates, None, args.skip_policy)


def register(command: AddCommand) -> None:
    """Add ``preview``."""
    p = command(
        "preview",
        "print a series' next fires, without a broker",
        "kafka-timers preview --cron '0 0 9 * * MON-FRI' --tz Europe/Paris --skip-holidays FR "
        "--from 2026-12-20T00:00:00Z -n 5",
        "kafka-timers preview --every 1h --tz Europe/Berlin --skip-ics closed.ics -n 48",
        func=cmd_preview,
    )
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", help="cron, 5 fields or 6 with the seconds first")
    when.add_argument("--every", help="a fixed interval, e.g. 30s, 5m, 1d")
    p.add_argument("--tz", help="IANA time zone of the cron times and skipped dates (UTC)")
    p.add_argument("--start", help="no occurrence before (epoch s or ISO 8601)")
    p.add_argument("--end", help="no occurrence after (epoch s or ISO 8601)")
    p.add_argument("--count", type=int, help="at most this many occurrences")
    add_calendar_options(p)
    p.add_argument("--spread", help="the series' spread, e.g. 60s")
    p.add_argument("--id", dest="timer_id", help="timer id (fixes a spread's fire seconds)")
    p.add_argument(
        "--from",
        dest="from_",
        metavar="TIME",
        help="list the fires of a request sent then (ISO 8601 or epoch s; default: now)",
    )
    p.add_argument("-n", type=int, default=10, help="how many occurrences (default 10)")


def cmd_preview(args: argparse.Namespace) -> int:
    from kafka_timers_client.series_preview import preview

    calendar, _ = calendar_options(args)
    occurrences = preview(
        cron=args.cron,
        every=args.every,
        tz=args.tz,
        start=args.start,
        end=args.end,
        count=args.count,
        spread=args.spread,
        timer_id=args.timer_id,
        from_=args.from_,
        n=args.n,
        **calendar,
    )
    for occurrence in occurrences:
        local = occurrence.local
        utc = datetime.fromtimestamp(occurrence.due, timezone.utc)
        line = (
            f"{occurrence.seq:>4}  {local:%a %Y-%m-%d %H:%M:%S} {local.tzname()}"
            f"  {utc:%Y-%m-%dT%H:%M:%SZ}  {occurrence.due}"
        )
        if occurrence.fire_at is None:
            line += "  fires within the spread (give --id for the second)"
        elif occurrence.fire_at != occurrence.due:
            line += f"  fires {occurrence.fire_at} (+{occurrence.fire_at - occurrence.due}s)"
        print(line)
    return 0
