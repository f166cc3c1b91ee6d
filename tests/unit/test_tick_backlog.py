"""TickBacklog: a tick partition far behind its end seeks to its newest tick, once."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from faust.types import TP

from app.worker.tick_backlog import SKIP_THRESHOLD, TickBacklog


class Consumer:
    def __init__(self, ends: dict[TP, int]) -> None:
        self.ends = ends
        self.seeks: list[tuple[TP, int]] = []

    def highwater(self, tp: TP) -> int:
        return self.ends[tp]

    async def seek(self, tp: TP, offset: int) -> None:
        self.seeks.append((tp, offset))


class Counter:
    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, n: float = 1) -> None:
        self.value += n


def events(tp: TP, *offsets: int) -> list[Any]:
    return [SimpleNamespace(message=SimpleNamespace(tp=tp, offset=o)) for o in offsets]


def test_a_partition_far_behind_seeks_to_its_newest_tick_once() -> None:
    behind, live = TP("ticks", 0), TP("ticks", 1)
    consumer, skipped = Consumer({behind: 100_000, live: 51}), Counter()
    backlog = TickBacklog(consumer, skipped)
    asyncio.run(backlog.skip_stale(events(behind, 10, 11) + events(live, 49, 50)))
    assert consumer.seeks == [(behind, 99_999)]
    assert skipped.value == 99_999 - 11 - 1
    # Faust still reads what it had taken in: no second seek to the same place.
    asyncio.run(backlog.skip_stale(events(behind, 12, 13)))
    assert consumer.seeks == [(behind, 99_999)]
    # A new burst past that point is skipped again.
    consumer.ends[behind] = 100_000 + 10 * SKIP_THRESHOLD
    asyncio.run(backlog.skip_stale(events(behind, 99_999)))
    assert consumer.seeks[-1] == (behind, 100_000 + 10 * SKIP_THRESHOLD - 1)


def test_a_partition_within_the_threshold_is_read_as_it_is() -> None:
    tp = TP("ticks", 0)
    consumer = Consumer({tp: SKIP_THRESHOLD + 10})
    asyncio.run(TickBacklog(consumer, Counter()).skip_stale(events(tp, 10)))
    assert consumer.seeks == []
