"""Clock sanity: how far this process's clock is from the oscillators' clocks.

A tick for second S is sent when the oscillator's clock reaches S, and the worker fires
S only once its own clock has reached S too (:mod:`app.core.tick_gate`): a wrong clock
on one side makes timers late, never early. Two checks make a wrong clock visible.

:class:`ClockSkewMonitor` compares the worker's clock with the time each tick was sent
by its oscillator's clock (``sent_ms`` in our ticks; the record timestamp for ticks
that do not say).

``local now - sent time`` is the clock offset plus the delivery delay, and a
backlog of old ticks (a worker starting, or catching up) only makes it larger. So the
estimate is the *minimum* over a sliding window: delays and backlogs come and go, a
clock offset stays. A negative estimate means the source's clock is ahead of ours —
the direction whose ticks the worker holds.

:class:`OscillatorLead` compares it with the tick's own second, the oscillator's clock
as the service uses it: ``tick second - local clock at arrival``. Delivery delay and a
backlog only make that smaller, so it is the *maximum* over a short window; a positive
value is a lower bound of how far the oscillator runs ahead of this worker.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable

from prometheus_client import Gauge

__all__ = ["LEAD_WINDOW", "ClockSkewMonitor", "OscillatorLead"]

log = logging.getLogger(__name__)

#: Seconds between two warnings about the same source.
WARN_INTERVAL = 60.0
#: Seconds of observations the minimum is taken over.
WINDOW = 30.0
#: Seconds of observations an oscillator's lead is the maximum of: short, so a clock that
#: is put right shows at once, and long enough to cover a slow second or two.
LEAD_WINDOW = 10.0
#: An oscillator not heard from for this long is no longer exported (it stopped, or its
#: partitions moved to another worker), so an alert on it clears.
LEAD_STALE = 60.0


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

    def observe(self, source: str, sent: float) -> float:
        """Record one observation; return the current estimate in seconds.

        A tick older than one already seen from the same source is a backlog (a worker
        taking over a partition works through its old ticks after the live ones of its
        own partitions): it says nothing about the clocks, so it is skipped. After a
        silence longer than the window (a long rebalance), observation starts afresh,
        so the backlog that follows is not taken for skew either.
        """
        now = self._clock()
        if sent < self._newest.get(source, sent):
            return self._estimate[source]
        self._newest[source] = sent
        window = self._window.setdefault(source, deque())
        while window and window[0][0] < now - WINDOW:
            window.popleft()
        if not window:
            self._first_seen[source] = now
        window.append((now, now - sent))
        skew = self._estimate[source] = min(s for _, s in window)
        self._gauge.labels(source=source).set(skew)
        # A positive estimate may still be a start-up backlog until a full window passed.
        settled = skew < 0 or now - self._first_seen[source] >= WINDOW
        last = self._last_warned.get(source, -WARN_INTERVAL)
        if abs(skew) > self._threshold and settled and now - last >= WARN_INTERVAL:
            self._last_warned[source] = now
            log.warning(
                "clock skew %+.3fs against %s exceeds %.3fs: %s; check NTP on both hosts",
                skew,
                source,
                self._threshold,
                "its ticks are ahead of this worker's clock and wait for it (timers fire by "
                "this worker's clock: late if it is the one behind)"
                if skew < 0
                else "timers fire late by about that much",
            )
        return skew


class OscillatorLead:
    """How far each oscillator's clock runs ahead of this worker's, from its tick seconds.

    Exported per source; a warning (at most once a minute per source) names the
    oscillator and the size when it exceeds the threshold. When every oscillator runs
    that far ahead, the likelier culprit is this worker's clock, and the warning says so.
    """

    def __init__(self, gauge: Gauge, threshold: float, window: float = LEAD_WINDOW) -> None:
        self._gauge = gauge
        self._threshold = threshold
        self._window_seconds = window
        self._window: dict[str, deque[tuple[float, float]]] = {}
        self._lead: dict[str, float] = {}
        self._first_seen: dict[str, float] = {}
        self._last_warned: dict[str, float] = {}

    def observe(self, source: str, second: int, now: float) -> float:
        """Record tick ``second`` from ``source`` arriving at local time ``now``; return
        the source's lead (seconds ahead of this worker; negative: behind or delayed)."""
        window = self._window.setdefault(source, deque())
        self._first_seen.setdefault(source, now)
        while window and window[0][0] < now - self._window_seconds:
            window.popleft()
        window.append((now, second - now))
        lead = self._lead[source] = max(v for _, v in window)
        self._gauge.labels(source=source).set(lead)
        self._forget_silent(now)
        last = self._last_warned.get(source, -WARN_INTERVAL)
        # A lead over the threshold is real from the first tick (delay and backlog only
        # lower it), but its size is right only once a whole window of fresh ticks is in:
        # a worker that starts reads old ticks first. So the warning waits for that.
        settled = now - self._first_seen[source] >= self._window_seconds
        if lead > self._threshold and settled and now - last >= WARN_INTERVAL:
            self._last_warned[source] = now
            everyone = len(self._lead) > 1 and all(v > self._threshold for v in self._lead.values())
            log.warning(
                "oscillator %s runs %.3fs ahead of this worker's clock (over %.3fs): its "
                "ticks are held until this worker's clock reaches their second, so timers "
                "fire by this worker's clock%s; check NTP on both hosts",
                source,
                lead,
                self._threshold,
                (
                    f"; all {len(self._lead)} oscillators are ahead, so this worker's clock "
                    f"is probably behind, by about {min(self._lead.values()):.3f}s: its "
                    "timers fire that much late"
                )
                if everyone
                else "",
            )
        return lead

    def leads(self) -> dict[str, float]:
        """The current lead of every oscillator heard from recently."""
        return dict(self._lead)

    def _forget_silent(self, now: float) -> None:
        for source, window in list(self._window.items()):
            if window and window[-1][0] < now - LEAD_STALE:
                del self._window[source]
                self._lead.pop(source, None)
                self._first_seen.pop(source, None)
                with contextlib.suppress(KeyError):
                    self._gauge.remove(source)
