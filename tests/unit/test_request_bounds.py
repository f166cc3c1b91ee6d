"""Total parsing: each trigger that once killed a worker is refused, fast, with a reason.

These are the cases issue 21 confirmed on real processes; tests/unit/test_hostile_records.py
generates the rest. Each must be refused with its own reason (never ``internal_error``,
which would mean a bug caught by the isolation boundary) in well under a millisecond of
real work.
"""

from __future__ import annotations

import time

import pytest

from app.core.raw_record import RawRecord
from app.core.request_format import parse_request
from kafka_timers_client import protowire
from kafka_timers_client.errors import RejectedRequest

NOW_MS = 1_767_225_600_000


def _json(text: bytes, ts: int = NOW_MS) -> RawRecord:
    return RawRecord("requests", 0, 0, ts, b"k", text)


def _etf1(epoch: bytes) -> RawRecord:
    headers = (("scheduler-epoch", epoch), ("scheduler-target-topic", b"cb"))
    return RawRecord("requests", 0, 0, NOW_MS, b"id", b"payload", headers)


TRIGGERS = {
    "surrogate id": (_json(b'{"id":"\\ud800","topic":"cb","in":"5s"}'), "out_of_bounds"),
    "surrogate cancel id": (_json(b'{"cancel":"\\ud800","token":"t"}'), "out_of_bounds"),
    "surrogate header name": (
        _json(b'{"topic":"cb","in":"5s","headers":{"\\ud800":"x"}}'),
        "out_of_bounds",
    ),
    "surrogate token": (_json(b'{"topic":"cb","in":"5s","token":"\\udfff"}'), "out_of_bounds"),
    "surrogate value": (_json(b'{"topic":"cb","in":"5s","value":"\\ud800"}'), "out_of_bounds"),
    "at Infinity": (_json(b'{"topic":"cb","at":Infinity}'), "out_of_bounds"),
    "at NaN": (_json(b'{"topic":"cb","at":NaN}'), "out_of_bounds"),
    "at 1e400": (_json(b'{"topic":"cb","at":1e400}'), "missing_due"),
    "at string exponent": (_json(b'{"topic":"cb","at":"1e700000"}'), "missing_due"),
    "in of 400 digits": (_json(b'{"topic":"cb","in":"' + b"9" * 400 + b'"}'), "missing_due"),
    "in of 200 digits": (_json(b'{"topic":"cb","in":"' + b"9" * 200 + b'"}'), "missing_due"),
    "skip-after 9...9": (
        _json(b'{"topic":"cb","in":"5s","late":"skip-after ' + b"9" * 200 + b'"}'),
        "invalid_late_policy",
    ),
    "count 2^63": (
        _json(b'{"topic":"cb","every":"1s","count":9223372036854775808}'),
        "invalid_recurrence",
    ),
    "end 10^19": (
        _json(b'{"topic":"cb","every":"1s","end":10000000000000000000}'),
        "invalid_recurrence",
    ),
    "etf1 epoch NaN": (_etf1(b"NaN"), "missing_due"),
    "etf1 epoch 1e700000": (_etf1(b"1e700000"), "missing_due"),
    "etf1 epoch -Infinity": (_etf1(b"-Infinity"), "missing_due"),
    "protobuf keyed NaN": (
        RawRecord(
            "requests",
            0,
            0,
            NOW_MS,
            b"NaN",
            protowire.encode(protowire.Future(callback_topic="cb", callback=b"v")),
        ),
        "missing_due",
    ),
    "JSON integer of 4,400 digits": (
        _json(b'{"topic":"cb","at":1' + b"0" * 4400 + b"}"),
        "out_of_bounds",
    ),
    "JSON nested 5,000 deep": (
        _json(b'{"topic":"cb","x":' + b"[" * 5000 + b"]" * 5000 + b"}"),
        "out_of_bounds",
    ),
    "tz America": (
        _json(b'{"topic":"cb","cron":"0 0 9 * * *","tz":"America"}'),
        "unknown_time_zone",
    ),
    "tz a path": (_json(b'{"topic":"cb","cron":"0 0 9 * * *","tz":"../../etc"}'), None),
    "id of 2,000 characters": (
        _json(b'{"id":"' + b"i" * 2000 + b'","topic":"cb","in":"5s"}'),
        "out_of_bounds",
    ),
    "300 headers": (
        _json(
            b'{"topic":"cb","in":"5s","headers":{'
            + b",".join(b'"h%d":"v"' % i for i in range(300))
            + b"}}"
        ),
        "out_of_bounds",
    ),
    "cron start past datetime": (
        _json(b'{"topic":"cb","cron":"0 0 9 * * *","start":999999999999}'),
        "no_occurrence",
    ),
}


