"""The export format: one pending timer per line, as JSON, with the request formats' fields.

A line holds everything the worker stores for a pending timer, exactly:

``{"id", "token", "topic", "key" | "key_b64", "value" | "value_b64", "headers", "due",
"late"}`` and, for a series, ``"cron"`` and ``"tz"`` or ``"every"`` (whole seconds),
``"start"`` (occurrence 1's due second: with the token, the version's identity),
``"end"``, ``"count"``, ``"seq"`` (the number of the pending occurrence, due at
``"due"``) and ``"fired_before"``. Text that is valid UTF-8 is written as text, other
bytes as base64 under ``<name>_b64``; ``"key": null`` is a callback without a key.
``headers`` is a list of ``{"name", "value" | "value_b64"}`` (names may repeat, values
are bytes). ``"spread"`` (seconds) is there for a spread timer. ``"partition"``, where
the timer was found, is informational and ignored when read back. Fields left out of a
line (``late``, ``end``, ``count``, ``spread``) are absent. A series with a calendar has
``"skip_holidays"``, ``"skip_dates"`` and ``"skip_policy"`` as in a JSON request (and an
interval series its ``"tz"``). A debounced timer has its window, ``"debounce"`` and
``"max_wait"`` (seconds, as in a request; ``max_wait`` absent for none), its first
request's time ``"debounce_first_ms"`` (epoch ms: the max-wait runs from it) and the
requests it merged so far, ``"debounce_merged"`` (its ``timer-debounced``): imported, it
fires at the same second with the same header, and later requests go on merging into it.

:func:`encode_timer` and :func:`decode_timer` are exact inverses over every
:class:`~app.core.timer.Timer` the worker can store, but for a debounced timer's last
request offset (an offset of the partition it was read from, meaningless in another:
read back as -1, unknown).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from app.core.debounce import Debounce
from app.core.timer import Timer
from kafka_timers_client.bounds import MAX_SECONDS
from kafka_timers_client.calendars import Calendar
from kafka_timers_client.debounce import checked_debounce
from kafka_timers_client.errors import KafkaTimersError
from kafka_timers_client.late import LatePolicy
from kafka_timers_client.recurrence import Recurrence
from kafka_timers_client.spread import MAX_SPREAD_SECONDS

__all__ = [
    "LineError",
    "calendar_fields",
    "debounce_fields",
    "decode_line",
    "decode_timer",
    "encode_line",
    "encode_timer",
]


class LineError(KafkaTimersError):
    """A line of an export file that is not a pending timer."""


def _put_bytes(doc: dict[str, Any], name: str, data: bytes | None) -> None:
    if data is None:
        doc[name] = None
        return
    try:
        doc[name] = data.decode()
    except UnicodeDecodeError:
        doc[f"{name}_b64"] = base64.b64encode(data).decode()


def encode_timer(timer: Timer, partition: int | None = None) -> dict[str, Any]:
    """``timer`` as the JSON object of one export line."""
    doc: dict[str, Any] = {"id": timer.id, "token": timer.token, "topic": timer.topic}
    _put_bytes(doc, "key", timer.key)
    _put_bytes(doc, "value", timer.value)
    headers = []
    for name, value in timer.headers:
        header: dict[str, Any] = {"name": name}
        _put_bytes(header, "value", value)
        headers.append(header)
    doc["headers"] = headers
    doc["due"] = timer.due
    if timer.late is not None:
        doc["late"] = timer.late.text()
    if timer.spread:
        doc["spread"] = timer.spread
    if timer.debounce is not None:
        doc.update(debounce_fields(timer.debounce))
    rec = timer.recurrence
    if rec is not None:
        if rec.cron is not None:
            doc["cron"] = rec.cron
            doc["tz"] = rec.tz
        else:
            doc["every"] = rec.every
        doc["start"] = rec.start
        for name, number in (("end", rec.end), ("count", rec.count)):
            if number is not None:
                doc[name] = number
        if rec.calendar is not None:
            doc.update(calendar_fields(rec.tz, rec.calendar))
        doc["seq"] = timer.seq
        doc["fired_before"] = timer.fired_before
    if partition is not None:
        doc["partition"] = partition
    return doc


def debounce_fields(debounce: Debounce) -> dict[str, Any]:
    """A debounced timer's whole merge state as export lines and import requests write
    it: its window, max-wait, first request's time and merged count."""
    fields: dict[str, Any] = {"debounce": debounce.seconds}
    if debounce.max_wait is not None:
        fields["max_wait"] = debounce.max_wait
    fields["debounce_first_ms"] = debounce.first_ms
    fields["debounce_merged"] = debounce.merged
    return fields


