"""The token bucket and the per-partition gates behind per-topic rate limits and pauses."""

from __future__ import annotations

import math

import pytest

from app.worker.topic_gates import BURST_SECONDS, TokenBucket, TopicGates


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_bucket_starts_empty_and_refills_at_its_rate() -> None:
    bucket = TokenBucket(100.0, now=0.0)
    assert bucket.available(0.0) == 0  # no burst at start
    assert bucket.available(0.05) == 5
    bucket.spend(5)
    assert bucket.available(0.06) == 1


def test_a_bucket_holds_at_most_a_tenth_of_a_second_and_at_least_one() -> None:
    bucket = TokenBucket(100.0, now=0.0)
    assert bucket.available(60.0) == round(100 * BURST_SECONDS)  # idle a minute: 10, not 6,000
    slow = TokenBucket(0.5, now=0.0)
    assert slow.available(60.0) == 1
    assert slow.seconds_to(2.0) == pytest.approx(2.0)


def test_spending_more_than_available_is_a_debt_the_refill_pays_first() -> None:
    bucket = TokenBucket(10.0, now=0.0)
    bucket.spend(3)  # a series that caught up three occurrences in one fire
    assert bucket.available(0.2) == 0
    assert bucket.available(0.4) == 1


def test_over_any_second_a_bucket_gives_at_most_its_rate_plus_its_burst() -> None:
    bucket = TokenBucket(62.5, now=0.0)
    given: list[tuple[float, int]] = []
    t = 5.0  # idle first: the bucket is full when the burst comes
    while t < 15.0:
        n = bucket.available(t)
        bucket.spend(n)
        given.append((t, n))
        t += 0.013
    for start in [5.0 + k * 0.1 for k in range(90)]:
        window = sum(n for at, n in given if start <= at < start + 1.0)
        assert window <= 62.5 * (1 + BURST_SECONDS) + 1


def test_gates_share_a_limit_per_partition_and_start_each_bucket_empty() -> None:
    clock = Clock()
    gates = TopicGates({"reminders": 800.0}, partitions=8, clock=clock)
    assert gates.gated == frozenset({"reminders"})
    assert gates.budget(3, "other") is None
    assert gates.budget(3, "reminders") == 0
    clock.now += 0.1
    assert gates.budget(3, "reminders") == 10  # 100/s for each of 8 partitions
    gates.spend(3, "reminders", 10)
    clock.now += 1.0
    gates.forget([3])  # revoked: the next owner starts from nothing, never a burst
    assert gates.budget(3, "reminders") == 0


def test_pause_is_rate_zero_until_resumed_and_nothing_accrues_meanwhile() -> None:
    clock = Clock()
    gates = TopicGates({"billing": 10.0}, partitions=1, clock=clock)
    changes: list[str] = []
    gates.on_change(lambda: changes.append("x"))
    gates.budget(0, "billing")
    gates.pause("billing")
    gates.pause("unlimited")
    assert gates.paused() == frozenset({"billing", "unlimited"})
    assert gates.gated == frozenset({"billing", "unlimited"})
    clock.now += 60
    assert gates.budget(0, "billing") == 0
    assert gates.budget(0, "unlimited") == 0
    assert gates.seconds_to_next(0, "billing") == math.inf
    gates.resume("billing")
    gates.resume("unlimited")
    assert gates.budget(0, "billing") == 0  # a minute paused is not a minute of tokens
    assert gates.budget(0, "unlimited") is None
    clock.now += 0.1
    assert gates.budget(0, "billing") == 1
    assert len(changes) == 4


def test_set_rate_changes_a_limit_at_run_time_and_none_lifts_it() -> None:
    clock = Clock()
    gates = TopicGates(partitions=2, clock=clock)
    assert gates.gated == frozenset()
    gates.set_rate("t", 20.0)
    assert gates.limits() == {"t": 20.0}
    gates.budget(0, "t")
    clock.now += 0.1
    assert gates.budget(0, "t") == 1  # 10/s per partition
    gates.set_rate("t", 200.0)
    clock.now += 0.1
    assert gates.budget(0, "t") == 10
    gates.set_rate("t", None)
    assert gates.gated == frozenset() and gates.budget(0, "t") is None
    with pytest.raises(ValueError):
        gates.set_rate("t", 0)
