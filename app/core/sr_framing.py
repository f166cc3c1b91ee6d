"""Confluent Schema Registry's wire format on the request topic: unwrapping, totally.

A producer that uses Confluent's serializers (``ProtobufSerializer``,
``JSONSerializer``, and their Java, Go and .NET twins) does not write the request
itself but a *framed* value:

* byte 0: the magic byte, ``0``;
* bytes 1-4: the schema id the registry gave the writer's schema, big-endian;
* protobuf only: the *message indexes*, the path of the message inside its ``.proto``
  file, as zigzag varints: a count, then that many indexes; the single byte ``0``
  stands for ``[0]`` (the file's first message);
* the message itself: protobuf bytes, or JSON text.

No request of the other formats can start with byte ``0``: JSON starts with ``{`` or
whitespace, and a protobuf message's first byte is a field's tag, whose number is at
least 1 (tag ``0`` is invalid); etf1 is told by a header, before the value is read.
So a value starting with ``0`` is framed, and anything wrong in the frame is a dead
letter (``malformed``) with what was wrong, never an exception.

The worker does **not** call the registry: it trusts the frame and reads the message
against its own ``Future`` schema (or as a JSON request). Any schema id is accepted and
kept with the timer (the fired record's ``schema_id``), and so is any message-index
path: the worker cannot know what the registered file looks like (in the shipped
``future.proto``, ``Future`` is the second message, ``[1]``; ``Header`` is ``[0]``).
"""

from __future__ import annotations

from typing import NamedTuple

from kafka_timers_client.errors import RejectedRequest, RejectReason

__all__ = ["MAGIC_BYTE", "MAX_MESSAGE_INDEXES", "Framed", "frame", "is_framed", "unframe"]

#: The first byte of every value in Confluent's wire format.
MAGIC_BYTE = 0
#: Most message indexes a frame may carry (a message nested this deep is no request);
#: bounds the work on a hostile frame before the message is read.
MAX_MESSAGE_INDEXES = 32
_HEADER_BYTES = 5
#: A varint of a message index or count: at most 5 bytes (a 32-bit zigzag value).
_MAX_VARINT_BYTES = 5


class Framed(NamedTuple):
    """What a framed value holds."""

    #: The schema id of the writer's schema (any: the worker does not look it up).
    schema_id: int
    #: The message's path in its ``.proto`` (``None`` when the message is JSON).
    indexes: tuple[int, ...] | None
    #: The request itself: protobuf bytes or JSON text.
    message: bytes


def is_framed(value: bytes) -> bool:
    """Whether ``value`` is in Confluent's wire format (starts with the magic byte)."""
    return value[:1] == b"\x00"


def _zigzag(data: bytes, pos: int) -> tuple[int, int]:
    """The zigzag varint at ``pos`` and the position after it."""
    result = shift = 0
    for i in range(pos, min(pos + _MAX_VARINT_BYTES, len(data))):
        byte = data[i]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), i + 1
        shift += 7
    raise RejectedRequest(
        RejectReason.MALFORMED, "Schema Registry frame: a truncated or overlong message index"
    )


def _indexes(data: bytes) -> tuple[tuple[int, ...], int]:
    """The message indexes at the start of ``data`` and where the message begins."""
    count, pos = _zigzag(data, 0)
    if count == 0:
        return (0,), pos
    if not 0 < count <= MAX_MESSAGE_INDEXES:
        raise RejectedRequest(
            RejectReason.MALFORMED,
            f"Schema Registry frame: {count} message indexes (1 to {MAX_MESSAGE_INDEXES})",
        )
    path = []
    for _ in range(count):
        index, pos = _zigzag(data, pos)
        if index < 0:
            raise RejectedRequest(
                RejectReason.MALFORMED, f"Schema Registry frame: message index {index}"
            )
        path.append(index)
    return tuple(path), pos


def unframe(value: bytes, *, json: bool) -> Framed:
    """The schema id, message indexes and message of framed ``value``.

    ``json``: read the rest as a JSON message (no message indexes), else as protobuf.
    Raises :class:`RejectedRequest` (``malformed``) if the frame is cut short or its
    indexes are not a path; the message itself is not looked at.
    """
    if len(value) < _HEADER_BYTES or value[0] != MAGIC_BYTE:
        raise RejectedRequest(
            RejectReason.MALFORMED,
            f"Schema Registry frame: {len(value)} bytes, not magic byte 0 and a schema id",
        )
    schema_id = int.from_bytes(value[1:_HEADER_BYTES], "big")
    rest = value[_HEADER_BYTES:]
    if json:
        return Framed(schema_id, None, rest)
    path, start = _indexes(rest)
    return Framed(schema_id, path, rest[start:])


def _varint(value: int) -> bytes:
    out = bytearray()
    value = (value << 1) ^ (value >> 63)  # zigzag
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def frame(schema_id: int, message: bytes, indexes: tuple[int, ...] | None = (1,)) -> bytes:
    """``message`` in Confluent's wire format (the inverse of :func:`unframe`), for
    tests and tools; ``indexes=None`` for JSON, ``(0,)`` written as the single ``0``
    byte as Confluent's serializers do."""
    head = bytes([MAGIC_BYTE]) + schema_id.to_bytes(4, "big")
    if indexes is None:
        return head + message
    if indexes == (0,):
        return head + b"\x00" + message
    return head + _varint(len(indexes)) + b"".join(_varint(i) for i in indexes) + message
