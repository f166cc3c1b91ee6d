"""Tick fetch pacing: long waits while idle, never past a boundary, short while due."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.core.fetch_pacing import GRACE, SHORT_WAIT_MS, TickWatch, tick_fetch_wait_ms

SECOND = 1_700_000_000


def test_an_idle_fetch_waits_until_the_next_boundary_at_most() -> None:
    # The tick of SECOND has come: nothing is due before SECOND + 1.
    assert tick_fetch_wait_ms(SECOND + 0.4, SECOND, 500) == 500
    assert tick_fetch_wait_ms(SECOND + 0.7, SECOND, 500) == 300
    assert tick_fetch_wait_ms(SECOND + 0.1, SECOND, 2_000) == 900


def test_a_fetch_right_after_a_boundary_whose_tick_is_missing_is_short() -> None:
    assert tick_fetch_wait_ms(SECOND + 0.001, SECOND - 1, 500) == SHORT_WAIT_MS
    assert tick_fetch_wait_ms(SECOND + 0.2, None, 500) == SHORT_WAIT_MS


def test_a_tick_missing_past_the_grace_goes_back_to_long_waits() -> None:
    # Oscillators down: polling fast for a whole second would only burn CPU.
    assert tick_fetch_wait_ms(SECOND + GRACE + 0.05, SECOND - 1, 500) == 500


def test_settling_and_a_short_maximum_keep_fetches_short() -> None:
    assert tick_fetch_wait_ms(SECOND + 0.5, SECOND, 500, settling=True) == SHORT_WAIT_MS
    assert tick_fetch_wait_ms(SECOND + 0.5, SECOND, 5) == 5
    assert tick_fetch_wait_ms(SECOND + 0.5, SECOND, 5, settling=True) == 5


def test_a_fetch_just_before_a_boundary_still_waits_the_short_wait() -> None:
    assert tick_fetch_wait_ms(SECOND + 0.9995, SECOND, 500) == SHORT_WAIT_MS


@given(
    offset=st.floats(min_value=0, max_value=0.999_999),
    behind=st.sampled_from([None, 0, 1, 5]),
    longest=st.integers(min_value=1, max_value=10_000),
)
def test_no_fetch_outlasts_the_maximum_or_ends_well_past_the_next_boundary(
    offset: float, behind: int | None, longest: int
) -> None:
    now = SECOND + offset
    oldest = None if behind is None else SECOND - behind
    wait = tick_fetch_wait_ms(now, oldest, longest)
    assert 1 <= wait <= longest
    # It ends by the next boundary, or is the short wait (never a long one across it).
    assert now + wait / 1000 <= SECOND + 1 + 0.002 or wait <= SHORT_WAIT_MS


def test_the_watch_reports_the_oldest_newest_tick_of_the_assigned_partitions() -> None:
    watch = TickWatch()
    watch.assigned([0, 1, 2])
    assert watch.oldest is None  # no tick seen on any yet
    watch.ticked([(0, SECOND), (1, SECOND)])
    assert watch.oldest is None  # partition 2 still has none
    watch.ticked([(2, SECOND - 1), (0, SECOND - 3)])  # an older tick changes nothing
    assert watch.oldest == SECOND - 1
    watch.ticked([(2, SECOND), (7, SECOND + 5)])  # 7 is not assigned: ignored
    assert watch.oldest == SECOND
    watch.assigned([0, 1])  # 2 revoked; what is known of 0 and 1 is kept
    assert watch.oldest == SECOND
    watch.assigned([0, 1, 3])
    assert watch.oldest is None


def test_a_batch_covers_the_second_once_every_assigned_partition_has_its_tick() -> None:
    watch = TickWatch()
    watch.assigned([0, 1, 2])
    assert not watch.covers([])
    assert not watch.covers([(0, SECOND), (1, SECOND)])  # partition 2's tick still out
    assert watch.covers([(0, SECOND), (1, SECOND), (2, SECOND), (1, SECOND)])
    assert not watch.covers([(0, SECOND + 1), (1, SECOND), (2, SECOND)])  # 1, 2 behind
    watch.ticked([(0, SECOND), (1, SECOND), (2, SECOND)])
    assert watch.covers([(0, SECOND)])  # a late duplicate adds nothing missing
    assert not watch.covers([(0, SECOND + 1)])
    assert watch.covers([(9, SECOND)])  # an unassigned partition's tick changes nothing
