"""Protobuf wire encoding of the ``Future`` request, by hand: what the client encodes with.

The schema of record is ``app/core/proto/kafka_timers/v1/future.proto`` (shipped with the
package; see docs/protocol.md): fields 1-3 are the original article's
``Future``, fields 4-8 ours, 9-15 recurring timers and the late-fire policy, 16 the
spread, 17-19 a series' calendar, 20-21 a backfill's window, 22-23 a debounce, 24-25 a
debounced timer restored whole (what import sends). This codec
follows it exactly, ``None`` standing for an absent field, and
tests/unit/test_future_proto.py checks it against code generated from that file in
both directions. The worker decodes requests with the protobuf runtime
(:mod:`app.core.proto`); :func:`decode` stays as the reference those tests use.

Unknown fields are skipped, as protobuf requires, so newer producers stay readable.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "ACTION_BACKFILL",
    "ACTION_CANCEL",
    "ACTION_PAUSE",
    "ACTION_RESUME",
    "ACTION_SCHEDULE",
    "ACTION_TRIGGER",
    "DecodeError",
    "Future",
    "decode",
    "encode",
    "encode_varint",
]

ACTION_SCHEDULE = 0
ACTION_CANCEL = 1
ACTION_PAUSE = 2
ACTION_RESUME = 3
ACTION_TRIGGER = 4
ACTION_BACKFILL = 5

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


class DecodeError(ValueError):
    """The bytes are not a well-formed protobuf message."""


@dataclass
class Future:
    """The decoded message; ``None`` means the field was absent."""

    callback_topic: str | None = None
    callback_key: str | None = None
    callback: bytes | None = None
    id: str | None = None
    token: str | None = None
    due: int | None = None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    action: int = ACTION_SCHEDULE
    cron: str | None = None
    tz: str | None = None
    every: int | None = None
    start: int | None = None
    end: int | None = None
    count: int | None = None
    late: str | None = None
    spread: int | None = None
    skip_holidays: str | None = None
    skip_dates: list[str] = field(default_factory=list)
    skip_policy: str | None = None
    backfill_from: int | None = None
    backfill_to: int | None = None
    debounce: int | None = None
    max_wait: int | None = None
    debounce_first_ms: int | None = None
    debounce_merged: int | None = None


def encode_varint(value: int) -> bytes:
    """``value`` as a protobuf varint: int64 negatives as ten-byte two's complement.

    A negative past int64 is masked to 64 bits too (adding 2**64 would leave it negative,
    and the loop below would never end), so any int encodes: the hostile-input tests
    generate such values on purpose.
    """
    if value < 0:
        value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _tag(number: int, wire_type: int) -> bytes:
    return encode_varint(number << 3 | wire_type)


def _len_field(number: int, payload: bytes) -> bytes:
    return _tag(number, _LEN) + encode_varint(len(payload)) + payload


def encode(future: Future) -> bytes:
    """Serialize ``future``; absent fields are left out, as proto3 does."""
    parts: list[bytes] = []
    if future.callback_topic is not None:
        parts.append(_len_field(1, future.callback_topic.encode()))
    if future.callback_key is not None:
        parts.append(_len_field(2, future.callback_key.encode()))
    if future.callback is not None:
        parts.append(_len_field(3, future.callback))
    if future.id is not None:
        parts.append(_len_field(4, future.id.encode()))
    if future.token is not None:
        parts.append(_len_field(5, future.token.encode()))
    if future.due is not None:
        parts.append(_tag(6, _VARINT) + encode_varint(future.due))
    for name, value in future.headers:
        parts.append(_len_field(7, _len_field(1, name.encode()) + _len_field(2, value)))
    if future.action:
        parts.append(_tag(8, _VARINT) + encode_varint(future.action))
    for number, text in ((9, future.cron), (10, future.tz)):
        if text is not None:
            parts.append(_len_field(number, text.encode()))
    for number, num in (
        (11, future.every),
        (12, future.start),
        (13, future.end),
        (14, future.count),
    ):
        if num is not None:
            parts.append(_tag(number, _VARINT) + encode_varint(num))
    if future.late is not None:
        parts.append(_len_field(15, future.late.encode()))
    if future.spread is not None:
        parts.append(_tag(16, _VARINT) + encode_varint(future.spread))
    if future.skip_holidays is not None:
        parts.append(_len_field(17, future.skip_holidays.encode()))
    for day in future.skip_dates:
        parts.append(_len_field(18, day.encode()))
    if future.skip_policy is not None:
        parts.append(_len_field(19, future.skip_policy.encode()))
    for number, num in (
        (20, future.backfill_from),
        (21, future.backfill_to),
        (22, future.debounce),
        (23, future.max_wait),
        (24, future.debounce_first_ms),
        (25, future.debounce_merged),
    ):
        if num is not None:
            parts.append(_tag(number, _VARINT) + encode_varint(num))
    return b"".join(parts)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise DecodeError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise DecodeError("varint longer than ten bytes")


def _fields(data: bytes) -> list[tuple[int, int, int | bytes]]:
    """Split ``data`` into ``(field number, wire type, value)`` triples."""
    out: list[tuple[int, int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise DecodeError("field number 0")
        value: int | bytes
        if wire_type == _VARINT:
            value, pos = _read_varint(data, pos)
        elif wire_type == _LEN:
            length, pos = _read_varint(data, pos)
            if pos + length > len(data):
                raise DecodeError("length-delimited field runs past the end")
            value, pos = data[pos : pos + length], pos + length
        elif wire_type in (_I64, _I32):
            width = 8 if wire_type == _I64 else 4
            if pos + width > len(data):
                raise DecodeError("fixed-width field runs past the end")
            value, pos = int.from_bytes(data[pos : pos + width], "little"), pos + width
        else:
            raise DecodeError(f"unsupported wire type {wire_type}")
        out.append((number, wire_type, value))
    return out


def _text(value: int | bytes, name: str) -> str:
    if not isinstance(value, bytes):
        raise DecodeError(f"{name} must be length-delimited")
    try:
        return value.decode()
    except UnicodeDecodeError as exc:
        raise DecodeError(f"{name} is not UTF-8") from exc


def _signed(value: int | bytes, wire_type: int, name: str, bits: int) -> int:
    """A varint read as a ``bits``-wide signed integer, truncated as protobuf does."""
    if wire_type != _VARINT or not isinstance(value, int):
        raise DecodeError(f"{name} must be a varint")
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def decode(data: bytes) -> Future:
    """Parse ``data`` as a ``Future``; raise :class:`DecodeError` if it is not one."""
    future = Future()
    for number, wire_type, value in _fields(data):
        if number == 1:
            future.callback_topic = _text(value, "callBackTopic")
        elif number == 2:
            future.callback_key = _text(value, "callBackKey")
        elif number == 3:
            if not isinstance(value, bytes):
                raise DecodeError("callBack must be length-delimited")
            future.callback = value
        elif number == 4:
            future.id = _text(value, "id")
        elif number == 5:
            future.token = _text(value, "token")
        elif number == 6:
            future.due = _signed(value, wire_type, "due", 64)
        elif number == 7:
            if not isinstance(value, bytes):
                raise DecodeError("headers must be length-delimited")
            name, header_value = "", b""
            for sub_number, _sub_type, sub_value in _fields(value):
                if sub_number == 1:
                    name = _text(sub_value, "header name")
                elif sub_number == 2 and isinstance(sub_value, bytes):
                    header_value = sub_value
            future.headers.append((name, header_value))
        elif number == 8:
            future.action = _signed(value, wire_type, "action", 32)  # an enum: int32
        elif number == 9:
            future.cron = _text(value, "cron")
        elif number == 10:
            future.tz = _text(value, "tz")
        elif number == 11:
            future.every = _signed(value, wire_type, "every", 64)
        elif number == 12:
            future.start = _signed(value, wire_type, "start", 64)
        elif number == 13:
            future.end = _signed(value, wire_type, "end", 64)
        elif number == 14:
            future.count = _signed(value, wire_type, "count", 64)
        elif number == 15:
            future.late = _text(value, "late")
        elif number == 16:
            future.spread = _signed(value, wire_type, "spread", 64)
        elif number == 17:
            future.skip_holidays = _text(value, "skip_holidays")
        elif number == 18:
            future.skip_dates.append(_text(value, "skip_dates"))
        elif number == 19:
            future.skip_policy = _text(value, "skip_policy")
        elif number == 20:
            future.backfill_from = _signed(value, wire_type, "backfill_from", 64)
        elif number == 21:
            future.backfill_to = _signed(value, wire_type, "backfill_to", 64)
        elif number == 22:
            future.debounce = _signed(value, wire_type, "debounce", 64)
        elif number == 23:
            future.max_wait = _signed(value, wire_type, "max_wait", 64)
        elif number == 24:
            future.debounce_first_ms = _signed(value, wire_type, "debounce_first_ms", 64)
        elif number == 25:
            future.debounce_merged = _signed(value, wire_type, "debounce_merged", 64)
    return future
