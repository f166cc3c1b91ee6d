"""Shares of a limit by backlog, the gates that apply them, and the table they come from."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.rate_shares import FLOOR, partition_rates
from app.kafka.demand import STALE_SECONDS, DemandTable
from app.settings import Settings
from app.worker.topic_gates import TopicGates


@given(
    limit=st.floats(min_value=0.001, max_value=1e7),
    partitions=st.integers(min_value=1, max_value=64),
    backlogs=st.dictionaries(st.integers(0, 63), st.integers(0, 10**9), max_size=64),
)
def test_the_shares_of_all_partitions_add_up_to_the_limit(
    limit: float, partitions: int, backlogs: dict[int, int]
) -> None:
    backlogs = {p: n for p, n in backlogs.items() if p < partitions}
    rates = partition_rates(limit, partitions, backlogs, range(partitions))
    assert sum(rates.values()) == pytest.approx(limit, rel=1e-9)
    assert min(rates.values()) >= FLOOR * limit / partitions * (1 - 1e-9)


def test_a_backlog_in_one_partition_gets_nearly_the_whole_limit() -> None:
    rates = partition_rates(500.0, 8, {3: 3000}, range(8))
    assert rates[3] == pytest.approx(500.0 * (1 - FLOOR) + 500.0 * FLOOR / 8)
    assert rates[0] == pytest.approx(500.0 * FLOOR / 8)
    assert partition_rates(500.0, 8, {}, [0, 1]) == {0: 62.5, 1: 62.5}
    halves = partition_rates(100.0, 2, {0: 10, 1: 10}, [0, 1])
    assert halves == {0: 50.0, 1: 50.0}


def test_gates_run_a_partitions_bucket_at_its_share_and_fall_back_to_the_split() -> None:
    now = [1000.0]
    gates = TopicGates({"t": 800.0}, partitions=8, clock=lambda: now[0])
    assert gates.budget(3, "t") == 0  # starts empty
    gates.share("t", {3: 700.0})
    gates.spend(3, "t", 0, waiting=5000)  # backlogged: keeps a window's worth
    now[0] += 0.5
    assert gates.budget(3, "t") == 35  # one round takes 50 ms of the share at most
    assert _rounds(gates, 3, "t") == 350  # and the rounds after it the rest
    gates.share("t", None)  # no current view: limit / N
    now[0] += 0.5
    assert _rounds(gates, 3, "t") == 50
    gates.share("untouched", {3: 1.0})  # not limited: ignored
    assert gates.budget(3, "untouched") is None


def _rounds(gates: TopicGates, partition: int, topic: str) -> int:
    """What back-to-back rounds of ``partition`` take until its bucket is empty."""
    total = 0
    while n := gates.budget(partition, topic):
        gates.spend(partition, topic, n, waiting=5000)
        total += n
    return total


def _table(clock: list[float], wall: list[float]) -> DemandTable:
    settings = replace(Settings(), worker_id="w1")
    return DemandTable(settings, clock=lambda: clock[0], wall=lambda: wall[0])


def _report(worker: str, at: float, held: dict[str, dict[str, int]]) -> bytes:
    return json.dumps({"worker": worker, "at": at, "held": held}).encode()


def test_the_table_keeps_current_reports_and_the_newest_owner_of_a_partition() -> None:
    clock, wall = [10.0], [5000.0]
    table = _table(clock, wall)
    assert not table.current()
    table.apply(_report("w2", 4999.0, {"3": {"t": 100}, "4": {"t": 7}}))
    table.apply(_report("w1", 5000.0, {"3": {"t": 40}, "5": {}}))  # w1 took 3 over
    assert table.current()
    assert table.backlogs() == {"t": {3: 40, 4: 7}}
    for bad in (b"", b"{", b"[1]", _report("w3", 1.0, {"1": {"t": 9}}), b'{"worker": 1}'):
        table.apply(bad)  # not a report, or one written long ago: ignored
    assert table.backlogs() == {"t": {3: 40, 4: 7}}
    clock[0] += STALE_SECONDS + 0.1  # nobody reported since: nothing counts
    assert not table.current()
    assert table.backlogs() == {}
