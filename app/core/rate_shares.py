"""How a topic's rate limit is shared by the partitions that deliver to it.

A limit is the topic's, across the deployment, wherever its due timers sit: 3,000
timers due at once in one partition must drain at the topic's limit, not at a
partition's fixed slice of it. Each partition that holds timers for a limited topic
gets a share of the limit in proportion to its **backlog** (timers held, due, waiting
for the limit), from a table of backlogs that every worker publishes and every worker
reads (:mod:`app.worker.demand`). Every worker computes the shares of its own
partitions from the same table, so the shares of all partitions add up to the limit.

A small **floor** (:data:`FLOOR`, 2% of the limit, spread over all partitions) goes to
every partition, backlogged or not: a partition whose first timers became due since the
last report starts delivering at once, slowly, and its backlog raises its share at the
next report. With no backlog anywhere each partition has ``limit / N`` (the static
split: the same total, and what a worker falls back to when its view of the table is
stale: see :func:`partition_rates`).

Pure: no clock, no Kafka.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["FLOOR", "partition_rates"]

#: The part of a limit that every partition gets whatever its backlog, in all.
FLOOR = 0.02


def partition_rates(
    limit: float,
    partitions: int,
    backlogs: Mapping[int, int],
    mine: Iterable[int],
) -> dict[int, float]:
    """The rate (callbacks a second) of each partition in ``mine`` for a topic limited to
    ``limit``, given every partition's known ``backlogs`` (absent: none).

    The rates of all ``partitions`` add up to ``limit``: ``FLOOR x limit / partitions``
    each, and the rest in proportion to backlog. With no backlog anywhere, ``limit /
    partitions`` each.

    >>> partition_rates(500.0, 8, {3: 3000}, [3, 4])
    {3: 491.25, 4: 1.25}
    >>> partition_rates(500.0, 8, {}, [0])
    {0: 62.5}
    """
    if partitions < 1:
        raise ValueError("partitions must be at least 1")
    total = sum(n for n in backlogs.values() if n > 0)
    if total <= 0:
        even = limit / partitions
        return dict.fromkeys(mine, even)
    floor = FLOOR * limit / partitions
    rest = (1.0 - FLOOR) * limit
    return {p: floor + rest * max(0, backlogs.get(p, 0)) / total for p in mine}
