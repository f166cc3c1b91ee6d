import logging

import pytest
from prometheus_client import CollectorRegistry, Gauge

from app.core.clock_check import WINDOW, ClockSkewMonitor


def monitor_at(now: list[float]) -> tuple[ClockSkewMonitor, CollectorRegistry]:
    registry = CollectorRegistry()
    gauge = Gauge("skew", "skew", ["source"], registry=registry)
    return ClockSkewMonitor(gauge, threshold=2.0, clock=lambda: now[0]), registry


def test_a_source_ahead_of_us_is_warned_at_once(caplog: pytest.LogCaptureFixture) -> None:
    now = [1000.0]
    monitor, registry = monitor_at(now)
    with caplog.at_level(logging.WARNING):
        assert monitor.observe("osc-a", 999.99) == pytest.approx(0.01)
        assert monitor.observe("osc-b", 1005.0) == pytest.approx(-5.0)  # 5 s ahead of us
        monitor.observe("osc-b", 1005.0)
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert "osc-b" in message and "ahead of this worker's clock" in message
    assert registry.get_sample_value("skew", {"source": "osc-b"}) == pytest.approx(-5.0)
    assert registry.get_sample_value("skew", {"source": "osc-a"}) == pytest.approx(0.01)


def test_a_backlog_of_old_ticks_is_not_skew(caplog: pytest.LogCaptureFixture) -> None:
    now = [1000.0]
    monitor, _ = monitor_at(now)
    with caplog.at_level(logging.WARNING):
        for age in (9.0, 6.0, 3.0):  # catching up on old ticks at start
            monitor.observe("osc", now[0] - age)
            now[0] += 0.01
        for _ in range(int(WINDOW) + 2):  # then fresh ticks, 10 ms after they were sent
            now[0] += 1
            estimate = monitor.observe("osc", now[0] - 0.01)
    assert estimate == pytest.approx(0.01)
    assert not caplog.records


def test_a_source_behind_us_is_warned_once_settled(caplog: pytest.LogCaptureFixture) -> None:
    now = [1000.0]
    monitor, _ = monitor_at(now)
    with caplog.at_level(logging.WARNING):
        for _ in range(int(WINDOW) + 2):
            now[0] += 1
            monitor.observe("osc", now[0] - 4.0)  # its clock runs 4 s behind ours
    assert len(caplog.records) == 1 and "late" in caplog.records[0].getMessage()


def test_a_taken_over_partitions_old_ticks_are_not_skew(caplog: pytest.LogCaptureFixture) -> None:
    now = [1000.0]
    monitor, _ = monitor_at(now)
    with caplog.at_level(logging.WARNING):
        for _ in range(int(WINDOW) + 2):  # live ticks of our own partitions
            now[0] += 1
            monitor.observe("osc", now[0] - 0.01)
        for age in range(40, 0, -1):  # then the dead worker's partitions' old ticks
            estimate = monitor.observe("osc", now[0] - age)
    assert estimate == pytest.approx(0.01)
    assert not caplog.records


def test_a_backlog_after_a_long_silence_is_not_skew(caplog: pytest.LogCaptureFixture) -> None:
    now = [1000.0]
    monitor, _ = monitor_at(now)
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            now[0] += 1
            monitor.observe("osc", now[0] - 0.01)
        silent_from = now[0]
        now[0] += 40  # a rebalance longer than the window: no ticks processed
        for second in range(1, 41):  # the backlog of the silence, read quickly
            monitor.observe("osc", silent_from + second)
            now[0] += 0.05
        for _ in range(int(WINDOW) + 2):  # then live again
            now[0] += 1
            estimate = monitor.observe("osc", now[0] - 0.01)
    assert estimate == pytest.approx(0.01)
    assert not caplog.records
