import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.raw_record import RawRecord
from app.core.request_format import _json_after_space, parse_request
from app.core.timer import Cancel, Timer, TokenAction
from kafka_timers_client import protowire
from kafka_timers_client.errors import RejectedRequest, RejectReason


def record(
    value: bytes | None, key: bytes | None = b"k", headers: tuple = (), ts: int = 1_000_000
) -> RawRecord:
    return RawRecord("timer-request", 3, 42, ts, key, value, headers)


def test_article_format_takes_due_from_key_and_derives_a_stable_id() -> None:
    value = protowire.encode(
        protowire.Future(callback_topic="cb", callback_key="ck", callback=b"x")
    )
    timer = parse_request(record(value, key=b"1767225600"))
    assert isinstance(timer, Timer)
    assert (timer.due, timer.topic, timer.key, timer.value) == (1767225600, "cb", b"ck", b"x")
    assert timer.id == "timer-request-3-42"


def test_article_format_with_a_non_second_key_is_rejected() -> None:
    value = protowire.encode(protowire.Future(callback_topic="cb", callback=b"x"))
    with pytest.raises(RejectedRequest) as info:
        parse_request(record(value, key=b"order-7"))
    assert info.value.reason is RejectReason.MISSING_DUE


def test_native_protobuf_carries_id_token_due_and_headers() -> None:
    value = protowire.encode(
        protowire.Future(
            callback_topic="cb",
            callback=b"x",
            id="t1",
            token="s",
            due=1767225601,
            headers=[("h", b"1")],
        )
    )
    timer = parse_request(record(value, key=b"t1"))
    assert timer == Timer(
        id="t1", due=1767225601, topic="cb", key=None, value=b"x", token="s", headers=(("h", b"1"),)
    )


def test_protobuf_cancel() -> None:
    value = protowire.encode(protowire.Future(id="t1", token="s", action=protowire.ACTION_CANCEL))
    assert parse_request(record(value)) == Cancel("t1", "s")


def test_json_with_fractional_at_rounds_up() -> None:
    doc = {
        "topic": "cb",
        "key": "k",
        "value": "hello",
        "at": 1767225600.2,
        "id": "j1",
        "token": "t",
        "headers": {"h": "v"},
    }
    timer = parse_request(record(b"  " + json.dumps(doc).encode()))
    assert timer == Timer(
        id="j1",
        due=1767225601,
        topic="cb",
        key=b"k",
        value=b"hello",
        token="t",
        headers=(("h", b"v"),),
    )


def test_json_relative_in_counts_from_the_record_timestamp() -> None:
    timer = parse_request(record(json.dumps({"topic": "cb", "in": "30s"}).encode(), ts=1_000_500))
    assert isinstance(timer, Timer)
    assert timer.due == 1031  # 1000.5 + 30 = 1030.5, rounded up


def test_json_iso_and_base64() -> None:
    doc = {"topic": "cb", "value_b64": "AAE=", "at": "2026-01-01T00:00:00Z"}
    timer = parse_request(record(json.dumps(doc).encode()))
    assert isinstance(timer, Timer) and timer.value == b"\x00\x01" and timer.due == 1767225600


def test_json_cancel() -> None:
    assert parse_request(record(b'{"cancel": "j1", "token": "t"}')) == Cancel("j1", "t")


