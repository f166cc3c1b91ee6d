"""TimerService with clocks that disagree: ticks from the future wait for the worker's clock.

The harness is the one of ``test_service.py`` (memory stores, a fake output, a clock set
by hand); here ticks are handed over *without* moving the clock, the way a tick from an
oscillator whose clock runs ahead arrives.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import pytest

from tests.unit.test_service import NOW, Harness, run


def tick_at(h: Harness, second: int, *partitions: int, source: str = "fast") -> int:
    """Tick ``second`` arriving now, whatever the worker's clock says."""
    ticks = [(p, second, None, source) for p in partitions or (0,)]
    return run(h.service.handle_ticks(ticks))


def release(h: Harness) -> int:
    return run(h.service.release_held_ticks())


def fires(h: Harness) -> list[tuple[str, int, int]]:
    """``(id, due, fired_at_ms)`` of every durable callback."""
    return [(t.id, t.due, ms) for t, ms in h.output.durable.callbacks]


def held_count(h: Harness, source: str = "fast") -> float:
    value = h.metrics.registry.get_sample_value("kafka_timers_ticks_held_total", {"source": source})
    return value or 0.0


def test_an_oscillator_an_hour_ahead_fires_each_timer_at_its_second_by_the_worker() -> None:
    h = Harness()
    h.clock.now = NOW + 0.5
    h.requests(*(h.schedule(f"t{i}", NOW + i) for i in range(1, 6)))
    assert tick_at(h, NOW + 3600) == 0
    assert held_count(h) == 1
    for second in range(NOW + 1, NOW + 6):
        h.clock.now = second + 0.001
        assert release(h) == 1
    assert [i for i, _, _ in fires(h)] == ["t1", "t2", "t3", "t4", "t5"]
    assert all(ms >= due * 1000 for _, due, ms in fires(h))
    assert h.service.held_ticks() == {0: NOW + 3600}  # still waiting for the worker's clock
    lead = h.metrics.registry.get_sample_value(
        "kafka_timers_oscillator_ahead_seconds", {"source": "fast"}
    )
    assert lead == pytest.approx(3599.5)


def test_an_honest_oscillator_keeps_timers_on_time_beside_a_fast_one() -> None:
    h = Harness()
    h.clock.now = NOW + 0.2
    h.requests(h.schedule("a", NOW + 1), h.schedule("b", NOW + 2))
    tick_at(h, NOW + 3600)
    h.clock.now = NOW + 1.01
    assert tick_at(h, NOW + 1, source="honest") == 1
    assert held_count(h, "honest") == 0
    assert [i for i, _, _ in fires(h)] == ["a"]


def test_a_request_for_a_second_only_a_fast_oscillator_reached_is_stored_not_fired() -> None:
    h = Harness()
    h.clock.now = NOW + 0.5
    tick_at(h, NOW + 3600)
    h.requests(h.schedule("soon", NOW + 30))
    assert fires(h) == []
    assert h.pending() == 1
    h.requests(h.schedule("past", NOW))  # the worker's clock has reached this one
    assert [i for i, _, _ in fires(h)] == ["past"]


def test_a_worker_clock_behind_fires_late_by_its_lag_never_early() -> None:
    h = Harness()
    h.clock.now = NOW - 3 + 0.01  # three seconds behind an honest oscillator
    h.requests(h.schedule("a", NOW - 1), h.schedule("b", NOW))
    assert tick_at(h, NOW, source="honest") == 0
    assert held_count(h, "honest") == 1
    h.clock.now = NOW - 1 + 0.01
    assert release(h) == 1
    h.clock.now = NOW + 0.01
    assert release(h) == 1
    assert not h.service.held_ticks()
    assert all(ms >= due * 1000 for _, due, ms in fires(h))


def test_the_tolerance_lets_ticks_that_far_ahead_fire_at_once() -> None:
    h = Harness(tick_tolerance_seconds=0.5)
    h.clock.now = NOW + 0.6
    h.requests(h.schedule("a", NOW + 1))
    assert tick_at(h, NOW + 1) == 1
    assert held_count(h) == 0


