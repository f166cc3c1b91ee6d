"""Fair firing: a tick's callbacks to different topics take turns (app.core.fair_order)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.core.fair_order import interleave_by_topic
from app.core.timer import Timer
from app.core.wheel import PartitionWheel
from tests.support.memkv import MemoryKV


def timer(timer_id: str, topic: str, due: int = 100) -> Timer:
    return Timer(id=timer_id, due=due, topic=topic, key=b"k", value=b"v", token="t")


@given(st.lists(st.sampled_from("abcd"), max_size=200))
def test_topics_take_turns_and_each_keeps_its_order(topics: list[str]) -> None:
    timers = [timer(f"t{i}", topic) for i, topic in enumerate(topics)]
    out = interleave_by_topic(timers)
    assert sorted(t.id for t in out) == sorted(t.id for t in timers)
    for topic in set(topics):
        assert [t for t in out if t.topic == topic] == [t for t in timers if t.topic == topic]
    # The n-th timer of a topic is no later than the n-th turn of every topic.
    n_topics = len(set(topics))
    seen: dict[str, int] = {}
    for position, t in enumerate(out):
        seen[t.topic] = seen.get(t.topic, 0) + 1
        assert position < seen[t.topic] * n_topics


def test_one_topic_is_returned_as_it_is() -> None:
    timers = [timer(f"t{i}", "a") for i in range(5)]
    assert interleave_by_topic(timers) == timers
    assert interleave_by_topic([]) == []


def test_a_tick_delivers_a_small_topic_among_its_first_callbacks() -> None:
    """2,000 timers to one topic and 3 to another due in one second, the 3 with ids that
    sort last: they come 2nd, 4th and 6th, not after the 2,000."""
    wheel = PartitionWheel(MemoryKV())
    for i in range(2000):
        wheel.schedule(timer(f"a{i:05d}", "burst"))
    for i in range(3):
        wheel.schedule(timer(f"z{i}", "other"))
    due = wheel.begin_tick(100)
    assert due is not None and len(due) == 2003
    assert [i for i, t in enumerate(due) if t.topic == "other"] == [1, 3, 5]
    wheel.finish_tick(100, due)
    assert wheel.count_pending() == 0
