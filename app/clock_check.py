"""Clock sanity: how far this process's clock is from the clocks stamping its input.

Timers are never early only if the oscillator's clock is right: a tick for second S is
sent when *its* clock reaches S. The worker compares its own clock with the timestamp of
each tick (set by the oscillator, or the broker under LogAppendTime) and exposes the
difference per source; above a threshold it logs a warning, once a minute per source.
The difference includes delivery latency, a few milliseconds on a healthy cluster.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from prometheus_client import Gauge

__all__ = ["ClockSkewMonitor"]

log = logging.getLogger(__name__)

#: Seconds between two warnings about the same source.
WARN_INTERVAL = 60.0


class ClockSkewMonitor:
    """Tracks ``local clock - record timestamp`` per source and warns past a threshold."""

    def __init__(
        self, gauge: Gauge, threshold: float, clock: Callable[[], float] = time.time
    ) -> None:
        self._gauge = gauge
        self._threshold = threshold
        self._clock = clock
        self._last_warned: dict[str, float] = {}

    def observe(self, source: str, record_timestamp: float) -> float:
        """Record one observation; return the skew in seconds (positive: we are ahead)."""
        now = self._clock()
        skew = now - record_timestamp
        self._gauge.labels(source=source).set(skew)
        if (
            abs(skew) > self._threshold
            and now - self._last_warned.get(source, -WARN_INTERVAL) >= WARN_INTERVAL
        ):
            self._last_warned[source] = now
            log.warning(
                "clock skew %+.3fs against %s exceeds %.3fs: timers may fire early or late; "
                "check NTP on both hosts",
                skew,
                source,
                self._threshold,
            )
        return skew
