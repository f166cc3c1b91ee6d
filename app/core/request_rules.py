"""The rules every request format shares (due second, series, spread, late policy, headers).

Each reader (:mod:`app.core.request_json`, :mod:`app.core.request_protobuf`,
:mod:`app.core.request_etf1`) reads its own syntax and hands the values to these, so a
rule holds the same whatever format a request came in.
"""

from __future__ import annotations

from app.core.debounce import Debounce, debounced_due
from app.core.raw_record import RawRecord
from app.core.timer import Header
from kafka_timers_client.bounds import (
    MAX_SECONDS,
    MAX_SPEC_CHARS,
    RESERVED_HEADER_PREFIXES,
    checked_text,
)
from kafka_timers_client.calendars import Calendar
from kafka_timers_client.debounce import checked_debounce
from kafka_timers_client.due import due_second, parse_epoch
from kafka_timers_client.errors import (
    InvalidTimeSpec,
    KafkaTimersError,
    RejectedRequest,
    RejectReason,
)
from kafka_timers_client.extra_fires import checked_window
from kafka_timers_client.late import LatePolicy
from kafka_timers_client.recurrence import ANCHOR_SLACK_SECONDS, Recurrence
from kafka_timers_client.spread import MAX_SPREAD_SECONDS

__all__ = [
    "checked_spread",
    "debounce_of",
    "due_from_key",
    "late_policy",
    "recurrence_of",
    "refuse_reserved",
    "request_window",
    "restored_debounce",
    "sent_second",
]


def due_from_key(record: RawRecord) -> int:
    """The due second of a request that gives none: its key, read as an epoch second."""
    text = record.key.decode(errors="replace") if record.key else ""
    try:
        return due_second(parse_epoch(text))
    except InvalidTimeSpec as exc:
        raise RejectedRequest(
            RejectReason.MISSING_DUE,
            f"no due time in the request and the key {text[:40]!r} is not an epoch second",
        ) from exc


def checked_spread(seconds: int, recurrence: Recurrence | None) -> int:
    """``seconds`` if it is a spread the service takes: from 0 to
    :data:`~kafka_timers_client.spread.MAX_SPREAD_SECONDS`, and for an interval series less than
    its interval (so that its occurrences still fire in order, each in its own window)."""
    if not 0 <= seconds <= MAX_SPREAD_SECONDS:
        raise RejectedRequest(
            RejectReason.INVALID_SPREAD,
            f"spread {seconds}s: from 0 to {MAX_SPREAD_SECONDS}s (a day)",
        )
    if recurrence is not None and recurrence.every is not None and seconds >= recurrence.every:
        raise RejectedRequest(
            RejectReason.INVALID_SPREAD,
            f"spread {seconds}s: less than the series' interval ({recurrence.every}s)",
        )
    return seconds


def late_policy(text: str | None) -> LatePolicy | None:
    if not text:
        return None
    checked_text(text, "late", MAX_SPEC_CHARS)
    policy = LatePolicy.parse(text)
    return None if policy.is_empty else policy


