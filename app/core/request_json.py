"""The JSON reader: a request as one JSON object (schedule, cancel, pause, resume,
trigger or backfill)."""

from __future__ import annotations

import base64
import binascii
import json
from decimal import Decimal
from typing import Any

from app.core.debounce import Debounce
from app.core.raw_record import RawRecord, derived_id
from app.core.request_rules import (
    checked_spread,
    debounce_of,
    due_from_key,
    late_policy,
    recurrence_of,
    refuse_reserved,
    request_window,
    restored_debounce,
    sent_second,
)
from app.core.timer import Cancel, Header, Timer, TokenAction
from kafka_timers_client.bounds import MAX_HEADERS
from kafka_timers_client.calendars import Calendar
from kafka_timers_client.debounce import debounce_seconds
from kafka_timers_client.due import due_second, parse_at, parse_duration
from kafka_timers_client.errors import InvalidTimeSpec, RejectedRequest, RejectReason
from kafka_timers_client.recurrence import Recurrence

__all__ = ["from_json"]


def _json_constant(name: str) -> None:
    raise RejectedRequest(RejectReason.OUT_OF_BOUNDS, f"{name} is not a number in a request")


#: JSON as the standard says: no NaN or Infinity. Numbers are bounded by Python's own
#: limit on integer digits (4,300: a ``ValueError`` at a bounded cost) and every field
#: read is bounded again where it is read (a due second, a count). Nesting is bounded by
#: the decoder's recursion guard (a ``RecursionError`` after about a thousand levels, at
#: a cost linear in the depth); nothing here walks into nested values, only the
#: request's top-level fields and its flat ``headers`` object. Hooks for numbers would
#: bound them earlier but cost a Python call per number (5% of a request).
_JSON = json.JSONDecoder(parse_constant=_json_constant)


def from_json(record: RawRecord, now: float | None) -> Timer | Cancel:
    """The timer or token request (``cancel``, ``pause``, ``resume``, ``trigger``,
    ``backfill``) a JSON object holds;
    ``now`` as for :func:`app.core.request_format.parse_request`."""
    assert record.value is not None
    try:
        doc = _JSON.decode(record.value.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RejectedRequest(RejectReason.MALFORMED, f"invalid JSON: {exc}") from exc
    except ValueError as exc:  # an integer past Python's 4,300 digits
        raise RejectedRequest(RejectReason.OUT_OF_BOUNDS, "a JSON number too long") from exc
    except RecursionError as exc:
        raise RejectedRequest(RejectReason.OUT_OF_BOUNDS, "JSON nested too deep") from exc
    if not isinstance(doc, dict):
        raise RejectedRequest(RejectReason.UNKNOWN_FORMAT, "JSON request must be an object")
    try:
        if "cancel" in doc:
            return Cancel(id=_json_str(doc, "cancel"), token=_json_str(doc, "token", ""))
        if "trigger" in doc:
            return Cancel(
                id=_json_str(doc, "trigger"),
                token=_json_str(doc, "token", ""),
                action=TokenAction.TRIGGER,
            )
        if "backfill" in doc:
            return Cancel(
                id=_json_str(doc, "backfill"),
                token=_json_str(doc, "token", ""),
                action=TokenAction.BACKFILL,
                window=request_window(_json_window_end(doc, "from"), _json_window_end(doc, "to")),
            )
        if "pause" in doc or "resume" in doc:
            asked = TokenAction.PAUSE if "pause" in doc else TokenAction.RESUME
            if "pause" in doc and "resume" in doc:
                raise TypeError("a request pauses or resumes, not both")
            return Cancel(
                id=_json_str(doc, asked.value),
                token=_json_str(doc, "token", ""),
                action=asked,
            )
        headers = _json_headers(doc)  # first, as for protobuf (request_protobuf.from_protobuf)
        recurrence = _json_recurrence(doc, sent_second(record, now))
        late = doc.get("late")
        if late is not None and not isinstance(late, str):
            raise TypeError('\'late\' must be a string such as "skip-after 5m" or "all"')
        debounce = None
        # null is absent, as for every optional field (a null debounce read as one
        # failed an assertion in debounce_of); 0 is refused (invalid_debounce).
        if doc.get("debounce") is not None or doc.get("max_wait") is not None:
            if "debounce_first_ms" in doc or "debounce_merged" in doc:  # an import's
                debounce = _json_restored_debounce(doc, record, recurrence)
                due = _json_due(doc, record)
            else:
                due, debounce = _json_debounce(doc, record, recurrence)
        elif recurrence is not None:
            assert recurrence.start is not None
            due = recurrence.start
        else:
            due = _json_due(doc, record)
        return Timer(
            id=_json_str(doc, "id", "") or derived_id(record),
            due=due,
            topic=_json_str(doc, "topic", ""),
            key=_json_bytes(doc, "key"),
            value=_json_bytes(doc, "value") or b"",
            token=_json_str(doc, "token", ""),
            headers=headers,
            recurrence=recurrence,
            seq=1 if recurrence is not None else 0,
            late=late_policy(late),
            spread=_json_spread(doc, recurrence) if "spread" in doc else 0,
            debounce=debounce,
        )
    except (TypeError, ValueError, binascii.Error) as exc:
        raise RejectedRequest(RejectReason.UNKNOWN_FORMAT, f"bad JSON request: {exc}") from exc


def _json_str(doc: dict[str, Any], name: str, default: str | None = None) -> str:
    """A text field; its UTF-8 and length are checked where it is used (the id and token
    by :func:`app.core.request_format.parse_request`, the topic by the policy's legal-name
    check)."""
    value = doc.get(name, default)
    if not isinstance(value, str):
        raise TypeError(f"{name!r} must be a string")
    return value


def _json_bytes(doc: dict[str, Any], name: str) -> bytes | None:
    """``name`` as UTF-8 text, or ``name_b64`` as base64 for binary payloads."""
    if f"{name}_b64" in doc:
        return base64.b64decode(_json_str(doc, f"{name}_b64"), validate=True)
    value = doc.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name!r} must be a string (use {name}_b64 for bytes)")
    return _encoded(value, repr(name))


