"""Turning a raw record on the request topic into a :class:`Timer` or a :class:`Cancel`.

Three formats share the topic; they are told apart like this, in order:

1. **etf1** — the record has a ``scheduler-epoch`` header (or is a tombstone: null value).
   Key = schedule id, value = payload, target in ``scheduler-target-topic`` /
   ``scheduler-target-key``. A tombstone cancels the schedule with that key.
2. **JSON** — the value's first non-blank byte is ``{``. Protobuf can never start
   with ``{`` itself (it would be field 15 as a deprecated group), but it can start
   with a whitespace byte followed by ``{``: a 123-byte callback topic is encoded as
   ``\n{``. So a value that is not literally ``{...`` and is not valid JSON is tried
   as protobuf before it is refused.
3. **protobuf** — anything else: the ``Future`` message of
   ``app/core/proto/kafka_timers/v1/future.proto``, decoded by the protobuf runtime
   (:mod:`app.core.proto`). A record holding only fields 1-3 and keyed by its expiry
   second, exactly what the original article's producers send, is a valid timer.

A JSON or protobuf request may come **framed** in Confluent Schema Registry's wire
format (the value starts with byte ``0``, which neither format can start with): the
frame is unwrapped by :mod:`app.core.sr_framing`, the message inside read as JSON or
protobuf as above, and the frame's schema id kept with the timer
(:attr:`app.core.timer.Timer.schema_id`).

A JSON or protobuf request may be **recurring**: a cron expression (with a time zone)
or an interval instead of a due time, with an optional start, end and count. Its first
occurrence is fixed here, from the start and the record's timestamp, but never more
than :data:`app.core.recurrence.ANCHOR_SLACK_SECONDS` before the worker's clock (see
:meth:`app.core.recurrence.Recurrence.anchored` and :func:`parse_request`). A request
may also carry its own late-fire policy (:mod:`app.core.late`), and a spread
(:mod:`app.core.spread`): seconds past its due second over which it may fire.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from google.protobuf.message import DecodeError as ProtobufDecodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from app.core import proto
from app.core.bounds import (
    MAX_HEADER_NAME_CHARS,
    MAX_HEADERS,
    MAX_ID_CHARS,
    MAX_SPEC_CHARS,
    MAX_TOKEN_CHARS,
    RESERVED_HEADER_PREFIXES,
    checked_text,
)
from app.core.due import due_second, parse_at, parse_duration, parse_epoch
from app.core.errors import InvalidTimeSpec, RejectedRequest, RejectReason
from app.core.late import LatePolicy
from app.core.recurrence import ANCHOR_SLACK_SECONDS, Recurrence
from app.core.spread import MAX_SPREAD_SECONDS
from app.core.sr_framing import unframe
from app.core.timer import Cancel, Header, Timer, TokenAction

__all__ = ["RawRecord", "derived_id", "parse_request"]

ETF1_EPOCH = "scheduler-epoch"
ETF1_TARGET_TOPIC = "scheduler-target-topic"
ETF1_TARGET_KEY = "scheduler-target-key"

_parse_future = proto.Future.FromString


@dataclass(frozen=True, init=False)
class RawRecord:
    """A record as consumed from the request topic, before any interpretation.

    Frozen, with its own ``__init__`` for the reason :class:`~app.core.timer.Timer`
    has one: the generated one sets each field through ``object.__setattr__``, and every
    record consumed builds one.
    """

    topic: str
    partition: int
    offset: int
    #: Record timestamp in epoch milliseconds (CreateTime), the base for relative ``in``.
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    #: Why the record could not even be read as a record (a header name that is not
    #: UTF-8, say), or None: such a record is dead-lettered as ``malformed``.
    defect: str | None = None
    #: For a copy a worker forwarded to its owner partition: ``(partition, offset)``
    #: where the request was first read (its ``timer-hop`` header,
    #: :func:`app.core.routing.without_hop`); None for a record read where it was sent.
    origin: tuple[int, int] | None = None

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: tuple[Header, ...] = (),
        defect: str | None = None,
        origin: tuple[int, int] | None = None,
    ) -> None:
        # Straight into the instance's dict: frozen stops assignment, not construction.
        self.__dict__.update(
            topic=topic,
            partition=partition,
            offset=offset,
            timestamp_ms=timestamp_ms,
            key=key,
            value=value,
            headers=headers,
            defect=defect,
            origin=origin,
        )

    def header(self, name: str) -> bytes | None:
        """The first header called ``name``."""
        return next((v for k, v in self.headers if k == name), None)


def derived_id(record: RawRecord) -> str:
    """A stable id for a request that names none: ``<topic>-<partition>-<offset>`` of
    where it was sent, the same for the record and for the copy a worker forwards to
    the id's owner partition (:attr:`RawRecord.origin`), so the timer is stored where
    a ``get`` or a ``cancel`` by that id goes."""
    partition, offset = record.origin or (record.partition, record.offset)
    return f"{record.topic}-{partition}-{offset}"


def parse_request(record: RawRecord, now: float | None = None) -> Timer | Cancel:
    """Interpret ``record``; raise :class:`RejectedRequest` with a reason if it is not valid.

    ``now`` is the reader's clock (epoch seconds), the worker's when it applies the
    request: a series starts at the later of the record's timestamp and ``now`` less
    :data:`~app.core.recurrence.ANCHOR_SLACK_SECONDS`, so a producer whose clock is far
    behind (a timestamp of 1970) does not replay decades of occurrences. Without
    ``now`` (the audit) a series starts at the record's timestamp: the earliest the
    worker can have anchored it.

    Total over what Kafka can deliver, with bounded work: every number is bounded while
    it is still text and every text is valid UTF-8 of bounded length
    (:mod:`app.core.bounds`); what still escapes is a bug that
    :mod:`app.worker.isolation` dead-letters.
    """
    return _bounded(_parse(record, now))


def _bounded(request: Timer | Cancel) -> Timer | Cancel:
    """``request`` if its id, token and header names are within :mod:`app.core.bounds`."""
    timer_id, token = request.id, request.token
    # The common case in a few C calls: short ASCII (a function call each cost 5%).
    if not (
        len(timer_id) <= MAX_ID_CHARS
        and len(token) <= MAX_TOKEN_CHARS
        and timer_id.isascii()
        and token.isascii()
    ):
        checked_text(timer_id, "the id", MAX_ID_CHARS)
        checked_text(token, "the token", MAX_TOKEN_CHARS)
    if isinstance(request, Timer) and request.headers:
        if len(request.headers) > MAX_HEADERS:
            raise RejectedRequest(
                RejectReason.OUT_OF_BOUNDS,
                f"{len(request.headers)} headers, at most {MAX_HEADERS}",
            )
        for name, _ in request.headers:
            checked_text(name, "a header name", MAX_HEADER_NAME_CHARS)
    return request


def _parse(record: RawRecord, now: float | None) -> Timer | Cancel:
    if record.defect is not None:
        raise RejectedRequest(RejectReason.MALFORMED, record.defect)
    headers = dict(record.headers)
    if record.value is None:
        return _etf1_tombstone(record)
    if ETF1_EPOCH in headers:
        return _etf1_schedule(record, headers)
    value = record.value
    if value[:1] == b"{":
        return _from_json(record, now)
    if value[:1] == b"\x00":  # Schema Registry's magic byte (sr_framing.is_framed, inline)
        return _from_framed(record, now)
    if value.lstrip()[:1] == b"{":
        # JSON after leading whitespace, or protobuf whose first tag is a whitespace byte:
        # field 1 (the callback topic) is tag "\n", and a 123-byte topic's length is "{".
        try:
            return _from_json(record, now)
        except RejectedRequest as not_json:
            if not_json.reason is not RejectReason.MALFORMED:
                raise
            return _from_protobuf(record, now)
    return _from_protobuf(record, now)


def _from_framed(record: RawRecord, now: float | None) -> Timer | Cancel:
    """A request in Schema Registry's wire format: its message read as JSON (no message
    indexes; after whitespace, tried as protobuf too, as unframed values are) or as a
    protobuf ``Future``; a timer keeps the frame's schema id."""
    assert record.value is not None
    body = record.value[5:]
    if body.lstrip()[:1] == b"{":
        framed = unframe(record.value, json=True)
        try:
            request = _from_json(replace(record, value=framed.message), now)
        except RejectedRequest as not_json:
            if not_json.reason is not RejectReason.MALFORMED or body[:1] == b"{":
                raise
            framed = unframe(record.value, json=False)
            request = _from_protobuf(replace(record, value=framed.message), now)
    else:
        framed = unframe(record.value, json=False)
        request = _from_protobuf(replace(record, value=framed.message), now)
    if isinstance(request, Timer):
        return replace(request, schema_id=framed.schema_id)
    return request


