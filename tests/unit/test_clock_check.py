import logging

import pytest
from prometheus_client import CollectorRegistry, Gauge

from app.clock_check import ClockSkewMonitor


def test_skew_is_exposed_per_source_and_warned_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()
    gauge = Gauge("skew", "skew", ["source"], registry=registry)
    now = [1000.0]
    monitor = ClockSkewMonitor(gauge, threshold=2.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING):
        assert monitor.observe("osc-a", 999.99) == pytest.approx(0.01)
        assert not caplog.records
        monitor.observe("osc-b", 996.0)  # osc-b's clock is 4 s behind ours
        monitor.observe("osc-b", 996.0)
        assert len(caplog.records) == 1 and "osc-b" in caplog.records[0].getMessage()
        now[0] += 61
        monitor.observe("osc-b", now[0] + 5)  # now 5 s ahead of ours: warned again
        assert len(caplog.records) == 2
    assert registry.get_sample_value("skew", {"source": "osc-b"}) == pytest.approx(-5.0)
    assert registry.get_sample_value("skew", {"source": "osc-a"}) == pytest.approx(0.01)
