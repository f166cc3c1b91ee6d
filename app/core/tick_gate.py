"""Ticks from the future wait for this worker's clock: which second a tick may fire now.

A tick for second S says "S has begun" by the clock of the oscillator that sent it.
Workers take the newest tick of any oscillator, so with several oscillators the fastest
clock would win: one oscillator an hour ahead would fire the next hour's timers at once.
The gate makes a second fire only when two clocks agree it has come: a tick has arrived
for it (the oscillator's clock) *and* this worker's clock has reached it, less a small
tolerance. A tick from further ahead is held: the worker acts at once on the newest
second both clocks agree on, keeps the held second (one per partition: O(partitions)
memory), and :meth:`TickGate.release` moves each partition on as this worker's clock
reaches each second. So an honest second oscillator keeps everything on time, a lone
fast one still fires every timer at its second by this worker's clock, and a timer fires
early only if the oscillator's clock *and* this worker's are both wrong.

A hold is bounded: a tick more than ``max_ahead`` seconds ahead of this worker's clock
(a forged tick for the year 9999, an oscillator with a broken clock) is not held at all,
only counted (:attr:`TickGate.too_far_ahead`): held, it would keep that partition firing
by this worker's clock alone for as long. The worker's tick agent drops such ticks before
they reach the gate (``KAFKA_TIMERS_TICK_MAX_AHEAD_SECONDS``); the bound here keeps the
gate's own promise whoever calls it.

Pure logic: the caller passes its clock reading in, so tests drive time by hand.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["MAX_AHEAD_SECONDS", "TickGate"]

#: How far ahead of this worker's clock a tick may be held, by default: an hour.
MAX_AHEAD_SECONDS = 3600.0


class TickGate:
    """Holds, per partition, the newest tick second this worker's clock has not reached."""

    def __init__(self, tolerance: float = 0.0, max_ahead: float = MAX_AHEAD_SECONDS) -> None:
        if tolerance < 0:
            raise ValueError("the tick tolerance cannot be negative")
        if max_ahead < tolerance:
            raise ValueError("a tick cannot be held for less than the tolerance")
        #: Seconds a tick may run ahead of this worker's clock and still fire at once.
        self.tolerance = tolerance
        #: Seconds a tick may run ahead of this worker's clock and still be held.
        self.max_ahead = max_ahead
        #: Ticks not held because they were further ahead than :attr:`max_ahead`.
        self.too_far_ahead = 0
        self._held: dict[int, int] = {}

    def limit(self, now: float) -> int:
        """The newest second this worker's clock says may fire (``now`` is its reading)."""
        return math.floor(now + self.tolerance)

    def admit(self, partition: int, second: int, now: float) -> tuple[int, bool]:
        """``(second to act on now, whether the tick was held)`` for one tick.

        A tick this worker's clock has reached is acted on as it is. One from further
        ahead is acted on only up to :meth:`limit` (both clocks agree that second has
        come); its own second is remembered and released later. One more than
        :attr:`max_ahead` ahead is acted on up to :meth:`limit` too, but not held.
        """
        limit = self.limit(now)
        if second <= limit:
            return second, False
        if second > now + self.max_ahead:
            self.too_far_ahead += 1
            return limit, False
        if second > self._held.get(partition, second - 1):
            self._held[partition] = second
        return limit, True

    def release(self, now: float) -> dict[int, int]:
        """For every partition holding a tick, the second to act on now.

        That is the held second or :meth:`limit`, whichever is older; a hold is dropped
        once this worker's clock has reached it.
        """
        limit = self.limit(now)
        released: dict[int, int] = {}
        for partition, held in list(self._held.items()):
            released[partition] = min(held, limit)
            if held <= limit:
                del self._held[partition]
        return released

    def seconds_to_next_release(self, now: float) -> float:
        """How long until this worker's clock reaches the next second a hold may release."""
        shifted = now + self.tolerance
        return math.floor(shifted) + 1 - shifted

    def forget(self, partitions: Iterable[int]) -> None:
        """Drop the holds of partitions this worker no longer processes."""
        for partition in partitions:
            self._held.pop(partition, None)

    @property
    def holding(self) -> bool:
        """Whether any partition has a tick waiting for this worker's clock."""
        return bool(self._held)

    def held(self) -> dict[int, int]:
        """The held second of each partition that has one (a copy, for status)."""
        return dict(self._held)
