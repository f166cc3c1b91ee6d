"""The protobuf reader's shortcut: a plain one-shot request (fields 1-6 alone) is read on
a cut-down message (``request_protobuf._plain_class``); whatever the bytes, the answer
must be the full reader's, the timer or the dead letter's reason and detail."""

from __future__ import annotations

from unittest import mock

from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core import proto, request_protobuf
from app.core.raw_record import RawRecord
from app.core.timer import Cancel, Timer
from kafka_timers_client import protowire
from kafka_timers_client.errors import RejectedRequest

MANY = settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TEXT = st.one_of(st.none(), st.just(""), st.text(max_size=30))
plain_futures = st.builds(
    protowire.Future,
    callback_topic=TEXT,
    callback_key=TEXT,
    callback=st.one_of(st.none(), st.binary(max_size=60)),
    id=TEXT,
    token=TEXT,
    due=st.one_of(st.none(), st.just(0), st.integers(-(2**63), 2**63 - 1)),
)
keys = st.one_of(st.none(), st.just(b"1767225600"), st.binary(max_size=12))


def _outcome(record: RawRecord) -> Timer | Cancel | tuple[str, str]:
    try:
        return request_protobuf.from_protobuf(record, 1_767_225_600.0)
    except RejectedRequest as exc:
        return exc.reason.value, str(exc)


def _refuse(value: bytes) -> None:
    raise DecodeError("the shortcut is off")


def both(record: RawRecord) -> tuple[object, object]:
    """What the reader answers, and what the full reader alone answers."""
    quick = _outcome(record)
    with mock.patch.object(request_protobuf, "_parse_plain", _refuse):
        full = _outcome(record)
    return quick, full


def test_the_cut_down_message_has_the_schemas_first_six_fields() -> None:
    plain = request_protobuf._parse_plain.__self__.DESCRIPTOR  # type: ignore[attr-defined]
    future = proto.Future.DESCRIPTOR

    def shape(f: object) -> tuple[object, ...]:
        return tuple(
            getattr(f, a) for a in ("name", "number", "type", "is_repeated", "has_presence")
        )

    assert [shape(f) for f in plain.fields] == [shape(f) for f in future.fields if f.number <= 6]
    assert len(plain.fields) == 6


@MANY
@given(future=plain_futures, key=keys)
def test_a_plain_request_is_the_full_readers_timer(
    future: protowire.Future, key: bytes | None
) -> None:
    record = RawRecord("timer-request", 2, 9, 1_767_225_600_000, key, protowire.encode(future))
    quick, full = both(record)
    assert quick == full


@MANY
@given(future=plain_futures, tail=st.binary(max_size=24), key=keys)
def test_any_bytes_after_a_plain_request_get_the_full_readers_answer(
    future: protowire.Future, tail: bytes, key: bytes | None
) -> None:
    record = RawRecord(
        "timer-request", 2, 9, 1_767_225_600_000, key, protowire.encode(future) + tail
    )
    quick, full = both(record)
    assert quick == full


def test_every_other_field_takes_the_full_reader() -> None:
    article = protowire.Future(callback_topic="t", callback=b"x", id="a", due=1_767_225_700)
    headed = protowire.encode(
        protowire.Future(**{**vars(article), "headers": [("h", b"v")]})  # type: ignore[arg-type]
    )
    timer = request_protobuf.from_protobuf(RawRecord("r", 0, 0, 0, None, headed), None)
    assert isinstance(timer, Timer) and timer.headers == (("h", b"v"),)
    spread = protowire.encode(protowire.Future(**{**vars(article), "spread": 30}))  # type: ignore[arg-type]
    timer = request_protobuf.from_protobuf(RawRecord("r", 0, 0, 0, None, spread), None)
    assert isinstance(timer, Timer) and timer.spread == 30
    # action 1 (cancel) written out: a cancel, not a timer
    cancel = protowire.encode(protowire.Future(id="a", token="s", action=protowire.ACTION_CANCEL))
    assert isinstance(
        request_protobuf.from_protobuf(RawRecord("r", 0, 0, 0, None, cancel), None), Cancel
    )
