"""A wrong clock on one side makes timers late, never early (real processes, moved clocks).

Workers fire second S only once a tick for S has arrived *and* their own clock has reached
S (``app.core.tick_gate``). Two failures, each with real oscillator and worker processes
whose wall clocks are moved by time-machine (``tests/support/clock.py``):

- one of two oscillators runs an hour ahead: nothing fires before its second, everything
  fires at its second, also after the honest oscillator stops and the fast one alone
  drives the workers; the held-tick counter and the lead gauge show it;
- a worker's clock is behind both oscillators: its timers fire that much late (measured
  on this test's real clock as the callbacks arrive), none early, and it says so.

"Early" is judged by the worker's own clock: the audit record's ``fired_at_ms`` and the
callback's record timestamp (the worker sets it to the same instant).
"""

from __future__ import annotations

import argparse
import io
import re
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.dev.broker import free_port
from app.dev.stack import ServiceProcess
from app.status.cli import status_main
from tests.support.broker import BrokerInfo
from tests.support.faults import FireWatch, Planned, Verdict, schedule_spread
from tests.support.stack import Stack

#: Runs alone, in ``make test``'s serial part: it gates lateness at 2 s by the worker's clock,
#: which another test's load beside it would move.
pytestmark = pytest.mark.serial

HOUR = 3600.0
#: How far the worker's clock is behind in the second test.
BEHIND = 5.0
STARTUP_TIMEOUT = 90.0
#: Fired "at its second": a tick's trip through the broker plus a busy machine's slack.
AT_ITS_SECOND_MS = 2000


