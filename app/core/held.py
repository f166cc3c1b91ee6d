"""The queue of one callback topic's due timers that a gate holds back, oldest key first.

A rate limit or a pause holds due timers back (:mod:`app.worker.topic_gates`); the
wheel keeps, per topic, each one's key second and id (the timer itself stays in the
store) and hands them out oldest key first. Almost every entry arrives in that order
already: a tick's scan reads keys in order, and each tick's keys come after the last
tick's. So entries go to the end of a deque, O(1) each; only an entry older than the
newest one (a request for a second ticked already, a resumed timer, a topic gated
since its tick) goes into a heap beside it, and :meth:`HeldQueue.pop` takes the older
of the two heads. A single heap did the same at O(log n) a push and a pop: with 37,500
held per partition, its pushes and pops were a tenth of what a held timer cost the
worker's event loop (bench: rate limit).

A tick's scan holds a burst's timers by the thousand, and a release round takes them
by the thousand: :meth:`HeldQueue.push_many` and :meth:`HeldQueue.pop_many` move a run
of entries with one call (a method call per entry was a tenth of what holding and
taking a timer cost, callgrind).

An entry is a plain tuple ``(slot, order, timer_id, since)``, not a named tuple: one is
built for every timer held, and a named tuple's constructor is a Python call.
``order`` (unique, increasing) breaks ties between one slot's entries in the order they
were held, so two entries never compare further than it.
"""

from __future__ import annotations

import heapq
from collections import deque

__all__ = ["HeldEntry", "HeldQueue"]

#: ``(slot, order, timer_id, since)``: the second the timer's key is stored under, its
#: place among the entries of that second, its id, and when it was first held (the
#: service's clock: the delay the gate adds is measured from it).
HeldEntry = tuple[int, int, str, float]


class HeldQueue:
    """Held entries of one topic, popped in ``(slot, order)`` order."""

    __slots__ = ("_in_order", "_last_slot", "_out_of_order")

    def __init__(self) -> None:
        #: Entries pushed in order, oldest first.
        self._in_order: deque[HeldEntry] = deque()
        #: Entries older than the newest in-order one when pushed: a heap.
        self._out_of_order: list[HeldEntry] = []
        self._last_slot = -(2**63)

    def push(self, entry: HeldEntry) -> None:
        """Add ``entry``, whose ``order`` is higher than every entry's pushed before."""
        if entry[0] >= self._last_slot:
            self._in_order.append(entry)
            self._last_slot = entry[0]
        else:
            heapq.heappush(self._out_of_order, entry)

    def push_many(self, entries: list[HeldEntry]) -> None:
        """:meth:`push` each of ``entries``, which are in ``(slot, order)`` order (a scan's,
        in key order): a run that starts at or after the newest entry goes to the end at
        once."""
        if not entries:
            return
        if entries[0][0] >= self._last_slot:
            self._in_order.extend(entries)
            self._last_slot = entries[-1][0]
            return
        for entry in entries:
            self.push(entry)

    def put_back(self, entry: HeldEntry) -> None:
        """Return an entry just popped (it is still the oldest)."""
        heapq.heappush(self._out_of_order, entry)

    def put_back_many(self, entries: list[HeldEntry]) -> None:
        """Return entries just popped (:meth:`pop_many`): they are still the oldest."""
        for entry in entries:
            heapq.heappush(self._out_of_order, entry)

    def pop_many(self, n: int) -> list[HeldEntry]:
        """Remove and return the ``n`` oldest entries (fewer if fewer are held), oldest
        first."""
        in_order = self._in_order
        if not self._out_of_order:
            popleft = in_order.popleft
            return [popleft() for _ in range(min(n, len(in_order)))]
        taken: list[HeldEntry] = []
        while len(taken) < n and self:
            taken.append(self.pop())
        return taken

    def pop(self) -> HeldEntry:
        """Remove and return the oldest entry (the queue must not be empty)."""
        in_order, out_of_order = self._in_order, self._out_of_order
        if out_of_order and (not in_order or out_of_order[0] < in_order[0]):
            return heapq.heappop(out_of_order)
        return in_order.popleft()

    def oldest_slot(self) -> int:
        """The slot of the oldest entry (the queue must not be empty)."""
        in_order, out_of_order = self._in_order, self._out_of_order
        if not out_of_order:
            return in_order[0][0]
        if not in_order:
            return out_of_order[0][0]
        return min(in_order[0][0], out_of_order[0][0])

    def __len__(self) -> int:
        return len(self._in_order) + len(self._out_of_order)

    def __bool__(self) -> bool:
        return bool(self._in_order) or bool(self._out_of_order)