def sent_second(record: RawRecord, now: float | None = None) -> int:
    """Where a series starts: the second the request was sent (its timestamp, rounded
    up), but no earlier than ``now`` (the worker's clock) less the anchor slack."""
    sent = -(-record.timestamp_ms // 1000)
    if now is None:
        return sent
    return max(sent, int(now // 1) - ANCHOR_SLACK_SECONDS)


def recurrence_of(
    sent_second: int,
    *,
    cron: str | None,
    tz: str | None,
    every: int | None,
    start: int | None,
    end: int | None,
    count: int | None,
    has_due: bool,
    calendar: Calendar | None = None,
) -> Recurrence | None:
    """The request's recurrence, anchored at its first occurrence; ``None`` for a one-shot.

    ``calendar``: the dates it skips (:meth:`Calendar.build` of the request's
    ``skip_holidays``, ``skip_dates`` and ``skip_policy``)."""
    if cron is None and every is None:
        if (
            tz is not None
            or start is not None
            or end is not None
            or count is not None
            or calendar is not None
        ):
            raise RejectedRequest(
                RejectReason.INVALID_RECURRENCE,
                "tz, start, end, count and skip_* need a recurrence (cron or every)",
            )
        return None
    if cron is not None and every is not None:
        raise RejectedRequest(RejectReason.INVALID_RECURRENCE, "give cron or every, not both")
    if cron is not None:
        checked_text(cron, "cron", MAX_SPEC_CHARS)
    if tz is not None:
        checked_text(tz, "tz", MAX_SPEC_CHARS)
    if has_due:
        raise RejectedRequest(
            RejectReason.INVALID_RECURRENCE,
            "a recurring timer takes start/end/count, not a due time (at, in, due)",
        )
    if cron is not None:
        recurrence = Recurrence.cron_series(
            cron, tz, start=start, end=end, count=count, calendar=calendar
        )
    else:
        if tz is not None and calendar is None:
            raise RejectedRequest(
                RejectReason.INVALID_RECURRENCE,
                "tz applies to cron, or to every with skip_holidays or skip_dates",
            )
        assert every is not None
        recurrence = Recurrence.interval(
            every, start=start, end=end, count=count, calendar=calendar, tz=tz
        )
    return recurrence.anchored(sent_second)


def refuse_reserved(headers: tuple[Header, ...]) -> tuple[Header, ...]:
    """``headers`` unless one is named like a header the service writes on callbacks.

    Refused, not dropped: a producer that sets one is forging or confused, and either
    way should hear of it (``reserved_header``); the callback then carries exactly one
    of each of the service's headers.
    """
    for name, _ in headers:
        if name[:10].lower().startswith(RESERVED_HEADER_PREFIXES):
            raise RejectedRequest(
                RejectReason.RESERVED_HEADER,
                f"header {name[:80]!r}: timer-* and scheduler-* are the service's own",
            )
    return headers


def request_window(low: int | None, high: int | None) -> tuple[int, int]:
    """A backfill's window ``[low, high)``: both given, epoch seconds, ``low < high``."""
    if low is None or high is None:
        raise RejectedRequest(RejectReason.MALFORMED, "a backfill needs its window: from and to")
    try:
        return checked_window(low, high)
    except KafkaTimersError as exc:
        raise RejectedRequest(RejectReason.OUT_OF_BOUNDS, str(exc)) from exc


def debounce_of(
    record: RawRecord,
    debounce: int | None,
    max_wait: int | None,
    *,
    has_due: bool,
    recurrence: Recurrence | None,
) -> tuple[int, Debounce]:
    """The due second and the :class:`Debounce` of a debounced request read from
    ``record``: due one debounce after the request's time, its record timestamp (as for
    ``in``; a copy forwarded to the id's owner keeps it).

    Refused (``invalid_debounce``): what :func:`kafka_timers_client.debounce.checked_debounce`
    refuses, and a debounce with a due time (the request's time gives it) or with a
    recurrence (a series is not merged).
    """
    checked = checked_debounce(debounce, max_wait)
    assert checked is not None  # a max-wait alone is refused
    if has_due:
        raise RejectedRequest(
            RejectReason.INVALID_DEBOUNCE,
            "a debounced request takes no due time (at, in, due): it is due one debounce "
            "after the request",
        )
    if recurrence is not None:
        raise RejectedRequest(
            RejectReason.INVALID_DEBOUNCE, "a series (cron, every) cannot be debounced"
        )
    seconds, longest = checked
    sent_ms = record.timestamp_ms
    return debounced_due(sent_ms, seconds), Debounce(seconds, longest, sent_ms, 1, record.offset)


def restored_debounce(
    record: RawRecord,
    debounce: int | None,
    max_wait: int | None,
    first_ms: int | None,
    merged: int | None,
    *,
    has_due: bool,
    recurrence: Recurrence | None,
) -> Debounce:
    """The :class:`Debounce` of a request that restores a debounced timer whole (what
    ``kafka-timers import`` sends for one: its window, its first request's time
    ``first_ms`` and the requests it had ``merged``, with its due second): stored as it
    is, replacing the pending version (:attr:`Debounce.restored`), merged into nothing.

    Refused (``invalid_debounce``): the window :func:`debounce_of` refuses, one of
    ``first_ms`` and ``merged`` without the other, a first request's time before the
    epoch, a merged count below 1, no due second, a recurrence.
    """
    checked = checked_debounce(debounce, max_wait)
    if checked is None:
        raise RejectedRequest(
            RejectReason.INVALID_DEBOUNCE, "a restored debounce needs its debounce"
        )
    if first_ms is None or merged is None:
        raise RejectedRequest(
            RejectReason.INVALID_DEBOUNCE,
            "a restored debounce needs both its first request's time and its merged count",
        )
    if not 0 <= first_ms <= 1000 * MAX_SECONDS + 999 or not 1 <= merged < 2**63:
        raise RejectedRequest(
            RejectReason.INVALID_DEBOUNCE,
            f"a restored debounce's first request at {first_ms} ms and {merged} merged: "
            f"epoch ms from 0 to {MAX_SECONDS} s, and at least 1 request",
        )
    if not has_due:
        raise RejectedRequest(
            RejectReason.INVALID_DEBOUNCE, "a restored debounce takes its due second (at, due)"
        )
    if recurrence is not None:
        raise RejectedRequest(
            RejectReason.INVALID_DEBOUNCE, "a series (cron, every) cannot be debounced"
        )
    seconds, longest = checked
    return Debounce(seconds, longest, first_ms, merged, record.offset, restored=True)
