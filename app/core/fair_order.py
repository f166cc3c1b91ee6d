"""Fair firing: a tick's callbacks to different topics take turns.

A tick delivers its due timers in the order the store keeps them (by second, then id).
When 200,000 timers to one topic and 20 to another are due in the same second, the 20
would wait behind the 200,000, seconds late, because one team scheduled a burst. The
order here is **round-robin by callback topic**: the first timer of each topic, then the
second of each, and so on. A topic's own timers keep their order (so do the callbacks
to one key, and a catch-up's seconds), and a topic with few timers has all of them
among the first few of the tick.

Round-robin, not weighted: every topic that has a timer due is one turn, whatever its
volume; a topic that needs a bound on its share of the delivery rate has rate limits
(:mod:`app.worker.topic_gates`). A tick to one topic (nearly all of them) is returned as
it is, after one comparison per timer.

A tick's scan of a burst (:meth:`app.core.wheel_tick.TickJob.begin_tick` with
``decode_first``) puts its timers in this order *before* decoding them, by the topic it
reads from each stored value, and decodes them as they are produced: :func:`take_turns`
orders what it has, decoded or not.

Pure: no clock, no Kafka.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain
from typing import TypeVar

from app.core.timer import Timer

__all__ = ["interleave_by_topic", "take_turns"]

T = TypeVar("T")


def interleave_by_topic(timers: Sequence[Timer]) -> list[Timer]:
    """``timers`` round-robin by topic, each topic's timers in their order.

    >>> from app.core.timer import Timer
    >>> ts = [Timer(id=i, due=1, topic=t, key=None, value=None) for i, t in
    ...       [("a1", "a"), ("a2", "a"), ("a3", "a"), ("b1", "b")]]
    >>> [t.id for t in interleave_by_topic(ts)]
    ['a1', 'b1', 'a2', 'a3']
    """
    if not timers:
        return []
    first = timers[0].topic
    for timer in timers:
        if timer.topic != first:
            break
    else:
        return list(timers)
    by_topic: dict[str, list[Timer]] = {}
    for timer in timers:
        queue = by_topic.get(timer.topic)
        if queue is None:
            by_topic[timer.topic] = [timer]
        else:
            queue.append(timer)
    return take_turns(by_topic.values())


def take_turns(queues: Iterable[Sequence[T]]) -> list[T]:
    """The first item of each of ``queues``, then the second of each, and so on.

    >>> take_turns([[1, 2, 3], [10], [20, 21]])
    [1, 10, 20, 2, 21, 3]
    """
    live = [queue for queue in queues if queue]
    turns: list[T] = []
    done = 0
    # Turns go round while every live queue has an item (zip, in C); then the queues
    # that are left go on without the ones that ran out. A burst beside a few timers is
    # a few rounds and one copy of the burst's remainder, not a look at each of its items.
    while len(live) > 1:
        end = min(len(queue) for queue in live)
        turns.extend(chain.from_iterable(zip(*(queue[done:end] for queue in live), strict=True)))
        done = end
        live = [queue for queue in live if len(queue) > end]
    if live:
        turns.extend(live[0][done:])
    return turns
