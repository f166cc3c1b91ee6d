"""pack_timer takes the leading fields' lengths from a table while they are short
(``stored._SHORT_LENGTHS``) and packs them otherwise: both give the layout's bytes, a
big-endian int32 before each field (-1 for an absent key or value), at every size
around the table's end."""

from __future__ import annotations

import struct

import pytest

from app.core.stored import _SHORT, _pack_any, pack_timer, unpack_timer
from app.core.timer import Timer, one_shot

SIZES = (0, 1, _SHORT - 1, _SHORT, _SHORT + 1, 70_000)


def layout_1(timer: Timer) -> bytes:
    """The plain one-shot layout, spelled out."""
    out = struct.pack(">Bq", 1, timer.due)
    for text in (timer.id, timer.token, timer.topic):
        out += struct.pack(">i", len(text.encode())) + text.encode()
    for data in (timer.key, timer.value):
        out += struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data
    out += struct.pack(">i", len(timer.headers))
    for name, value in timer.headers:
        out += struct.pack(">i", len(name.encode())) + name.encode()
        out += struct.pack(">i", len(value)) + value
    return out


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("field", ["id", "token", "topic", "key", "value"])
def test_every_leading_field_packs_at_every_size(field: str, size: int) -> None:
    fields: dict[str, object] = {"id": "a", "token": "t", "topic": "cb", "key": b"k", "value": b"v"}
    fields[field] = "é" * size if field in ("id", "token", "topic") else b"x" * size
    timer = Timer(due=1_767_225_600, **fields)  # type: ignore[arg-type]
    packed = pack_timer(timer)
    assert packed == layout_1(timer)
    assert unpack_timer(packed) == timer


@pytest.mark.parametrize("size", SIZES)
def test_absent_keys_and_values_and_headers(size: int) -> None:
    timer = Timer("a", 5, "cb", None, None, headers=(("h", b"y" * size),))
    assert pack_timer(timer) == layout_1(timer)
    timer = Timer("a", 5, "cb", None, b"z" * size, headers=tuple(("h", b"") for _ in range(3)))
    assert pack_timer(timer) == layout_1(timer)
    assert unpack_timer(pack_timer(timer)) == timer


@pytest.mark.parametrize(
    "timer",
    [
        Timer("a", 1_767_225_600, "cb", b"k", b"v", "t"),
        Timer("a", 0, "", None, None),
        Timer("é" * 3, -(2**63), "cb", b"", b"", "tok"),
        one_shot("probe-1", 2**63 - 1, "callbacks", None, b"x" * 100, ""),
    ],
)
def test_a_plain_timer_packs_as_the_general_case_does(timer: Timer) -> None:
    # pack_timer's own path for a one-shot timer with nothing but its six fields.
    assert pack_timer(timer) == _pack_any(timer) == layout_1(timer)
    assert unpack_timer(pack_timer(timer)) == timer
