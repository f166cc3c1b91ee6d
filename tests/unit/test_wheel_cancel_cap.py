"""Cancels for ids that never come are capped per partition, and cannot renew themselves.

A flood of cancels for ids that never come (5,000 with 1 KB ids made 10,000 store keys
and 10.5 MB of changelog, kept a week) must stop growing at the cap; the running count
must equal a recount from the store, whatever mix of cancels, requests and expiry.
"""

from __future__ import annotations

import random

from app.core.timer import Cancel, Timer
from app.core.wheel import CancelOutcome, PartitionWheel, Scheduled
from tests.support.memkv import MemoryKV

WINDOW = 1000


def timer(timer_id: str, due: int, token: str = "tok") -> Timer:
    return Timer(id=timer_id, due=due, topic="cb", key=b"k", value=b"v", token=token)


def capped(kv: MemoryKV, cap: int = 3) -> PartitionWheel:
    return PartitionWheel(kv, memory_seconds=WINDOW, clock=lambda: 50.0, max_cancels_in_advance=cap)


def test_past_the_cap_a_cancel_in_advance_is_not_remembered_and_its_request_is_stored() -> None:
    kv = MemoryKV()
    wheel = capped(kv)
    outcomes = [wheel.cancel(Cancel(f"c{i}", "tok")).value for i in range(5)]
    assert outcomes == ["cancelled_in_advance"] * 3 + ["not_remembered"] * 2
    assert wheel.counts.in_advance == 3
    keys = len(kv.changes)
    # The same cancel again is answered the same and rewrites nothing: it cannot extend
    # its own window, nor take another slot.
    assert wheel.cancel(Cancel("c0", "tok")) is CancelOutcome.CANCELLED_IN_ADVANCE
    assert len(kv.changes) == keys and wheel.counts.in_advance == 3
    assert wheel.schedule(timer("c4", 100)).outcome is Scheduled.STORED
    assert wheel.schedule(timer("c0", 100)).outcome is Scheduled.CANCELLED_EARLIER


def test_a_slot_frees_when_its_id_is_scheduled_anew_or_forgotten() -> None:
    kv = MemoryKV()
    wheel = capped(kv, cap=2)
    wheel.cancel(Cancel("a", "tok"))
    wheel.cancel(Cancel("b", "tok"))
    assert wheel.cancel(Cancel("c", "tok")) is CancelOutcome.NOT_REMEMBERED
    # A new version (another token) of a cancelled-in-advance id is stored: slot free.
    assert wheel.schedule(timer("a", 100, token="other")).outcome is Scheduled.STORED
    assert wheel.counts.in_advance == 1
    assert wheel.cancel(Cancel("c", "tok")) is CancelOutcome.CANCELLED_IN_ADVANCE
    # The window passes: every remembered cancel is forgotten, every slot free.
    for second in (60, 50 + WINDOW + 1):
        due = wheel.begin_tick(second)
        assert due is not None
        wheel.finish_tick(second, due)
    assert wheel.counts.in_advance == 0


def test_the_running_count_equals_a_recount_under_any_mix() -> None:
    rng = random.Random(21)
    kv = MemoryKV()
    wheel = capped(kv, cap=20)
    second = 60
    for _ in range(3000):
        timer_id = f"id{rng.randrange(60)}"
        token = rng.choice(["tok", "other"])
        action = rng.randrange(5)
        if action == 0:
            wheel.cancel(Cancel(timer_id, token))
        elif action == 1:
            wheel.schedule(timer(timer_id, second + rng.randrange(1, 30), token))
        elif action == 2:
            wheel.cancel(Cancel(timer_id, token, check_token=False))
        else:
            second += rng.randrange(1, 40)
            due = wheel.begin_tick(second)
            if due is not None:
                wheel.finish_tick(second, due)
        assert wheel.counts.in_advance <= 20
    running = wheel.counts.in_advance
    assert running == capped(kv).recount().in_advance
    assert running > 0


def test_a_tombstone_cancels_only_timers_stored_without_a_token() -> None:
    wheel = capped(MemoryKV(), cap=10)
    wheel.schedule(timer("protected", 100, token="secret"))
    wheel.schedule(timer("etf1-key", 100, token=""))
    tombstone = Cancel("protected", "", check_token=False)
    assert wheel.cancel(tombstone) is CancelOutcome.WRONG_TOKEN
    assert wheel.get_pending("protected") is not None
    assert wheel.cancel(Cancel("etf1-key", "", check_token=False)) is CancelOutcome.CANCELLED


def test_an_id_cancelled_by_its_tombstone_can_be_scheduled_again() -> None:
    wheel = capped(MemoryKV(), cap=10)
    wheel.schedule(timer("etf1-key", 100, token=""))
    wheel.cancel(Cancel("etf1-key", "", check_token=False))
    # the cancelled version itself, redelivered, stays cancelled
    assert wheel.schedule(timer("etf1-key", 100, token="")).outcome is Scheduled.CANCELLED_EARLIER
    # a new version (another due time) is a new timer, not silently dropped for a week
    assert wheel.schedule(timer("etf1-key", 160, token="")).outcome is Scheduled.STORED
    assert wheel.get_pending("etf1-key") is not None
