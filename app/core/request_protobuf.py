"""The protobuf reader: the ``Future`` message of ``app/core/proto/kafka_timers/v1/future.proto``.

Decoded by the protobuf runtime (:mod:`app.core.proto`). A record holding only fields
1-3 and keyed by its expiry second, what the original article's producers send, is a
valid timer.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError as ProtobufDecodeError
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from app.core import proto
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
from app.core.timer import Cancel, Header, Timer, TokenAction, one_shot
from kafka_timers_client.calendars import Calendar
from kafka_timers_client.errors import RejectedRequest, RejectReason

__all__ = ["from_protobuf"]


_parse_future = proto.Future.FromString

#: The fields of a plain one-shot request: callback topic, key and value, id, token, due.
_PLAIN_FIELDS = 6


def _plain_class() -> type[Message]:
    """``Future`` cut down to its fields 1-6 (the same numbers, types and presence), in a
    pool of its own: what a plain one-shot request holds, and all it holds.

    A request read with it that leaves no unknown field holds none of ``Future``'s
    other fields (headers, action, recurrence, calendar, late policy, spread, debounce),
    each of which would be unknown here, and its fields 1-6 have the schema's wire types:
    read with ``Future`` it is the same timer. Reading it so skips what the full reader
    asks of every request (thirteen presence checks by name, the headers' container, the
    action), about half of a plain request's parse (see :func:`from_protobuf`)."""
    whole = descriptor_pb2.FileDescriptorProto()
    proto.Future.DESCRIPTOR.file.CopyToProto(whole)
    future = next(m for m in whole.message_type if m.name == proto.Future.DESCRIPTOR.name)
    cut = descriptor_pb2.FileDescriptorProto(
        name="kafka_timers/v1/plain_future.proto", package="kafka_timers.v1", syntax=whole.syntax
    )
    plain = cut.message_type.add(name="PlainFuture")
    for field in future.field:
        if field.number <= _PLAIN_FIELDS:
            kept = plain.field.add()
            kept.CopyFrom(field)
            if field.proto3_optional:  # its synthetic oneof, renumbered
                kept.oneof_index = len(plain.oneof_decl)
                plain.oneof_decl.add().CopyFrom(future.oneof_decl[field.oneof_index])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(cut)
    cls: type[Message] = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("kafka_timers.v1.PlainFuture")
    )
    return cls


_parse_plain = _plain_class().FromString


def _tag_lead(field: str) -> int:
    """The first byte of the tag of ``Future``'s length-delimited ``field`` (numbered 16
    or more), however its varint is written: a tag of 128 or more starts with its low
    seven bits and the continuation bit. A value without this byte cannot hold the field
    (sent with another wire type, it is an unknown field, refused before it is read).
    An int, looked for with ``in`` (one ``memchr``; a one-byte ``bytes`` is first tried
    as a number, and the error that makes cost ten times the search)."""
    number: int = proto.Future.DESCRIPTOR.fields_by_name[field].number
    tag = number << 3 | 2
    assert tag >= 128, field
    return tag & 0x7F | 0x80


#: ``skip_dates``: upb builds a container for a repeated field each time it is read, even
#: an empty one (about 1,900 instructions, counted: half of what a plain request's parse
#: cost more once calendars and debounce came), so it is read only where its tag may be.
_SKIP_DATES_LEAD = _tag_lead("skip_dates")

#: The protobuf actions that name a pending timer by id and token.
_TOKEN_ACTIONS = {
    proto.CANCEL: TokenAction.CANCEL,
    proto.PAUSE: TokenAction.PAUSE,
    proto.RESUME: TokenAction.RESUME,
    proto.TRIGGER: TokenAction.TRIGGER,
    proto.BACKFILL: TokenAction.BACKFILL,
}


