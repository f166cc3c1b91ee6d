"""Consumed headers become ``(name, bytes)`` pairs, whatever shape the client gives."""

from __future__ import annotations

from confluent_kafka import Message

from app.kafka.records import to_record
from kafka_timers_client.message_headers import header_pairs


def test_no_headers_are_an_empty_tuple() -> None:
    assert header_pairs(None) == ()
    assert header_pairs([]) == ()


def test_text_and_null_values_become_bytes_and_order_is_kept() -> None:
    raw = [("a", "é"), ("b", None), ("c", b"y"), ("a", b"")]
    assert header_pairs(raw) == (("a", "é".encode()), ("b", b""), ("c", b"y"), ("a", b""))


def test_a_consumed_message_keeps_its_headers_and_place() -> None:
    msg = Message(
        topic="requests",
        partition=3,
        offset=41,
        key=b"k",
        value=b"v",
        headers=[("timer-hop", b"1:2:abc"), ("x", None)],
        timestamp=(1, 1_700_000_000_000),
    )
    record = to_record(msg)
    assert record.headers == (("timer-hop", b"1:2:abc"), ("x", b""))
    assert (record.partition, record.offset, record.timestamp_ms) == (3, 41, 1_700_000_000_000)
    assert record.defect is None
