"""From the tick agent's events to the ticks the service fires on: total, bounded, counted.

The agent hands each batch of Faust events here (:meth:`TickIntake.read`). Every record
is parsed by :func:`app.core.tick_record.parse_tick` (never raises, bounded time); what
it ignores is counted in ``kafka_timers_ticks_ignored_total{reason}`` and logged at most
once a minute per reason; a tick further ahead of this worker's clock than
``KAFKA_TIMERS_TICK_MAX_AHEAD_SECONDS`` is ignored, never held. Sources are told apart
by :class:`app.core.tick_sources.TickSources` (bounded, forgotten when silent, their
labels removed here). :meth:`TickIntake.whole` tells the take loop when a batch holds a
second's ticks for every partition, parsing each event once.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from app.core.fetch_pacing import TickWatch
from app.core.tick_record import TickIgnored, TickParse, parse_tick, record_time, tick_second
from app.core.tick_sources import TickSources
from app.worker.metrics import WorkerMetrics

__all__ = ["LOG_INTERVAL", "TickIntake"]

log = logging.getLogger(__name__)

#: Seconds between two log lines about ignored ticks of the same reason (a burst of
#: garbage is counted, not logged line by line).
LOG_INTERVAL = 60.0

#: ``(partition, second, sent, source)``, what :meth:`TimerService.handle_ticks` takes.
TickTuple = tuple[int, int, float | None, str]


class TickIntake:
    """Reads tick events for the agent.

    Args:
        metrics: The worker's metrics (ignored ticks, sources, and the per-source labels
            removed when a source is forgotten).
        watch: The newest tick of each assigned partition (for :meth:`whole`).
        max_ahead: Seconds ahead of this worker's clock a tick may be held.
        max_sources: Most sources told apart.
        silence: Seconds without a tick after which a source is forgotten.
        clock: This worker's clock.
    """

    def __init__(
        self,
        metrics: WorkerMetrics,
        watch: TickWatch,
        *,
        max_ahead: float,
        max_sources: int,
        silence: float,
        clock: Callable[[], float],
    ) -> None:
        self._metrics = metrics
        self._watch = watch
        self._max_ahead = max_ahead
        self._sources = TickSources(max_sources, silence)
        self._clock = clock
        self._overflowed = 0
        self._logged: dict[TickIgnored, float] = {}
        self._unlogged: dict[TickIgnored, int] = {}
        # For whole(): events of the current batch already looked at, and the newest
        # second of each partition among them.
        self._seen = 0
        self._newest: dict[int, int] = {}
        self._last_key: bytes | None = None
        self._last_second: int | TickIgnored = TickIgnored.NO_SECOND

    def whole(self, events: Sequence[Any]) -> bool:
        """Whether ``events`` (the batch so far) bring every assigned partition up to
        their newest second. Called after each event joins the batch: each is parsed
        once, so a batch of n costs O(n x partitions), not O(n squared)."""
        if len(events) <= self._seen:  # a new batch
            self._seen = 0
            self._newest.clear()
        latest = self._clock() + self._max_ahead
        for event in events[self._seen :]:
            message = event.message
            if message.key != self._last_key:
                self._last_key, self._last_second = message.key, tick_second(message.key)
            second = self._last_second
            newest = self._newest.get(message.partition, -1)
            if isinstance(second, int) and newest < second <= latest:
                self._newest[message.partition] = second
        self._seen = len(events)
        return self._watch.covers(self._newest.items())

    def read(self, events: Sequence[Any]) -> list[TickTuple]:
        """The ticks among ``events`` the service needs, each ``(partition, second, sent,
        source)``: per partition and source the newest second and the newest send time.

        That is all the clock checks and the gate use (the lead is a maximum of seconds,
        the skew a minimum of arrival minus send time, a partition fires up to its newest
        admitted second), so a burst costs the service one tick per partition and
        source per batch, not one per record. A record like the one before it (a burst
        repeats one) is parsed once.
        """
        now = self._clock()
        latest = math.floor(now + self._max_ahead)
        self._forget_silent(now)
        newest: dict[tuple[int, str], list[Any]] = {}
        last: tuple[Any, Any, TickParse] | None = None
        for event in events:
            message = event.message
            key, value = message.key, event.value
            if not isinstance(value, bytes):
                value = None
            if last is not None and key == last[0] and value == last[1]:
                parsed = last[2]
            else:
                parsed = parse_tick(key, value, None, latest)
                last = (key, value, parsed)
            for reason in parsed.ignored:
                self._ignored(reason, message, now)
            tick = parsed.tick
            if tick is None:
                continue
            sent = tick.sent if tick.sent is not None else record_time(message.timestamp)
            source = self._sources.name(tick.source, now)
            seen = newest.get((message.partition, source))
            if seen is None:
                newest[(message.partition, source)] = [tick.second, sent]
                continue
            seen[0] = max(seen[0], tick.second)
            if sent is not None and (seen[1] is None or sent > seen[1]):
                seen[1] = sent
        self._account()
        return [(p, second, sent, source) for (p, source), (second, sent) in newest.items()]

    def _forget_silent(self, now: float) -> None:
        metrics = self._metrics
        for source in self._sources.sweep(now):
            for labelled in (metrics.ticks_held, metrics.clock_skew, metrics.oscillator_ahead):
                with contextlib.suppress(KeyError):
                    labelled.remove(source)

    def _account(self) -> None:
        metrics = self._metrics
        metrics.tick_sources.set(len(self._sources))
        overflowed = self._sources.overflowed
        if overflowed > self._overflowed:
            metrics.tick_sources_other.inc(overflowed - self._overflowed)
            self._overflowed = overflowed

    def _ignored(self, reason: TickIgnored, message: Any, now: float) -> None:
        self._metrics.ticks_ignored.labels(reason=reason.value).inc()
        if now - self._logged.get(reason, -LOG_INTERVAL) < LOG_INTERVAL:
            self._unlogged[reason] = self._unlogged.get(reason, 0) + 1
            return
        self._logged[reason] = now
        more = self._unlogged.pop(reason, 0)
        log.warning(
            "tick record at %s[%d]@%d: %s ignored%s (kafka_timers_ticks_ignored_total)",
            message.topic,
            message.partition,
            message.offset,
            reason.value,
            f", and {more} more since the last such line" if more else "",
        )
