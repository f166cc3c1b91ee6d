"""The due-load forecast (app.core.forecast): after any sequence of stores, cancels,
replacements, fires (series going on included), requests applied while a tick is being
delivered and reloads, its counters equal a brute-force count of the store."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.forecast import (
    HOUR,
    MINUTE,
    OTHER_TOPICS,
    ForecastRows,
    PartitionForecast,
    forecast_rows,
    stored_topic,
)
from app.core.keys import PENDING, PENDING_END, parse_timer_key
from app.core.stored import pack_timer, unpack_timer
from app.core.timer import Cancel, Timer
from app.core.wheel import PartitionWheel, Scheduled
from kafka_timers_client.late import LatePolicy
from kafka_timers_client.recurrence import Recurrence
from tests.support.memkv import MemoryKV

START = 1_767_225_600  # 2026-01-01T00:00:00Z, a whole hour
#: Small windows so that a test crosses them: 10 minutes by minute, 3 hours by hour.
MINUTES, HOURS = 600, 3 * HOUR
TOPICS = ("a", "b", "c")


def new_forecast(scan_limit: int = 3) -> PartitionForecast:
    return PartitionForecast(
        minute_seconds=MINUTES, hour_seconds=HOURS, max_topics=2, scan_limit=scan_limit
    )


def timer(timer_id: str, due: int, topic: str = "a", token: str = "tok") -> Timer:
    return Timer(id=timer_id, due=due, topic=topic, key=b"k", value=b"v", token=token)


def expected_cells(
    kv: MemoryKV, fc: PartitionForecast
) -> tuple[dict[str, dict[int, int]], dict[str, dict[int, int]]]:
    """Each stored timer in the cell its key says, given the forecast's edges."""
    own = set(fc._own)
    minutes: dict[str, dict[int, int]] = {}
    hours: dict[str, dict[int, int]] = {}
    for key, value in kv.scan(PENDING, PENDING_END):
        slot, _ = parse_timer_key(key)
        topic = stored_topic(value)
        label = topic if topic in own else OTHER_TOPICS
        if key < fc._m_key:
            cells, bucket = minutes.setdefault(label, {}), slot // MINUTE
        elif key < fc._h_key:
            cells, bucket = hours.setdefault(label, {}), slot // HOUR
        else:
            continue
        cells[bucket] = cells.get(bucket, 0) + 1
    return minutes, hours


def nonempty(level: dict[str, dict[int, int]]) -> dict[str, dict[int, int]]:
    return {topic: cells for topic, cells in level.items() if cells}


