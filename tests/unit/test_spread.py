"""Spread (issue 24.2): a timer fires at a second in [due, due + spread] fixed by its id
(and, for a series, each occurrence's number); never early, the same second every time,
about uniform over the window. Parsing, the stored layout, the wheel's placement, the
late policy, the client, export and import."""

from __future__ import annotations

import json
import uuid
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.firing import plan
from app.core.keys import timer_key
from app.core.raw_record import RawRecord
from app.core.request_format import parse_request
from app.core.stored import NEWEST_LAYOUT, pack_timer, unpack_timer
from app.core.timer import Cancel, Timer
from app.core.wheel import CancelOutcome, PartitionWheel, Scheduled
from app.ops.jsonl import decode_line, encode_line
from app.ops.requests import as_request
from kafka_timers_client import protowire
from kafka_timers_client.client import ScheduledTimer, TimerClient
from kafka_timers_client.errors import KafkaTimersError, RejectedRequest, RejectReason
from kafka_timers_client.late import DEFAULT_POLICY, LatePolicy
from kafka_timers_client.partitioner import partition_for
from kafka_timers_client.recurrence import Recurrence
from kafka_timers_client.spread import MAX_SPREAD_SECONDS, spread_offset, spread_second
from tests.support.memkv import MemoryKV

T0 = 1_800_000_000
IDS = st.text(min_size=1, max_size=60)


# -- the second ------------------------------------------------------------------------


@settings(max_examples=500, deadline=None)
@given(IDS, st.integers(0, 10**6), st.integers(0, 10**11), st.integers(0, MAX_SPREAD_SECONDS))
def test_the_fire_second_is_in_the_window_and_the_same_every_time(
    timer_id: str, seq: int, due: int, spread: int
) -> None:
    second = spread_second(timer_id, seq, due, spread)
    assert due <= second <= due + spread
    assert second == spread_second(timer_id, seq, due, spread)
    assert second - due == spread_offset(timer_id, seq, spread)
    timer = Timer(timer_id, due, "cb", None, b"", seq=seq, spread=spread)
    assert timer.fire_at == second


@settings(max_examples=200, deadline=None)
@given(IDS, st.integers(0, 100), st.integers(0, MAX_SPREAD_SECONDS))
def test_the_native_and_python_hashes_give_the_same_second(
    timer_id: str, seq: int, spread: int
) -> None:
    from kafka_timers_client import partitioner

    native_offset = spread_offset(timer_id, seq, spread)
    saved, partitioner._native_placement = partitioner._native_placement, None
    try:
        assert spread_offset(timer_id, seq, spread) == native_offset
    finally:
        partitioner._native_placement = saved


def test_the_offsets_are_pinned_across_releases() -> None:
    # The same request must land on the same second on every worker and release: these
    # values are part of the format (a changed hash would move pending timers' seconds).
    assert [spread_offset(f"t-{i}", 0, 60) for i in range(6)] == [5, 46, 20, 58, 35, 47]
    assert [spread_offset("t-0", seq, 60) for seq in (1, 2, 3)] == [43, 47, 13]
    assert spread_offset("remind-42", 0, 86_400) == 27_072


def test_no_spread_is_the_due_second_and_the_last_key_second_bounds_it() -> None:
    assert spread_second("a", 0, T0, 0) == T0
    last = 10**12 - 1
    assert spread_second("a", 0, last - 5, 3600) <= last


@pytest.mark.parametrize(
    "ids",
    [
        [f"t-{i}" for i in range(100_000)],  # sequential ids, as tests and benches make
        [uuid.UUID(int=i * 7919 + 1).hex for i in range(100_000)],
    ],
    ids=["sequential", "hex"],
)
def test_the_seconds_are_about_uniform(ids: list[str]) -> None:
    spread = 60
    counts = Counter(spread_second(i, 0, T0, spread) - T0 for i in ids)
    assert set(counts) == set(range(spread + 1))
    mean = len(ids) / (spread + 1)
    assert max(counts.values()) <= 1.1 * mean and min(counts.values()) >= 0.9 * mean
    chi2 = sum((n - mean) ** 2 / mean for n in counts.values())
    assert chi2 < 120  # 60 degrees of freedom: p < 1e-5 above about 110


