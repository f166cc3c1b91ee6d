"""Readiness and liveness rules of a worker, and the oscillator's ``/livez``, on fake clocks.

The endpoints themselves are exercised on real processes by
``tests/integration/test_health.py``; these check every rule and reason without them.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from prometheus_client import CollectorRegistry, Counter

from app.telemetry import HealthReport, serve_metrics
from app.worker.health import Phase, WorkerHealth
from oscillator.health import tick_liveness
from oscillator.ticker import Oscillator
from tests.support.fake_clock import Clocks

NOW = 1_767_225_600.0


def ready_worker(clocks: Clocks, timeout: float = 30.0) -> WorkerHealth:
    health = WorkerHealth(timeout, clock=lambda: clocks.now, monotonic=lambda: clocks.mono)
    health.rebalancing()
    health.recovering([0, 1])
    health.ready(health.applying([0, 1]), [0, 1])
    return health


def test_readiness_walks_joining_recovering_applying_ready_with_a_reason_each() -> None:
    clocks = Clocks(NOW, 1000.0)
    health = WorkerHealth(30, clock=lambda: clocks.now, monotonic=lambda: clocks.mono)
    seen = [health.readiness()]
    health.recovering([3, 1])
    seen.append(health.readiness())
    token = health.applying([1, 3])
    seen.append(health.readiness())
    health.ready(token, [1, 3])
    seen.append(health.readiness())
    assert [r.ok for r in seen] == [False, False, False, True]
    assert [r.body["phase"] for r in seen] == ["joining", "recovering", "applying", "ready"]
    assert seen[0].body["reason"] == "joining the consumer group"
    assert seen[1].body["reason"] == "recovering partitions [1, 3]"
    assert seen[2].body["reason"] == "applying waiting requests of partitions [1, 3]"
    assert "reason" not in seen[3].body and seen[3].body["partitions"] == [1, 3]


def test_a_rebalance_makes_it_not_ready_and_a_stale_step_cannot_make_it_ready() -> None:
    clocks = Clocks(NOW, 1000.0)
    health = ready_worker(clocks)
    token = health.applying([0, 1])
    health.rebalancing()  # a new rebalance began while the old drain was still running
    health.ready(token, [0, 1])
    assert health.phase is Phase.JOINING
    assert not health.readiness().ok


def test_alive_while_ticks_are_processed_even_with_timers_overdue() -> None:
    clocks = Clocks(NOW, 1000.0)
    health = ready_worker(clocks)
    for _ in range(60):
        clocks.advance(1)
        health.ticked()
    # A big burst is still firing: overdue, but ticks keep being processed.
    assert health.liveness({0: int(clocks.now) - 45}).ok


def test_alive_without_ticks_when_nothing_is_due() -> None:
    clocks = Clocks(NOW, 1000.0)
    health = ready_worker(clocks)
    clocks.advance(300)
    assert health.liveness({0: int(clocks.now) + 60}).ok
    assert health.liveness({}).ok


def test_dead_when_timers_wait_past_the_timeout_and_no_tick_came_for_as_long() -> None:
    clocks = Clocks(NOW, 1000.0)
    health = ready_worker(clocks, timeout=30)
    health.ticked()
    due = int(clocks.now) + 5
    clocks.advance(30)  # due 25 s ago, no tick for 30 s: not yet
    assert health.liveness({1: due}).ok
    clocks.advance(6)  # due 31 s ago, no tick for 36 s
    report = health.liveness({1: due, 0: int(clocks.now) + 100})
    assert not report.ok
    assert report.body["alive"] is False
    assert report.body["reason"].startswith("no tick processed for 36 s")
    assert "partitions [1]" in report.body["reason"]
    assert report.body["oldest_overdue_seconds"] == 31
    health.ticked()  # ticks arrive again
    assert health.liveness({1: due}).ok


def test_a_fresh_assignment_gets_the_whole_timeout_to_hear_its_first_tick() -> None:
    clocks = Clocks(NOW, 1000.0)
    health = ready_worker(clocks, timeout=10)
    clocks.advance(100)  # quiet, but nothing was due
    health.rebalancing()
    health.recovering([0])
    health.ready(health.applying([0]), [0])
    overdue = {0: int(clocks.now) - 50}  # the partition it took over has a backlog
    assert health.liveness(overdue).ok
    clocks.advance(11)
    assert not health.liveness(overdue).ok


def test_liveness_is_not_judged_while_recovering_or_applying() -> None:
    clocks = Clocks(NOW, 1000.0)
    health = ready_worker(clocks, timeout=5)
    health.recovering([0])
    clocks.advance(120)
    report = health.liveness({0: int(clocks.now) - 100})
    assert report.ok
    assert "not judged" in report.body["note"]


def _get(url: str) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read(), response.headers["Content-Type"]
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers["Content-Type"]


def test_the_metrics_server_serves_metrics_and_health_checks_with_their_status() -> None:
    registry = CollectorRegistry()
    Counter("probe_things", "things", registry=registry).inc()
    state = {"ok": True}
    server = serve_metrics(
        0,
        registry,
        {
            "/livez": lambda: HealthReport(state["ok"], {"alive": state["ok"]}),
            "/broken": lambda: 1 / 0,  # type: ignore[return-value,arg-type]
        },
        addr="127.0.0.1",
    )
    assert server is not None
    base = f"http://127.0.0.1:{server.port}"
    try:
        status, body, kind = _get(base + "/metrics")
        assert status == 200 and b"probe_things_total 1.0" in body and kind.startswith("text/plain")
        assert _get(base + "/livez")[:2] == (200, b'{"alive": true}')
        state["ok"] = False
        status, body, kind = _get(base + "/livez")
        assert (status, json.loads(body), kind) == (503, {"alive": False}, "application/json")
        status, body, _ = _get(base + "/broken")
        assert status == 503 and "ZeroDivisionError" in json.loads(body)["reason"]
        assert _get(base + "/nothing")[0] == 404
    finally:
        server.close()


def test_no_port_serves_nothing() -> None:
    assert serve_metrics(None, CollectorRegistry()) is None


def test_an_oscillator_is_alive_while_it_sends_ticks_in_time() -> None:
    mono = [500.0]
    osc = Oscillator({"bootstrap.servers": "127.0.0.1:1"}, "ticks", oscillator_id="o1")
    osc.started = mono[0]
    check = tick_liveness(osc, 5.0, monotonic=lambda: mono[0])
    assert check().ok  # just started
    mono[0] += 6
    report = check()
    assert not report.ok and report.body["reason"] == "no tick sent in the 6 s since start"
    osc.last_sent = mono[0]
    assert check().ok
    mono[0] += 5.5
    report = check()
    assert not report.ok
    assert report.body["reason"] == "no tick sent for 6 s (one is due every second)"
    assert report.body["seconds_since_tick"] == 5.5
