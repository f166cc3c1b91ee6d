"""The byte layout of a pending timer inside the RocksDB table (and its changelog).

A private, versioned, length-prefixed layout rather than the request's own bytes: it is
exact for binary keys and headers, and cheap to pack and unpack on the hot path.
"""

from __future__ import annotations

import struct

from app.core.timer import Timer

__all__ = ["pack_timer", "unpack_timer"]

_VERSION = 1
_HEAD = struct.Struct(">Bq")
_LEN = struct.Struct(">i")


def _put(parts: list[bytes], data: bytes | None) -> None:
    if data is None:
        parts.append(_LEN.pack(-1))
    else:
        parts.append(_LEN.pack(len(data)))
        parts.append(data)


def pack_timer(timer: Timer) -> bytes:
    """Serialize ``timer`` for storage."""
    parts = [_HEAD.pack(_VERSION, timer.due)]
    for text in (timer.id, timer.token, timer.topic):
        _put(parts, text.encode())
    _put(parts, timer.key)
    _put(parts, timer.value)
    parts.append(_LEN.pack(len(timer.headers)))
    for name, value in timer.headers:
        _put(parts, name.encode())
        _put(parts, value)
    return b"".join(parts)


def unpack_timer(data: bytes) -> Timer:
    """Inverse of :func:`pack_timer`."""
    version, due = _HEAD.unpack_from(data, 0)
    if version != _VERSION:
        raise ValueError(f"stored timer has unknown layout version {version}")
    pos = _HEAD.size

    def take() -> bytes | None:
        nonlocal pos
        (length,) = _LEN.unpack_from(data, pos)
        pos += _LEN.size
        if length < 0:
            return None
        chunk = data[pos : pos + length]
        pos += length
        return chunk

    timer_id, token, topic = ((take() or b"").decode() for _ in range(3))
    key = take()
    value = take()
    (count,) = _LEN.unpack_from(data, pos)
    pos += _LEN.size
    headers = []
    for _ in range(count):
        name = (take() or b"").decode()
        headers.append((name, take() or b""))
    return Timer(
        id=timer_id,
        due=due,
        topic=topic,
        key=key,
        value=value,
        token=token,
        headers=tuple(headers),
    )
