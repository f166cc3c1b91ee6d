"""Second boundaries, with the clock and the sleep injected so tests drive time."""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["wait_for_second"]


def wait_for_second(
    second: int, clock: Callable[[], float], wait: Callable[[float], bool]
) -> float | None:
    """Block until ``clock()`` reaches ``second``; return the time it did, or None if stopped.

    ``wait(timeout)`` sleeps and returns True when asked to stop (``threading.Event.wait``).
    Sleeps until the boundary, then re-checks the clock: a sleep that comes back early
    never produces an early tick.
    """
    while True:
        now = clock()
        if now >= second:
            return now
        if wait(second - now):
            return None


def current_second(clock: Callable[[], float]) -> int:
    """The epoch second that has most recently begun."""
    return math.floor(clock())
