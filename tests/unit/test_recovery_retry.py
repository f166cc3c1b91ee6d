"""A recovery step that cannot finish is retried with bounded backoff, never fatal.

The backoff itself (:mod:`app.core.backoff`), the retry loop of the changelog catch-up
(:func:`app.worker.catch_up.catch_up_until_done`, with a fake attempt and a fake
sleep: no broker) and what a stall does to readiness, liveness and the metrics
(:class:`app.worker.health.RecoveryStalls`). The whole path on real processes, with a
broker that never lets the catch-up reach the end: ``tests/integration/
test_recovery_stall.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import aiokafka.errors
import pytest
from confluent_kafka import KafkaError, KafkaException
from faust.tables.recovery import RebalanceAgain, ServiceStopped

from app.core.backoff import CATCH_UP_FETCH_WAITS_MS, Backoff, fetch_wait_ms
from app.worker.catch_up import (
    CATCH_UP_BACKOFF,
    CatchUpAbandoned,
    CatchUpIncomplete,
    catch_up_until_done,
)
from app.worker.faust_internals import recovery as recovery_patches
from app.worker.health import CATCH_UP_STEP, RecoveryStalls, WorkerHealth
from app.worker.metrics import WorkerMetrics

# -- the backoff -------------------------------------------------------------------


def test_delays_double_from_the_initial_one_up_to_the_maximum() -> None:
    backoff = Backoff(initial=1.0, maximum=30.0, factor=2.0)
    assert [backoff.delay(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 30, 30, 30]


def test_a_retry_years_later_still_waits_the_maximum_and_never_overflows() -> None:
    backoff = Backoff(initial=0.5, maximum=30.0, factor=3.0)
    assert backoff.delay(10_000_000) == 30.0
    assert Backoff(initial=2.0, maximum=2.0, factor=1.0).delay(50) == 2.0


def test_jitter_takes_at_most_its_share_off_and_nothing_without_randomness() -> None:
    backoff = Backoff(initial=10.0, maximum=10.0, jitter=0.2)
    assert backoff.delay(1) == 10.0
    assert backoff.delay(1, lambda: 0.0) == 10.0
    assert backoff.delay(1, lambda: 0.999999) == pytest.approx(8.0, abs=1e-4)
    assert CATCH_UP_BACKOFF.delay(99, lambda: 0.5) == pytest.approx(27.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial": 0.0},
        {"initial": 5.0, "maximum": 1.0},
        {"factor": 0.5},
        {"jitter": 1.5},
    ],
)
def test_a_backoff_that_cannot_be_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Backoff(**kwargs)


def test_retries_and_attempts_are_numbered_from_one() -> None:
    with pytest.raises(ValueError):
        Backoff().delay(0)
    with pytest.raises(ValueError):
        fetch_wait_ms(0)


def test_each_later_attempt_lets_a_fetch_wait_longer_then_keeps_the_longest() -> None:
    assert [fetch_wait_ms(n) for n in range(1, 7)] == [10, 100, 500, 1000, 1000, 1000]
    assert CATCH_UP_FETCH_WAITS_MS[0] == 10, "a takeover's first attempt stays fast"


# -- the retry loop ------------------------------------------------------------------


class FakeAttempts:
    """Stands in for one attempt of the catch-up: fails ``failures`` times, then applies."""

    def __init__(self, failures: Sequence[Exception]) -> None:
        self.failures = list(failures)
        self.calls: list[dict[str, Any]] = []

    def __call__(self, dbs: Any, conf: Any, topic: str, timeout: float, **kw: Any) -> Any:
        self.calls.append({"timeout": timeout, **kw})
        if self.failures:
            raise self.failures.pop(0)
        return dict.fromkeys(dbs, 3)


class Report:
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def stalled(
        self, partitions: Sequence[int], reason: str, attempt: int, retry_in: float
    ) -> None:
        self.events.append(("stalled", list(partitions), attempt, retry_in, reason))

    def resumed(self, partitions: Sequence[int]) -> None:
        self.events.append(("resumed", list(partitions)))


def stalled(n: int) -> CatchUpIncomplete:
    return CatchUpIncomplete(f"no progress ({n})")


def run(attempts: FakeAttempts, report: Report | None = None, **kw: Any) -> Any:
    slept: list[float] = []
    result = catch_up_until_done(
        {0: object(), 2: object()},  # type: ignore[dict-item]
        {},
        "t-changelog",
        stall_timeout=5.0,
        max_age=86400.0,
        backoff=Backoff(initial=1.0, maximum=4.0),
        report=report,
        attempt_once=attempts,
        sleep=slept.append,
        **kw,
    )
    return result, slept


def test_a_catch_up_that_stalls_is_retried_with_backoff_until_it_completes() -> None:
    attempts = FakeAttempts([stalled(1), stalled(2), stalled(3), stalled(4)])
    report = Report()
    result, slept = run(attempts, report)
    assert result == {0: 3, 2: 3}
    assert len(attempts.calls) == 5
    assert sum(slept) == pytest.approx(1 + 2 + 4 + 4), "1 s doubling, at most the maximum"
    assert max(slept) <= 0.2 + 1e-9, "sleeps in slices, looking whether to stop"
    assert [c["fetch_wait"] for c in attempts.calls] == [10, 100, 500, 1000, 1000]
    assert all(c["timeout"] == 5.0 for c in attempts.calls)
    # Only the first attempt may rebuild a stale store: a rebuild cut short is not marked
    # caught up, and starting it over each time would never get anywhere.
    assert [c["max_age"] for c in attempts.calls] == [86400.0, None, None, None, None]
    stalls = [e for e in report.events if e[0] == "stalled"]
    assert [(e[1], e[2], e[3]) for e in stalls] == [
        ([0, 2], 1, 1.0),
        ([0, 2], 2, 2.0),
        ([0, 2], 3, 4.0),
        ([0, 2], 4, 4.0),
    ]
    assert "no progress (1)" in stalls[0][4]
    assert report.events[-1] == ("resumed", [0, 2])


def test_a_catch_up_that_completes_at_once_reports_nothing() -> None:
    report = Report()
    result, slept = run(FakeAttempts([]), report)
    assert result == {0: 3, 2: 3} and slept == [] and report.events == []


def test_a_broker_error_is_retried_like_a_stall() -> None:
    error = KafkaException(KafkaError(KafkaError._TRANSPORT, "broker away"))
    report = Report()
    result, _ = run(FakeAttempts([error]), report)
    assert result == {0: 3, 2: 3}
    assert report.events[0][0] == "stalled" and "broker away" in report.events[0][4]


def test_what_is_not_the_broker_still_raises() -> None:
    # A RocksDB write that fails is the worker's own disk: it stops (isolation.py).
    with pytest.raises(OSError):
        run(FakeAttempts([OSError("disk full")]))


def test_a_stopping_worker_abandons_the_retries_and_clears_the_stall() -> None:
    report = Report()
    stopping = iter([False, False, True])
    with pytest.raises(CatchUpAbandoned):
        run(FakeAttempts([stalled(1)] * 10), report, should_stop=lambda: next(stopping, True))
    assert report.events[-1] == ("resumed", [0, 2])


# -- what a stall does to readiness, liveness and the metrics -------------------------


class Clock:
    def __init__(self) -> None:
        self.mono = 1000.0

    def __call__(self) -> float:
        return self.mono


def sample(metrics: WorkerMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    assert value is not None, name
    return value


def test_a_stalled_catch_up_makes_the_worker_not_ready_with_its_reason_but_alive() -> None:
    clock = Clock()
    health = WorkerHealth(30.0, clock=lambda: 1.7e9, monotonic=clock)
    metrics = WorkerMetrics()
    stalls = RecoveryStalls(health, metrics)
    assert sample(metrics, "kafka_timers_recovery_stalled", step=CATCH_UP_STEP) == 0
    health.recovering([0, 1])
    clock.mono += 61
    stalls.stalled([0, 1], "read nothing for 60 s", 1, 1.0)
    report = health.readiness()
    assert not report.ok
    assert report.body["phase"] == "recovering"
    assert "changelog_catch_up stalled" in report.body["reason"]
    assert "partitions [0, 1], attempt 1: read nothing for 60 s" in report.body["reason"]
    assert report.body["stalled"] == {CATCH_UP_STEP: report.body["stalled"][CATCH_UP_STEP]}
    assert health.liveness({0: 1}).ok, "retrying: not a worker to restart"
    assert sample(metrics, "kafka_timers_recovery_stalled", step=CATCH_UP_STEP) == 1
    stalls.stalled([0, 1], "read nothing for 60 s", 2, 2.0)
    assert sample(metrics, "kafka_timers_recovery_retries_total", step=CATCH_UP_STEP) == 2
    assert health.not_ready_for() == pytest.approx(61)
    stalls.resumed([0, 1])
    assert sample(metrics, "kafka_timers_recovery_stalled", step=CATCH_UP_STEP) == 0
    health.ready(health.applying([0, 1]), [0, 1])
    assert health.readiness().ok and health.not_ready_for() == 0


def test_a_store_opened_while_ready_that_stalls_makes_the_worker_not_ready_until_done() -> None:
    clock = Clock()
    health = WorkerHealth(30.0, clock=lambda: 1.7e9, monotonic=clock)
    metrics = WorkerMetrics()
    stalls = RecoveryStalls(health, metrics)
    health.recovering([3])
    health.ready(health.applying([3]), [3])
    clock.mono += 100
    stalls.stalled([3], "broker away", 1, 1.0)
    stalls.stalled([4], "broker away", 1, 1.0)
    clock.mono += 5
    assert not health.readiness().ok
    assert health.not_ready_for() == pytest.approx(5), "counted from when it stopped being ready"
    stalls.resumed([3])
    assert not health.readiness().ok, "another catch-up is still stalled"
    assert sample(metrics, "kafka_timers_recovery_stalled", step=CATCH_UP_STEP) == 1
    stalls.resumed([4])
    assert health.readiness().ok


# -- Faust's own recovery, started over instead of ended ---------------------------------


class WaitResults:
    def __init__(self, done: list[Any], stopped: bool) -> None:
        self.done, self.stopped = done, stopped


class FakeRecovery:
    """What :func:`_recovery_wait` uses of Faust's ``Recovery``."""

    def __init__(self, answers: list[Any]) -> None:
        self.signal_recovery_start = asyncio.Event()
        self.should_stop = False
        self.answers = answers

    async def wait_first(self, coro: Any, signal: Any, timeout: Any = None) -> WaitResults:
        if asyncio.iscoroutine(coro):
            coro.close()
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer  # type: ignore[no-any-return]


