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

Both are kept in amortised constant time per tick, whatever the burst: the extreme over
a window is a monotonic queue (an observation that can never be the extreme again is
dropped when it arrives), and observations within one second of this worker's clock
share one entry, so a source's queue holds at most a window's seconds plus one, however
many ticks arrive (a burst of 40,000 ticks for one past second made each tick scan all
the ones before it: timers 32.6 s late). That sharing can keep an extreme up to a second
longer than the window says; nothing else changes. A source silent for
:data:`LEAD_STALE` is forgotten, its gauges included.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from prometheus_client import Gauge

from app.core.printable import printable

__all__ = ["LEAD_WINDOW", "ClockSkewMonitor", "OscillatorLead", "WindowExtreme"]

log = logging.getLogger(__name__)

#: Seconds between two warnings about the same source.
WARN_INTERVAL = 60.0
#: Seconds of observations the minimum is taken over.
WINDOW = 30.0
#: Seconds of observations an oscillator's lead is the maximum of: short, so a clock that
#: is put right shows at once, and long enough to cover a slow second or two.
LEAD_WINDOW = 10.0
#: An oscillator not heard from for this long is no longer exported (it stopped, or its
#: partitions moved to another worker), so an alert on it clears, and its state is freed.
LEAD_STALE = 60.0
#: Seconds between two looks for silent sources (each a pass over the sources).
SWEEP_INTERVAL = 1.0


class WindowExtreme:
    """The minimum (or maximum) of the values observed over the last ``window`` seconds.

    A monotonic queue of ``[time, value]``: a value that can never be the extreme again
    (an older one no better than a newer) leaves when the newer arrives, so each
    observation costs amortised O(1). Observations in the same second of the clock share
    one entry (the better value, the newer time), so the queue holds at most
    ``window + 2`` entries whatever the rate.
    """

    __slots__ = ("_entries", "_sign", "_window")

    def __init__(self, window: float, *, maximum: bool = False) -> None:
        self._window = window
        self._sign = -1.0 if maximum else 1.0
        self._entries: deque[list[float]] = deque()

    def observe(self, now: float, value: float) -> float:
        """Add ``value`` seen at ``now``; return the extreme over the window."""
        entries = self._entries
        self.expire(now)
        keyed = self._sign * value
        while entries and entries[-1][1] >= keyed:
            entries.pop()
        if entries and math.floor(entries[-1][0]) == math.floor(now):
            entries[-1][0] = now  # a better value of this second is kept a little longer
        else:
            entries.append([now, keyed])
        return self._sign * entries[0][1]

    def expire(self, now: float) -> None:
        """Drop what left the window by ``now``."""
        entries = self._entries
        while entries and entries[0][0] < now - self._window:
            entries.popleft()

    def __len__(self) -> int:
        return len(self._entries)

    def newest(self) -> float | None:
        """When the newest observation was made, ``None`` if none is in the window."""
        return self._entries[-1][0] if self._entries else None


class _Skew:
    """What :class:`ClockSkewMonitor` knows of one source."""

    __slots__ = ("estimate", "first_seen", "heard", "last_warned", "newest", "window")

    def __init__(self, now: float) -> None:
        self.window = WindowExtreme(WINDOW)
        self.first_seen = now
        self.heard = now
        self.newest = float("-inf")
        self.estimate = 0.0
        self.last_warned = -WARN_INTERVAL


class _HeardFrom(Protocol):
    heard: float


_State = TypeVar("_State", bound=_HeardFrom)


class _PerSource(Generic[_State]):
    """The state of each source heard from, exported to a gauge labelled by source; a
    source silent for :data:`LEAD_STALE` is forgotten, its gauge too."""

    def __init__(self, gauge: Gauge, threshold: float) -> None:
        self._gauge = gauge
        self._threshold = threshold
        self._sources: dict[str, _State] = {}
        self._next_sweep = float("-inf")

    def _forget_silent(self, now: float) -> None:
        # A look at most once per interval (a clock stepped back looks at once).
        if self._next_sweep - SWEEP_INTERVAL <= now < self._next_sweep:
            return
        self._next_sweep = now + SWEEP_INTERVAL
        for source in [s for s, st in self._sources.items() if st.heard < now - LEAD_STALE]:
            del self._sources[source]
            with contextlib.suppress(KeyError):
                self._gauge.remove(source)


