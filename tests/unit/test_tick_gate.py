"""The tick gate: a second fires only when a tick has come for it and this worker's clock
has reached it (less the tolerance)."""

from __future__ import annotations

import pytest

from app.core.tick_gate import TickGate

NOW = 1_767_225_600


def test_a_tick_this_clock_has_reached_passes_as_it_is() -> None:
    gate = TickGate()
    assert gate.admit(0, NOW, NOW + 0.02) == (NOW, False)
    assert gate.admit(0, NOW - 30, NOW + 0.02) == (NOW - 30, False)  # a backlog
    assert not gate.holding


def test_a_tick_from_the_future_acts_on_the_agreed_second_and_is_held() -> None:
    gate = TickGate()
    assert gate.admit(3, NOW + 3600, NOW + 0.4) == (NOW, True)
    assert gate.holding and gate.held() == {3: NOW + 3600}


def test_a_hold_releases_second_by_second_and_is_dropped_once_reached() -> None:
    gate = TickGate()
    gate.admit(0, NOW + 2, NOW + 0.5)
    assert gate.release(NOW + 0.9) == {0: NOW}  # nothing new yet
    assert gate.release(NOW + 1.0) == {0: NOW + 1}
    assert gate.holding
    assert gate.release(NOW + 2.001) == {0: NOW + 2}
    assert not gate.holding
    assert gate.release(NOW + 3) == {}


def test_the_newest_held_second_is_kept_per_partition() -> None:
    gate = TickGate()
    gate.admit(0, NOW + 5, NOW)
    gate.admit(0, NOW + 3, NOW)  # an older tick (another oscillator) lowers nothing
    gate.admit(1, NOW + 2, NOW)
    assert gate.held() == {0: NOW + 5, 1: NOW + 2}


def test_the_tolerance_lets_a_tick_that_far_ahead_fire_at_once() -> None:
    gate = TickGate(tolerance=0.5)
    assert gate.admit(0, NOW + 1, NOW + 0.6) == (NOW + 1, False)
    assert gate.admit(0, NOW + 2, NOW + 0.6) == (NOW + 1, True)
    assert gate.seconds_to_next_release(NOW + 0.6) == pytest.approx(0.9)
    assert gate.release(NOW + 1.5) == {0: NOW + 2}
    with pytest.raises(ValueError):
        TickGate(tolerance=-1)


def test_the_next_release_is_at_this_clocks_next_second_boundary() -> None:
    gate = TickGate()
    assert gate.seconds_to_next_release(NOW + 0.25) == pytest.approx(0.75)
    assert gate.seconds_to_next_release(NOW) == pytest.approx(1.0)


def test_forgotten_partitions_release_nothing() -> None:
    gate = TickGate()
    gate.admit(0, NOW + 9, NOW)
    gate.admit(1, NOW + 9, NOW)
    gate.forget([0])
    assert gate.release(NOW + 10) == {1: NOW + 9}


def test_a_tick_further_ahead_than_max_ahead_is_not_held_and_fires_nothing_early() -> None:
    gate = TickGate(max_ahead=3600)
    assert gate.admit(0, 253_402_300_799, NOW + 0.5) == (NOW, False)  # the year 9999
    assert not gate.holding and gate.too_far_ahead == 1
    assert gate.admit(0, NOW + 3600, NOW + 0.5) == (NOW, True)  # within the bound: held
    assert gate.held() == {0: NOW + 3600}
    with pytest.raises(ValueError):
        TickGate(tolerance=5, max_ahead=1)
