"""Which tick sources (oscillators) a worker tells apart: bounded in number, forgotten
when silent.

Every source a worker tells apart is a label of three metrics and a key of the clock
checks' state, and a source is whatever name a tick record carries: a careless tool that
writes a new name per tick would grow ``/metrics`` and the worker without bound
(measured: 200 names of 300 kB grew ``/metrics`` to 120 MB). So a worker tells apart at
most ``limit`` sources at a time (names already cut by
:func:`app.core.tick_record.source_name`); ticks from any further one count as
:data:`OTHER`, and a source silent for ``silence`` seconds is forgotten, which frees its
place: :meth:`TickSources.sweep` says which, for the caller to drop their labels.

Pure logic: the caller passes its clock reading in.
"""

from __future__ import annotations

__all__ = ["OTHER", "SWEEP_INTERVAL", "TickSources"]

#: The name every source past the limit is counted under.
OTHER = "other"
#: Seconds between two looks for silent sources (each costs one pass over them).
SWEEP_INTERVAL = 1.0


class TickSources:
    """The sources a worker tells apart, each with the time of its newest tick.

    Args:
        limit: Most sources told apart at once (:data:`OTHER` not counted).
        silence: Seconds without a tick after which a source is forgotten.
    """

    def __init__(self, limit: int, silence: float) -> None:
        if limit < 1 or silence <= 0:
            raise ValueError("a positive number of sources and a positive silence")
        self._limit = limit
        self._silence = silence
        #: Each source told apart, and when its newest tick arrived (insertion order is
        #: the order of their first ticks, not of their newest).
        self._heard: dict[str, float] = {}
        self._next_sweep = float("-inf")
        #: Ticks counted as :data:`OTHER` because every place was taken.
        self.overflowed = 0

    def name(self, source: str, now: float) -> str:
        """The name ``source``'s tick at ``now`` counts under: its own, or :data:`OTHER`
        when ``limit`` others are already told apart."""
        if source in self._heard or len(self._heard) - (OTHER in self._heard) < self._limit:
            self._heard[source] = now
            return source
        self._heard[OTHER] = now
        self.overflowed += 1
        return OTHER

    def sweep(self, now: float) -> list[str]:
        """Forget every source silent for ``silence`` seconds at ``now``; return them.

        Looks at most once per :data:`SWEEP_INTERVAL`, so its cost per tick is constant.
        """
        # A look at most once per interval (a clock stepped back looks at once).
        if self._next_sweep - SWEEP_INTERVAL <= now < self._next_sweep:
            return []
        self._next_sweep = now + SWEEP_INTERVAL
        quiet = [s for s, heard in self._heard.items() if heard < now - self._silence]
        for source in quiet:
            del self._heard[source]
        return quiet

    def __len__(self) -> int:
        """How many sources are told apart now (:data:`OTHER` included once it is used)."""
        return len(self._heard)