def test_pause_and_resume_in_json_and_protobuf() -> None:
    pause = Cancel("j1", "t", action=TokenAction.PAUSE)
    resume = Cancel("j1", "t", action=TokenAction.RESUME)
    assert parse_request(record(b'{"pause": "j1", "token": "t"}')) == pause
    assert parse_request(record(b'{"resume": "j1", "token": "t"}')) == resume
    for action, expected in ((protowire.ACTION_PAUSE, pause), (protowire.ACTION_RESUME, resume)):
        value = protowire.encode(protowire.Future(id="j1", token="t", action=action))
        assert parse_request(record(value)) == expected
    with pytest.raises(RejectedRequest):
        parse_request(record(b'{"pause": "j1", "resume": "j1", "token": "t"}'))
    with pytest.raises(RejectedRequest):  # an id is required
        parse_request(record(protowire.encode(protowire.Future(action=protowire.ACTION_PAUSE))))


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"{not json", RejectReason.MALFORMED),
        (b"[1, 2]", RejectReason.MALFORMED),  # '[' is not '{': read as protobuf, and it is not
        (b'{"topic": 5, "at": 1}', RejectReason.UNKNOWN_FORMAT),
        (b'{"topic": "x", "at": "next tuesday"}', RejectReason.MISSING_DUE),
        (b'{"topic": "x", "at": true}', RejectReason.UNKNOWN_FORMAT),
        (b"\xff\xff\xff", RejectReason.MALFORMED),
    ],
)
def test_malformed_values_have_a_reason(value: bytes, reason: RejectReason) -> None:
    with pytest.raises(RejectedRequest) as info:
        parse_request(record(value, key=b"x"))
    assert info.value.reason is reason


def test_etf1_schedule() -> None:
    headers = (
        ("scheduler-epoch", b"1893456000"),
        ("scheduler-target-topic", b"online-videos"),
        ("scheduler-target-key", b"vid1"),
        ("customer-header", b"dummy"),
    )
    timer = parse_request(record(b"video 1", key=b"vid1-online", headers=headers, ts=1607918336000))
    assert isinstance(timer, Timer)
    assert (timer.id, timer.due, timer.topic, timer.key, timer.value) == (
        "vid1-online",
        1893456000,
        "online-videos",
        b"vid1",
        b"video 1",
    )
    assert dict(timer.headers) == {
        "scheduler-timestamp": b"1607918336",
        "scheduler-key": b"vid1-online",
        "scheduler-topic": b"timer-request",
        "customer-header": b"dummy",
    }


def test_etf1_tombstone_cancels_by_key_without_token() -> None:
    assert parse_request(record(None, key=b"vid1-online")) == Cancel(
        "vid1-online", "", check_token=False
    )


def test_etf1_bad_epoch() -> None:
    with pytest.raises(RejectedRequest) as info:
        parse_request(record(b"x", headers=(("scheduler-epoch", b"soon"),)))
    assert info.value.reason is RejectReason.MISSING_DUE


def test_protobuf_with_a_123_byte_topic_is_not_taken_for_json() -> None:
    # Field 1's tag is b"\n" and a 123-byte length is b"{": the value starts "\n{".
    topic = "t" * 123
    value = protowire.encode(protowire.Future(callback_topic=topic, id="x", due=5))
    assert value[:2] == b"\n{"
    timer = parse_request(RawRecord("requests", 0, 0, 0, b"k", value))
    assert isinstance(timer, Timer) and timer.topic == topic and timer.due == 5


def test_json_after_leading_whitespace_is_still_json() -> None:
    value = b'\n  {"topic": "t", "at": 5, "id": "j"}'
    timer = parse_request(RawRecord("requests", 0, 0, 0, b"k", value))
    assert isinstance(timer, Timer) and timer.id == "j"


# -- recurring timers ------------------------------------------------------------------

SENT_MS = 1_767_225_600_300  # 2026-01-01 00:00:00.3 UTC, a Thursday


def test_json_cron_series_in_a_time_zone_starts_at_its_first_occurrence() -> None:
    doc = {"topic": "cb", "cron": "0 0 9 * * MON-FRI", "tz": "Europe/Paris", "count": 5}
    timer = parse_request(record(json.dumps(doc).encode(), ts=SENT_MS))
    assert isinstance(timer, Timer) and timer.recurrence is not None
    assert (timer.due, timer.seq) == (1_767_254_400, 1)  # 09:00 Paris = 08:00 UTC that day
    assert timer.recurrence.start == timer.due and timer.recurrence.count == 5