def from_protobuf(record: RawRecord, now: float | None) -> Timer | Cancel:
    """The timer or token request (cancel, pause, resume, trigger, backfill) a ``Future``
    message holds;
    ``now`` as for :func:`app.core.request_format.parse_request`."""
    value = record.value
    assert value is not None
    # A plain one-shot request, the common case, read on fields 1-6 alone (_plain_class);
    # anything else, or anything wrong, is read again by the full reader below.
    try:
        plain: Any = _parse_plain(value)
    except ProtobufDecodeError:
        pass
    else:
        if not len(UnknownFieldSet(plain)):
            # A presence check by name is asked only where the value cannot tell: a due
            # second other than 0 and a key other than "" were sent.
            due, key = plain.due, plain.callBackKey
            return one_shot(
                plain.id or derived_id(record),
                due if due or plain.HasField("due") else due_from_key(record),
                plain.callBackTopic,
                key.encode() if key or plain.HasField("callBackKey") else None,
                plain.callBack,
                plain.token,
            )
    try:
        future: Any = _parse_future(value)
    except ProtobufDecodeError as exc:
        raise RejectedRequest(RejectReason.MALFORMED, f"not protobuf or JSON: {exc}") from exc
    if len(UnknownFieldSet(future)):
        _refuse_misread_fields(future, proto.LAST_FIELD_NUMBER)
    action = future.action  # an open enum: values other than 0 and 1 come through
    if action in _TOKEN_ACTIONS:
        asked = _TOKEN_ACTIONS[action]
        if not future.id:
            raise RejectedRequest(RejectReason.MALFORMED, f"{asked.value} without a timer id")
        if asked is TokenAction.BACKFILL:
            has_window = future.HasField
            window = request_window(
                future.backfill_from if has_window("backfill_from") else None,
                future.backfill_to if has_window("backfill_to") else None,
            )
            return Cancel(id=future.id, token=future.token, action=asked, window=window)
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
    calendar = None
    skip_dates = future.skip_dates if _SKIP_DATES_LEAD in value else ()
    if has("skip_holidays") or skip_dates or has("skip_policy"):
        calendar = Calendar.build(future.skip_holidays, skip_dates, future.skip_policy)
    if (
        has("cron")
        or has("every")
        or has("tz")
        or has("start")
        or has("end")
        or has("count")
        or calendar is not None
    ):
        recurrence = recurrence_of(
            sent_second(record, now),
            cron=future.cron if has("cron") else None,
            tz=future.tz or None,
            every=future.every if has("every") else None,
            start=future.start if has("start") else None,
            end=future.end if has("end") else None,
            count=future.count if has("count") else None,
            has_due=has("due"),
            calendar=calendar,
        )
    debounce = None
    # By presence, as JSON reads its keys: a debounce (or max-wait) sent as 0 is refused
    # (invalid_debounce), never read as "not debounced". On upb a presence check costs
    # less than reading the field.
    if has("debounce") or has("max_wait"):
        if has("debounce_first_ms") or has("debounce_merged"):  # restored whole (import)
            debounce = restored_debounce(
                record,
                future.debounce if has("debounce") else None,
                future.max_wait if has("max_wait") else None,
                future.debounce_first_ms if has("debounce_first_ms") else None,
                future.debounce_merged if has("debounce_merged") else None,
                has_due=has("due"),
                recurrence=recurrence,
            )
            due = future.due
        else:
            due, debounce = debounce_of(
                record,
                future.debounce if has("debounce") else None,
                future.max_wait if has("max_wait") else None,
                has_due=has("due"),
                recurrence=recurrence,
            )
    elif recurrence is not None:
        assert recurrence.start is not None
        due = recurrence.start
    else:
        # Absent and empty are the same for every field but the key (null or empty) and due.
        due = future.due if has("due") else due_from_key(record)
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
        late=late_policy(future.late) if has("late") else None,
        spread=checked_spread(future.spread, recurrence) if future.spread else 0,
        debounce=debounce,
    )


def _headers(headers: Any) -> tuple[Header, ...]:
    out = []
    for header in headers:  # one pass: reading a header out of upb is what costs
        if len(UnknownFieldSet(header)):
            _refuse_misread_fields(header, 2)
        out.append((header.name, header.value))
    return refuse_reserved(tuple(out))


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