def test_the_offset_does_not_follow_the_partition() -> None:
    # murmur2(id) places the id; the offset hashes "<id>\\0<seq>": one partition's
    # timers still spread over every second of the window, not one residue of it.
    ids = [f"t-{i}" for i in range(40_000) if partition_for(f"t-{i}".encode(), 8) == 3]
    counts = Counter(spread_offset(i, 0, 15) for i in ids)
    assert set(counts) == set(range(16))
    assert max(counts.values()) <= 1.2 * len(ids) / 16


def test_each_occurrence_of_a_series_gets_its_own_offset() -> None:
    offsets = {spread_offset("series-1", seq, 3600) for seq in range(1, 200)}
    assert len(offsets) > 150


# -- requests --------------------------------------------------------------------------


def record(value: bytes, ts: int = T0 * 1000) -> RawRecord:
    return RawRecord("timer-request", 0, 7, ts, b"k", value)


def json_request(**fields: object) -> Timer:
    doc = {"topic": "cb", "value": "v", "at": T0, "id": "a", **fields}
    request = parse_request(record(json.dumps(doc).encode()))
    assert isinstance(request, Timer)
    return request


@pytest.mark.parametrize(
    ("spread", "seconds"),
    [("60s", 60), ("5m", 300), ("1d", 86_400), (20, 20), ("0s", 0), (0, 0), ("1h", 3600)],
)
def test_json_spread_takes_the_duration_syntax(spread: object, seconds: int) -> None:
    timer = json_request(spread=spread)
    assert timer.spread == seconds and timer.due == T0
    assert T0 <= timer.fire_at <= T0 + seconds


@pytest.mark.parametrize(
    "spread",
    ["2d", "86401s", "1.5s", "250ms", "-5s", "soon", True, [60], {"s": 1}, "9" * 300, 1e300],
)
def test_a_bad_spread_is_dead_lettered_with_its_own_reason(spread: object) -> None:
    with pytest.raises(RejectedRequest) as refused:
        json_request(spread=spread)
    assert refused.value.reason is RejectReason.INVALID_SPREAD
    assert "spread" in str(refused.value) or "duration" in str(refused.value)


def test_a_series_spread_must_be_shorter_than_its_interval() -> None:
    doc = {"topic": "cb", "value": "v", "id": "s", "every": "10s", "start": T0}
    ok = parse_request(record(json.dumps({**doc, "spread": "9s"}).encode()))
    assert isinstance(ok, Timer) and ok.spread == 9 and ok.seq == 1
    with pytest.raises(RejectedRequest) as refused:
        parse_request(record(json.dumps({**doc, "spread": "10s"}).encode()))
    assert refused.value.reason is RejectReason.INVALID_SPREAD
    cron = {"topic": "cb", "value": "v", "cron": "0 * * * *", "spread": "2h"}
    timer = parse_request(record(json.dumps(cron).encode()))
    assert isinstance(timer, Timer) and timer.spread == 7200  # a cron series may


def test_protobuf_field_16_is_the_spread_in_seconds() -> None:
    future = protowire.Future(callback_topic="cb", callback=b"v", id="p", due=T0, spread=45)
    timer = parse_request(record(protowire.encode(future)))
    assert isinstance(timer, Timer) and timer.spread == 45
    assert protowire.decode(protowire.encode(future)).spread == 45
    for bad in (-1, MAX_SPREAD_SECONDS + 1, 2**62):
        future.spread = bad
        with pytest.raises(RejectedRequest) as refused:
            parse_request(record(protowire.encode(future)))
        assert refused.value.reason is RejectReason.INVALID_SPREAD
    # A producer without the field (every producer before it) asks for no spread.
    future.spread = None
    plain = parse_request(record(protowire.encode(future)))
    assert isinstance(plain, Timer) and plain.spread == 0 and plain.fire_at == T0


# -- the stored layout -----------------------------------------------------------------


