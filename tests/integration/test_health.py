"""Issue 16: ``/readyz`` and ``/livez`` of real workers and oscillators on a real broker.

Readiness: a worker that takes over partitions holding tens of thousands of pending
timers, with thousands of requests waiting, answers not ready (503 and why) until it has
recovered them and applied the waiting requests, then ready; at its first "ready" every
timer is there. Liveness: a worker holding due timers turns unhealthy when ticks stop
arriving (both oscillators stopped), and healthy again when they come back.
"""

from __future__ import annotations

import time

from tests.support.faults import schedule_spread
from tests.support.probes import get_json, start_probed
from tests.support.stack import Stack
from tests.support.waiting import wait_until

STARTUP = 60.0
PENDING_BEFORE = 40_000
WAITING = 20_000


def test_readyz_is_not_ready_until_taken_over_partitions_are_recovered(stack: Stack) -> None:
    settings = stack.settings
    topic = stack.callback_topic(f"cb-ready-{settings.app_id}")
    first = start_probed(stack, "worker", "w-first")
    wait_until(lambda: get_json(first.web + "/readyz")[0] == 200, STARTUP, "the first worker ready")
    day = int(time.time()) + 86400
    schedule_spread(settings, topic, PENDING_BEFORE, day, day + 3600, prefix="a")

    def pending(url: str) -> int:
        status, body = get_json(url + "/status/data", timeout=5)
        return int(body["totals"]["pending"]) if status == 200 else -1

    wait_until(lambda: pending(first.web) == PENDING_BEFORE, STARTUP, "all timers stored")
    assert first.process.stop() == 0
    # Requests that arrive while no worker runs: the next one must apply them first.
    schedule_spread(settings, topic, WAITING, day, day + 3600, prefix="b")

    # A new worker on an empty data directory: it must rebuild every partition from the
    # changelog (40,000 timers) and apply the 20,000 waiting requests.
    second = start_probed(stack, "worker", "w-second", loglevel="info")
    started = time.monotonic()
    answers: list[tuple[float, int | None, str]] = []

    def ready() -> bool:
        """Whether it is ready; every change of answer on the way is kept."""
        status, body = get_json(second.web + "/readyz", timeout=1)
        phase = body.get("phase", "") if isinstance(body, dict) else "no answer"
        if not answers or answers[-1][1:] != (status, phase):
            answers.append((round(time.monotonic() - started, 2), status, phase))
        if status == 503:
            assert body["ready"] is False and body["reason"], body
        return status == 200

    wait_until(ready, STARTUP * 2, lambda: f"never ready: {answers}", interval=0.02)
    # Ready means everything is there: the recovered timers and the applied requests.
    assert pending(second.web) == PENDING_BEFORE + WAITING, answers
    phases = [phase for _, status, phase in answers if status == 503]
    print(f"\nreadyz transitions (s since start, status, phase): {answers}")
    # 20,000 waiting requests take over a second to apply: that phase is always seen (the
    # changelog catch-up runs in a thread: "recovering" shows when the probe lands in it).
    assert "applying" in phases, answers
    assert phases.index("applying") > phases.index("joining"), answers
    assert answers[-1][1:] == (200, "ready"), answers


def test_livez_fails_while_ticks_stop_with_timers_due_and_recovers(stack: Stack) -> None:
    settings = stack.settings
    topic = stack.callback_topic(f"cb-live-{settings.app_id}")
    timeout = 4.0
    oscillators = [start_probed(stack, "oscillator", f"osc-{i}") for i in (1, 2)]
    worker = start_probed(stack, "worker", "w-live", liveness_timeout=timeout)
    wait_until(lambda: get_json(worker.web + "/readyz")[0] == 200, STARTUP, "the worker ready")
    for osc in oscillators:
        status, body = get_json(osc.metrics + "/livez")
        assert status == 200 and body["alive"] is True, body
    now = int(time.time())
    schedule_spread(settings, topic, 2000, now + 2, now + 120)
    wait_until(
        lambda: get_json(worker.web + "/livez")[1].get("seconds_since_tick") is not None,
        STARTUP,
        "ticks processed",
    )
    status, body = get_json(worker.web + "/livez")
    assert status == 200 and body["alive"] is True, body

    stopped = time.monotonic()
    for osc in oscillators:
        osc.process.stop()
    status, body = wait_until(
        lambda: (r := get_json(worker.web + "/livez"))[0] == 503 and r,
        30,
        "livez unhealthy with ticks stopped and timers due",
    )
    went_dead = time.monotonic() - stopped
    assert body["alive"] is False
    assert body["reason"].startswith("no tick processed for"), body
    assert "while timers due over 4 s ago wait on partitions" in body["reason"], body
    assert went_dead >= timeout, "unhealthy before the timeout passed"
    # Still ready: it holds its partitions; it is the ticks that are missing.
    assert get_json(worker.web + "/readyz")[0] == 200

    restarted = time.monotonic()
    back = start_probed(stack, "oscillator", "osc-3")
    wait_until(lambda: get_json(worker.web + "/livez")[0] == 200, 30, "livez healthy again")
    healthy_again = time.monotonic() - restarted
    assert get_json(back.metrics + "/livez")[0] == 200
    print(
        f"\nlivez: unhealthy {went_dead:.1f} s after both oscillators stopped (timeout "
        f"{timeout:g} s), healthy {healthy_again:.1f} s after a new oscillator started"
    )
