"""A whole-service restart (a deploy, ``docker compose restart``, a host reboot) recovers.

Every worker gets SIGTERM at once and all are started again on their own data
directories, three times in a row, while timers fire on every partition every second.
Each time, every partition must fire again within 30 s of the restart; at the end no
timer may be lost and none may fire before its second. On the dev broker this used to
stall for minutes: the new members' JoinGroup named a departed member as leader.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from app.dev.stack import ServiceProcess
from tests.support.faults import FireWatch, Planned, Verdict, schedule_spread
from tests.support.stack import Stack

pytestmark = pytest.mark.fault

ROUNDS = 3
WORKERS = ("w-a", "w-b")
#: The promise: every partition fires again this soon after the workers are started.
RESUME_WITHIN_S = 30.0
#: How long the test waits before it calls a restart stuck (to report the figure).
STUCK_AFTER_S = 120.0
#: Each round's timers: one per partition per second for this long.
ROUND_SPAN_S = 45


def now_ms() -> int:
    return int(time.time() * 1000)


def first_fire_after(watch: FireWatch, partitions: int, after_ms: int) -> dict[int, int]:
    first: dict[int, int] = {}
    for fire in watch.fires():
        if fire.fired_at_ms >= after_ms and fire.fired_at_ms < first.get(fire.partition, 1 << 62):
            first[fire.partition] = fire.fired_at_ms
    return first


def start_all(stack: Stack, generation: int) -> list[ServiceProcess]:
    return [
        stack.worker(
            f"{name}-{generation}",
            loglevel="info",
            data_dir=stack.base_dir / name,  # a restart keeps its disk
        )
        for name in WORKERS
    ]


def test_three_whole_service_restarts_in_a_row_each_resume_within_30_s(stack: Stack) -> None:
    settings = stack.settings
    topic = stack.callback_topic(f"cb-restart-{settings.app_id}")
    partitions = settings.partitions
    stack.oscillator()
    workers = start_all(stack, 0)
    plan: dict[str, Planned] = {}
    figures: list[str] = []
    resumed_s: list[float] = []
    with FireWatch(settings, topic) as watch:
        started_ms = now_ms()
        for round_no in range(1, ROUNDS + 1):
            start = int(time.time())
            plan.update(
                schedule_spread(
                    settings,
                    topic,
                    ROUND_SPAN_S * partitions,
                    start + 2,
                    start + ROUND_SPAN_S + 1,
                    prefix=f"r{round_no}-",
                )
            )
            # Steady state first: every partition firing (the first round: after start).
            steady_from = started_ms if round_no == 1 else now_ms()
            watch.wait(
                lambda w, t=steady_from: len(first_fire_after(w, partitions, t)) == partitions,
                STUCK_AFTER_S,
                f"round {round_no}: every partition firing before the restart",
            )
            stop_ms = now_ms()
            with ThreadPoolExecutor(len(workers)) as pool:  # SIGTERM to all at once
                codes = list(pool.map(lambda w: w.stop(), workers))
            stopped_ms = now_ms()
            assert codes == [0] * len(workers), f"round {round_no}: exit codes {codes}"
            restart_ms = now_ms()
            workers = start_all(stack, round_no)
            deadline = time.monotonic() + STUCK_AFTER_S
            while time.monotonic() < deadline:
                watch.poll(0.2)
                if len(first_fire_after(watch, partitions, restart_ms)) == partitions:
                    break
            first = first_fire_after(watch, partitions, restart_ms)
            if len(first) < partitions:
                figures.append(
                    f"round {round_no}: STUCK, {len(first)}/{partitions} partitions firing "
                    f"{STUCK_AFTER_S:.0f} s after the restart"
                )
                resumed_s.append(float("inf"))
                continue
            resumed = (max(first.values()) - restart_ms) / 1000
            resumed_s.append(resumed)
            figures.append(
                f"round {round_no}: stop {(stopped_ms - stop_ms) / 1000:.1f} s, "
                f"restart -> first fire {(min(first.values()) - restart_ms) / 1000:.1f} s, "
                f"-> every partition firing {resumed:.1f} s"
            )
        last_due = max(t.due for t in plan.values())
        watch.wait_all_fired(plan, timeout=max(0.0, last_due - time.time()) + 60)
        watch.drain_stragglers()
        verdict = Verdict.of(plan, watch)
    report = "; ".join(figures) + f"; {verdict.summary()}"
    print(report)
    verdict.assert_none_lost_early_or_unknown(report)
    assert all(s <= RESUME_WITHIN_S for s in resumed_s), report
