"""A tick record, whatever its bytes, is read in bounded time and never raises."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.tick_record import (
    MAX_SOURCE_CHARS,
    UNKNOWN_SOURCE,
    Tick,
    TickIgnored,
    parse_tick,
    tick_second,
)
from kafka_timers_client.bounds import MAX_SECONDS

NOW = 1_767_225_600


def ours(second: int = NOW, name: object = "osc-1", sent_ms: object = NOW * 1000 + 7) -> bytes:
    return json.dumps({"second": second, "oscillator": name, "sent_ms": sent_ms}).encode()


def test_our_tick_says_its_second_source_and_send_time() -> None:
    parsed = parse_tick(str(NOW).encode(), ours(), NOW + 0.5)
    assert parsed.tick == Tick(NOW, "osc-1", NOW + 0.007)
    assert parsed.ignored == ()


def test_the_articles_tick_falls_back_to_the_record_timestamp() -> None:
    assert parse_tick(str(NOW).encode(), b"1", NOW + 0.02).tick == Tick(
        NOW, UNKNOWN_SOURCE, NOW + 0.02
    )
    assert parse_tick(b"1767225600.9", None, None).tick == Tick(NOW, UNKNOWN_SOURCE, None)


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        (None, TickIgnored.NO_SECOND),
        (b"", TickIgnored.NO_SECOND),
        (b"tick", TickIgnored.NO_SECOND),
        (b"NaN", TickIgnored.NO_SECOND),
        (b"Infinity", TickIgnored.NO_SECOND),
        (b"\xff\xfe", TickIgnored.NO_SECOND),
        (b"1" * 41, TickIgnored.NO_SECOND),  # too long to read
        (b"1e700000", TickIgnored.OUT_OF_RANGE),  # would build 700,001 digits
        (b"1e999999999999999999", TickIgnored.OUT_OF_RANGE),
        (b"-1", TickIgnored.OUT_OF_RANGE),
        (str(MAX_SECONDS + 1).encode(), TickIgnored.OUT_OF_RANGE),
    ],
)
def test_a_key_that_is_no_second_in_range_ignores_the_record(
    key: bytes | None, reason: TickIgnored
) -> None:
    started = time.thread_time()
    parsed = parse_tick(key, ours(), NOW)
    assert parsed == (None, (reason,))
    assert time.thread_time() - started < 0.01


def test_a_tick_further_ahead_than_held_is_ignored() -> None:
    assert parse_tick(b"253402300799", ours(), NOW, latest=NOW + 3600) == (
        None,
        (TickIgnored.TOO_FAR_AHEAD,),
    )
    assert parse_tick(str(NOW + 3600).encode(), ours(), NOW, latest=NOW + 3600).tick is not None


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"[" * 3000 + b"]" * 3000, TickIgnored.BAD_VALUE),  # too long
        (b'{"a":' + b"[" * 2000 + b"]" * 2000 + b"}", TickIgnored.BAD_VALUE),  # too deep
        (b'{"oscillator": "x", "sent_ms": NaN}', TickIgnored.BAD_VALUE),
        (b'{"sent_ms": ' + b"9" * 4400 + b"}", TickIgnored.BAD_VALUE),
        (ours(sent_ms=10**400), TickIgnored.BAD_FIELD),  # sent_ms / 1000 would overflow
        (ours(sent_ms=-5), TickIgnored.BAD_FIELD),
        (ours(sent_ms=True), TickIgnored.BAD_FIELD),
        (ours(sent_ms=1.5e12), TickIgnored.BAD_FIELD),
        (ours(name={"deep": [1, 2]}, sent_ms=None), TickIgnored.BAD_FIELD),
    ],
)
def test_a_bad_value_ignores_that_part_and_keeps_the_tick(
    value: bytes, reason: TickIgnored
) -> None:
    parsed = parse_tick(str(NOW).encode(), value, NOW + 0.1)
    assert parsed.tick is not None and parsed.tick.second == NOW
    assert parsed.ignored == (reason,)
    assert parsed.tick.sent == NOW + 0.1  # the record timestamp stands in


def test_source_names_are_cut_and_made_encodable() -> None:
    long = parse_tick(str(NOW).encode(), ours(name="o" * 1000), None)
    assert long.tick is not None and long.tick.source == "o" * MAX_SOURCE_CHARS
    huge = parse_tick(str(NOW).encode(), ours(name="o" * 300_000), None)  # not even read
    assert huge.tick is not None and huge.tick.source == UNKNOWN_SOURCE
    assert huge.ignored == (TickIgnored.BAD_VALUE,)
    lone = parse_tick(str(NOW).encode(), b'{"oscillator": "a\\ud800b"}', None)
    assert lone.tick is not None
    lone.tick.source.encode()  # a lone surrogate would break /metrics
    empty = parse_tick(str(NOW).encode(), ours(name=""), None)
    assert empty.tick is not None and empty.tick.source == UNKNOWN_SOURCE


@pytest.mark.parametrize(
    "stamp", [float("nan"), float("inf"), float("-inf"), -1.0, 0.0, 1e300, 10**400, -(10**400)]
)
def test_a_record_timestamp_out_of_range_is_no_send_time(stamp: float) -> None:
    parsed = parse_tick(str(NOW).encode(), b"1", stamp)
    assert parsed.tick == Tick(NOW, UNKNOWN_SOURCE, None)


def test_tick_second_reads_the_key_alone() -> None:
    assert tick_second(b" 1767225600 ") == NOW
    assert tick_second(b"1.7672256e9") == NOW
    assert tick_second(b"0") == 0


_json_leaves = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=50)
_json = st.recursive(
    _json_leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=20,
)
_tick_docs = st.fixed_dictionaries(
    {},
    optional={
        "oscillator": _json | st.text(max_size=500),
        "sent_ms": _json | st.integers(min_value=-(10**30), max_value=10**30),
        "second": _json,
    },
)
_values = (
    st.binary(max_size=5000)
    | _json.map(lambda doc: json.dumps(doc).encode())
    | _tick_docs.map(lambda doc: json.dumps(doc).encode())
    | st.integers(min_value=1, max_value=6000).map(lambda n: b"[" * n + b"]" * n)
    | st.none()
)
_keys = (
    st.binary(max_size=60)
    | st.integers(min_value=-(10**20), max_value=10**20).map(lambda n: str(n).encode())
    | st.from_regex(r"-?[0-9]{0,14}(\.[0-9]{0,5})?([eE][+-]?[0-9]{1,12})?", fullmatch=True).map(
        str.encode
    )
    | st.sampled_from([b"NaN", b"-Infinity", b"sNaN", b"1e700000"])
    | st.none()
)
_stamps = st.none() | st.floats() | st.integers(min_value=-(2**63), max_value=2**63)


@settings(max_examples=600, deadline=None)
@given(key=_keys, value=_values, stamp=_stamps, latest=st.integers(0, MAX_SECONDS))
def test_any_record_is_read_in_bounded_time_and_never_raises(
    key: bytes | None, value: bytes | None, stamp: float | None, latest: int
) -> None:
    started = time.thread_time()
    parsed = parse_tick(key, value, stamp, latest)
    # This thread's CPU time: a neighbour's load (the suite runs two at a time) does not
    # count, only the parse's own work; its worst case is microseconds.
    assert time.thread_time() - started < 0.25
    if parsed.tick is None:
        assert len(parsed.ignored) == 1
        return
    tick = parsed.tick
    assert 0 <= tick.second <= latest
    assert 0 < len(tick.source) <= MAX_SOURCE_CHARS
    tick.source.encode()
    assert tick.sent is None or 0 < tick.sent <= MAX_SECONDS
