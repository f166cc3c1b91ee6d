"""HeldQueue pops in (slot, order) order whatever order entries are pushed and put back
in: the same as one heap would, which is what it replaced."""

from __future__ import annotations

import heapq

from hypothesis import given
from hypothesis import strategies as st

from app.core.held import HeldEntry, HeldQueue

#: Steps: push an entry for a slot, pop one, or pop one and put it back.
steps = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(0, 20)),
        st.tuples(st.just("pop"), st.just(0)),
        st.tuples(st.just("put_back"), st.just(0)),
    ),
    max_size=200,
)


@given(steps)
def test_it_pops_what_a_heap_would(program: list[tuple[str, int]]) -> None:
    queue, model = HeldQueue(), list[HeldEntry]()
    order = 0
    for action, slot in program:
        if action == "push":
            entry = (slot, order, f"t{order}", 0.0)
            order += 1
            queue.push(entry)
            heapq.heappush(model, entry)
        elif model:
            popped = queue.pop()
            assert popped == heapq.heappop(model)
            if action == "put_back":
                queue.put_back(popped)
                heapq.heappush(model, popped)
        assert len(queue) == len(model)
        assert bool(queue) == bool(model)
        if model:
            assert queue.oldest_slot() == model[0][0]
    assert [queue.pop() for _ in range(len(queue))] == sorted(model)


def test_entries_pushed_in_order_never_reach_the_heap() -> None:
    queue = HeldQueue()
    for order, slot in enumerate([5, 5, 6, 9]):
        queue.push((slot, order, f"t{order}", 0.0))
    queue.push((4, 4, "late", 0.0))  # a request due already: older than the newest
    assert queue._out_of_order == [(4, 4, "late", 0.0)]
    assert [queue.pop()[2] for _ in range(5)] == ["late", "t0", "t1", "t2", "t3"]