class ClockSkewMonitor(_PerSource[_Skew]):
    """Estimates ``local clock - source clock`` per source and warns past a threshold."""

    def __init__(
        self, gauge: Gauge, threshold: float, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(gauge, threshold)
        self._clock = clock

    def observe(self, source: str, sent: float) -> float:
        """Record one observation; return the current estimate in seconds.

        A tick older than one already seen from the same source is a backlog (a worker
        taking over a partition works through its old ticks after the live ones of its
        own partitions): it says nothing about the clocks, so it is skipped. After a
        silence longer than the window (a long rebalance), observation starts afresh,
        so the backlog that follows is not taken for skew either.
        """
        now = self._clock()
        self._forget_silent(now)
        state = self._sources.get(source)
        if state is None:
            state = self._sources[source] = _Skew(now)
        elif sent < state.newest:
            return state.estimate
        state.newest = sent
        state.heard = now
        state.window.expire(now)
        if not len(state.window):
            state.first_seen = now
        skew = state.estimate = state.window.observe(now, now - sent)
        self._gauge.labels(source=source).set(skew)
        # A positive estimate may still be a start-up backlog until a full window passed.
        settled = skew < 0 or now - state.first_seen >= WINDOW
        if abs(skew) > self._threshold and settled and now - state.last_warned >= WARN_INTERVAL:
            state.last_warned = now
            log.warning(
                "clock skew %+.3fs against %s exceeds %.3fs: %s; check NTP on both hosts",
                skew,
                printable(source),
                self._threshold,
                "its ticks are ahead of this worker's clock and wait for it (timers fire by "
                "this worker's clock: late if it is the one behind)"
                if skew < 0
                else "timers fire late by about that much",
            )
        return skew

    def sources(self) -> list[str]:
        """The sources observed recently."""
        return list(self._sources)


class _Lead:
    """What :class:`OscillatorLead` knows of one source."""

    __slots__ = ("first_seen", "heard", "last_warned", "lead", "window")

    def __init__(self, window: float, now: float) -> None:
        self.window = WindowExtreme(window, maximum=True)
        self.first_seen = now
        self.heard = now
        self.lead = 0.0
        self.last_warned = -WARN_INTERVAL


class OscillatorLead(_PerSource[_Lead]):
    """How far each oscillator's clock runs ahead of this worker's, from its tick seconds.

    Exported per source; a warning (at most once a minute per source) names the
    oscillator and the size when it exceeds the threshold. When every oscillator runs
    that far ahead, the likelier culprit is this worker's clock, and the warning says so.
    """

    def __init__(self, gauge: Gauge, threshold: float, window: float = LEAD_WINDOW) -> None:
        super().__init__(gauge, threshold)
        self._window_seconds = window

    def observe(self, source: str, second: int, now: float) -> float:
        """Record tick ``second`` from ``source`` arriving at local time ``now``; return
        the source's lead (seconds ahead of this worker; negative: behind or delayed)."""
        self._forget_silent(now)
        state = self._sources.get(source)
        if state is None:
            state = self._sources[source] = _Lead(self._window_seconds, now)
        state.heard = now
        lead = state.lead = state.window.observe(now, second - now)
        self._gauge.labels(source=source).set(lead)
        # A lead over the threshold is real from the first tick (delay and backlog only
        # lower it), but its size is right only once a whole window of fresh ticks is in:
        # a worker that starts reads old ticks first. So the warning waits for that.
        settled = now - state.first_seen >= self._window_seconds
        if lead > self._threshold and settled and now - state.last_warned >= WARN_INTERVAL:
            state.last_warned = now
            leads = self.leads()
            everyone = len(leads) > 1 and all(v > self._threshold for v in leads.values())
            log.warning(
                "oscillator %s runs %.3fs ahead of this worker's clock (over %.3fs): its "
                "ticks are held until this worker's clock reaches their second, so timers "
                "fire by this worker's clock%s; check NTP on both hosts",
                printable(source),
                lead,
                self._threshold,
                (
                    f"; all {len(leads)} oscillators are ahead, so this worker's clock "
                    f"is probably behind, by about {min(leads.values()):.3f}s: its "
                    "timers fire that much late"
                )
                if everyone
                else "",
            )
        return lead

    def leads(self) -> dict[str, float]:
        """The current lead of every oscillator heard from recently."""
        return {source: state.lead for source, state in self._sources.items()}