def _key_text(record: RawRecord) -> str:
    if not record.key:
        raise RejectedRequest(RejectReason.MALFORMED, "record has no key")
    try:
        return record.key.decode()
    except UnicodeDecodeError as exc:
        raise RejectedRequest(RejectReason.MALFORMED, "record key is not UTF-8") from exc


def _due_from_key(record: RawRecord) -> int:
    text = record.key.decode(errors="replace") if record.key else ""
    try:
        return due_second(parse_epoch(text))
    except InvalidTimeSpec as exc:
        raise RejectedRequest(
            RejectReason.MISSING_DUE,
            f"no due time in the request and the key {text[:40]!r} is not an epoch second",
        ) from exc


def _etf1_tombstone(record: RawRecord) -> Cancel:
    return Cancel(id=_key_text(record), token="", check_token=False)


def _etf1_schedule(record: RawRecord, headers: dict[str, bytes]) -> Timer:
    schedule_id = _key_text(record)
    try:
        due = due_second(parse_epoch(headers[ETF1_EPOCH].decode()))
    except (InvalidTimeSpec, UnicodeDecodeError) as exc:
        raise RejectedRequest(RejectReason.MISSING_DUE, f"scheduler-epoch: {exc}") from exc
    topic = _utf8(headers.get(ETF1_TARGET_TOPIC, b""), "scheduler-target-topic")
    # etf1's own control headers stay behind; the service's provenance replaces them.
    passthrough = tuple((k, v) for k, v in record.headers if not k.startswith("scheduler-"))
    _refuse_reserved(passthrough)
    provenance = (
        ("scheduler-timestamp", str(record.timestamp_ms // 1000).encode()),
        ("scheduler-key", record.key or b""),
        ("scheduler-topic", record.topic.encode()),
    )
    return Timer(
        id=schedule_id,
        due=due,
        topic=topic,
        key=headers.get(ETF1_TARGET_KEY),
        value=record.value,
        token="",
        headers=provenance + passthrough,
    )


def _utf8(raw: bytes, name: str) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise RejectedRequest(RejectReason.INVALID_TOPIC, f"{name} is not UTF-8") from exc


#: The protobuf actions that name a pending timer by id and token.
_TOKEN_ACTIONS = {
    proto.CANCEL: TokenAction.CANCEL,
    proto.PAUSE: TokenAction.PAUSE,
    proto.RESUME: TokenAction.RESUME,
}


def _from_protobuf(record: RawRecord, now: float | None) -> Timer | Cancel:
    assert record.value is not None
    try:
        future: Any = _parse_future(record.value)
    except ProtobufDecodeError as exc:
        raise RejectedRequest(RejectReason.MALFORMED, f"not protobuf or JSON: {exc}") from exc
    if len(UnknownFieldSet(future)):
        _refuse_misread_fields(future, proto.LAST_FIELD_NUMBER)
    action = future.action  # an open enum: values other than 0 and 1 come through
    if action in _TOKEN_ACTIONS:
        asked = _TOKEN_ACTIONS[action]
        if not future.id:
            raise RejectedRequest(RejectReason.MALFORMED, f"{asked.value} without a timer id")
        return Cancel(id=future.id, token=future.token, action=asked)
    if action != proto.SCHEDULE:
        raise RejectedRequest(RejectReason.UNKNOWN_FORMAT, f"unknown action {action}")
    # The headers before anything else about the timer: a forged service header is
    # refused for what it is (reserved_header), whatever else is wrong with the request,
    # as the schema's comments say (tests/unit/test_future_proto.py reads them so). A
    # request without a due second and with a timer-* header was told missing_due.
    headers = _headers(future.headers) if future.headers else ()
    has = future.HasField
    recurrence = None
    if has("cron") or has("every") or has("tz") or has("start") or has("end") or has("count"):
        recurrence = _recurrence(
            _sent_second(record, now),
            cron=future.cron if has("cron") else None,
            tz=future.tz or None,
            every=future.every if has("every") else None,
            start=future.start if has("start") else None,
            end=future.end if has("end") else None,
            count=future.count if has("count") else None,
            has_due=has("due"),
        )
    if recurrence is not None:
        assert recurrence.start is not None
        due = recurrence.start
    else:
        # Absent and empty are the same for every field but the key (null or empty) and due.
        due = future.due if has("due") else _due_from_key(record)
    return Timer(
        id=future.id or derived_id(record),
        due=due,
        topic=future.callBackTopic,
        key=future.callBackKey.encode() if has("callBackKey") else None,
        value=future.callBack,
        token=future.token,
        headers=headers,
        recurrence=recurrence,
        seq=1 if recurrence is not None else 0,
        late=_late(future.late) if has("late") else None,
        spread=_spread(future.spread, recurrence) if future.spread else 0,
    )


def _spread(seconds: int, recurrence: Recurrence | None) -> int:
    """``seconds`` if it is a spread the service takes: from 0 to
    :data:`~app.core.spread.MAX_SPREAD_SECONDS`, and for an interval series less than
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
    return _spread(int(seconds), recurrence)


def _late(text: str | None) -> LatePolicy | None:
    if not text:
        return None
    checked_text(text, "late", MAX_SPEC_CHARS)
    policy = LatePolicy.parse(text)
    return None if policy.is_empty else policy


def _sent_second(record: RawRecord, now: float | None = None) -> int:
    """Where a series starts: the second the request was sent (its timestamp, rounded
    up), but no earlier than ``now`` (the worker's clock) less the anchor slack."""
    sent = -(-record.timestamp_ms // 1000)
    if now is None:
        return sent
    return max(sent, int(now // 1) - ANCHOR_SLACK_SECONDS)


def _recurrence(
    sent_second: int,
    *,
    cron: str | None,
    tz: str | None,
    every: int | None,
    start: int | None,
    end: int | None,
    count: int | None,
    has_due: bool,
) -> Recurrence | None:
    """The request's recurrence, anchored at its first occurrence; ``None`` for a one-shot."""
    if cron is None and every is None:
        if tz is not None or start is not None or end is not None or count is not None:
            raise RejectedRequest(
                RejectReason.INVALID_RECURRENCE,
                "tz, start, end and count need a recurrence (cron or every)",
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
        recurrence = Recurrence.cron_series(cron, tz, start=start, end=end, count=count)
    else:
        if tz is not None:
            raise RejectedRequest(
                RejectReason.INVALID_RECURRENCE, "tz applies to cron, not to every"
            )
        assert every is not None
        recurrence = Recurrence.interval(every, start=start, end=end, count=count)
    return recurrence.anchored(sent_second)


def _headers(headers: Any) -> tuple[Header, ...]:
    out = []
    for header in headers:  # one pass: reading a header out of upb is what costs
        if len(UnknownFieldSet(header)):
            _refuse_misread_fields(header, 2)
        out.append((header.name, header.value))
    return _refuse_reserved(tuple(out))


def _refuse_reserved(headers: tuple[Header, ...]) -> tuple[Header, ...]:
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


def _refuse_misread_fields(message: Any, last_number: int) -> None:
    """Dead-letter a field of the schema that was sent with the wrong wire type.

    protobuf reads it as an unknown field and the field as absent: a ``due`` sent as
    fixed64 would silently become "take the due second from the key". Such bytes come
    from a broken producer, never from generated code, and belong in the DLQ. Unknown
    fields above the schema's numbers are a newer producer's, and are skipped.
    """
    for unknown in UnknownFieldSet(message):
        if unknown.field_number <= last_number:
            raise RejectedRequest(
                RejectReason.MALFORMED,
                f"field {unknown.field_number} of {message.DESCRIPTOR.name} "
                f"has wire type {unknown.wire_type}, not the schema's",
            )


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


def _from_json(record: RawRecord, now: float | None) -> Timer | Cancel:
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
        if "pause" in doc or "resume" in doc:
            asked = TokenAction.PAUSE if "pause" in doc else TokenAction.RESUME
            if "pause" in doc and "resume" in doc:
                raise TypeError("a request pauses or resumes, not both")
            return Cancel(
                id=_json_str(doc, asked.value),
                token=_json_str(doc, "token", ""),
                action=asked,
            )
        headers = _json_headers(doc)  # first, as for protobuf (see _from_protobuf)
        recurrence = _json_recurrence(doc, _sent_second(record, now))
        late = doc.get("late")
        if late is not None and not isinstance(late, str):
            raise TypeError('\'late\' must be a string such as "skip-after 5m" or "all"')
        if recurrence is not None:
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
            late=_late(late),
            spread=_json_spread(doc, recurrence) if "spread" in doc else 0,
        )
    except (TypeError, ValueError, binascii.Error) as exc:
        raise RejectedRequest(RejectReason.UNKNOWN_FORMAT, f"bad JSON request: {exc}") from exc


def _json_str(doc: dict[str, Any], name: str, default: str | None = None) -> str:
    """A text field; its UTF-8 and length are checked where it is used (the id and token
    by :func:`_bounded`, the topic by the policy's legal-name check)."""
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
    return _refuse_reserved(tuple((k, _encoded(v, "a header value")) for k, v in headers.items()))


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
    return _due_from_key(record)


def _json_recurrence(doc: dict[str, Any], sent_second: int) -> Recurrence | None:
    """``cron``/``tz`` or ``every`` (a duration), with ``start``/``end`` (epoch seconds or
    ISO 8601) and ``count``."""
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
    return _recurrence(
        sent_second,
        cron=cron,
        tz=tz,
        every=every,
        start=start,
        end=end,
        count=count,
        has_due="at" in doc or "in" in doc,
    )


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
