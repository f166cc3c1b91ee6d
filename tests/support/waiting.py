"""Wait for a condition with a deadline, instead of sleeping a fixed time: the one way
tests wait for something to happen."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["keep_reading", "wait_until", "wait_until_async"]

T = TypeVar("T")


def wait_until(
    probe: Callable[[], T],
    timeout: float,
    message: str | Callable[[], str],
    interval: float = 0.05,
    *,
    between: Callable[[], object] | None = None,
) -> T:
    """Call ``probe`` until it returns something truthy, and return that.

    Args:
        probe: what to check; called at least once, even with a zero timeout.
        timeout: seconds (monotonic) before giving up with ``AssertionError``.
        message: what was waited for; a callable is asked only at the deadline, so it
            can describe the state things were left in.
        interval: seconds to sleep between two probes.
        between: called between two probes instead of sleeping, when something has to
            be done there that itself waits (reading a topic for up to 0.1 s).
    """
    deadline = time.monotonic() + timeout
    while not (result := _probe_once(probe, deadline, timeout, message)):
        if between is not None:
            between()
        else:
            time.sleep(interval)  # poll interval, not a wait for a result
    return result


async def wait_until_async(
    probe: Callable[[], T], timeout: float, message: str, interval: float = 0.01
) -> T:
    """:func:`wait_until` inside an event loop: the loop keeps running between probes."""
    deadline = time.monotonic() + timeout
    while not (result := _probe_once(probe, deadline, timeout, message)):
        await asyncio.sleep(interval)  # poll interval, not a wait for a result
    return result


def _probe_once(
    probe: Callable[[], T], deadline: float, timeout: float, message: str | Callable[[], str]
) -> T:
    """One probe of either wait: its result, or ``AssertionError`` if it is falsy at or
    past the deadline (so ``probe`` is called at least once, even with a zero timeout)."""
    result = probe()
    if not result and time.monotonic() >= deadline:
        what = message() if callable(message) else message
        raise AssertionError(f"timed out after {timeout:g}s: {what}")
    return result


def keep_reading(poll: Callable[[float], object], seconds: float) -> None:
    """Read with ``poll`` (a timeout in seconds) for ``seconds``: a window in which
    nothing more should arrive (a duplicate, a fire while paused) is watched, not slept
    through, so whatever does arrive is there for the test to find."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        poll(min(0.2, left))
