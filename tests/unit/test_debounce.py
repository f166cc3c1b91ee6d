"""Debounced timers: the merge rule, its refusals, its store layout and its callback.

The pure rule (:func:`app.core.debounce.merge`) first, then the wheel that applies it
(the token rule, a round under way, a re-read after a crash), the request formats, the
stored layout (byte for byte the same for every other timer; read by the previous
release) and the worker's request path end to end on memory stores.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from app.core.debounce import Debounce, merge
from app.core.raw_record import RawRecord
from app.core.request_format import parse_request
from app.core.stored import pack_timer, unpack_timer
from app.core.timer import Timer
from app.core.wheel import PartitionWheel, Scheduled
from app.worker.output import DeliveryFailure
from kafka_timers_client import protowire
from kafka_timers_client.client import TimerClient
from kafka_timers_client.debounce import DEBOUNCED_HEADER, debounced_due
from kafka_timers_client.errors import KafkaTimersError, RejectedRequest, RejectReason
from kafka_timers_client.late import LatePolicy
from tests.support.memkv import MemoryKV
from tests.support.proto import offline_client
from tests.support.recording_producer import HeaderRecorder
from tests.unit.test_service import NOW, Harness
from tests.unit.test_spread_rollback import T0, ticks_in_previous_release

MS = NOW * 1000


def request(
    at_ms: int,
    value: bytes = b"v",
    *,
    seconds: int = 5,
    max_wait: int | None = None,
    offset: int = -1,
    token: str = "",
    timer_id: str = "x",
) -> Timer:
    """A debounced request for ``timer_id`` sent at ``at_ms``, as a reader builds it."""
    return Timer(
        timer_id,
        debounced_due(at_ms, seconds),
        "cb",
        b"k",
        value,
        token,
        debounce=Debounce(seconds, max_wait, at_ms, 1, offset),
    )


# -- the rule ----------------------------------------------------------------------------


def test_due_is_one_debounce_after_the_request_rounded_up() -> None:
    assert debounced_due(MS, 5) == NOW + 5
    assert debounced_due(MS + 1, 5) == NOW + 6  # never early
    assert debounced_due(MS + 999, 1) == NOW + 2


def test_a_request_with_nothing_pending_or_a_plain_timer_pending_starts_a_debounce() -> None:
    first = request(MS)
    assert merge(None, first) is first
    plain = Timer("x", NOW + 100, "cb", None, b"p", "")
    assert merge(plain, first) is first


def test_each_request_moves_the_fire_counts_itself_and_takes_the_callback() -> None:
    pending = request(MS, b"1", offset=0)
    for n in range(2, 11):
        at = MS + 2000 * (n - 1)
        merged = merge(pending, request(at, b"%d" % n, offset=n - 1))
        assert merged is not None
        assert merged.due == debounced_due(at, 5)
        assert merged.value == b"%d" % n
        assert merged.debounce == Debounce(5, None, MS, n, n - 1)
        pending = merged
    assert pending.due == NOW + 18 + 5


def test_max_wait_bounds_the_fire_from_the_first_request() -> None:
    pending = request(MS, max_wait=8, offset=0)
    merged = merge(pending, request(MS + 2000, max_wait=8, offset=1))
    assert merged is not None and merged.due == NOW + 7  # 2 + 5, under 8
    merged = merge(merged, request(MS + 4500, max_wait=8, offset=2))
    assert merged is not None and merged.due == NOW + 8  # 4.5 + 5 rounded up: capped at 8
    assert merged.debounce is not None and merged.debounce.merged == 3
    assert merged.debounce.deadline == NOW + 8
    later = merge(merged, request(MS + 7000, max_wait=8, offset=3))
    assert later is not None and later.due == NOW + 8


def test_a_request_at_or_below_the_last_offset_merged_is_merged_already() -> None:
    pending = merge(request(MS, offset=3), request(MS + 1000, offset=4))
    assert pending is not None
    assert merge(pending, request(MS + 1000, offset=4)) is None
    assert merge(pending, request(MS, offset=3)) is None
    again = merge(pending, request(MS + 2000, offset=5))
    assert again is not None and again.debounce is not None and again.debounce.merged == 3


# -- the wheel ---------------------------------------------------------------------------


def fire(wheel: PartitionWheel, second: int) -> list[Timer]:
    due = wheel.begin_tick(second) or []
    wheel.finish_tick(second, due)
    return due


def test_the_wheel_fires_ten_requests_once_with_the_last_payload() -> None:
    wheel = PartitionWheel(MemoryKV(), clock=lambda: NOW)
    fired: list[Timer] = []
    for n in range(10):
        at = MS + 2000 * n
        if n:
            for second in range(NOW + 2 * n - 2, NOW + 2 * n):
                fired += fire(wheel, second)
        accepted = wheel.schedule(request(at, b"%d" % n, offset=n))
        assert accepted.outcome is Scheduled.STORED
        assert accepted.replaced == (n > 0)
    assert fired == []
    for second in range(NOW + 18, NOW + 30):
        fired += fire(wheel, second)
    (one,) = fired
    assert one.due == NOW + 18 + 5 and one.value == b"9"
    assert one.debounce is not None and one.debounce.merged == 10
    assert wheel.count_pending() == 0


def test_the_debounce_is_stored_so_another_wheel_on_the_store_goes_on() -> None:
    kv = MemoryKV()
    PartitionWheel(kv, clock=lambda: NOW).schedule(request(MS, b"a", offset=0))
    wheel = PartitionWheel(kv, clock=lambda: NOW)  # a restart, or a new owner
    wheel.recount()
    wheel.schedule(request(MS + 3000, b"b", offset=1))
    (stored,) = wheel.iter_pending()
    assert stored.debounce == Debounce(5, None, MS, 2, 1)
    assert stored.due == NOW + 8


def test_a_token_protected_timer_merges_only_a_request_with_its_token() -> None:
    wheel = PartitionWheel(MemoryKV(), clock=lambda: NOW)
    wheel.schedule(request(MS, b"a", token="s3cret", offset=0))
    refused = wheel.schedule(request(MS + 1000, b"b", token="other", offset=1))
    assert refused.outcome is Scheduled.WRONG_TOKEN
    anyone = wheel.schedule(request(MS + 1000, b"b", offset=2))
    assert anyone.outcome is Scheduled.WRONG_TOKEN
    (stored,) = wheel.iter_pending()
    assert stored.value == b"a" and stored.debounce == Debounce(5, None, MS, 1, 0)
    assert wheel.schedule(request(MS + 2000, b"c", token="s3cret", offset=3)).replaced
    (stored,) = wheel.iter_pending()
    assert stored.value == b"c" and stored.debounce == Debounce(5, None, MS, 2, 3)


def test_a_plain_request_replaces_a_debounced_timer() -> None:
    wheel = PartitionWheel(MemoryKV(), clock=lambda: NOW)
    wheel.schedule(request(MS, offset=0))
    wheel.schedule(request(MS + 1000, offset=1))
    assert wheel.schedule(Timer("x", NOW + 60, "cb", None, b"plain", "")).replaced
    (stored,) = wheel.iter_pending()
    assert stored.debounce is None and stored.due == NOW + 60
    wheel.schedule(request(MS + 2000, offset=2))  # and a debounce after it starts anew
    (stored,) = wheel.iter_pending()
    assert stored.debounce == Debounce(5, None, MS + 2000, 1, 2)


def test_a_request_while_the_timer_is_being_delivered_starts_a_new_debounce() -> None:
    """Taken by a round, the timer has fired as far as a request can tell: the round
    still delivers it, and the request is a new timer, counted from 1."""
    wheel = PartitionWheel(MemoryKV(), clock=lambda: NOW)
    wheel.schedule(request(MS, b"a", offset=0))
    wheel.schedule(request(MS + 1000, b"b", offset=1))
    taken = wheel.begin_tick(NOW + 6)
    assert taken is not None and [t.value for t in taken] == [b"b"]
    wheel.schedule(request(MS + 6000, b"c", offset=2))
    assert wheel.still_due(taken) == taken, "the round delivers it still"
    wheel.finish_tick(NOW + 6, taken)
    (stored,) = wheel.iter_pending()
    assert stored.value == b"c" and stored.debounce == Debounce(5, None, MS + 6000, 1, 2)
    (last,) = [t for s in range(NOW + 7, NOW + 12) for t in fire(wheel, s)]
    assert last.value == b"c"


def test_max_wait_fires_at_the_bound_and_later_requests_start_a_new_debounce() -> None:
    """Ten requests two seconds apart, a debounce of 5 s and a max-wait of 8 s: the
    first timer fires at first + 8 with the requests merged by then, the next ones make
    a new timer from the first request after that fire."""
    wheel = PartitionWheel(MemoryKV(), clock=lambda: NOW)
    fired: list[tuple[int, int, bytes | None]] = []
    for n in range(10):
        for second in range(NOW + 2 * n - 1, NOW + 2 * n + 1):  # ticks up to the request
            fired += [
                (second, t.debounce.merged, t.value) for t in fire(wheel, second) if t.debounce
            ]
        wheel.schedule(request(MS + 2000 * n + 100, b"%d" % n, max_wait=8, offset=n))
    for second in range(NOW + 19, NOW + 40):
        fired += [(second, t.debounce.merged, t.value) for t in fire(wheel, second) if t.debounce]
    # 0.1 s past each even second: the bound is first + 8 s rounded up, NOW + 9.
    assert fired == [(NOW + 9, 5, b"4"), (NOW + 19, 5, b"9")]


# -- the request formats ---------------------------------------------------------------


def json_record(ts_ms: int = MS + 250, offset: int = 7, **fields: Any) -> RawRecord:
    doc = {"id": "x", "topic": "cb", "value": "v", **fields}
    return RawRecord("timer-request", 0, offset, ts_ms, b"x", json.dumps(doc).encode())


def proto_record(ts_ms: int = MS + 250, offset: int = 7, **fields: Any) -> RawRecord:
    future = protowire.Future(callback_topic="cb", callback=b"v", id="x", **fields)
    return RawRecord("timer-request", 0, offset, ts_ms, b"x", protowire.encode(future))


@pytest.mark.parametrize(
    "record",
    [
        json_record(debounce="30s", max_wait="5m"),
        json_record(debounce=30, max_wait=300),
        proto_record(debounce=30, max_wait=300),
    ],
)
def test_the_request_time_is_the_record_timestamp(record: RawRecord) -> None:
    timer = parse_request(record, now=NOW + 3600.0)  # read an hour later: not the time
    assert isinstance(timer, Timer)
    assert timer.due == NOW + 31  # 0.25 s + 30 s, rounded up
    assert timer.debounce == Debounce(30, 300, MS + 250, 1, 7)


@pytest.mark.parametrize(
    "record",
    [
        json_record(debounce="10s", max_wait="5s"),
        json_record(debounce="0s"),
        json_record(debounce=-5),
        json_record(debounce="1.5s"),
        json_record(debounce=True),
        json_record(max_wait="5m"),
        json_record(debounce="5s", at=NOW + 60),
        json_record(debounce="5s", every="1m"),
        proto_record(debounce=10, max_wait=5),
        proto_record(debounce=-5),
        proto_record(max_wait=300),
        proto_record(debounce=5, max_wait=0),
        proto_record(debounce=5, due=NOW + 60),
        proto_record(debounce=5, cron="0 * * * *"),
    ],
)
def test_a_debounce_that_cannot_be_is_refused_with_its_reason(record: RawRecord) -> None:
    with pytest.raises(RejectedRequest) as refused:
        parse_request(record, now=NOW)
    assert refused.value.reason is RejectReason.INVALID_DEBOUNCE, refused.value


@pytest.mark.parametrize(
    ("json_fields", "proto_fields"),
    [
        ({"debounce": 0}, {"debounce": 0}),
        ({"debounce": 0, "in": 60}, {"debounce": 0, "due": NOW + 60}),
        ({"debounce": 0, "max_wait": 300}, {"debounce": 0, "max_wait": 300}),
        ({"max_wait": 0}, {"max_wait": 0}),
        ({"max_wait": 0, "in": 60}, {"max_wait": 0, "due": NOW + 60}),
        ({"debounce": 5, "max_wait": 0}, {"debounce": 5, "max_wait": 0}),
    ],
)
def test_a_debounce_or_max_wait_of_0_is_refused_alike_in_json_and_protobuf(
    json_fields: dict[str, Any], proto_fields: dict[str, Any]
) -> None:
    """0 is set, not absent: protobuf reads field 22-23 by presence, as JSON its keys (a
    protobuf debounce of 0 was a plain timer, or missing_due without a due second)."""
    for record in (json_record(**json_fields), proto_record(**proto_fields)):
        with pytest.raises(RejectedRequest) as refused:
            parse_request(record, now=NOW)
        assert refused.value.reason is RejectReason.INVALID_DEBOUNCE, refused.value


@pytest.mark.parametrize(
    "record",
    [
        json_record(MS, debounce=None, **{"in": 60}),
        json_record(MS, max_wait=None, **{"in": 60}),
        proto_record(due=NOW + 60),
    ],
)
def test_an_absent_debounce_is_a_plain_timer(record: RawRecord) -> None:
    """JSON null is absent, as for every optional field (it failed an assertion)."""
    timer = parse_request(record, now=NOW)
    assert isinstance(timer, Timer)
    assert timer.debounce is None
    assert timer.due == NOW + 60


@pytest.mark.parametrize(
    "record",
    [
        json_record(
            debounce=30, max_wait=300, at=NOW + 20, debounce_first_ms=MS, debounce_merged=4
        ),
        proto_record(
            debounce=30, max_wait=300, due=NOW + 20, debounce_first_ms=MS, debounce_merged=4
        ),
    ],
)
def test_a_restored_debounce_keeps_its_due_first_request_and_count(record: RawRecord) -> None:
    """What an import sends: the timer as it was, to replace (not merge into) a pending one."""
    timer = parse_request(record, now=NOW + 3600.0)
    assert isinstance(timer, Timer)
    assert timer.due == NOW + 20
    assert timer.debounce == Debounce(30, 300, MS, 4, 7, restored=True)


@pytest.mark.parametrize(
    "record",
    [
        json_record(debounce=30, debounce_first_ms=MS, debounce_merged=4),  # no due second
        json_record(debounce=30, at=NOW + 20, debounce_merged=4),
        json_record(debounce=30, at=NOW + 20, debounce_first_ms=MS, debounce_merged=0),
        json_record(debounce=30, at=NOW + 20, debounce_first_ms=-1, debounce_merged=2),
        json_record(debounce=30, at=NOW + 20, debounce_first_ms="1", debounce_merged=2),
        json_record(max_wait=30, at=NOW + 20, debounce_first_ms=MS, debounce_merged=2),
        proto_record(debounce=30, debounce_first_ms=MS, debounce_merged=4),
        proto_record(debounce=30, due=NOW + 20, debounce_first_ms=MS),
        proto_record(debounce=30, due=NOW + 20, debounce_first_ms=MS, debounce_merged=0),
        proto_record(debounce=0, due=NOW + 20, debounce_first_ms=MS, debounce_merged=2),
        proto_record(debounce=9, max_wait=5, due=NOW + 20, debounce_first_ms=MS, debounce_merged=2),
    ],
)
def test_a_restored_debounce_that_cannot_be_is_refused(record: RawRecord) -> None:
    with pytest.raises(RejectedRequest) as refused:
        parse_request(record, now=NOW)
    assert refused.value.reason is RejectReason.INVALID_DEBOUNCE, refused.value


def test_a_restored_debounce_replaces_the_pending_one_instead_of_merging() -> None:
    pending = request(MS, b"1", offset=3)
    restored = replace(
        request(MS - 9000, b"r", offset=9),
        due=NOW + 4,
        debounce=Debounce(5, None, MS - 9000, 7, 9, restored=True),
    )
    assert merge(pending, restored) is restored


@pytest.fixture
def client() -> Iterator[TimerClient]:
    """A client on the clock NOW + 0.5 whose sends are recorded, never produced."""
    yield from offline_client(NOW + 0.5)


@pytest.mark.parametrize(
    "options",
    [
        {"debounce": "0s"},
        {"debounce": "10s", "max_wait": "5s"},
        {"max_wait": "5s"},
        {"debounce": "5s", "delay": 3.0},
        {"debounce": "5s", "every": "1m"},
    ],
)
def test_the_client_refuses_what_the_worker_would(
    client: TimerClient, options: dict[str, Any]
) -> None:
    with pytest.raises(KafkaTimersError) as refused:
        client.schedule("cb", b"v", timer_id="x", **options)
    assert "\n" not in str(refused.value)


def test_the_client_sends_the_debounce_with_its_timestamp_and_no_token(
    client: TimerClient,
) -> None:
    sent: list[tuple[str, bytes, int]] = []

    def record(key: str, value: bytes, *_: Any, timestamp_ms: int = -1) -> None:
        sent.append((key, value, timestamp_ms))

    setattr(client, "_send", record)  # noqa: B010 (the instance's, not the method's type)
    timer = client.schedule("cb", b"v", timer_id="x", debounce="30s", max_wait="5m")
    ((timer_id, value, ts),) = sent
    assert (timer_id, ts, timer.token, timer.due) == ("x", MS + 500, "", NOW + 31)
    future = protowire.decode(value)
    assert (future.debounce, future.max_wait, future.due, future.token) == (30, 300, None, "")
    parsed = parse_request(RawRecord("r", 0, 0, ts, b"x", value), now=NOW)
    assert isinstance(parsed, Timer) and parsed.due == timer.due


# -- the store -------------------------------------------------------------------------

#: pack_timer of these as the tree before debounce wrote them (hex): every timer that is
#: not debounced is stored byte for byte as before, so a rollback reads it as ever.
BEFORE_DEBOUNCE = [
    (
        Timer("a-1", 1_800_000_000, "cb", b"k", b"v", "tok", headers=(("h", b"1"),)),
        "01000000006b49d20000000003612d3100000003746f6b000000026362000000016b0000000176"
        "0000000100000001680000000131",
    ),
    (
        Timer("a-2", 1_800_000_000, "cb", None, b"v", "", spread=30),
        "01000000006b49d21b00000003612d3200000000000000026362ffffffff000000017600000000"
        "000000000000001e000000000000001b",
    ),
    (
        Timer("a-3", 1_800_000_000, "cb", b"k", None, "tok", schema_id=12),
        "01000000006b49d20000000003612d3300000003746f6b000000026362000000016bffffffff00"
        "00000000000000000000000000000000000000000000000000000c",
    ),
    (
        Timer(
            "a-4",
            1_800_000_000,
            "cb",
            b"k",
            b"v",
            "tok",
            late=LatePolicy(5000, None),
            spread=3,
            schema_id=7,
        ),
        "02000000006b49d20100000003612d3400000003746f6b000000026362000000016b0000000176"
        "000000000000000000000000000000000000000000010000000000000000ffffffffffffffffff"
        "ffffffffffffffffffffffffffffff00000000000013880000000000000003000000000000000100"
        "00000000000007",
    ),
]


@pytest.mark.parametrize(("timer", "packed"), BEFORE_DEBOUNCE)
def test_a_timer_without_debounce_is_stored_as_before(timer: Timer, packed: str) -> None:
    assert pack_timer(timer).hex() == packed
    assert unpack_timer(bytes.fromhex(packed)) == timer


@pytest.mark.parametrize("schema_id", [None, 12])
@pytest.mark.parametrize("spread", [0, 30])
def test_a_debounced_timer_keeps_its_layout_and_adds_the_extension(
    schema_id: int | None, spread: int
) -> None:
    plain = Timer("x", NOW + 5, "cb", b"k", b"v", "", spread=spread, schema_id=schema_id)
    for debounce in (Debounce(5, None, MS, 4, 17), Debounce(5, 60, MS, 4, 17)):
        timer = replace(plain, debounce=debounce)
        packed = pack_timer(timer)
        assert packed[0] == 1, "no new layout version: the previous release reads it"
        assert unpack_timer(packed) == timer
        # A reader that stops before the debounce extension reads the plain timer.
        assert unpack_timer(packed[:-40]) == plain


def test_the_previous_release_fires_a_debounced_timer_once_at_its_second(tmp_path: Path) -> None:
    """Rollback: 0.2.0 reads the layout's fields and ignores the extensions after them;
    it fires a debounced timer at the second this tree stored it for, once."""
    kv = MemoryKV()
    wheel = PartitionWheel(kv, clock=lambda: T0 - 10)
    first_ms = (T0 - 3) * 1000
    wheel.schedule(request(first_ms, timer_id="one", offset=0))
    wheel.schedule(request(first_ms + 2000, timer_id="one", offset=1))
    wheel.schedule(Timer("plain", T0 + 5, "cb", None, b"v", "tok"))
    result = ticks_in_previous_release(kv, tmp_path)
    fired = sorted((i, second) for i, _seq, _due, second in result["fired"])
    assert fired == [("one", T0 + 4), ("plain", T0 + 5)]
    assert result["pending"] == 0


# -- the callback and the request path ------------------------------------------------


def test_the_callback_carries_the_requests_merged_after_the_services_headers() -> None:
    from app.worker.output import OutputProducer

    out = OutputProducer(
        {"bootstrap.servers": "127.0.0.1:1"}, worker_id="w", fired_topic="f", dlq_topic="d"
    )
    recorder = HeaderRecorder()
    out._producer = recorder  # type: ignore[assignment]
    timer = replace(request(MS), headers=(("mine", b"1"),), debounce=Debounce(5, None, MS, 10))
    out.callback(timer, partition=0, fired_at_ms=MS + 5000)
    out.callback(replace(timer, debounce=None), partition=0, fired_at_ms=MS + 5000)
    names = [[name for name, _ in headers] for headers in recorder.headers]
    assert names[0][-2:] == [DEBOUNCED_HEADER, "mine"]
    assert dict(recorder.headers[0])[DEBOUNCED_HEADER] == b"10"
    assert DEBOUNCED_HEADER not in names[1]


def debounced(h: Harness, value: bytes, **fields: Any) -> RawRecord:
    future = protowire.Future(callback_topic="cb", callback=value, id="x", debounce=5, **fields)
    return h.record(protowire.encode(future), key=b"x")


def test_a_re_read_after_a_crash_counts_each_request_once() -> None:
    """A unit applied to the store whose flush failed is read again after the restart:
    its requests are in the debounce already, and are not counted twice."""
    h = Harness()
    h.tick(NOW)
    h.requests(debounced(h, b"1"))
    h.clock.now = NOW + 1
    unit = [debounced(h, b"2"), debounced(h, b"3")]
    h.output.fail_flush = True
    with pytest.raises(DeliveryFailure):
        h.requests(*unit)
    h.service.forget_partitions([0])  # the restart, on its own data
    h.requests(*unit)  # the re-read
    h.clock.now = NOW + 2
    h.requests(debounced(h, b"4"))
    for second in range(NOW + 1, NOW + 9):
        h.tick(second)
    ((timer, _),) = h.output.durable.callbacks
    assert timer.value == b"4" and timer.due == NOW + 7
    assert timer.debounce == Debounce(5, None, MS + 10, 4, 3)  # the tick moved the clock


def test_a_refused_debounce_is_answered_and_dead_lettered() -> None:
    h = Harness()
    h.requests(debounced(h, b"1", max_wait=2))
    assert [reason for _, reason, _ in h.output.durable.dead_letters] == [
        RejectReason.INVALID_DEBOUNCE
    ]