def test_a_spread_timer_keeps_its_layout_and_adds_the_extension() -> None:
    plain = Timer("a", T0, "cb", b"k", b"v", "tok")
    spread = Timer("a", T0, "cb", b"k", b"v", "tok", spread=60)
    rec = Recurrence.interval(30, start=T0).anchored(T0 - 1)
    series = Timer("s", T0, "cb", None, b"v", "t", recurrence=rec, seq=4, spread=29)
    late = Timer("l", T0, "cb", None, b"", late=LatePolicy(5000, None), spread=1)
    # Only a series with a calendar is written in layout 3: the release before reads these.
    assert NEWEST_LAYOUT == 3
    assert pack_timer(spread)[0] == 1 and pack_timer(series)[0] == pack_timer(late)[0] == 2
    assert pack_timer(spread)[: len(pack_timer(plain))][9:] == pack_timer(plain)[9:]
    for timer in (spread, series, late):
        data = pack_timer(timer)
        assert int.from_bytes(data[1:9], "big") == timer.fire_at  # the head: its fire second
        assert unpack_timer(data) == timer
    assert unpack_timer(pack_timer(plain)).spread == 0


# -- the wheel -------------------------------------------------------------------------


def spread_timer(timer_id: str, due: int = T0, spread: int = 20, token: str = "tok") -> Timer:
    return Timer(timer_id, due, "cb", b"k", b"v", token, spread=spread)


def fire(wheel: PartitionWheel, second: int) -> list[str]:
    due = wheel.begin_tick(second)
    assert due is not None
    wheel.finish_tick(second, due)
    return sorted(t.id for t in due)


def test_the_wheel_keeps_a_spread_timer_under_its_fire_second() -> None:
    kv = MemoryKV()
    wheel = PartitionWheel(kv)
    timers = [spread_timer(f"t-{i}") for i in range(200)]
    for t in timers:
        assert wheel.schedule(t).outcome is Scheduled.STORED
        assert kv.get(timer_key(t.fire_at, t.id)) is not None
    fired: dict[str, int] = {}
    for second in range(T0 - 1, T0 + 22):
        for timer_id in fire(wheel, second):
            assert timer_id not in fired
            fired[timer_id] = second
    assert len(fired) == 200 and wheel.count_pending() == 0
    assert all(fired[t.id] == t.fire_at for t in timers)
    assert min(fired.values()) >= T0 and max(fired.values()) <= T0 + 20
    assert len(set(fired.values())) >= 15
    # fired and remembered under the requested second: a redelivery is a duplicate
    assert wheel.lookup("t-0") == ("fired", T0, "tok")
    assert wheel.schedule(spread_timer("t-0")).outcome is Scheduled.DUPLICATE


def test_the_same_request_twice_lands_on_the_same_second() -> None:
    wheel = PartitionWheel(MemoryKV())
    first = wheel.schedule(spread_timer("again"))
    again = wheel.schedule(spread_timer("again"))
    assert first.outcome is again.outcome is Scheduled.STORED and again.replaced
    assert wheel.count_pending() == 1
    second = spread_timer("again").fire_at
    assert wheel.lookup("again") == ("pending", second, "tok")
    assert [t.id for t in wheel.iter_pending()] == ["again"]
    assert all(fire(wheel, s) == [] for s in range(T0 - 1, second))
    assert fire(wheel, second) == ["again"]


def test_a_request_read_after_its_due_but_before_its_second_waits_for_it() -> None:
    timer = next(t for t in (spread_timer(f"w-{i}") for i in range(100)) if t.fire_at >= T0 + 5)
    wheel = PartitionWheel(MemoryKV())
    fire(wheel, T0 + 2)  # the partition has ticked past the due second already
    assert wheel.schedule(timer).outcome is Scheduled.STORED  # not fired at once: not due
    assert fire(wheel, timer.fire_at - 1) == []
    assert fire(wheel, timer.fire_at) == [timer.id]
    late = PartitionWheel(MemoryKV())
    fire(late, T0 + 30)
    assert late.schedule(timer).outcome is Scheduled.FIRE_NOW  # its second has passed