@pytest.mark.parametrize("name", list(TRIGGERS))
def test_each_known_trigger_is_refused_with_a_reason_in_bounded_time(name: str) -> None:
    record, reason = TRIGGERS[name]
    parse_request(_json(b'{"topic":"cb","cron":"0 0 9 * * *","tz":"Europe/Paris"}'))  # warm
    started = time.thread_time()
    with pytest.raises(RejectedRequest) as refused:
        parse_request(record)
    elapsed = time.thread_time() - started
    if reason is not None:
        assert refused.value.reason.value == reason, refused.value.detail
    assert refused.value.reason.value != "internal_error"
    refused.value.detail.encode()  # the detail itself is valid text
    # A few ms of this thread's CPU time (a neighbour's load does not count); the
    # triggers took 10-22 s before.
    assert elapsed < 0.05, f"{name}: {elapsed * 1000:.1f} ms"


def test_valid_requests_near_the_bounds_are_still_accepted() -> None:
    for text in (
        b'{"id":"' + b"i" * 1024 + b'","topic":"cb","in":"5s","token":"\\ud83d\\ude00"}',
        b'{"topic":"cb","at":1767225600.123456789}',
        b'{"topic":"cb","at":"2026-12-24T09:00:00Z"}',
        b'{"topic":"cb","every":"1s","count":1000000000000}',
        b'{"topic":"cb","cron":"0 0 9 * * *","tz":"America/Argentina/Buenos_Aires"}',
        b'{"topic":"cb","in":"5s","late":"skip-after 10s, all"}',
    ):
        parse_request(_json(text))


@pytest.mark.parametrize(
    "record",
    [
        _json(b'{"topic":"cb","in":"5s","headers":{"timer-id":"victim-order-7"}}'),
        _json(b'{"topic":"cb","in":"5s","headers":{"Timer-Due":"1"}}'),
        _json(b'{"topic":"cb","in":"5s","headers":{"scheduler-key":"x"}}'),
        RawRecord(
            "requests",
            0,
            0,
            NOW_MS,
            b"k",
            protowire.encode(
                protowire.Future(
                    callback_topic="cb", callback=b"v", due=1, headers=[("timer-seq", b"1")]
                )
            ),
        ),
        RawRecord(
            "requests",
            0,
            0,
            NOW_MS,
            b"id",
            b"payload",
            (("scheduler-epoch", b"1"), ("scheduler-target-topic", b"cb"), ("timer-id", b"x")),
        ),
    ],
)
def test_a_request_carrying_the_services_own_headers_is_refused(record: RawRecord) -> None:
    with pytest.raises(RejectedRequest) as refused:
        parse_request(record)
    assert refused.value.reason.value == "reserved_header"


def test_etf1_control_headers_stay_behind_and_provenance_is_the_services() -> None:
    headers = (
        ("scheduler-epoch", b"1767225600"),
        ("scheduler-target-topic", b"cb"),
        ("scheduler-key", b"forged"),
        ("traceparent", b"00-1-2-01"),
    )
    timer = parse_request(RawRecord("requests", 0, 0, NOW_MS, b"id", b"payload", headers))
    names = [name for name, _ in timer.headers]
    assert names.count("scheduler-key") == 1 and dict(timer.headers)["scheduler-key"] == b"id"
    assert "traceparent" in names
