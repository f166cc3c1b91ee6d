"""Wait for a condition with a deadline, instead of sleeping a fixed time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(probe: Callable[[], T], timeout: float, message: str, interval: float = 0.05) -> T:
    """Call ``probe`` until it returns something truthy; fail with ``message`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s: {message}")
        time.sleep(interval)  # poll interval, not a wait for a result