def _json_headers(doc: dict[str, Any]) -> tuple[Header, ...]:
    headers = doc.get("headers") or {}
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise TypeError("'headers' must be an object of strings")
    if len(headers) > MAX_HEADERS:
        raise RejectedRequest(
            RejectReason.OUT_OF_BOUNDS, f"{len(headers)} headers, at most {MAX_HEADERS}"
        )
    return refuse_reserved(tuple((k, _encoded(v, "a header value")) for k, v in headers.items()))


def _encoded(text: str, name: str) -> bytes:
    """``text`` encoded, or :class:`RejectedRequest` if it holds a lone surrogate."""
    try:
        return text.encode()
    except UnicodeEncodeError as exc:
        raise RejectedRequest(
            RejectReason.OUT_OF_BOUNDS, f"{name} is not valid UTF-8 (a lone surrogate)"
        ) from exc


def _json_due(doc: dict[str, Any], record: RawRecord) -> int:
    try:
        if "at" in doc:
            at = doc["at"]
            if isinstance(at, bool) or not isinstance(at, (int, float, str)):
                raise TypeError("'at' must be epoch seconds or an ISO 8601 string")
            return due_second(parse_at(str(at)))
        if "in" in doc:
            delay = parse_duration(str(doc["in"]))
            return due_second(Decimal(record.timestamp_ms) / 1000 + Decimal(str(delay)))
    except InvalidTimeSpec as exc:
        raise RejectedRequest(RejectReason.MISSING_DUE, str(exc)) from exc
    return due_from_key(record)


def _json_recurrence(doc: dict[str, Any], sent_second: int) -> Recurrence | None:
    """``cron``/``tz`` or ``every`` (a duration), with ``start``/``end`` (epoch seconds or
    ISO 8601), ``count`` and a calendar (:func:`_json_calendar`)."""
    every_text = doc.get("every")
    every: int | None = None
    try:
        if every_text is not None:
            seconds = parse_duration(str(every_text))
            if seconds != int(seconds):
                raise RejectedRequest(
                    RejectReason.INVALID_RECURRENCE,
                    f"every {every_text!r}: use whole seconds (the service's resolution)",
                )
            every = int(seconds)
            if every < 1:
                raise RejectedRequest(
                    RejectReason.INVALID_RECURRENCE, f"every {every_text!r}: at least 1s"
                )
        start = _json_instant(doc, "start", up=True)
        end = _json_instant(doc, "end", up=False)
    except InvalidTimeSpec as exc:
        raise RejectedRequest(RejectReason.INVALID_RECURRENCE, str(exc)) from exc
    count = doc.get("count")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
        raise TypeError("'count' must be a whole number")
    cron = doc.get("cron")
    tz = doc.get("tz")
    if cron is not None and not isinstance(cron, str):
        raise TypeError("'cron' must be a string such as \"0 0 9 * * MON-FRI\"")
    if tz is not None and not isinstance(tz, str):
        raise TypeError("'tz' must be an IANA time zone name such as \"Europe/Paris\"")
    return recurrence_of(
        sent_second,
        cron=cron,
        tz=tz,
        every=every,
        start=start,
        end=end,
        count=count,
        has_due="at" in doc or "in" in doc,
        calendar=_json_calendar(doc),
    )


