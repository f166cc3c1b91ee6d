"""Preview a series: the next occurrences a request would fire, computed without a broker.

:func:`preview` walks exactly what the worker walks (:class:`~kafka_timers_client.recurrence.
Recurrence` with its :class:`~kafka_timers_client.calendars.Calendar`), for a request sent
at ``from_`` (default: now): the first occurrence is the one the worker would anchor the
series at, the next ones its successors. ``kafka-timers preview`` prints it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import NamedTuple
from zoneinfo import ZoneInfo

from kafka_timers_client.calendars import SkipPolicy
from kafka_timers_client.due import due_second, parse_at
from kafka_timers_client.errors import KafkaTimersError
from kafka_timers_client.spread import spread_second

__all__ = ["MAX_PREVIEW", "Occurrence", "preview"]

#: Most occurrences one preview lists.
MAX_PREVIEW = 10_000


class Occurrence(NamedTuple):
    """One occurrence of a previewed series."""

    #: Its number in the series, from 1 (the ``timer-seq`` header).
    seq: int
    #: Its due second (``timer-due``), epoch seconds.
    due: int
    #: The second it fires at: ``due``, or with a spread the second in
    #: ``[due, due + spread]`` the timer id fixes (``None``: a spread without an id).
    fire_at: int | None
    #: ``due`` as a local time in the series' zone.
    local: datetime


def preview(
    *,
    cron: str | None = None,
    every: float | str | None = None,
    tz: str | None = None,
    start: float | Decimal | str | None = None,
    end: float | Decimal | str | None = None,
    count: int | None = None,
    skip_holidays: str | None = None,
    skip_dates: Iterable[date | str] = (),
    skip_ics: str | Path | bytes | None = None,
    skip_policy: SkipPolicy | str | None = None,
    spread: float | str | None = None,
    timer_id: str | None = None,
    from_: float | Decimal | str | None = None,
    n: int = 10,
) -> list[Occurrence]:
    """The first ``n`` occurrences of the series a request with these fields (those of
    :meth:`~kafka_timers_client.TimerClient.schedule`) would fire, sent at ``from_``
    (epoch seconds or ISO 8601; default: now). Fewer if the series ends first.

    Raises :class:`KafkaTimersError` with one line for what the worker would refuse.
    """
    from kafka_timers_client.client import TimerClient  # the same checks as schedule()

    if cron is None and every is None:
        raise KafkaTimersError("a preview needs cron= or every=")
    if not 1 <= n <= MAX_PREVIEW:
        raise KafkaTimersError(f"n={n}: from 1 to {MAX_PREVIEW}")
    calendar = TimerClient.build_calendar(skip_holidays, skip_dates, skip_ics, skip_policy)
    recurrence = TimerClient.build_recurrence(cron, tz, every, start, end, count, calendar=calendar)
    spread_seconds = TimerClient.spread_seconds(spread, every)
    now = Decimal(str(time.time())) if from_ is None else parse_at(str(from_))
    anchored = recurrence.anchored(due_second(now))
    assert anchored.start is not None
    zone = ZoneInfo(anchored.tz)
    out: list[Occurrence] = []
    for seq, due in anchored.occurrences(anchored.start, 1):
        fire_at: int | None = due
        if spread_seconds:
            fire_at = (
                None if timer_id is None else spread_second(timer_id, seq, due, spread_seconds)
            )
        out.append(Occurrence(seq, due, fire_at, datetime.fromtimestamp(due, zone)))
        if len(out) >= n:
            break
    return out
