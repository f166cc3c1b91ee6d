"""The token bucket and the per-partition gates behind per-topic rate limits and pauses."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.worker.topic_gates import (
    BURST_SECONDS,
    WINDOW_BURST_SHARE,
    WINDOW_SECONDS,
    TokenBucket,
    TopicGates,
)


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
        assert window <= 62.5 * (1 + BURST_SECONDS * WINDOW_BURST_SHARE) + 1


def test_a_backlogged_bucket_served_by_slow_rounds_still_gives_its_rate() -> None:
    """Rounds a quarter second apart (a big flush): a tenth-of-a-second bucket would give
    40% of the rate; a backlogged one keeps what accrues between rounds."""
    bucket = TokenBucket(6_250.0, now=0.0)
    t, total = 0.0, 0
    while t < 10.0:
        t += 0.25
        n = bucket.available(t)
        bucket.spend(n, backlogged=True)
        total += n
    assert total == pytest.approx(6_250 * 10, rel=0.03)


def test_an_idle_bucket_keeps_only_its_burst() -> None:
    bucket = TokenBucket(100.0, now=0.0)
    bucket.spend(0, backlogged=False)  # the last round emptied what was held
    assert bucket.available(5.0) == round(100 * BURST_SECONDS)


@settings(max_examples=200, deadline=None)
@given(
    rate=st.sampled_from([0.5, 7.0, 62.5, 6_250.0]),
    rounds=st.lists(
        st.tuples(st.floats(0.001, 2.5), st.booleans(), st.floats(0.0, 1.0)),
        min_size=1,
        max_size=60,
    ),
)
def test_no_window_gets_more_than_the_rate_plus_the_burst(
    rate: float, rounds: list[tuple[float, bool, float]]
) -> None:
    """Whatever the rounds' spacing (stalls included), whether timers remain after each,
    and however much of its budget each round takes."""
    bucket = TokenBucket(rate, now=0.0)
    t = 0.0
    given_at: list[tuple[float, int]] = []
    for gap, backlogged, share in rounds:
        t += gap
        n = math.floor(bucket.available(t) * share)
        bucket.spend(n, backlogged=backlogged)
        given_at.append((t, n))
    ceiling = rate * WINDOW_SECONDS + bucket.capacity * WINDOW_BURST_SHARE
    for start, _ in given_at:
        window = sum(n for at, n in given_at if start <= at < start + WINDOW_SECONDS)
        assert window <= ceiling + 1e-9
    assert sum(n for _, n in given_at) <= rate * t + bucket.capacity + 1e-9


def busiest_window(stamps: list[float]) -> int:
    """Most of ``stamps`` in any window ``[s, s + WINDOW_SECONDS)``."""
    stamps = sorted(stamps)
    most, first = 0, 0
    for last, at in enumerate(stamps):
        while stamps[first] <= at - WINDOW_SECONDS:
            first += 1
        most = max(most, last - first + 1)
    return most


@settings(max_examples=200, deadline=None)
@given(
    rate=st.sampled_from([7.0, 62.5, 1_500.0]),
    rounds=st.lists(
        st.tuples(st.floats(0.0, 1.5), st.floats(0.0, 1.2), st.floats(0.0, 1.0)),
        min_size=1,
        max_size=40,
    ),
)
def test_no_second_of_record_timestamps_gets_more_than_the_rate_plus_the_burst(
    rate: float, rounds: list[tuple[float, float, float]]
) -> None:
    """Rounds that take a while to produce what they took (each callback's record
    timestamp is the moment it was produced, spread over the round), with gaps between
    rounds and stalls: counted from when each round took its tokens, a round produced
    into the next second let that second get ~1.25x the limit (15,038 at 12,000/s)."""
    clock = Clock(0.0)
    gates = TopicGates({"t": rate}, partitions=1, clock=clock)
    stamps: list[float] = []
    for gap, producing, share in rounds:
        clock.now += gap
        budget = gates.budget(0, "t")
        assert budget is not None
        n = math.floor(budget * share)
        gates.spend(0, "t", n, waiting=1)
        taken = clock.now
        stamps.extend(taken + producing * (i + 1) / n for i in range(n))
        clock.now = taken + producing
        gates.produced(0)
    burst = max(1.0, rate * BURST_SECONDS) * WINDOW_BURST_SHARE
    assert busiest_window(stamps) <= rate * WINDOW_SECONDS + burst


@settings(max_examples=200, deadline=None)
@given(
    partitions=st.integers(2, 8),
    steps=st.lists(
        st.tuples(
            st.floats(0.01, 0.4),
            st.lists(st.integers(0, 3000), min_size=8, max_size=8),
        ),
        min_size=1,
        max_size=40,
    ),
)
def test_shares_that_move_between_partitions_keep_the_topic_within_its_limit(
    partitions: int, steps: list[tuple[float, list[int]]]
) -> None:
    """Backlogs that move between partitions retune every bucket (shares that add up to
    the limit at every moment): the topic's busiest second stays within the limit plus
    a tenth (the acceptance's bound; 4,000 drawn cases held). Windows bounded by each
    bucket's current rate let a bucket whose share had just risen give a whole second
    at it beside one that had given at its old share (551 in a second at 500/s, in CI;
    561 here)."""
    from app.core.rate_shares import partition_rates

    limit = 500.0
    clock = Clock(0.0)
    gates = TopicGates({"t": limit}, partitions=partitions, clock=clock)
    stamps: list[float] = []
    for gap, backlog in steps:
        backlogs = {p: n for p, n in enumerate(backlog[:partitions]) if n}
        gates.share("t", partition_rates(limit, partitions, backlogs, range(partitions)))
        end = clock.now + gap
        while clock.now < end:
            for partition in range(partitions):
                budget = gates.budget(partition, "t")
                assert budget is not None
                gates.spend(partition, "t", budget, waiting=1)
                stamps.extend([clock.now] * budget)
                gates.produced(partition)
            clock.now += 0.05
    assert busiest_window(stamps) <= limit * (1 + BURST_SECONDS) + partitions


def test_a_full_window_says_when_it_has_room_again() -> None:
    bucket = TokenBucket(100.0, now=0.0)
    bucket.spend(0, backlogged=True)
    assert bucket.available(1.0) == 100
    bucket.spend(100, backlogged=True)
    bucket.tokens = 20.0  # tokens to spare, but the window is full but for half its burst
    assert bucket.available(1.0) == 5
    bucket.spend(5, backlogged=True)
    assert bucket.seconds_to(1.0) == pytest.approx(1.0)


def test_gates_share_a_limit_per_partition_and_start_each_bucket_empty() -> None:
    clock = Clock()
    gates = TopicGates({"reminders": 800.0}, partitions=8, clock=clock)
    assert gates.gated == frozenset({"reminders"})
    assert gates.budget(3, "other") is None
    assert gates.budget(3, "reminders") == 0
    clock.now += 0.05
    assert gates.budget(3, "reminders") == 5  # 100/s for each of 8 partitions
    gates.spend(3, "reminders", 5)
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
    assert gates.budget(0, "t") == 5  # 100/s per partition; a round takes 0.05 s of it
    gates.set_rate("t", None)
    assert gates.gated == frozenset() and gates.budget(0, "t") is None
    with pytest.raises(ValueError):
        gates.set_rate("t", 0)


def test_a_bucket_retuned_for_ever_without_being_asked_keeps_one_window_of_rates() -> None:
    """Shares are retuned four times a second while a topic has a backlog anywhere; a
    partition's bucket that is never asked for tokens meanwhile must not keep them all."""
    bucket = TokenBucket(10.0, now=0.0)
    for step in range(1, 4001):
        bucket.retune(10.0 + step % 7, now=step * 0.25)
    assert len(bucket._rates) <= 1 + WINDOW_SECONDS / 0.25


def test_a_round_takes_at_most_the_windows_slack_and_the_rounds_after_it_the_rest() -> None:
    """A round late by a quarter second finds a quarter second of tokens, but takes at
    most one release interval of them (the window's slack): a round counts whole in the
    window until its last callback leaves it, so a big one would cost the rate (a
    million in one partition at 50,000/s: rounds of 26,847 and 0.82x). The rounds that
    follow at once take the rest."""
    clock = Clock()
    gates = TopicGates({"reminders": 8 * 50_000.0}, partitions=8, clock=clock)
    gates.budget(0, "reminders")
    gates.spend(0, "reminders", 0, waiting=1_000_000)  # backlogged: keeps what accrues
    clock.now += 0.25
    taken = []
    for _ in range(5):
        n = gates.budget(0, "reminders")
        assert n is not None
        gates.spend(0, "reminders", n, waiting=1_000_000)
        gates.produced(0)
        taken.append(n)
    assert taken == [2_500] * 5  # 50,000/s x RELEASE_INTERVAL each, 12,500 in all
    assert gates.budget(0, "reminders") == 0
