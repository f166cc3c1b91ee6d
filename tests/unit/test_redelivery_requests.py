"""The requests of ``kafka_timers_client.redelivery`` are read by the worker's own parser
as the very timer and cancel meant; the copy's headers count deliveries and keep the
origin; what no request can carry is named, not sent."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Message
from hypothesis import given
from hypothesis import strategies as st

from app.core.raw_record import RawRecord
from app.core.request_format import parse_request
from app.core.timer import Cancel, Timer
from kafka_timers_client.redelivery import (
    DELIVERY_COUNT_HEADER,
    DELIVERY_ORIGIN_HEADER,
    cancel_request,
    copy_headers,
    deliveries,
    origin,
    schedule_request,
    timer_id_of,
)

DUE = 1_900_000_000


def _read(value: bytes, key: str) -> Timer | Cancel:
    record = RawRecord("timer-request", 0, 7, DUE * 1000 - 5000, key.encode(), value)
    return parse_request(record, now=DUE - 5)


@given(
    key=st.one_of(st.none(), st.binary(max_size=40)),
    value=st.one_of(st.none(), st.binary(max_size=200)),
    headers=st.lists(
        st.tuples(
            st.text(min_size=1, max_size=12).filter(lambda n: not n.lower().startswith("timer-")),
            st.text(max_size=20).map(str.encode),
        ),
        max_size=5,
        unique_by=lambda h: h[0],
    ),
)
def test_the_worker_reads_the_schedule_as_the_copy(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]]
) -> None:
    headers = [h for h in headers if not h[0].lower().startswith("scheduler-")]
    timer_id = timer_id_of("group-1", "jobs", 3, 41)
    request = schedule_request("jobs", key, value, headers, timer_id, "tok", DUE)
    assert isinstance(request, bytes)
    timer = _read(request, timer_id)
    assert isinstance(timer, Timer)
    assert (timer.id, timer.token, timer.due, timer.topic) == (timer_id, "tok", DUE, "jobs")
    assert timer.key == key
    assert (timer.value or b"") == (value or b"")
    assert list(timer.headers) == headers


def test_a_key_that_is_not_utf8_goes_as_json() -> None:
    request = schedule_request("jobs", b"\xff\x00k", b"v", [("a", b"1")], "id-1", "tok", DUE)
    assert isinstance(request, bytes)
    assert json.loads(request)["key_b64"] == "/wBr"
    timer = _read(request, "id-1")
    assert isinstance(timer, Timer)
    assert (timer.key, timer.value, list(timer.headers)) == (b"\xff\x00k", b"v", [("a", b"1")])


def test_what_no_request_can_carry_is_named() -> None:
    binary = [("a", b"\xff")]
    assert schedule_request("jobs", b"\xff", b"v", binary, "i", "t", DUE) == (
        "binary-key-and-headers"
    )
    many = [(f"h{i}", b"") for i in range(300)]
    assert schedule_request("jobs", b"k", b"v", many, "i", "t", DUE) == "too-many-headers"
    assert schedule_request("jobs", b"k", b"v", [], "i" * 2000, "t", DUE) == "id-too-long"


def test_an_ack_is_a_cancel_with_the_token() -> None:
    cancel = _read(cancel_request("group-1/jobs/3/41", "tok"), "group-1/jobs/3/41")
    assert isinstance(cancel, Cancel)
    assert (cancel.id, cancel.token) == ("group-1/jobs/3/41", "tok")


def test_copies_count_deliveries_and_keep_their_origin() -> None:
    first = Message(topic="jobs", partition=2, offset=9, value=b"v", headers=[("trace", b"x")])
    assert deliveries(first) == 1
    assert origin(first) == "jobs/2/9"
    headers = copy_headers(first, 2)
    assert headers == [
        ("trace", b"x"),
        (DELIVERY_ORIGIN_HEADER, b"jobs/2/9"),
        ("delivery-count", b"2"),
    ]
    # The copy as the worker delivers it: its timer-* headers first, then ours.
    copy = Message(
        topic="jobs-retry",
        partition=0,
        offset=100,
        headers=[("timer-id", b"g/jobs/2/9"), ("timer-token", b"tok"), *headers],
    )
    assert (deliveries(copy), origin(copy)) == (2, "jobs/2/9")
    again = copy_headers(copy, 3)
    assert again == [
        ("trace", b"x"),
        (DELIVERY_ORIGIN_HEADER, b"jobs/2/9"),
        (DELIVERY_COUNT_HEADER, b"3"),
    ]


@pytest.mark.parametrize("raw", [b"", b"zero", b"-4"])
def test_a_garbled_count_is_one_delivery(raw: bytes) -> None:
    assert deliveries(Message(headers=[(DELIVERY_COUNT_HEADER, raw)])) == 1
