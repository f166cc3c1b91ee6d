"""Bounded state: fired and cancelled ids are remembered for a window, then forgotten.

The wheel runs on the in-memory store; its ``changes`` list is the changelog, so
"what compaction keeps" (the newest record per key, unless it is a tombstone) can be
read back exactly as a recovering worker would.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from app.core import expiry_batch
from app.core.keys import (
    EXPIRY,
    EXPIRY_BATCH,
    EXPIRY_BATCH_END,
    EXPIRY_END,
    INDEX,
    INDEX_END,
    WATERMARK,
    index_key,
)
from app.core.timer import Cancel, Timer
from app.core.wheel import CancelOutcome, KeyCounts, PartitionWheel, Scheduled
from tests.support.memkv import MemoryKV

WINDOW = 1000


def timer(timer_id: str, due: int, token: str = "tok") -> Timer:
    return Timer(id=timer_id, due=due, topic="cb", key=b"k", value=b"v", token=token)


def wheel_on(kv: MemoryKV, **kwargs: int) -> PartitionWheel:
    return PartitionWheel(kv, memory_seconds=WINDOW, clock=lambda: 50.0, **kwargs)


def tick(wheel: PartitionWheel, second: int) -> list[str]:
    due = wheel.begin_tick(second)
    assert due is not None, f"tick {second} did not advance the wheel"
    wheel.finish_tick(second, due)
    return sorted(t.id for t in due)


def live_keys(kv: MemoryKV) -> set[bytes]:
    """What a compacted changelog keeps: keys whose newest record is not a tombstone."""
    newest: dict[bytes, bytes | None] = {}
    for key, value in kv.changes:
        newest[key] = value
    return {k for k, v in newest.items() if v is not None}


def assert_counts_match(wheel: PartitionWheel, kv: MemoryKV) -> None:
    kept = KeyCounts(**vars(wheel.counts))
    assert kept == wheel.recount(), "incremental key counts drifted from the store"
    non_wheel = {k for k in kv.data if k == WATERMARK}
    assert kept.pending + kept.remembered + len(non_wheel) == len(kv.data)


def test_fired_id_is_remembered_for_the_window_then_forgotten() -> None:
    kv = MemoryKV()
    wheel = wheel_on(kv)
    wheel.schedule(timer("a", 100))
    assert tick(wheel, 100) == ["a"]
    assert wheel.schedule(timer("a", 100)).outcome is Scheduled.DUPLICATE
    tick(wheel, 100 + WINDOW - 1)
    assert wheel.lookup("a") == ("fired", 100, "tok"), "forgotten before the window ended"
    tick(wheel, 100 + WINDOW)
    assert wheel.lookup("a") is None
    assert set(kv.data) == {WATERMARK}
    assert live_keys(kv) == {WATERMARK}, "the changelog still holds the forgotten id"
    # after the window a redelivered request is a new timer: it fires (again) at once
    assert wheel.schedule(timer("a", 100)).outcome is Scheduled.FIRE_NOW


def test_a_timer_fired_at_once_expires_from_its_tick() -> None:
    kv = MemoryKV()
    wheel = wheel_on(kv)
    tick(wheel, 500)
    late = timer("late", 10)
    assert wheel.schedule(late).outcome is Scheduled.FIRE_NOW
    wheel.mark_fired(late)
    tick(wheel, 500 + WINDOW - 1)
    assert wheel.schedule(late).outcome is Scheduled.DUPLICATE
    tick(wheel, 500 + WINDOW)
    assert live_keys(kv) == {WATERMARK}


def test_cancels_expire_the_same_way_in_advance_or_not() -> None:
    kv = MemoryKV()
    wheel = wheel_on(kv)
    tick(wheel, 100)
    wheel.schedule(timer("c", 5000))
    assert wheel.cancel(Cancel("c", "tok")) is CancelOutcome.CANCELLED
    for i in range(50):  # cancels for ids that never arrive: a producer cannot grow state
        assert wheel.cancel(Cancel(f"never-{i}", "x")) is CancelOutcome.CANCELLED_IN_ADVANCE
    assert_counts_match(wheel, kv)
    tick(wheel, 100 + WINDOW - 1)
    assert wheel.schedule(timer("never-7", 200, token="x")).outcome is Scheduled.CANCELLED_EARLIER
    tick(wheel, 100 + WINDOW)
    assert set(kv.data) == {WATERMARK}
    assert live_keys(kv) == {WATERMARK}
    assert_counts_match(wheel, kv)


def test_a_cancel_before_the_first_tick_expires_from_the_clock() -> None:
    kv = MemoryKV()
    wheel = wheel_on(kv)  # clock says 50
    assert wheel.cancel(Cancel("early", "t")) is CancelOutcome.CANCELLED_IN_ADVANCE
    tick(wheel, 50 + WINDOW - 1)
    assert wheel.lookup("early") == ("cancelled", 0, "t")
    tick(wheel, 50 + WINDOW)
    assert wheel.lookup("early") is None


def test_a_reschedule_after_the_fire_survives_the_old_expiry() -> None:
    kv = MemoryKV()
    wheel = wheel_on(kv)
    wheel.schedule(timer("a", 100, token="t1"))
    tick(wheel, 100)
    later = 100 + WINDOW + 500
    assert wheel.schedule(timer("a", later, token="t2")).outcome is Scheduled.STORED
    tick(wheel, 100 + WINDOW)  # the old fire's expiry: the new pending entry must stay
    assert wheel.lookup("a") == ("pending", later, "t2")
    assert_counts_match(wheel, kv)
    assert tick(wheel, later) == ["a"]
    tick(wheel, later + WINDOW)
    assert live_keys(kv) == {WATERMARK}


def test_a_newer_terminal_entry_is_not_removed_by_an_older_expiry() -> None:
    kv = MemoryKV()
    wheel = wheel_on(kv)
    wheel.schedule(timer("a", 100, token="t1"))
    tick(wheel, 100)
    wheel.schedule(timer("a", 200, token="t2"))
    tick(wheel, 200)  # fired again: a second expiry key, at 200 + WINDOW
    tick(wheel, 100 + WINDOW)
    assert wheel.lookup("a") == ("fired", 200, "t2")
    tick(wheel, 200 + WINDOW)
    assert wheel.lookup("a") is None


def test_the_same_cancel_again_is_remembered_from_the_first() -> None:
    kv = MemoryKV()
    wheel = wheel_on(kv)
    tick(wheel, 100)
    wheel.cancel(Cancel("x", "t"))
    tick(wheel, 300)
    writes = len(kv.changes)
    assert wheel.cancel(Cancel("x", "t")) is CancelOutcome.CANCELLED_IN_ADVANCE
    assert len(kv.changes) == writes, "an identical cancel must not write again"
    tick(wheel, 100 + WINDOW)
    assert wheel.lookup("x") is None


def test_the_sweep_is_bounded_per_tick_and_carries_on() -> None:
    kv = MemoryKV()
    wheel = wheel_on(kv, sweep_limit=1000)
    for i in range(2500):
        wheel.schedule(timer(f"t{i:04d}", 100))
        wheel.cancel(Cancel(f"c{i:04d}", "tok"))  # in advance: an expiry key each
    tick(wheel, 100)
    batches = -(-2500 // expiry_batch.MAX_ENTRIES)
    assert wheel.counts.remembered == 2 * 2500 + 2500 + batches
    assert sum(1 for _ in kv.scan(EXPIRY_BATCH, EXPIRY_BATCH_END)) == batches

    def remembered_ids() -> int:
        return sum(1 for _ in kv.scan(INDEX, INDEX_END))

    # The cancels expire first (remembered from the clock's 50, not the tick's 100): a
    # thousand keys a tick.
    tick(wheel, 50 + WINDOW)
    assert remembered_ids() == 4000
    tick(wheel, 51 + WINDOW)
    tick(wheel, 52 + WINDOW)
    assert sum(1 for _ in kv.scan(EXPIRY, EXPIRY_END)) == 0
    assert remembered_ids() == 2500
    # Then the fired ids, by whole batches: at least the budget, less than a batch more.
    tick(wheel, 100 + WINDOW)
    assert 1000 <= 2500 - remembered_ids() < 1000 + expiry_batch.MAX_ENTRIES
    tick(wheel, 101 + WINDOW)
    tick(wheel, 102 + WINDOW)
    assert remembered_ids() == 0
    assert set(kv.data) == {WATERMARK}
    assert wheel.counts == KeyCounts()


def test_a_restarted_wheel_sweeps_what_its_predecessor_left() -> None:
    kv = MemoryKV()
    wheel = wheel_on(kv)
    wheel.schedule(timer("a", 100))
    tick(wheel, 100)
    reborn = wheel_on(kv)
    reborn.recount()
    tick(reborn, 100 + WINDOW)
    assert reborn.lookup("a") is None
    assert kv.get(index_key("a")) is None


class DeferringKV(MemoryKV):
    """A store whose writes can be held back, as the worker's are within a unit of work
    (:meth:`app.worker.partition_store.ChangeloggedKV.defer_local_writes`): reads by key
    see them, scans do not until they are applied."""

    def __init__(self) -> None:
        super().__init__()
        self._deferred: dict[bytes, bytes | None] | None = None

    def defer(self) -> None:
        self._deferred = {}

    def apply(self) -> None:
        deferred, self._deferred = self._deferred or {}, None
        for key, value in deferred.items():
            if value is None:
                super().delete(key)
            else:
                super().put(key, value)

    def get(self, key: bytes) -> bytes | None:
        if self._deferred is not None and key in self._deferred:
            return self._deferred[key]
        return super().get(key)

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return [self.get(key) for key in keys]

    def put(self, key: bytes, value: bytes) -> None:
        if self._deferred is None:
            super().put(key, value)
        else:
            self._deferred[key] = value

    def delete(self, key: bytes) -> None:
        if self._deferred is None:
            super().delete(key)
        else:
            self._deferred[key] = None


def test_a_batch_written_in_the_unit_that_sweeps_is_swept_when_it_expires() -> None:
    # The tick that fires a timer writes its expiry batch and then sweeps, in one unit:
    # the sweep's scan cannot see the batch, and must not conclude there is none.
    kv = DeferringKV()
    wheel = wheel_on(kv)
    wheel.schedule(timer("a", 100))
    for second in (100, 101, 100 + WINDOW):
        kv.defer()
        tick(wheel, second)
        kv.apply()
    assert wheel.lookup("a") is None
    assert set(kv.data) == {WATERMARK}
    assert wheel.counts == KeyCounts()


def test_a_batch_never_replaces_one_under_the_same_key() -> None:
    # Two batches of one expiry second whose first id is the same (that id ended twice
    # in one second, as two release rounds of a tick second can make it): both are kept,
    # so neither's ids escape the sweep, and both are swept.
    kv = MemoryKV()
    wheel = wheel_on(kv)
    wheel.schedule(timer("a", 100))
    wheel.schedule(timer("b", 100))
    tick(wheel, 100)
    entry = kv.get(index_key("a"))
    assert entry is not None
    wheel.counts.remembered += wheel._put_expiry_batches([(b"a", entry), (b"c", b"F1")])
    assert sum(1 for _ in kv.scan(EXPIRY_BATCH, EXPIRY_BATCH_END)) == 2
    assert_counts_match(wheel, kv)
    tick(wheel, 100 + WINDOW)
    assert set(kv.data) == {WATERMARK}
    assert wheel.counts == KeyCounts()


@pytest.mark.parametrize("deferred", [False, True], ids=["direct", "deferred-writes"])
def test_key_counts_stay_exact_through_any_sequence(deferred: bool) -> None:
    rng = random.Random(7)
    kv = DeferringKV()
    wheel = wheel_on(kv, sweep_limit=7)
    second = 100
    ids = [f"id{i}" for i in range(40)]
    for step in range(4000):
        action = rng.random()
        timer_id = rng.choice(ids)
        token = rng.choice(("a", "b"))
        if action < 0.45:
            t = timer(timer_id, second + rng.randint(-5, 3 * WINDOW // 2), token)
            if wheel.schedule(t).outcome is Scheduled.FIRE_NOW:
                wheel.mark_fired(t)
        elif action < 0.65:
            wheel.cancel(Cancel(timer_id, token, check_token=rng.random() < 0.9))
        elif action < 0.7:
            # a tick whose delivery fails, with requests arriving meanwhile
            due = wheel.begin_tick(second + 1)
            if due is not None:
                second += 1
                wheel.schedule(timer(rng.choice(ids), second + rng.randint(0, 50), "c"))
                wheel.abort_tick()
        else:
            second += rng.randint(1, 40)
            due = wheel.begin_tick(second)
            assert due is not None
            if rng.random() < 0.2:  # a request for the same id while the tick is delivered
                t = timer(timer_id, second + rng.randint(0, 50), "d")
                if wheel.schedule(t).outcome is Scheduled.FIRE_NOW:
                    wheel.mark_fired(t)
            if deferred:  # the worker's unit of work: the forgetting, then the sweep
                kv.defer()
            wheel.finish_tick(second, due)
            kv.apply()
        if step % 97 == 0:
            assert_counts_match(wheel, kv)
    assert_counts_match(wheel, kv)
    # Then quiet: everything pending fires, everything remembered expires.
    for _ in range(20):
        second += 5 * WINDOW
        tick(wheel, second)
    assert_counts_match(wheel, kv)
    assert set(kv.data) == {WATERMARK}
    assert live_keys(kv) == {WATERMARK}
