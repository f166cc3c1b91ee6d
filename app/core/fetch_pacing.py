"""How long each fetch of ticks may wait at the broker: long while idle, short when due.

A worker's consumer asks the broker for ticks again and again; each fetch waits at the
broker up to a maximum for a record to arrive. The longer it may wait, the fewer fetches
an idle worker makes: at 50 ms that is 20 a second, which cost an idle worker ~15 ms of
CPU a second (and the dev broker as much again) for nothing.

On Apache Kafka a long wait costs no lateness: a waiting fetch returns as soon as a
record arrives. Not every broker does that. The dev broker (Tansu) looks for records a
few times during the wait, halving the time left after each look, so a tick that lands
just after a fetch began waits for half the fetch's wait: up to 250 ms at 500 ms
(measured: one second in ten had its ticks ~259 ms late).

Ticks come at a known time, though: one per partition just after each second boundary.
So a fetch here waits at most until the next boundary, and a fetch that starts after a
boundary whose tick has not come yet for every partition waits only
:data:`SHORT_WAIT_MS`. An idle worker then fetches two or three times a second, and on
any broker a tick waits for a fetch at most about :data:`SHORT_WAIT_MS`. Past
:data:`GRACE` after a boundary (oscillators down or far behind) fetches go back to the
long wait, and while a worker is taking partitions over they stay short: a newly
assigned partition is not fetched before the fetch in flight returns.

Pure logic: the caller passes its clock reading in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["GRACE", "SHORT_WAIT_MS", "TickWatch", "tick_fetch_wait_ms"]

#: How long after a boundary a missing tick is watched for closely (seconds). Ticks
#: normally reach the broker within a few ms of it; past this, the oscillators are down
#: or far behind, and polling fast would only burn CPU.
GRACE = 0.3
#: The wait of a fetch while a tick is due and has not come, and while settling (ms).
SHORT_WAIT_MS = 10


def tick_fetch_wait_ms(
    now: float, oldest_tick: int | None, longest_ms: int, *, settling: bool = False
) -> int:
    """The wait (ms) for a fetch of ticks that starts at ``now`` (this worker's clock).

    ``oldest_tick`` is the oldest of the newest tick seconds seen on each assigned
    partition (``None``: some partition has had none yet), ``longest_ms`` the configured
    maximum, ``settling`` whether the worker is taking partitions over.
    """
    short = min(SHORT_WAIT_MS, longest_ms)
    if settling:
        return short
    second = math.floor(now)
    if (oldest_tick is None or oldest_tick < second) and now - second < GRACE:
        return short  # this second's tick is due on some partition any moment
    until_boundary = round((second + 1 - now) * 1000)
    return max(short, min(longest_ms, until_boundary))


class TickWatch:
    """The newest tick second seen on each assigned partition, and the oldest of those.

    Also says when a batch of ticks is whole (:meth:`covers`): the tick agent then stops
    waiting for more of the second's ticks.

    Updated on the event loop; :attr:`oldest` is read by the consumer's thread before each
    fetch, so it is kept as one precomputed value (reading an attribute is atomic).
    """

    def __init__(self) -> None:
        self._newest: dict[int, int | None] = {}
        #: The oldest newest-tick over the assigned partitions (``None``: one has none).
        self.oldest: int | None = None

    def assigned(self, partitions: Iterable[int]) -> None:
        """Watch exactly ``partitions`` from now on (keeping what is known of each)."""
        self._newest = {p: self._newest.get(p) for p in partitions}
        self._update()

    def ticked(self, ticks: Iterable[tuple[int, int]]) -> None:
        """Note ``(partition, second)`` ticks just read."""
        _advance(self._newest, ticks)
        self._update()

    def covers(self, ticks: Iterable[tuple[int, int]]) -> bool:
        """Whether ``ticks``, with those seen before, bring every assigned partition up to
        the newest second among them: a second's ticks are all in."""
        newest = dict(self._newest)
        top = _advance(newest, ticks)
        return top is not None and all(s is not None and s >= top for s in newest.values())

    def _update(self) -> None:
        seconds = list(self._newest.values())
        known = [s for s in seconds if s is not None]
        self.oldest = min(known) if known and len(known) == len(seconds) else None


def _advance(newest: dict[int, int | None], ticks: Iterable[tuple[int, int]]) -> int | None:
    """Move each watched partition in ``newest`` up to its newest tick in ``ticks`` (others
    are ignored); return the newest second among ``ticks`` (``None``: there were none)."""
    top: int | None = None
    for partition, second in ticks:
        top = second if top is None or second > top else top
        if partition in newest:
            seen = newest[partition]
            if seen is None or second > seen:
                newest[partition] = second
    return top
