import pytest

from kafka_timers_client import protowire


def _article_bytes(topic: str, key: str, value: bytes) -> bytes:
    """Fields 1-3 exactly as protoc encodes the article's Future."""
    out = b""
    for number, payload in ((1, topic.encode()), (2, key.encode()), (3, value)):
        out += bytes([number << 3 | 2, len(payload)]) + payload
    return out


def test_article_message_decodes() -> None:
    future = protowire.decode(_article_bytes("payments", "order-1", b"\x00\x01retry"))
    assert (future.callback_topic, future.callback_key, future.callback) == (
        "payments",
        "order-1",
        b"\x00\x01retry",
    )
    assert future.id is None and future.due is None


def test_round_trip_of_every_field() -> None:
    future = protowire.Future(
        callback_topic="t",
        callback_key="k",
        callback=b"v" * 300,
        id="id-1",
        token="tok",
        due=1767225600,
        headers=[("a", b"1"), ("b", b"")],
        action=protowire.ACTION_CANCEL,
    )
    assert protowire.decode(protowire.encode(future)) == future


def test_unknown_fields_are_skipped() -> None:
    # fields 100 (varint) and 101 (fixed32): numbers no version of the schema uses
    extra = bytes([0xA0, 0x06, 0x96, 0x01]) + bytes([0xAD, 0x06]) + b"abcd"
    future = protowire.decode(_article_bytes("t", "k", b"v") + extra)
    assert future.callback_topic == "t"


def test_negative_int64_round_trips() -> None:
    future = protowire.Future(due=-5)
    assert protowire.decode(protowire.encode(future)).due == -5


@pytest.mark.parametrize("data", [b"\x0a\x05ab", b"\x08", b"\x00", b"\x0b", b"\x0a\x02\xff\xfe"])
def test_garbage_raises_decode_error(data: bytes) -> None:
    with pytest.raises(protowire.DecodeError):
        protowire.decode(data)