def calendar_fields(tz: str, calendar: Calendar) -> dict[str, Any]:
    """A series' calendar as the JSON request's fields (and ``tz``, which an interval
    series carries only with a calendar)."""
    doc: dict[str, Any] = {"tz": tz}
    if calendar.holidays is not None:
        doc["skip_holidays"] = calendar.holidays
    if calendar.dates:
        doc["skip_dates"] = [day.isoformat() for day in calendar.dates]
    doc["skip_policy"] = calendar.policy.value
    return doc


def _calendar(doc: dict[str, Any]) -> Calendar | None:
    holidays, dates, policy = (
        doc.get("skip_holidays"),
        doc.get("skip_dates", []),
        doc.get("skip_policy"),
    )
    if holidays is not None and not isinstance(holidays, str):
        raise LineError("'skip_holidays' must be a string such as \"FR\"")
    if not isinstance(dates, list):
        raise LineError("'skip_dates' must be a list of dates such as [\"2026-12-24\"]")
    if policy is not None and not isinstance(policy, str):
        raise LineError('\'skip_policy\' must be "skip" or "next"')
    try:
        return Calendar.build(holidays, dates, policy)
    except KafkaTimersError as exc:
        raise LineError(str(exc)) from exc


def encode_line(timer: Timer, partition: int | None = None) -> str:
    """One export line (no newline): compact JSON, keys in a fixed order."""
    return json.dumps(encode_timer(timer, partition), separators=(",", ":"), ensure_ascii=False)


def _text(doc: dict[str, Any], name: str, default: str | None = None) -> str:
    value = doc.get(name, default)
    if not isinstance(value, str):
        raise LineError(f"{name!r} must be a string")
    try:  # a lone surrogate ("\ud800", or stdin's bytes that are not UTF-8) encodes to
        value.encode()  # nothing a request can carry: it stopped an import with a traceback
    except UnicodeEncodeError:
        raise LineError(f"{name!r} is not valid UTF-8 (a lone surrogate)") from None
    return value


def _int(doc: dict[str, Any], name: str, *, required: bool = False) -> int | None:
    value = doc.get(name)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise LineError(f"{name!r} must be a whole number")
    return value


def _second(doc: dict[str, Any], name: str, *, required: bool = False) -> int | None:
    """An epoch second as the worker stores one (its keys hold 12 digits): a number past
    that would go out wrapped in a request's 64 bits, or not at all."""
    second = _int(doc, name, required=required)
    if second is not None and not 0 <= second <= MAX_SECONDS:
        raise LineError(f"{name!r} must be an epoch second from 0 to {MAX_SECONDS}")
    return second


def _get_bytes(doc: dict[str, Any], name: str, *, nullable: bool) -> bytes | None:
    if f"{name}_b64" in doc:
        try:
            return base64.b64decode(_text(doc, f"{name}_b64"), validate=True)
        except binascii.Error as exc:
            raise LineError(f"'{name}_b64' is not base64: {exc}") from exc
    if name not in doc:
        raise LineError(f"{name!r} (or {name}_b64) is missing")
    value = doc[name]
    if value is None:
        if not nullable:
            raise LineError(f"{name!r} must not be null")
        return None
    if not isinstance(value, str):
        raise LineError(f"{name!r} must be a string (or {name}_b64 for bytes)")
    try:
        return value.encode()
    except UnicodeEncodeError as exc:
        raise LineError(f"{name!r} is not valid UTF-8 (a lone surrogate)") from exc


