"""Fair firing: a tick's callbacks to different topics take turns (app.core.fair_order)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.fair_in_flight import InFlightIds
from app.core.fair_order import interleave_by_topic, take_turns
from app.core.firing import plan
from app.core.keys import timer_key
from app.core.policy import RequestPolicy
from app.core.raw_record import RawRecord
from app.core.stored import pack_timer, stored_topic, stored_topic_is, topic_field
from app.core.timer import Cancel, Timer
from app.core.wheel import CancelOutcome, PartitionWheel
from app.core.wheel_tick import EAGER_SCAN
from app.worker.metrics import WorkerMetrics
from app.worker.service import TimerService
from app.worker.service_firing import FAIR_TURN
from kafka_timers_client import protowire
from kafka_timers_client.late import DEFAULT_POLICY
from kafka_timers_client.recurrence import Recurrence
from tests.support.memkv import MemoryKV
from tests.support.memstores import FakeOutput, MemoryStores

NOW = 1_767_225_600


def timer(timer_id: str, topic: str, due: int = 100) -> Timer:
    return Timer(id=timer_id, due=due, topic=topic, key=b"k", value=b"v", token="t")


@given(st.lists(st.sampled_from("abcd"), max_size=200))
def test_topics_take_turns_and_each_keeps_its_order(topics: list[str]) -> None:
    timers = [timer(f"t{i}", topic) for i, topic in enumerate(topics)]
    out = interleave_by_topic(timers)
    assert sorted(t.id for t in out) == sorted(t.id for t in timers)
    for topic in set(topics):
        assert [t for t in out if t.topic == topic] == [t for t in timers if t.topic == topic]
    # The n-th timer of a topic is no later than the n-th turn of every topic.
    n_topics = len(set(topics))
    seen: dict[str, int] = {}
    for position, t in enumerate(out):
        seen[t.topic] = seen.get(t.topic, 0) + 1
        assert position < seen[t.topic] * n_topics


def test_queues_take_turns() -> None:
    assert take_turns([[1, 2, 3], [10], [20, 21]]) == [1, 10, 20, 2, 21, 3]
    assert take_turns([]) == []


def test_one_topic_is_returned_as_it_is() -> None:
    timers = [timer(f"t{i}", "a") for i in range(5)]
    assert interleave_by_topic(timers) == timers
    assert interleave_by_topic([]) == []


def test_a_tick_delivers_a_small_topic_among_its_first_callbacks() -> None:
    """2,000 timers to one topic and 3 to another due in one second, the 3 with ids that
    sort last: they come 2nd, 4th and 6th, not after the 2,000."""
    wheel = PartitionWheel(MemoryKV())
    for i in range(2000):
        wheel.schedule(timer(f"a{i:05d}", "burst"))
    for i in range(3):
        wheel.schedule(timer(f"z{i}", "other"))
    due = wheel.begin_tick(100)
    assert due is not None and len(due) == 2003
    assert [i for i, t in enumerate(due) if t.topic == "other"] == [1, 3, 5]
    wheel.finish_tick(100, due)
    assert wheel.count_pending() == 0


def _burst_wheel(burst: int = EAGER_SCAN + 1000, few: int = 3) -> PartitionWheel:
    """``burst`` timers to one topic and ``few`` to another, all due at 100, the few
    with ids that sort last: past :data:`EAGER_SCAN`, where a scan leaves them undecoded."""
    wheel = PartitionWheel(MemoryKV())
    for i in range(burst):
        wheel.schedule(timer(f"a{i:05d}", "burst"))
    for i in range(few):
        wheel.schedule(timer(f"z{i}", "other"))
    return wheel


def test_a_burst_is_ordered_before_it_is_decoded_and_decoded_as_it_is_taken() -> None:
    """Past EAGER_SCAN keys, the first turn comes decoded with the few in it; the rest
    is taken in its fair order, every timer once, and the round forgets them all."""
    wheel = _burst_wheel()
    total = EAGER_SCAN + 1003
    head = wheel.begin_tick(100, decode_first=8)
    assert head is not None and len(head) == 8
    assert [i for i, t in enumerate(head) if t.topic == "other"] == [1, 3, 5]
    assert wheel.undecoded == total - 8
    assert wheel.undecoded_topics == {"burst", "other"}
    rest = wheel.take_scanned(100) + wheel.take_scanned()
    assert wheel.undecoded == 0
    everything = head + rest
    assert [t.id for t in everything if t.topic == "burst"] == [
        f"a{i:05d}" for i in range(EAGER_SCAN + 1000)
    ]
    assert len({t.id for t in everything}) == total
    wheel.finish_tick(100, everything)
    assert wheel.count_pending() == 0


def test_a_small_tick_is_decoded_whole_even_when_asked_to_decode_first() -> None:
    wheel = _burst_wheel(burst=EAGER_SCAN - 3)
    due = wheel.begin_tick(100, decode_first=8)
    assert due is not None and len(due) == EAGER_SCAN and wheel.undecoded == 0


def test_a_timer_rescheduled_before_it_is_decoded_is_not_delivered_and_stays_pending() -> None:
    """A request handled while the round awaits (its timers in flight, most of them
    undecoded) replaces one: the old version is not taken, the new one fires later."""
    wheel = _burst_wheel()
    head = wheel.begin_tick(100, decode_first=8)
    assert head is not None
    late_id = f"a{EAGER_SCAN + 900:05d}"
    assert late_id not in {t.id for t in head}
    wheel.schedule(Timer(id=late_id, due=200, topic="burst", key=b"k", value=b"v2", token="t"))
    rest = wheel.take_scanned()
    assert late_id not in {t.id for t in rest}
    wheel.finish_tick(100, head + rest)
    assert wheel.count_pending() == 1
    again = wheel.begin_tick(200, decode_first=8)
    assert again is not None and [(t.id, t.value) for t in again] == [(late_id, b"v2")]


def test_a_burst_scan_holds_gated_topics_and_parks_paused_timers_it_does_not_decode() -> None:
    wheel = _burst_wheel()
    for i in range(5):
        wheel.schedule(timer(f"y{i}", "limited"))
    paused_id = f"a{EAGER_SCAN + 500:05d}"
    assert wheel.pause(Cancel(paused_id, "t")).value == "paused"
    head = wheel.begin_tick(100, frozenset({"limited"}), decode_first=8)
    assert head is not None
    taken = head + wheel.take_scanned()
    assert {t.topic for t in taken} == {"burst", "other"}
    assert paused_id not in {t.id for t in taken}
    assert len(taken) == EAGER_SCAN + 1003 - 1
    assert wheel.held_count("limited") == 5
    wheel.finish_tick(100, taken)
    assert wheel.count_pending() == 6  # the 5 held and the paused one


def test_a_round_is_not_finished_before_its_undecoded_timers_are_taken() -> None:
    """Finishing would advance past timers never delivered: refused. Aborted, the next
    tick scans them all again."""
    wheel = _burst_wheel()
    head = wheel.begin_tick(100, decode_first=8)
    assert head is not None
    with pytest.raises(RuntimeError):
        wheel.finish_tick(100, head)
    wheel.abort_tick()
    again = wheel.begin_tick(101)
    assert again is not None and len(again) == EAGER_SCAN + 1003


def _service(clock: list[float]) -> tuple[TimerService, FakeOutput]:
    output = FakeOutput()
    service = TimerService(
        policy=RequestPolicy.build(
            allow_patterns=(".*",),
            own_topics=("ticks", "requests", "fired", "dlq"),
            app_id="kt",
            max_payload_bytes=1000,
            horizon_seconds=86400,
        ),
        output=output,
        metrics=WorkerMetrics(),
        stores=MemoryStores(output),
        clock=lambda: clock[0],
    )
    return service, output


def _request(partition: int, offset: int, future: protowire.Future) -> RawRecord:
    return RawRecord("requests", partition, offset, NOW * 1000, None, protowire.encode(future))


def test_a_burst_over_partitions_fires_another_topics_few_in_the_first_turn() -> None:
    """Two partitions, each with more than EAGER_SCAN timers to one topic and, with ids
    that sort last, 2 to another and a series to the burst's topic: the few come in the
    round's first turn; every timer fires once; the series goes on."""
    clock = [NOW - 10.0]
    service, output = _service(clock)
    burst = EAGER_SCAN + 700
    records = []
    for p in (0, 1):
        futures = [
            protowire.Future(callback_topic="burst", callback=b"v", id=f"a{p}-{i:05d}", due=NOW)
            for i in range(burst)
        ]
        futures += [
            protowire.Future(callback_topic="other", callback=b"v", id=f"z{p}-{i}", due=NOW)
            for i in range(2)
        ]
        futures.append(
            protowire.Future(callback_topic="burst", callback=b"v", id=f"s{p}", every=60, start=NOW)
        )
        records += [_request(p, offset, f) for offset, f in enumerate(futures)]
    asyncio.run(service.handle_requests(records))
    clock[0] = NOW + 0.01
    fired = asyncio.run(service.handle_ticks([(p, NOW, None, "osc") for p in (0, 1)]))
    ids = [t.id for t, _ in output.durable.callbacks]
    assert fired == len(ids) == 2 * (burst + 3)
    assert len(set(ids)) == len(ids)
    assert max(ids.index(f"z{p}-{i}") for p in (0, 1) for i in range(2)) < FAIR_TURN + 4
    assert sum(w.count_pending() for w in service.wheels().values()) == 2  # the series' next
    clock[0] = NOW + 60.01
    assert asyncio.run(service.handle_ticks([(p, NOW + 60, None, "osc") for p in (0, 1)])) == 2


