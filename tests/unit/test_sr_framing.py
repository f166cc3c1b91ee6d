"""Requests in Confluent Schema Registry's wire format are unwrapped, totally.

Values written by confluent-kafka's own ``ProtobufSerializer`` and ``JSONSerializer``
(against a mock registry: the worker never calls one) read as the same timer as the
unframed message, with the frame's schema id kept; hypothesis frames every request the
unframed property tests draw, and throws arbitrary bytes after the magic byte: each is
a timer, a cancel or a dead letter with a reason. The schema id survives storage and
lands in the fired record; the previous release, rolled back to, fires such timers.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from hypothesis import given
from hypothesis import strategies as st

from app.core import proto
from app.core.fired import FiredRecord, fired_json
from app.core.raw_record import RawRecord
from app.core.request_format import parse_request
from app.core.sr_framing import MAX_MESSAGE_INDEXES, frame, unframe
from app.core.stored import pack_timer, unpack_timer
from app.core.timer import Cancel, Timer
from app.core.wheel import PartitionWheel
from kafka_timers_client import protowire
from kafka_timers_client.errors import RejectedRequest, RejectReason
from kafka_timers_client.recurrence import Recurrence
from tests.support.hostile import (
    arbitrary_records,
    check_record,
    json_records,
    protobuf_records,
    within_budget,
)
from tests.support.memkv import MemoryKV
from tests.unit.test_future_proto import MANY, futures, keys, parsed
from tests.unit.test_hostile_records import hostile
from tests.unit.test_spread_rollback import T0, ticks_in_previous_release

REQUEST_TOPIC = "timer-request"
SENT_MS = 1_767_225_600_000


def record(value: bytes, key: bytes | None = b"k") -> RawRecord:
    return RawRecord(REQUEST_TOPIC, 3, 41, SENT_MS, key, value)


def value_context() -> SerializationContext:
    return SerializationContext(REQUEST_TOPIC, MessageField.VALUE)


@pytest.fixture
def registry() -> SchemaRegistryClient:
    return SchemaRegistryClient.new_client({"url": "mock://test-sr-framing"})


def test_confluents_protobuf_serializer_frames_a_future_the_worker_reads(
    registry: SchemaRegistryClient,
) -> None:
    serialize = ProtobufSerializer(proto.Future, registry, {"use.deprecated.format": False})
    message = proto.Future(callBackTopic="reminders", callBack=b"\x00hi", id="a-1", due=1_800)
    framed = serialize(message, value_context())
    assert framed is not None and framed[:1] == b"\x00"

    timer = parse_request(record(framed))
    assert isinstance(timer, Timer)
    registered = registry.get_latest_version(f"{REQUEST_TOPIC}-value")
    assert timer.schema_id == registered.schema_id
    assert timer == replace(
        parse_request(record(message.SerializeToString())), schema_id=registered.schema_id
    )
    assert timer.value == b"\x00hi", "the payload bytes are passed through unchanged"


def test_confluents_json_serializer_frames_a_request_the_worker_reads(
    registry: SchemaRegistryClient,
) -> None:
    schema = json.dumps({"type": "object", "properties": {"topic": {"type": "string"}}})
    serialize = JSONSerializer(schema, registry)
    doc = {"topic": "reminders", "value": "hi", "id": "j-1", "at": 1_800}
    framed = serialize(doc, value_context())
    assert framed is not None and framed[:1] == b"\x00"

    timer = parse_request(record(framed))
    assert isinstance(timer, Timer)
    assert timer.schema_id == registry.get_latest_version(f"{REQUEST_TOPIC}-value").schema_id
    assert (timer.id, timer.topic, timer.value, timer.due) == ("j-1", "reminders", b"hi", 1_800)


def test_a_framed_cancel_cancels() -> None:
    cancel = protowire.encode(protowire.Future(id="a-1", token="t", action=proto.CANCEL))
    assert parse_request(record(frame(9, cancel))) == Cancel(id="a-1", token="t")
    doc = json.dumps({"cancel": "a-1", "token": "t"}).encode()
    assert parse_request(record(frame(9, doc, None))) == Cancel(id="a-1", token="t")


@pytest.mark.parametrize(
    "value",
    [
        b"\x00",
        b"\x00\x00\x00\x01",  # the schema id cut short
        b"\x00\x00\x00\x00\x01",  # no message indexes
        b"\x00\x00\x00\x00\x01\x03",  # a negative count (zigzag 3 = -2)
        b"\x00\x00\x00\x00\x01\x02\x01",  # index -1
        b"\x00\x00\x00\x00\x01\x02",  # count 1, no index
        b"\x00\x00\x00\x00\x01\xff\xff\xff\xff\xff\xff",  # an overlong varint
        b"\x00\x00\x00\x00\x01" + bytes([2 * (MAX_MESSAGE_INDEXES + 1)]),
        b"\x00\x00\x00\x00\x01\x00\x00",  # [0], then a message starting with tag 0
        b'\x00\x00\x00\x00\x01{"topic": ',  # framed JSON cut short
    ],
)
def test_a_broken_frame_is_dead_lettered_as_malformed(value: bytes) -> None:
    with pytest.raises(RejectedRequest) as rejected:
        parse_request(record(value))
    assert rejected.value.reason is RejectReason.MALFORMED


def test_message_indexes_are_read_as_confluent_writes_them() -> None:
    message = b"\x0a\x01t"
    assert unframe(frame(7, message, (0,)), json=False) == (7, (0,), message)
    assert frame(7, message, (0,)) == b"\x00\x00\x00\x00\x07\x00" + message
    assert unframe(frame(2**32 - 1, message, (1, 0, 3)), json=False) == (
        2**32 - 1,
        (1, 0, 3),
        message,
    )
    assert unframe(frame(7, b"{}", None), json=True) == (7, None, b"{}")


@MANY
@given(
    future=futures,
    key=keys,
    schema_id=st.integers(0, 2**32 - 1),
    indexes=st.one_of(st.just((0,)), st.lists(st.integers(0, 300), min_size=1, max_size=4)),
)
def test_a_framed_protobuf_request_reads_as_the_unframed_one(
    future: protowire.Future, key: bytes | None, schema_id: int, indexes: list[int]
) -> None:
    message = protowire.encode(future)
    framed = frame(schema_id, message, tuple(indexes))
    plain, wrapped = parsed(record(message, key)), parsed(record(framed, key))
    if message.lstrip()[:1] == b"{":  # read as JSON first, unframed: another format's business
        return
    if isinstance(plain, Timer):
        assert wrapped == replace(plain, schema_id=schema_id)
    else:
        assert wrapped == plain


@MANY
@given(
    doc=st.fixed_dictionaries(
        {"topic": st.sampled_from(["reminders", "", "bad topic"])},
        optional={
            "id": st.text(max_size=10),
            "at": st.one_of(st.integers(-5, 2**40), st.text(max_size=5)),
            "in": st.sampled_from(["30s", "1h", "x"]),
            "value": st.text(max_size=10),
            "cancel": st.text(max_size=5),
        },
    ),
    schema_id=st.integers(0, 2**32 - 1),
    key=keys,
)
def test_a_framed_json_request_reads_as_the_unframed_one(
    doc: dict[str, object], schema_id: int, key: bytes | None
) -> None:
    message = json.dumps(doc).encode()
    plain, wrapped = (
        parsed(record(message, key)),
        parsed(record(frame(schema_id, message, None), key)),
    )
    if isinstance(plain, Timer):
        assert wrapped == replace(plain, schema_id=schema_id)
    else:
        assert wrapped == plain


@MANY
@given(rest=st.binary(max_size=200), key=keys)
def test_any_bytes_after_the_magic_byte_are_a_timer_a_cancel_or_a_dead_letter(
    rest: bytes, key: bytes | None
) -> None:
    result = parsed(record(b"\x00" + rest, key))
    assert isinstance(result, (Timer, Cancel, RejectReason))
    if isinstance(result, Timer):
        assert result.schema_id == int.from_bytes(rest[:4], "big")


@pytest.mark.parametrize("spread", [0, 30])
def test_the_schema_id_is_stored_with_the_timer_and_reported_when_it_fires(spread: int) -> None:
    timer = Timer("a-1", 1_800, "reminders", None, b"hi", "tok", spread=spread, schema_id=12)
    assert unpack_timer(pack_timer(timer)) == timer
    assert unpack_timer(pack_timer(replace(timer, schema_id=None))).schema_id is None
    record_json = fired_json(timer, partition=3, worker_json='"w"', fired_at_ms=1_800_000)
    expected = FiredRecord.fired(timer, partition=3, worker="w", fired_at_ms=1_800_000)
    assert record_json == expected.to_json()
    assert FiredRecord.from_json(record_json).schema_id == 12


def test_a_release_before_the_schema_extension_reads_the_timer_it_stored() -> None:
    """The bytes up to the spread extension are what that release reads: the same timer."""
    timer = Timer("a-1", 1_800, "reminders", None, b"hi", "tok", schema_id=12)
    stored = pack_timer(timer)
    without_extension = stored[:-8]
    assert unpack_timer(without_extension) == replace(timer, schema_id=None)


def test_the_previous_release_fires_timers_stored_with_a_schema_id(tmp_path: Path) -> None:
    """0.2.0 (RELEASES' newest) reads the schema extension as bytes after the layout's
    fields, which it ignores: a timer stored with a schema id, spread or not, one-shot or
    a series, fires once at this tree's second and is forgotten."""
    kv = MemoryKV()
    wheel = PartitionWheel(kv, clock=lambda: T0 - 10)
    one = Timer("one", T0, "cb", b"k", b"v", "tok", spread=40, schema_id=7)
    rec = Recurrence.interval(30, start=T0, count=2).anchored(T0 - 1)
    series = Timer("series", T0, "cb", None, b"v", "tok", recurrence=rec, seq=1, schema_id=7)
    plain = Timer("plain", T0 + 5, "cb", None, b"v", "tok", schema_id=2**31)
    for timer in (one, series, plain):
        wheel.schedule(timer)
    result = ticks_in_previous_release(kv, tmp_path)
    fired = sorted((i, seq, second) for i, seq, _due, second in result["fired"])
    assert fired == [
        ("one", 0, one.fire_at),
        ("plain", 0, T0 + 5),
        ("series", 1, T0),
        ("series", 2, T0 + 30),
    ]
    assert result["pending"] == 0


@st.composite
def framed_records(draw: st.DrawFn) -> RawRecord:
    """A hostile JSON or protobuf request, framed as Schema Registry's serializers do or
    with a broken frame; or arbitrary bytes after the magic byte."""
    kind = draw(st.sampled_from(["json", "protobuf", "arbitrary"]))
    schema_id = draw(st.one_of(st.just(1), st.integers(0, 2**32 - 1)))
    if kind == "arbitrary":
        inner = draw(arbitrary_records())
        return replace(inner, value=b"\x00" + draw(st.binary(max_size=200)))
    inner = draw(json_records() if kind == "json" else protobuf_records())
    assert inner.value is not None
    indexes = None if kind == "json" else draw(st.sampled_from([(0,), (1,), (1, 0), (7, 300)]))
    framed = frame(schema_id, inner.value, indexes)
    cut = draw(st.one_of(st.none(), st.integers(0, 8)))  # a frame cut short
    return replace(inner, value=framed if cut is None else framed[:cut])


@hostile
@given(record=framed_records().filter(within_budget))
def test_hostile_framed_requests_are_handled_by_the_worker(record: RawRecord) -> None:
    """The worker's whole request path (TimerService on memory stores, then a canary):
    never raises, the next record is stored, each record accounted for, every derived
    record within the budget, in bounded time (tests/support/hostile.py)."""
    check_record(record)