def test_exactly_once_releases_held_ticks_through_transactions() -> None:
    h = Harness(transactional=True)
    h.clock.now = NOW + 0.5
    h.requests(h.schedule("a", NOW + 1), h.schedule("b", NOW + 2, partition=1))
    assert tick_at(h, NOW + 3600, 0, 1) == 0
    h.clock.now = NOW + 2.0
    assert release(h) == 2
    assert sorted(i for i, _, _ in fires(h)) == ["a", "b"]
    assert not h.output.in_transaction


def test_a_revoked_partition_drops_its_hold_and_is_not_reopened() -> None:
    h = Harness()
    h.clock.now = NOW + 0.5
    h.requests(h.schedule("a", NOW + 1))
    tick_at(h, NOW + 3600)
    opened = len(h.stores.opened)
    run(h.service.revoke_partitions([0]))
    h.clock.now = NOW + 5
    assert release(h) == 0
    assert fires(h) == []
    assert len(h.stores.opened) == opened


def test_the_release_loop_wakes_at_each_second_while_something_is_held() -> None:
    h = Harness()
    h.clock.now = NOW + 0.3
    h.requests(*(h.schedule(f"t{i}", NOW + i) for i in range(1, 4)))
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        h.clock.now += seconds
        await asyncio.sleep(0)  # the fake clock's sleep: one turn of the loop, no time

    async def scenario() -> None:
        loop_task = asyncio.create_task(h.service.run_tick_release(sleep))
        await h.service.handle_ticks([(0, NOW + 3, None, "fast")])
        for _ in range(200):  # yield until the loop has released everything
            if not h.service.held_ticks():
                break
            await asyncio.sleep(0)  # a turn of the loop (bounded above), not a time
        assert not loop_task.done()
        loop_task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await loop_task

    run(scenario())
    assert [i for i, _, _ in fires(h)] == ["t1", "t2", "t3"]
    assert all(ms >= due * 1000 for _, due, ms in fires(h))
    assert len(slept) == 3 and slept[0] == pytest.approx(0.701)


def test_ticks_and_releases_never_fire_at_the_same_time() -> None:
    h = Harness()
    h.clock.now = NOW + 0.5
    h.requests(h.schedule("a", NOW + 1), h.schedule("b", NOW + 1, partition=1))
    tick_at(h, NOW + 1)  # held on partition 0
    h.clock.now = NOW + 1.01
    active, most = 0, 0
    flush = h.output.flush

    async def slow_flush(timeout: float = 60.0) -> None:
        nonlocal active, most
        active += 1
        most = max(most, active)
        await asyncio.sleep(0.01)  # a flush that takes a while: what the test overlaps, not a wait
        await flush(timeout)
        active -= 1

    h.output.flush = slow_flush  # type: ignore[method-assign]

    async def both() -> Sequence[int]:
        return await asyncio.gather(
            h.service.release_held_ticks(),
            h.service.handle_ticks([(1, NOW + 1, None, "honest")]),
        )

    assert sorted(run(both())) == [1, 1]
    assert most == 1


def test_an_oscillator_far_ahead_is_named_with_its_lead(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness()
    h.clock.now = NOW + 0.5
    with caplog.at_level(logging.WARNING):
        tick_at(h, NOW + 3000, source="osc-fast")  # what a starting worker reads first
        tick_at(h, NOW, source="osc-good")
        assert not caplog.records  # its size is known once a whole window of ticks is in
        for second in range(1, 12):
            h.clock.now = NOW + second + 0.5
            tick_at(h, NOW + 3600 + second, source="osc-fast")
            tick_at(h, NOW + second, source="osc-good")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    assert "osc-fast" in messages[0] and "3599.500s ahead" in messages[0]
    assert "probably behind" not in messages[0]


def test_when_every_oscillator_is_ahead_the_worker_says_its_own_clock_is_behind(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness()
    with caplog.at_level(logging.WARNING):
        for second in range(12):
            h.clock.now = NOW + second - 9.5
            tick_at(h, NOW + second, source="osc-1")
            tick_at(h, NOW + second, source="osc-2")
    assert "this worker's clock is probably behind, by about 9.500s" in caplog.text
