import logging
import random
import time

import pytest
from prometheus_client import CollectorRegistry, Gauge

from app.core.clock_check import (
    LEAD_STALE,
    LEAD_WINDOW,
    WINDOW,
    ClockSkewMonitor,
    OscillatorLead,
    WindowExtreme,
)


def skew_monitor() -> tuple[ClockSkewMonitor, CollectorRegistry, list[float]]:
    """A skew monitor, the registry of its gauge, and its clock: ``now[0]``, second 1000
    until the test moves it."""
    now = [1000.0]
    registry = CollectorRegistry()
    gauge = Gauge("skew", "skew", ["source"], registry=registry)
    return ClockSkewMonitor(gauge, threshold=2.0, clock=lambda: now[0]), registry, now


def live_ticks(
    monitor: ClockSkewMonitor, now: list[float], ticks: int, late: float = 0.01
) -> float:
    """``ticks`` ticks of ``osc``, one a second, each read ``late`` s after it was sent;
    the estimate after the last."""
    estimate = float("nan")
    for _ in range(ticks):
        now[0] += 1
        estimate = monitor.observe("osc", now[0] - late)
    return estimate


def test_a_source_ahead_of_us_is_warned_at_once(caplog: pytest.LogCaptureFixture) -> None:
    monitor, registry, _ = skew_monitor()
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
    monitor, _, now = skew_monitor()
    with caplog.at_level(logging.WARNING):
        for age in (9.0, 6.0, 3.0):  # catching up on old ticks at start
            monitor.observe("osc", now[0] - age)
            now[0] += 0.01
        estimate = live_ticks(monitor, now, int(WINDOW) + 2)  # then fresh ticks, 10 ms late
    assert estimate == pytest.approx(0.01)
    assert not caplog.records


def test_a_source_behind_us_is_warned_once_settled(caplog: pytest.LogCaptureFixture) -> None:
    monitor, _, now = skew_monitor()
    with caplog.at_level(logging.WARNING):
        live_ticks(monitor, now, int(WINDOW) + 2, late=4.0)  # its clock runs 4 s behind ours
    assert len(caplog.records) == 1 and "late" in caplog.records[0].getMessage()


def test_a_taken_over_partitions_old_ticks_are_not_skew(caplog: pytest.LogCaptureFixture) -> None:
    monitor, _, now = skew_monitor()
    with caplog.at_level(logging.WARNING):
        live_ticks(monitor, now, int(WINDOW) + 2)  # live ticks of our own partitions
        for age in range(40, 0, -1):  # then the dead worker's partitions' old ticks
            estimate = monitor.observe("osc", now[0] - age)
    assert estimate == pytest.approx(0.01)
    assert not caplog.records


def test_a_backlog_after_a_long_silence_is_not_skew(caplog: pytest.LogCaptureFixture) -> None:
    monitor, _, now = skew_monitor()
    with caplog.at_level(logging.WARNING):
        live_ticks(monitor, now, 5)
        silent_from = now[0]
        now[0] += 40  # a rebalance longer than the window: no ticks processed
        for second in range(1, 41):  # the backlog of the silence, read quickly
            monitor.observe("osc", silent_from + second)
            now[0] += 0.05
        estimate = live_ticks(monitor, now, int(WINDOW) + 2)  # then live again
    assert estimate == pytest.approx(0.01)
    assert not caplog.records


# -- constant time per tick, bounded state, silent sources forgotten ----------------


def lead_at() -> tuple[OscillatorLead, CollectorRegistry]:
    registry = CollectorRegistry()
    gauge = Gauge("lead", "lead", ["source"], registry=registry)
    return OscillatorLead(gauge, threshold=2.0), registry


def test_a_burst_of_ticks_for_one_past_second_costs_constant_time_each() -> None:
    monitor, _, now = skew_monitor()
    lead, _ = lead_at()
    started = time.thread_time()
    for i in range(100_000):  # a backlog for second 900, read over 2 s
        now[0] = 1000.0 + i / 50_000
        monitor.observe("osc", 900.0)
        lead.observe("osc", 900, now[0])
    elapsed = time.thread_time() - started
    assert elapsed < 5.0, elapsed  # a window scan per tick took minutes
    assert monitor.observe("osc", 900.0) == pytest.approx(100.0)  # the minimum: the first
    assert lead.leads()["osc"] == pytest.approx(-100.0)  # the maximum: the first too
    assert len(lead._sources["osc"].window) <= LEAD_WINDOW + 2
    assert len(monitor._sources["osc"].window) <= WINDOW + 2


@pytest.mark.parametrize("maximum", [False, True])
def test_the_window_extreme_is_the_extreme_of_the_window(maximum: bool) -> None:
    rng = random.Random(7)
    extreme = WindowExtreme(5.0, maximum=maximum)
    seen: list[tuple[float, float]] = []
    now = 0.0
    for _ in range(3000):
        now += rng.choice((0.01, 0.3, 1.0, 2.5))
        value = rng.uniform(-10, 10)
        seen.append((now, value))
        got = extreme.observe(now, value)
        # Exact over [now - 5, now], or a value at most a second older (shared entries).
        pick = max if maximum else min
        exact = pick(v for t, v in seen if t >= now - 5.0)
        loose = pick(v for t, v in seen if t >= now - 6.0)
        assert (exact <= got <= loose) if maximum else (loose <= got <= exact)
        assert len(extreme) <= 7


def test_a_silent_source_is_forgotten_gauge_included() -> None:
    monitor, registry, now = skew_monitor()
    lead, lead_registry = lead_at()
    monitor.observe("gone", 999.9)
    lead.observe("gone", 1000, now[0])
    now[0] += LEAD_STALE + 1
    monitor.observe("live", now[0] - 0.01)
    lead.observe("live", int(now[0]), now[0])
    assert monitor.sources() == ["live"]
    assert list(lead.leads()) == ["live"]
    assert registry.get_sample_value("skew", {"source": "gone"}) is None
    assert lead_registry.get_sample_value("lead", {"source": "gone"}) is None
    assert registry.get_sample_value("skew", {"source": "live"}) == pytest.approx(0.01)
