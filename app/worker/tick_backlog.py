"""A tick partition far behind its end skips to its newest tick.

A tick for second S fires everything due up to S, so of a partition's backlog only the
newest tick matters. A backlog is rare but real: a careless tool writes 100,000 ticks in
a burst, or a worker comes back after an hour away with two oscillators' 7,200 ticks to
read. Each record that reaches the tick agent costs Faust's per-message path (a
``wait_first`` of futures per record in its consumer's drain loop, then the stream's
machinery): about 2,000 records a second on a 2-core machine, so 100,000 ticks held every
timer back for tens of seconds (measured: 7.5-53 s). :class:`TickBacklog` looks at each
batch the agent takes: when a partition's end is more than :data:`SKIP_THRESHOLD`
records past the newest tick read, it seeks Faust's consumer to the record before the
end; Faust notes the jump as a gap (as it does for compacted topics), so its commits go on
past the records never read. What Faust already took in is still read: a poll's worth
and its stream buffer, both kept small in the worker (:data:`~app.worker.faust_app.TICK_BATCH`).
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["SKIP_THRESHOLD", "TickBacklog"]

log = logging.getLogger(__name__)

#: Records a tick partition may be behind its end before the rest is skipped: two
#: oscillators' ticks for about four minutes.
SKIP_THRESHOLD = 500


class TickBacklog:
    """Skips the backlog of tick partitions far behind their end (see module docs)."""

    def __init__(self, consumer: Any, skipped: Any, threshold: int = SKIP_THRESHOLD) -> None:
        """``consumer`` is Faust's (``app.consumer``); ``skipped`` a counter of records
        skipped (``.inc(n)``)."""
        self._consumer = consumer
        self._skipped = skipped
        self._threshold = threshold
        #: The offset each partition was last sought to.
        self._sought: dict[Any, int] = {}

    async def skip_stale(self, events: list[Any]) -> None:
        """Seek every partition of ``events`` that is far behind its end to its end."""
        newest: dict[Any, int] = {}
        for event in events:
            message = event.message
            tp = message.tp
            if message.offset > newest.get(tp, -1):
                newest[tp] = message.offset
        for tp, offset in newest.items():
            try:
                end = self._consumer.highwater(tp)
            except Exception:
                continue
            if end is None or end - offset <= self._threshold:
                continue
            await self._skip(tp, offset, end)

    async def _skip(self, tp: Any, newest: int, end: int) -> None:
        target = end - 1
        if target <= self._sought.get(tp, -1) + self._threshold:
            return  # sought there already: Faust is still reading what it had fetched
        self._sought[tp] = target
        # Records Faust already took in before the seek are still read (up to a poll's
        # worth); Faust notes the jump to ``target`` as a gap itself, so its commits go
        # on past the records never read.
        await self._consumer.seek(tp, target)
        skipped = target - newest - 1
        self._skipped.inc(skipped)
        log.warning(
            "tick partition %s[%d] was %d records behind its end: skipped to its newest "
            "tick, about %d old ticks unread (the newest covers every second before it)",
            tp.topic,
            tp.partition,
            end - newest - 1,
            skipped,
        )