def _json_calendar(doc: dict[str, Any]) -> Calendar | None:
    """``skip_holidays`` (``"FR"``, ``"US-CA"``), ``skip_dates`` (``["2026-12-24"]``) and
    ``skip_policy`` (``"skip"`` or ``"next"``)."""
    holidays = doc.get("skip_holidays")
    dates = doc.get("skip_dates")
    policy = doc.get("skip_policy")
    if holidays is None and dates is None and policy is None:
        return None
    if holidays is not None and not isinstance(holidays, str):
        raise TypeError('\'skip_holidays\' must be a string such as "FR" or "US-CA"')
    if dates is not None and not isinstance(dates, list):
        raise TypeError("'skip_dates' must be a list of dates such as [\"2026-12-24\"]")
    if policy is not None and not isinstance(policy, str):
        raise TypeError('\'skip_policy\' must be "skip" or "next"')
    return Calendar.build(holidays, dates or (), policy)


def _json_instant(doc: dict[str, Any], name: str, *, up: bool) -> int | None:
    """An epoch second from epoch seconds or ISO 8601: rounded up for a start (never
    early), down for an end (never past it)."""
    value = doc.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"{name!r} must be epoch seconds or an ISO 8601 string")
    moment = parse_at(str(value))
    return due_second(moment) if up else int(moment.to_integral_value(rounding="ROUND_FLOOR"))


def _json_window_end(doc: dict[str, Any], name: str) -> int | None:
    """A backfill window's ``from`` or ``to``: epoch seconds or ISO 8601, rounded up (a
    window's first second, as its end, is never earlier than asked); ``None`` if absent."""
    value = doc.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"{name!r} must be epoch seconds or an ISO 8601 string")
    try:
        return due_second(parse_at(str(value)))
    except InvalidTimeSpec as exc:
        raise RejectedRequest(RejectReason.OUT_OF_BOUNDS, f"backfill {name}: {exc}") from exc


def _json_spread(doc: dict[str, Any], recurrence: Recurrence | None) -> int:
    """``"spread"``: a duration (``"60s"``, ``"5m"``) or a number of seconds, whole."""
    value = doc.get("spread")
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise RejectedRequest(
            RejectReason.INVALID_SPREAD, 'spread must be a duration such as "60s" or seconds'
        )
    try:
        seconds = parse_duration(str(value))
    except InvalidTimeSpec as exc:
        raise RejectedRequest(RejectReason.INVALID_SPREAD, str(exc)) from exc
    if seconds != int(seconds):
        raise RejectedRequest(
            RejectReason.INVALID_SPREAD,
            f"spread {str(value)[:40]!r}: use whole seconds (the service's resolution)",
        )
    return checked_spread(int(seconds), recurrence)


def _json_restored_debounce(
    doc: dict[str, Any], record: RawRecord, recurrence: Recurrence | None
) -> Debounce:
    """A debounced timer restored whole (``"debounce_first_ms"``, ``"debounce_merged"``,
    with ``"at"``): :func:`app.core.request_rules.restored_debounce`."""
    debounce, max_wait = doc.get("debounce"), doc.get("max_wait")
    return restored_debounce(
        record,
        None if debounce is None else debounce_seconds(debounce, "debounce"),
        None if max_wait is None else debounce_seconds(max_wait, "max_wait"),
        _json_whole(doc, "debounce_first_ms"),
        _json_whole(doc, "debounce_merged"),
        has_due="at" in doc or "in" in doc,
        recurrence=recurrence,
    )


def _json_whole(doc: dict[str, Any], name: str) -> int | None:
    value = doc.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RejectedRequest(RejectReason.INVALID_DEBOUNCE, f"{name!r} must be a whole number")
    return value


def _json_debounce(
    doc: dict[str, Any], record: RawRecord, recurrence: Recurrence | None
) -> tuple[int, Debounce]:
    """``"debounce"`` and ``"max_wait"``: durations (``"30s"``, ``"5m"``) or seconds, whole
    (:func:`app.core.request_rules.debounce_of`)."""
    debounce = doc.get("debounce")
    max_wait = doc.get("max_wait")
    return debounce_of(
        record,
        None if debounce is None else debounce_seconds(debounce, "debounce"),
        None if max_wait is None else debounce_seconds(max_wait, "max_wait"),
        has_due="at" in doc or "in" in doc,
        recurrence=recurrence,
    )
