"""An oscillator's ``/livez``: it sent its last tick in time.

A tick is due every second. An oscillator whose newest tick is older than the liveness
timeout (``KAFKA_TIMERS_LIVENESS_TIMEOUT``) is stuck: its loop stopped, or producing
blocks. It answers 503 with the reason, so an orchestrator restarts it. (Other
oscillators keep the workers ticking meanwhile: run at least two.)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from app.telemetry import HealthCheck, HealthReport
from oscillator.ticker import Oscillator

__all__ = ["LIVEZ_PATH", "tick_liveness"]

#: Where the oscillator's metrics server answers the check (probes point here).
LIVEZ_PATH = "/livez"


def tick_liveness(
    oscillator: Oscillator, timeout: float, monotonic: Callable[[], float] = time.monotonic
) -> HealthCheck:
    """The ``/livez`` check of ``oscillator``."""

    def check() -> HealthReport:
        now = monotonic()
        last = oscillator.last_sent
        quiet = now - (last if last is not None else oscillator.started)
        body: dict[str, Any] = {
            "alive": quiet <= timeout,
            "seconds_since_tick": None if last is None else round(now - last, 3),
            "timeout_seconds": timeout,
        }
        if quiet > timeout:
            body["reason"] = (
                f"no tick sent for {quiet:.0f} s (one is due every second)"
                if last is not None
                else f"no tick sent in the {quiet:.0f} s since start"
            )
        return HealthReport(quiet <= timeout, body)

    return check
