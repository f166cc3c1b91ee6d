"""Debounced timers: what a debounced request does to the pending timer of its id.

Pure functions over plain data (no store, no clock): :meth:`PartitionWheel.schedule
<app.core.wheel.PartitionWheel.schedule>` reads the pending version of the id and asks
:func:`merge` what to store instead of the request. The request's rules (what is a valid
debounce) are the client's, :mod:`kafka_timers_client.debounce`.

A debounced request is stored like any timer, due one debounce after its request time
(its record's timestamp, rounded up to the second: never early). What makes it debounced
is its :class:`Debounce`, kept with it in the store (:mod:`app.core.stored`): the first
request's time and the number of requests merged, so a restart, or another worker taking
its partition, goes on counting from where the last one was.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kafka_timers_client.debounce import debounced_due

if TYPE_CHECKING:
    from app.core.timer import Timer

__all__ = ["Debounce", "debounced_due", "merge"]


@dataclass(frozen=True)
class Debounce:
    """How a debounced timer was asked for, and what it has merged so far."""

    #: The quiet window, whole seconds (at least 1): it fires this long after the last
    #: request merged into it.
    seconds: int
    #: The longest it may wait after its first request, whole seconds (at least
    #: ``seconds``); ``None``: no bound, a steady stream of requests postpones it forever.
    max_wait: int | None
    #: The first request's time: its record timestamp, epoch milliseconds.
    first_ms: int
    #: How many requests were merged into it (the ``timer-debounced`` header), from 1.
    merged: int = 1
    #: The offset, in its request partition, of the last request merged (-1: unknown).
    #: A request read again after a crash, at or below it, is merged already.
    last_offset: int = -1
    #: Read from a request that restores a debounced timer whole (what ``kafka-timers
    #: import`` sends: its due second, first request's time and merged count): it
    #: replaces the pending version, as a reschedule does, instead of merging into it,
    #: so the same import twice leaves the same timer. Never stored (a stored one is
    #: ``False``).
    restored: bool = False

    @property
    def deadline(self) -> int | None:
        """The last second it may fire at: the first request's time plus the max-wait,
        rounded up; ``None`` without a max-wait."""
        if self.max_wait is None:
            return None
        return debounced_due(self.first_ms, self.max_wait)


def merge(pending: Timer | None, request: Timer) -> Timer | None:
    """The timer to store for the debounced ``request`` when ``pending`` is its id's
    pending version (``None``: none, or one that must not be merged into).

    A pending debounced timer is carried on: the request's callback (topic, key, value,
    headers, token), due one debounce after the request but no later than the first
    request's time plus the max-wait, the first request's time kept and one more request
    counted. The debounce and max-wait are the request's own (the last word, as its
    callback is). Anything else pending (a plain timer), or a request that restores a
    debounced timer whole (:attr:`Debounce.restored`), is replaced by the request.
    ``None``: ``request`` was merged already (its offset is not past the last one
    merged: a request read again after a crash), nothing to change.
    """
    asked = request.debounce
    assert asked is not None
    if pending is None or asked.restored:
        return request
    held = pending.debounce
    if held is None:
        return request
    if 0 <= asked.last_offset <= held.last_offset:
        return None
    carried = Debounce(
        asked.seconds, asked.max_wait, held.first_ms, held.merged + 1, asked.last_offset
    )
    due = request.due
    deadline = carried.deadline
    if deadline is not None and deadline < due:
        due = deadline
    return replace(request, due=due, debounce=carried)