class RecoveryReport:
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def stalled(self, partitions: Any, reason: str, attempt: int, retry_in: float) -> None:
        self.events.append(("stalled", attempt, reason))

    def resumed(self, partitions: Any) -> None:
        self.events.append(("resumed",))


async def noop() -> None:
    return None


@pytest.fixture
def recovery_report(monkeypatch: pytest.MonkeyPatch) -> Any:
    report = RecoveryReport()
    monkeypatch.setattr(recovery_patches, "_RECOVERY_BACKOFF", (0.001, 0.002))
    recovery_patches.watch_recovery(report)
    yield report
    recovery_patches.watch_recovery(None)


def test_a_recovery_wait_that_runs_out_starts_the_recovery_over(recovery_report: Any) -> None:
    timed_out = WaitResults([], stopped=True)
    answered = WaitResults([noop], stopped=False)
    recovery = FakeRecovery([timed_out, timed_out, answered, answered])

    async def scenario() -> None:
        for attempt in (1, 2):
            with pytest.raises(RebalanceAgain):
                await recovery_patches._recovery_wait(recovery, noop(), timeout=90.0)
            assert recovery.signal_recovery_start.is_set(), "the recovery starts over"
            recovery.signal_recovery_start.clear()
            assert recovery_report.events[-1][:2] == ("stalled", attempt)
        # The recovery's pause before it starts over proves nothing about the broker.
        await recovery_patches._recovery_wait(recovery, noop())
        assert recovery_report.events[-1][0] == "stalled"
        await recovery_patches._recovery_wait(recovery, noop(), timeout=90.0)

    asyncio.run(scenario())
    assert "no answer within 90.0 s" in recovery_report.events[0][2]
    assert recovery_report.events[-1] == ("resumed",)


def test_an_aiokafka_error_starts_the_recovery_over_instead_of_crashing_it(
    recovery_report: Any,
) -> None:
    recovery = FakeRecovery([aiokafka.errors.KafkaConnectionError("refused")])
    with pytest.raises(RebalanceAgain):
        asyncio.run(recovery_patches._recovery_wait(recovery, noop()))
    assert "KafkaConnectionError" in recovery_report.events[0][2]


def test_a_stopping_worker_stops_its_recovery_as_faust_does(recovery_report: Any) -> None:
    recovery = FakeRecovery([WaitResults([], stopped=True)])
    recovery.should_stop = True
    with pytest.raises(ServiceStopped):
        asyncio.run(recovery_patches._recovery_wait(recovery, noop()))
    assert recovery_report.events == []


def test_a_new_rebalance_restarts_the_recovery_without_a_stall(recovery_report: Any) -> None:
    recovery = FakeRecovery([])
    recovery.answers.append(WaitResults([recovery.signal_recovery_start], stopped=False))
    with pytest.raises(RebalanceAgain):
        asyncio.run(recovery_patches._recovery_wait(recovery, noop()))
    assert recovery_report.events == []
