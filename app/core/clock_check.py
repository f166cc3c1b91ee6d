"""Clock sanity: how far this process's clock is from the clocks stamping its input.

Timers are never early only if the oscillator's clock is right: a tick for second S is
sent when *its* clock reaches S. The worker compares its own clock with the timestamp of
each tick (set by the oscillator, or by the broker under LogAppendTime).

``local now - record timestamp`` is the clock offset plus the delivery delay, and a
backlog of old ticks (a worker starting, or catching up) only makes it larger. So the
estimate is the *minimum* over a sliding window: delays and backlogs come and go, a
clock offset stays. A negative estimate means the source's clock is ahead of ours —
the direction that could fire timers early.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

from prometheus_client import Gauge

__all__ = ["ClockSkewMonitor"]

log = logging.getLogger(__name__)

#: Seconds between two warnings about the same source.
WARN_INTERVAL = 60.0
#: Seconds of observations the minimum is taken over.
WINDOW = 30.0


class ClockSkewMonitor:
    """Estimates ``local clock - source clock`` per source and warns past a threshold."""

    def __init__(
        self, gauge: Gauge, threshold: float, clock: Callable[[], float] = time.time
    ) -> None:
        self._gauge = gauge
        self._threshold = threshold
        self._clock = clock
        self._last_warned: dict[str, float] = {}
        self._window: dict[str, deque[tuple[float, float]]] = {}
        self._first_seen: dict[str, float] = {}
        self._newest: dict[str, float] = {}
        self._estimate: dict[str, float] = {}

    def observe(self, source: str, record_timestamp: float) -> float:
        """Record one observation; return the current estimate in seconds.

        A tick older than one already seen from the same source is a backlog (a worker
        taking over a partition works through its old ticks after the live ones of its
        own partitions): it says nothing about the clocks, so it is skipped. After a
        silence longer than the window (a long rebalance), observation starts afresh,
        so the backlog that follows is not taken for skew either.
        """
        now = self._clock()
        if record_timestamp < self._newest.get(source, record_timestamp):
            return self._estimate[source]
        self._newest[source] = record_timestamp
        window = self._window.setdefault(source, deque())
        while window and window[0][0] < now - WINDOW:
            window.popleft()
        if not window:
            self._first_seen[source] = now
        window.append((now, now - record_timestamp))
        skew = self._estimate[source] = min(s for _, s in window)
        self._gauge.labels(source=source).set(skew)
        # A positive estimate may still be a start-up backlog until a full window passed.
        settled = skew < 0 or now - self._first_seen[source] >= WINDOW
        last = self._last_warned.get(source, -WARN_INTERVAL)
        if abs(skew) > self._threshold and settled and now - last >= WARN_INTERVAL:
            self._last_warned[source] = now
            log.warning(
                "clock skew %+.3fs against %s exceeds %.3fs: timers may fire %s; "
                "check NTP on both hosts",
                skew,
                source,
                self._threshold,
                "early" if skew < 0 else "late",
            )
        return skew