def test_a_series_past_the_eager_keys_is_known_in_flight_so_a_cancel_still_stops_it() -> None:
    """A series occurrence in the undecoded part of a burst: cancelled while the round
    awaits, its occurrence is on its way but the series stops (as in a decoded round)."""
    wheel = _burst_wheel(few=0)
    rec = Recurrence.interval(2, start=100).anchored(99)
    wheel.schedule(Timer("zs", 100, "burst", None, b"v", "tok", recurrence=rec, seq=1))
    head = wheel.begin_tick(100, decode_first=8)
    assert head is not None and "zs" not in {t.id for t in head}
    assert wheel.cancel(Cancel("zs", "tok")) is CancelOutcome.CANCELLED
    taken = head + wheel.take_scanned()
    (occurrence,) = [t for t in taken if t.id == "zs"]
    assert taken[-1] is occurrence  # the burst topic's order kept: its id sorts last
    successor = plan(occurrence, 100, 100_000, DEFAULT_POLICY).successor
    assert successor is not None
    wheel.finish_tick(100, taken, {"zs": successor})
    assert wheel.count_pending() == 0 and wheel.lookup("zs") == ("cancelled", 100, "tok")


@given(st.lists(st.lists(st.integers(), max_size=6), max_size=5))
def test_take_turns_is_round_robin_over_the_queues(queues: list[list[int]]) -> None:
    expected = [q[i] for i in range(max(map(len, queues), default=0)) for q in queues if i < len(q)]
    assert take_turns(queues) == expected


def test_in_flight_ids_are_read_from_the_keys_on_first_use_and_a_discard_holds() -> None:
    ids = InFlightIds(["a"], [(timer_key(100, "b"), b""), (timer_key(100, "c"), b""), "a"])
    ids.discard("b")
    ids.add("d")
    assert "b" not in ids and {"a", "c", "d"} <= ids and len(ids) == 3
    assert sorted(ids) == ["a", "c", "d"]


@given(
    st.text(max_size=12),
    st.text(max_size=12),
    st.sampled_from(["burst", "burst2", "bursT", "", "b", "é-topic"]),
    st.sampled_from(["burst", "burst2", ""]),
)
def test_a_stored_timers_topic_is_told_by_comparison_as_it_is_read(
    timer_id: str, token: str, topic: str, other: str
) -> None:
    packed = pack_timer(Timer(id=timer_id, due=100, topic=topic, key=b"k", value=None, token=token))
    assert stored_topic(packed) == topic
    assert stored_topic_is(packed, topic_field(other)) == (topic == other)