def test_cancel_reschedule_and_a_redelivery_after_the_cancel() -> None:
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(spread_timer("c"))
    assert wheel.cancel(Cancel("c", "wrong")) is CancelOutcome.WRONG_TOKEN
    assert wheel.cancel(Cancel("c", "tok")) is CancelOutcome.CANCELLED
    assert wheel.count_pending() == 0
    assert wheel.lookup("c") == ("cancelled", T0, "tok")  # the version's requested second
    assert wheel.schedule(spread_timer("c")).outcome is Scheduled.CANCELLED_EARLIER
    assert wheel.cancel(Cancel("c", "tok")) is CancelOutcome.CANCELLED
    # a new version (another token) is a new timer; a reschedule with its token moves it
    wheel.schedule(spread_timer("c", token="v2"))
    assert wheel.schedule(spread_timer("c", T0 + 50, "v3")).outcome is Scheduled.WRONG_TOKEN
    moved = spread_timer("c", due=T0 + 100, token="v2")
    assert wheel.schedule(moved).replaced and wheel.count_pending() == 1
    assert all(fire(wheel, s) == [] for s in range(T0, T0 + 100))
    assert fire(wheel, moved.fire_at) == ["c"]


def test_a_spread_series_fires_each_occurrence_on_its_own_second() -> None:
    rec = Recurrence.interval(10, start=T0, count=30).anchored(T0 - 1)
    series = Timer("s", T0, "cb", None, b"v", "tok", recurrence=rec, seq=1, spread=9)
    wheel = PartitionWheel(MemoryKV())
    assert wheel.schedule(series).outcome is Scheduled.STORED
    fired: list[tuple[int, int, int]] = []
    for second in range(T0, T0 + 300):
        due = wheel.begin_tick(second)
        assert due is not None
        successors = {}
        for t in due:
            steps = plan(t, second, second * 1000 + 50, DEFAULT_POLICY)
            fired += [(s.timer.seq, s.timer.due, second) for s in steps.steps]
            if steps.successor is not None:
                successors[t.id] = steps.successor
        wheel.finish_tick(second, due, successors)
    assert [seq for seq, _, _ in fired] == list(range(1, 31))
    for seq, due, second in fired:
        assert due == T0 + (seq - 1) * 10  # timer-due stays the occurrence's own
        assert second == spread_second("s", seq, due, 9)
    assert len({second - due for _, due, second in fired}) > 5
    assert wheel.lookup("s") == ("fired", T0, "tok")


def test_skip_after_counts_from_the_second_it_fires_at() -> None:
    timer = next(
        t for t in (spread_timer(f"l-{i}", spread=60) for i in range(100)) if t.fire_at > T0 + 30
    )
    skip = LatePolicy(5000, None)
    on_time = plan(timer, timer.fire_at, timer.fire_at * 1000 + 200, skip)
    assert on_time.steps[0].kind.value == "deliver"  # 30+ s after due, 0.2 s after its second
    late = plan(timer, timer.fire_at + 10, (timer.fire_at + 10) * 1000, skip)
    assert late.steps[0].kind.value == "late"


# -- client, CLI checks, export and import ---------------------------------------------


def test_the_client_checks_a_spread_as_the_worker_does() -> None:
    assert TimerClient.spread_seconds(None) == 0
    assert TimerClient.spread_seconds("60s") == 60 and TimerClient.spread_seconds(20) == 20
    for bad in ("2d", "1.5s", "x"):
        with pytest.raises(KafkaTimersError):
            TimerClient.spread_seconds(bad)
    with pytest.raises(KafkaTimersError):
        TimerClient.spread_seconds("30s", every="30s")
    scheduled = ScheduledTimer("t-1", "tok", T0, spread=20)
    assert scheduled.fire_at == spread_timer("t-1").fire_at


def test_export_and_import_carry_the_spread() -> None:
    timer = spread_timer("e", spread=300)
    line = encode_line(timer, partition=2)
    assert json.loads(line)["spread"] == 300
    assert decode_line(line) == timer
    assert "spread" not in json.loads(encode_line(spread_timer("n", spread=0)))
    sent = parse_request(RawRecord("r", 0, 0, T0 * 1000, b"e", as_request(timer, T0 * 1000).value))
    assert isinstance(sent, Timer) and sent.spread == 300 and sent.fire_at == timer.fire_at
    binary_key = Timer("b", T0, "cb", b"\xff", b"v", "tok", spread=30)
    sent = parse_request(
        RawRecord("r", 0, 0, T0 * 1000, b"b", as_request(binary_key, T0 * 1000).value)
    )
    assert isinstance(sent, Timer) and sent.spread == 30  # the JSON request carries it too