def _debounce(doc: dict[str, Any]) -> Debounce:
    """A debounced timer's window, first request's time and merged count."""
    seconds, max_wait = _int(doc, "debounce", required=True), _int(doc, "max_wait")
    first_ms = _int(doc, "debounce_first_ms", required=True)
    merged = _int(doc, "debounce_merged", required=True)
    assert seconds is not None and first_ms is not None and merged is not None
    try:
        checked_debounce(seconds, max_wait)
    except KafkaTimersError as exc:
        raise LineError(f"'debounce': {exc}") from exc
    if not 0 <= first_ms <= 1000 * MAX_SECONDS + 999:
        raise LineError("'debounce_first_ms' must be epoch milliseconds from 0")
    if not 1 <= merged < 2**63:
        raise LineError("'debounce_merged' must be at least 1")
    return Debounce(seconds, max_wait, first_ms, merged)


def decode_timer(doc: Any) -> Timer:
    """The :class:`Timer` an export line's JSON object stands for; :class:`LineError`
    if it is not one."""
    if not isinstance(doc, dict):
        raise LineError("a line must be a JSON object")
    headers_doc = doc.get("headers", [])
    if not isinstance(headers_doc, list):
        raise LineError("'headers' must be a list of {name, value} objects")
    headers = []
    for header in headers_doc:
        if not isinstance(header, dict):
            raise LineError("'headers' must be a list of {name, value} objects")
        value = _get_bytes(header, "value", nullable=False)
        assert value is not None
        headers.append((_text(header, "name"), value))
    late_text = doc.get("late")
    late = None
    if late_text is not None:
        if not isinstance(late_text, str):
            raise LineError("'late' must be a string such as \"skip-after 5m\"")
        try:
            policy = LatePolicy.parse(late_text)
        except KafkaTimersError as exc:
            raise LineError(f"'late': {exc}") from exc
        late = None if policy.is_empty else policy
    recurrence = None
    seq = fired_before = 0
    if "cron" in doc or "every" in doc:
        if "cron" in doc and "every" in doc:
            raise LineError("a series has 'cron' or 'every', not both")
        start = _second(doc, "start", required=True)
        end, count = _second(doc, "end"), _int(doc, "count")
        calendar = _calendar(doc)
        if "cron" in doc:
            recurrence = Recurrence(
                cron=_text(doc, "cron"),
                tz=_text(doc, "tz", "UTC"),
                start=start,
                end=end,
                count=count,
                calendar=calendar,
            )
        else:
            every = _int(doc, "every", required=True)
            assert every is not None
            if every < 1:
                raise LineError("'every' must be at least 1 (second)")
            recurrence = Recurrence(
                every=every,
                tz=_text(doc, "tz", "UTC") if calendar is not None else "UTC",
                start=start,
                end=end,
                count=count,
                calendar=calendar,
            )
        seq = _int(doc, "seq", required=True) or 0
        fired_before = _int(doc, "fired_before") or 0
        if seq < 1:
            raise LineError("'seq' of a series starts at 1")
    due = _second(doc, "due", required=True)
    assert due is not None
    spread = _int(doc, "spread") or 0
    if not 0 <= spread <= MAX_SPREAD_SECONDS:
        raise LineError(f"'spread' must be from 0 to {MAX_SPREAD_SECONDS} (seconds)")
    timer_id = _text(doc, "id")
    if not timer_id:
        raise LineError("'id' must not be empty")
    debounce = None
    if "debounce" in doc or "max_wait" in doc:
        if recurrence is not None:
            raise LineError("a series (cron, every) cannot be debounced")
        debounce = _debounce(doc)
    return Timer(
        id=timer_id,
        due=due,
        topic=_text(doc, "topic"),
        key=_get_bytes(doc, "key", nullable=True),
        value=_get_bytes(doc, "value", nullable=True),
        token=_text(doc, "token", ""),
        headers=tuple(headers),
        recurrence=recurrence,
        seq=seq,
        fired_before=fired_before,
        late=late,
        spread=spread,
        debounce=debounce,
    )


def decode_line(line: str) -> Timer:
    """The :class:`Timer` of one export line."""
    try:
        doc = json.loads(line)
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        raise LineError(f"not JSON: {exc}") from exc
    return decode_timer(doc)