def test_json_interval_with_start_end_and_policy() -> None:
    doc = {
        "topic": "cb",
        "every": "30s",
        "start": "2026-01-01T00:10:00Z",
        "end": 1_767_230_000.9,
        "late": "skip-after 5m, all",
    }
    timer = parse_request(record(json.dumps(doc).encode(), ts=SENT_MS))
    assert isinstance(timer, Timer) and timer.recurrence is not None
    assert timer.due == 1_767_225_600 + 600
    assert (timer.recurrence.every, timer.recurrence.end) == (30, 1_767_230_000)
    assert timer.late is not None and timer.late.text() == "skip-after 300s, all"
    without_start = parse_request(record(b'{"topic": "cb", "every": "2s"}', ts=SENT_MS))
    assert isinstance(without_start, Timer) and without_start.due == 1_767_225_601 + 2


def test_protobuf_series_fields_9_to_15() -> None:
    future = protowire.Future(
        callback_topic="cb", id="s", token="t", cron="*/10 * * * * *", tz="UTC", late="all"
    )
    assert protowire.decode(protowire.encode(future)) == future
    timer = parse_request(record(protowire.encode(future), ts=SENT_MS))
    assert isinstance(timer, Timer) and timer.recurrence is not None
    assert timer.due == 1_767_225_610 and timer.late is not None
    every = protowire.Future(callback_topic="cb", id="e", every=60, count=3, start=1_767_225_900)
    timer = parse_request(record(protowire.encode(every), ts=SENT_MS))
    assert isinstance(timer, Timer) and timer.recurrence is not None
    assert (timer.due, timer.recurrence.count) == (1_767_225_900, 3)


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        ({"topic": "cb", "cron": "0 0 9 * * NOPE"}, RejectReason.INVALID_CRON),
        (
            {"topic": "cb", "cron": "0 9 * * *", "tz": "Europe/Pariss"},
            RejectReason.UNKNOWN_TIME_ZONE,
        ),
        (
            {"topic": "cb", "every": "30s", "start": 2_000_000_000, "end": 1_900_000_000},
            RejectReason.INVALID_RECURRENCE,
        ),
        ({"topic": "cb", "every": "30s", "end": 1_000_000_000}, RejectReason.NO_OCCURRENCE),
        ({"topic": "cb", "every": "30s", "at": 1_800_000_000}, RejectReason.INVALID_RECURRENCE),
        ({"topic": "cb", "every": "30s", "cron": "* * * * *"}, RejectReason.INVALID_RECURRENCE),
        ({"topic": "cb", "every": "1.5s"}, RejectReason.INVALID_RECURRENCE),
        ({"topic": "cb", "in": "5s", "count": 3}, RejectReason.INVALID_RECURRENCE),
        ({"topic": "cb", "in": "5s", "late": "later"}, RejectReason.INVALID_LATE_POLICY),
        ({"topic": "cb", "cron": 5}, RejectReason.UNKNOWN_FORMAT),
    ],
)
def test_bad_recurrences_are_refused_with_a_reason(doc: dict, reason: RejectReason) -> None:
    with pytest.raises(RejectedRequest) as refused:
        parse_request(record(json.dumps(doc).encode(), ts=SENT_MS))
    assert refused.value.reason is reason


@given(st.binary(max_size=40), st.sampled_from([b"", b" ", b"\t\n", b"\r\x0b\x0c \n" * 9]))
def test_json_after_whitespace_is_told_as_lstrip_tells_it(body: bytes, space: bytes) -> None:
    """parse_request looks for ``{`` after leading whitespace without copying the value (a value
    that starts with ``{`` is JSON before that question)."""
    for value in (space + body, space + b"{" + body, body):
        if value[:1] != b"{":
            told = value[:1].isspace() and _json_after_space(value) is not None
            assert told == (value.lstrip()[:1] == b"{")
            assert told == (bytearray(value)[:1].isspace() and bool(_json_after_space(value)))
    # the regex's class is what lstrip strips
    assert {b for b in range(256) if bytes([b]).isspace()} == set(b" \t\n\r\x0b\x0c")
