"""How the restart scenario reads fires: when partitions fire again, how long timers waited."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
from prometheus_client.samples import Sample

from app.dev.stack import ServiceProcess
from bench.restarts import Fire, refired_after, storing_state, trickle_check, waited_longest
from bench.stack import Worker


def fire(partition: int, due: int, at: float, worker: str = "worker-2") -> Fire:
    return Fire(f"trickle-{partition}-{due}", partition, worker, at)


def test_a_trickle_fire_knows_its_due_second() -> None:
    assert fire(3, 1_700_000_000, 0.0).due == 1_700_000_000
    assert Fire("pending-000000001", 0, "w", 0.0).due is None


def test_partitions_fire_again_only_by_another_worker_or_the_new_process() -> None:
    fires = [
        fire(0, 100, 100.5, "worker-1"),  # the stopping worker, after the signal: not again
        fire(0, 101, 104.0, "worker-2"),  # the other worker took partition 0 over
        fire(1, 101, 101.2, "worker-1"),  # still the old process (before the new one started)
        fire(1, 104, 106.0, "worker-1"),  # the new process, started at 103
        fire(2, 99, 99.9, "worker-2"),  # before the signal
    ]
    refired = refired_after(fires, [0, 1, 2], since=100.0, stopped="worker-1", new_from=103.0)
    assert refired == {0: 4.0, 1: 6.0}  # partition 2 has not fired again
    # After a kill there is no new process: only other workers count.
    assert refired_after(fires, [0, 1], since=100.0, stopped="worker-1") == {0: 4.0}


def test_the_longest_wait_is_the_latest_first_fire_of_a_timer_due_in_the_window() -> None:
    fires = [
        fire(0, 100, 100.05),
        fire(0, 101, 105.0),  # waited 4 s (the pause)
        fire(0, 101, 106.0),  # a duplicate: the first fire is what the timer waited
        fire(1, 102, 104.5),  # waited 2.5 s
        fire(1, 110, 117.0),  # outside the window
        Fire("pending-1", 0, "w", 200.0),  # not a trickle timer
    ]
    assert waited_longest(fires, 100, 105) == pytest.approx(4.0)
    assert waited_longest(fires, 100, 105, partitions=[1]) == pytest.approx(2.5)
    assert waited_longest([], 100, 105) == 0.0


def test_trickle_check_counts_lost_early_and_duplicate_timers() -> None:
    fires = [
        fire(0, 100, 100.1),
        fire(0, 100, 103.0),  # again
        fire(1, 100, 99.5),  # early
        fire(2, 100, 100.2),  # not expected (due after the check)
    ]
    expected = {"trickle-0-100", "trickle-1-100", "trickle-3-100"}
    assert trickle_check(fires, expected) == {
        "expected": 3,
        "lost": 1,
        "early": 1,
        "duplicates": 1,
    }


class _StubWorker(Worker):
    """A worker whose metrics page is given, not served."""

    def __init__(self, name: str, log: Path, samples: list[Sample]) -> None:
        super().__init__(
            cast(ServiceProcess, SimpleNamespace(name=name, log_path=log)), 0, log.parent
        )
        self._given = samples

    def samples(self, timeout: float = 2.0) -> list[Sample]:
        return self._given


def test_a_storing_timeout_says_what_each_worker_did_and_keeps_its_log(tmp_path: Path) -> None:
    log = tmp_path / "run" / "worker-1.log"
    log.parent.mkdir()
    log.write_text("the worker's last words\n")
    stored = Sample("kafka_timers_scheduled_total", {}, 1234.0)
    lag = Sample("kafka_timers_request_lag_records", {"partition": "0"}, 7.0)
    lag2 = Sample("kafka_timers_request_lag_records", {"partition": "1"}, 3.0)
    workers = [
        _StubWorker("worker-1", log, [stored, lag, lag2]),
        _StubWorker("worker-2", tmp_path / "run" / "worker-2.log", []),  # not serving, no log
    ]
    said = storing_state(workers, tmp_path / "work")
    assert "worker-1 (serving: True): scheduled_total 1,234" in said
    assert "request_lag_records 10" in said  # summed over its partitions
    assert "worker-2 (serving: False)" in said
    kept = tmp_path / "work" / "restarts-failed" / "worker-1.log"
    assert kept.read_text() == "the worker's last words\n"
    assert not (tmp_path / "work" / "restarts-failed" / "worker-2.log").exists()