def source_samples(metrics_url: str, name: str) -> dict[str, float]:
    """Samples of ``name`` on a process's ``/metrics``, by their ``source`` label."""
    with urllib.request.urlopen(metrics_url + "/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        sample.labels["source"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def warm_up(stack: Stack, watch: FireWatch, topic: str) -> dict[str, Planned]:
    """Until the workers fire on every partition (one timer per partition, due now)."""
    now = int(time.time())
    warm = schedule_spread(stack.settings, topic, stack.settings.partitions, now, now, "warm-")
    watch.wait(
        lambda w: w.fired_ids() >= warm.keys(), STARTUP_TIMEOUT, "the workers to fire everywhere"
    )
    return warm


def lateness_ms(watch: FireWatch, plan: dict[str, Planned]) -> list[int]:
    """Per fire of a planned timer: the worker's fire time minus the due second, ms."""
    return [f.fired_at_ms - f.due * 1000 for f in watch.fires() if f.id in plan]


def test_an_oscillator_an_hour_ahead_fires_nothing_early_and_everything_at_its_second(
    stack: Stack, broker: BrokerInfo
) -> None:
    settings = stack.settings
    topic = stack.callback_topic("fast-oscillator-callbacks")
    honest = stack.oscillator("osc-honest")
    fast = stack.oscillator("osc-fast", clock_offset=HOUR)
    metrics = {name: free_port() for name in ("w1", "w2")}
    web = {name: free_port() for name in metrics}
    workers = [
        stack.worker(n, metrics_port=p, web_port=web[n], loglevel="info")
        for n, p in metrics.items()
    ]
    with FireWatch(settings, topic) as watch:
        warm = warm_up(stack, watch, topic)
        start = int(time.time())
        plan = schedule_spread(settings, topic, 300, start + 3, start + 32)
        # A third in, the honest oscillator stops: the fast one alone drives the rest, so
        # every later second fires only when the workers' own clocks reach it.
        watch.wait(lambda w: len(w.fired_ids() & plan.keys()) >= 100, 60, "100 timers to fire")
        honest_stopped_s = time.time() - start
        honest.stop()
        watch.wait_all_fired(plan, timeout=max(0.0, start + 32 - time.time()) + 60)
        watch.drain_stragglers()
        verdict = Verdict.of({**warm, **plan}, watch)
        late = lateness_ms(watch, plan)
    held = {
        n: source_samples(f"http://127.0.0.1:{p}", "kafka_timers_ticks_held_total")
        for n, p in metrics.items()
    }
    ahead = {
        n: source_samples(f"http://127.0.0.1:{p}", "kafka_timers_oscillator_ahead_seconds")
        for n, p in metrics.items()
    }
    held_fast = sum(h.get("osc-fast", 0.0) for h in held.values())
    held_honest = sum(h.get("osc-honest", 0.0) for h in held.values())
    report = (
        f"{verdict.summary()}; honest oscillator stopped {honest_stopped_s:.1f} s in; "
        f"lateness by the worker's clock min {min(late, default=0)} ms, "
        f"max {max(late, default=0)} ms; ticks held from osc-fast {held_fast:.0f}, "
        f"from osc-honest {held_honest:.0f}; lead of osc-fast "
        f"{ {n: round(a.get('osc-fast', float('nan')), 3) for n, a in ahead.items()} }"
    )
    print(report)
    verdict.assert_none_lost_early_or_unknown(report)
    assert len(late) == len(plan) == 300, report
    assert max(late) < AT_ITS_SECOND_MS, report
    assert held_fast > 0 and held_honest == 0, report
    assert all(HOUR - 2 < a["osc-fast"] <= HOUR for a in ahead.values()), report
    for worker in workers:
        assert re.search(r"oscillator osc-fast runs (3599|3600)\.\d+s ahead", worker.log_text()), (
            f"{worker.name} names the fast oscillator and its lead"
        )
    out = io.StringIO()  # what an operator sees: kafka-timers status over both workers
    urls = [f"http://127.0.0.1:{p}" for p in web.values()]
    status_main(settings, argparse.Namespace(url=urls), out)
    fast_line = next(line for line in out.getvalue().splitlines() if "osc-fast" in line)
    shown = re.search(r"\+(\d+\.\d+) s", fast_line)
    assert "AHEAD" in fast_line and shown, out.getvalue()
    assert HOUR - 2 < float(shown.group(1)) <= HOUR + 0.01, out.getvalue()  # 3599.996 -> 3600.00
    verdicts = [line for line in fast.log_text().splitlines() if "the broker's" in line]
    if broker.kind == "tansu":  # it answers ListOffsets with its append time
        assert any(re.search(r"(3599|3600)\.\d+s ahead of the broker's", v) for v in verdicts), (
            verdicts
        )
    else:
        assert verdicts, "the oscillator says what it found about the broker's clock"


def test_a_worker_whose_clock_is_behind_fires_that_much_late_never_early(stack: Stack) -> None:
    settings = stack.settings
    topic = stack.callback_topic("slow-worker-callbacks")
    stack.oscillator("osc-1")
    stack.oscillator("osc-2")
    port = free_port()
    worker: ServiceProcess = stack.worker(
        "w-behind", clock_offset=-BEHIND, metrics_port=port, loglevel="info"
    )
    arrived_ms: dict[str, int] = {}

    def poll(watch: FireWatch) -> None:
        for record in watch.callbacks.poll(0.1):  # when it reached us, on the real clock
            arrived_ms.setdefault(
                (record.header("timer-id") or b"").decode(), int(time.time() * 1000)
            )
        watch.audit.poll(0.05)

    with FireWatch(settings, topic) as watch:
        warm = warm_up(stack, watch, topic)
        start = int(time.time())
        plan = schedule_spread(settings, topic, 120, start + 3, start + 17)
        deadline = time.monotonic() + 17 + BEHIND + 60
        while not plan.keys() <= arrived_ms.keys() and time.monotonic() < deadline:
            poll(watch)
        watch.drain_stragglers()
        verdict = Verdict.of({**warm, **plan}, watch)
        late_by_worker = lateness_ms(watch, plan)
    real_late = [arrived_ms[i] - plan[i].due * 1000 for i in plan if i in arrived_ms]
    skew = source_samples(f"http://127.0.0.1:{port}", "kafka_timers_clock_skew_seconds")
    said = re.search(
        r"this worker's clock is probably behind, by about (\d+\.\d+)s", worker.log_text()
    )
    report = (
        f"{verdict.summary()}; arrival on the real clock minus due: min "
        f"{min(real_late, default=0)} ms, max {max(real_late, default=0)} ms; by the worker's "
        "clock: min "
        f"{min(late_by_worker, default=0)} ms, max {max(late_by_worker, default=0)} ms; "
        f"skew gauge {skew}; warning: {said.group(0) if said else None}"
    )
    print(report)
    verdict.assert_none_lost_early_or_unknown(report)
    assert len(real_late) == len(plan), report
    assert min(real_late) >= (BEHIND - 0.2) * 1000, report  # late by the worker's lag
    assert max(late_by_worker) < AT_ITS_SECOND_MS, report  # on time by its own clock
    assert all(-BEHIND - 0.5 < s < -BEHIND + 0.5 for s in skew.values()) and len(skew) == 2, report
    assert said and BEHIND - 0.5 < float(said.group(1)) < BEHIND + 0.5, report
