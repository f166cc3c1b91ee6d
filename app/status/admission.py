"""How much of the event loop the heavy views may take: a budget of loop time per second.

The worker's web views run on the event loop that fires timers, and Python threads
would not take their work off it (they share the interpreter lock, and the wheels and
their stores are not thread-safe). So the views that read the stores (``/timers/next``,
``/timers/<id>``, ``/status/data``) serve from caches refreshed at most once a second
where they can, and all of them spend from one :class:`LoopBudget`: when it is spent, a
request is answered 503 at once (no queue), and the loop goes back to the timers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["LoopBudget"]


class LoopBudget:
    """A token bucket of event-loop seconds, refilled at ``share`` seconds per second.

    Work is admitted while the bucket is not empty and then charged what it took, so a
    piece of work may overdraw it once; the next is refused until it refills. Over any
    stretch of time the heavy views take at most ``share`` of the loop, plus one piece.
    """

    def __init__(
        self,
        share: float,
        burst: float,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        #: Loop seconds per second the heavy views may spend.
        self.share = share
        #: Most loop seconds saved up while idle.
        self.burst = burst
        self._clock = clock
        self._tokens = burst
        self._at = clock()
        #: Requests refused since start.
        self.refused = 0

    def _refill(self) -> float:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.share)
        self._at = now
        return now

    def admit(self) -> bool:
        """Whether there is budget left now (counted as refused if not)."""
        self._refill()
        if self._tokens > 0:
            return True
        self.refused += 1
        return False

    @contextmanager
    def spend(self) -> Iterator[None]:
        """Charge the loop time of the ``with`` block."""
        start = self._clock()
        try:
            yield
        finally:
            self._refill()
            self._tokens -= self._clock() - start

    def charge(self, seconds: float) -> None:
        """Charge loop time spent outside a :meth:`spend` block (writing a response)."""
        self._refill()
        self._tokens -= seconds
