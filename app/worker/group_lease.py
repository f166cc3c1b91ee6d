"""How long this worker may still act as the owner of its partitions.

A worker frozen past its group session (a long GC pause, a VM stall, SIGSTOP) wakes up
believing it still owns its partitions: its fetched ticks are still in its buffers, and
it learns that the group moved on only from its next heartbeat, a round trip later.
Meanwhile another worker was given those partitions and fired their timers, so
everything the woken worker fires before it notices is a duplicate (measured before this
existed: 44 of 900 timers after a 14 s SIGSTOP).

The broker cannot evict a member before a whole session timeout has passed since it
last heard from it, and an eager rebalance gives a member's partitions to another only
after that member has rejoined (giving them up) or been evicted. So a heartbeat (or a
join) the broker answered, *sent* at ``t``, proves ownership until ``t`` plus the
session timeout: the lease. Ticks that arrive after the lease ran out are not fired
(:meth:`app.worker.service.TimerService.handle_ticks`); a later tick covers their
seconds once a heartbeat renews the lease, or the new owner fires them. What is left of
the duplicate window is the one tick whose callbacks were produced before the lease ran
out but whose forgetting the new owner had not read yet, as after any crash.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["GroupLease"]


class GroupLease:
    """The time until which the group cannot have given this worker's partitions away."""

    def __init__(self, session_timeout: float, clock: Callable[[], float] = time.monotonic):
        self._session_timeout = session_timeout
        self._clock = clock
        self._until = float("-inf")
        #: Whether the lease was renewed at least once: before the first join there is
        #: nothing to own, and nothing is checked.
        self.started = False

    def renew(self, sent_at: float) -> None:
        """The broker answered a heartbeat or join sent at ``sent_at`` (this clock)."""
        self.started = True
        self._until = max(self._until, sent_at + self._session_timeout)

    def now(self) -> float:
        return self._clock()

    def held(self) -> bool:
        """Whether this worker still certainly owns what it was last assigned."""
        return not self.started or self._clock() < self._until

    def lapsed_for(self) -> float:
        """Seconds since the lease ran out (0 while it is held)."""
        return 0.0 if self.held() else self._clock() - self._until