def check(kv: MemoryKV, wheel: PartitionWheel, now: int) -> None:
    fc = wheel.forecast
    assert fc is not None
    assert fc._m_key <= fc._h_key
    minutes, hours = expected_cells(kv, fc)
    assert nonempty(fc.minutes) == minutes
    assert nonempty(fc.hours) == hours
    rows, complete = forecast_rows([fc], now, minute_seconds=MINUTES, hour_seconds=HOURS)
    if not complete:
        return
    # The rows, by brute force over the store: every pending timer by its key's second.
    m0, h0 = now // MINUTE, now // HOUR
    want: dict[str, tuple[int, list[int], list[int]]] = {}
    for key, value in kv.scan(PENDING, PENDING_END):
        slot, _ = parse_timer_key(key)
        topic = stored_topic(value)
        label = topic if topic in fc._own else OTHER_TOPICS
        overdue, mins, hrs = want.setdefault(label, (0, [0] * 10, [0] * 3))
        if slot // MINUTE < m0:
            want[label] = (overdue + 1, mins, hrs)
            continue
        if slot // MINUTE - m0 < 10:
            mins[slot // MINUTE - m0] += 1
        if slot // HOUR - h0 < 3:
            hrs[slot // HOUR - h0] += 1
    got = {
        topic: (r.overdue, r.minutes, r.hours)
        for topic, r in rows.items()
        if r.overdue or any(r.minutes) or any(r.hours)
    }
    want = {t: w for t, w in want.items() if w[0] or any(w[1]) or any(w[2])}
    assert got == want


# One step of a run: what it does to the wheel, drawn by hypothesis.
_ids = st.sampled_from([f"t{i}" for i in range(8)])
_offsets = st.one_of(
    st.integers(-30, MINUTES + 120),  # the minute window and around its edge
    st.integers(MINUTES, HOURS + 2 * HOUR),  # the hour window and past its edge
    st.sampled_from([HOURS, HOURS + HOUR, 86400]),  # on an edge, and far beyond
)
_schedule = st.tuples(
    st.just("schedule"), _ids, _offsets, st.sampled_from(TOPICS), st.sampled_from(["x", "y"])
)
_series = st.tuples(st.just("series"), _ids, _offsets, st.sampled_from(TOPICS))
_cancel = st.tuples(st.just("cancel"), _ids, st.sampled_from(["x", "y"]))
_tick = st.tuples(
    st.just("tick"),
    st.sampled_from([1, 1, 7, 59, 61, 600, 3599, 3601, 7200]),
    st.lists(st.one_of(_schedule, _cancel), max_size=3),  # applied while it delivers
    st.booleans(),  # series that fired go on
    st.booleans(),  # topic "b" is rate-limited: its due timers are held in the wheel
    st.integers(0, 2),  # how many held ones its bucket lets out this round
)
#: A round between ticks that delivers held timers (app.worker.service.release_gated).
_release = st.tuples(st.just("release"), st.integers(0, 3))
_reload = st.tuples(st.just("reload"))
_steps = st.lists(st.one_of(_schedule, _series, _cancel, _tick, _release, _reload), max_size=40)


def run(steps: list[tuple[object, ...]], scan_limit: int) -> None:
    kv = MemoryKV()
    clock = [START + 5]

    def make_wheel() -> PartitionWheel:
        wheel = PartitionWheel(kv, clock=lambda: clock[0], forecast=new_forecast(scan_limit))
        wheel.recount()
        return wheel

    wheel = make_wheel()
    now: Callable[[], int] = lambda: wheel.ticked_through or clock[0]  # noqa: E731

    def apply(step: tuple[object, ...]) -> None:
        kind = step[0]
        if kind == "schedule":
            _, tid, offset, topic, token = step
            t = timer(str(tid), now() + int(str(offset)), str(topic), str(token))
            wheel.schedule(t)
        elif kind == "series":
            _, tid, offset, topic = step
            t = dataclasses.replace(
                timer(str(tid), now() + int(str(offset)), str(topic), "x"),
                recurrence=Recurrence(every=90),
                seq=1,
                late=LatePolicy(),
            )
            wheel.schedule(t)
        elif kind == "cancel":
            _, tid, token = step
            wheel.cancel(Cancel(id=str(tid), token=str(token)))

    for step in steps:
        if step[0] == "tick":
            _, gap, meanwhile, go_on, gated, budget = step
            second = now() + int(str(gap))
            clock[0] = second
            timers = wheel.begin_tick(second)
            assert timers is not None
            if gated:  # as the service's gates do: hold, then take what the bucket allows
                held = [t for t in timers if t.topic == "b"]
                timers = [t for t in timers if t.topic != "b"]
                if held:
                    wheel.hold(held, float(second))
                timers += [t for t, _ in wheel.take_held("b", int(str(budget)))]
            for inner in meanwhile:  # type: ignore[attr-defined]
                apply(inner)
            successors = {
                t.id: dataclasses.replace(t, due=second + 90, seq=t.seq + 1)
                for t in timers
                if go_on and t.recurrence is not None
            }
            wheel.finish_tick(second, timers, successors)
        elif step[0] == "release":
            through = wheel.fired_through
            if through is not None and wheel.holding:
                taken = [t for t, _ in wheel.take_held("b", int(str(step[1])))]
                wheel.finish_tick(through, taken)
        elif step[0] == "reload":
            wheel = make_wheel()
        else:
            apply(step)
        check(kv, wheel, now())
    # Whatever happened, a reload counts the same as the counters kept: once the edges
    # have caught up, the kept forecast and a rebuilt one give the same rows.
    fc = wheel.forecast
    assert fc is not None
    second = now()
    while not fc.advance(second, kv.scan):
        pass
    fresh = new_forecast()
    fresh.rebuild(second, kv.scan)
    while not fresh.advance(second, kv.scan):  # a bounded slice a tick, as after a load
        pass
    kept, _ = forecast_rows([fc], second, minute_seconds=MINUTES, hour_seconds=HOURS)
    rebuilt, complete = forecast_rows([fresh], second, minute_seconds=MINUTES, hour_seconds=HOURS)
    assert complete
    # Which topics have cells of their own depends on the order they came in: compare
    # the totals, and each topic that has its own cells in both.
    both = fc._own & fresh._own
    assert _total(kept) == _total(rebuilt)
    for topic in both:
        assert dataclasses.asdict(kept[topic]) == dataclasses.asdict(rebuilt[topic])


def _total(rows: dict[str, ForecastRows]) -> tuple[int, list[int], list[int]]:
    overdue, minutes, hours = 0, [0] * 10, [0] * 3
    for r in rows.values():
        overdue += r.overdue
        minutes = [x + y for x, y in zip(minutes, r.minutes, strict=True)]
        hours = [x + y for x, y in zip(hours, r.hours, strict=True)]
    return overdue, minutes, hours


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_steps, st.sampled_from([1, 3, 1000]))
def test_forecast_equals_a_brute_force_count(steps: list[tuple[object, ...]], limit: int) -> None:
    run(steps, limit)


def test_stored_topic_reads_what_pack_timer_wrote() -> None:
    for t in (
        timer("id", 100, "reminders"),
        dataclasses.replace(timer("ü" * 300, 5, "t" * 249, ""), key=None, value=None),
        dataclasses.replace(
            timer("s", 7, "series-topic"), recurrence=Recurrence(cron="* * * * *"), seq=3
        ),
    ):
        packed = pack_timer(t)
        assert stored_topic(packed) == unpack_timer(packed).topic == t.topic


def test_rows_windows_and_the_other_topics() -> None:
    kv = MemoryKV()
    wheel = PartitionWheel(kv, clock=lambda: START, forecast=new_forecast())
    wheel.recount()
    plan = {"a": [30, 90, 90, 400, 3000, 5 * HOUR], "b": [61], "c": [2 * HOUR]}
    n = 0
    for topic, offsets in plan.items():
        for offset in offsets:
            assert wheel.schedule(timer(f"{topic}{n}", START + offset, topic)).outcome is (
                Scheduled.STORED
            )
            n += 1
    assert wheel.forecast is not None
    rows, complete = forecast_rows(
        [wheel.forecast], START, minute_seconds=MINUTES, hour_seconds=HOURS
    )
    assert complete
    a, b, other = rows["a"], rows["b"], rows[OTHER_TOPICS]  # max_topics=2: c is other
    assert a.minutes == [1, 2, 0, 0, 0, 0, 1, 0, 0, 0]
    assert a.hours == [5, 0, 0]  # 5 h out is past the 3 h window
    # (next_1h: the 10 minute rows of this small window; 3 hours of them by default)
    assert a.windows() == {"next_1m": 1, "next_5m": 3, "next_1h": 4, "next_24h": 5}
    assert b.minutes[1] == 1 and other.hours == [0, 0, 1]
    # Two minutes later: what was due in the first minute and has not fired is overdue.
    later, _ = forecast_rows(
        [wheel.forecast], START + 120, minute_seconds=MINUTES, hour_seconds=HOURS
    )
    assert later["a"].overdue == 3 and later["a"].minutes[:5] == [0, 0, 0, 0, 1]


def test_an_idle_tick_reads_nothing() -> None:
    kv = MemoryKV()
    wheel = PartitionWheel(kv, clock=lambda: START, forecast=new_forecast())
    wheel.recount()
    reads = []
    original = kv.scan

    def counting(low: bytes, high: bytes):  # type: ignore[no-untyped-def]
        reads.append((low, high))
        return original(low, high)

    kv.scan = counting  # type: ignore[method-assign]
    for s in range(START + 1, START + 50):
        wheel.begin_tick(s)
        wheel.finish_tick(s, [])
    # begin_tick's scan and the expiry sweep, and once the first look for expiry batches
    # (none: later ticks do not look): none of the forecast's own
    assert len(reads) == 2 * 49 + 1
    wheel.begin_tick(START + 60)  # a new minute: the minute edge moves, the hour edge not
    wheel.finish_tick(START + 60, [])
    assert len(reads) == 2 * 50 + 2
