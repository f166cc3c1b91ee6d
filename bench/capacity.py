"""Capacity: memory and disk of one worker holding 0, 100k and 1M pending timers, and
the CPU an idle tick costs with 1M pending.

One worker (and one oscillator, so it ticks) is filled in steps through the normal
request path, with timers due over the next week starting tomorrow (realistic buckets,
none due during the run). At each level, after a short settle: RSS (``VmRSS``), its
high-water mark, and the disk its data directory occupies. Idle ticks are measured as
the worker's CPU time over some seconds of ticks, at 0 pending (the baseline) and at
the top level. Finally the worker is restarted on its data directory, which shows what
loading a full partition costs (time until it ticks again, and its RSS then).
"""

from __future__ import annotations

import itertools
import statistics
import time
from typing import Any

from bench.context import RunContext, ScenarioResult
from bench.load import RequestLoad, TimerSpec, timer_ids
from bench.procstat import cpu_seconds, disk_bytes, peak_rss_bytes, rss_bytes
from bench.report import Figure, fmt_bytes, fmt_count, fmt_ms, fmt_seconds
from bench.stack import Worker, wait_serving, wait_until

__all__ = ["run"]

#: Seconds to let a worker settle (memtables, allocator, GC) before measuring it.
SETTLE_SECONDS = 5.0
#: Due times are spread over this many seconds, starting a day out.
SPREAD_SECONDS = 7 * 86400
#: Targets: RSS growth per pending timer, and idle tick cost at the top level relative
#: to the empty worker's (with an absolute allowance: the kernel counts CPU time in
#: 10 ms clock ticks, so a one-second sample is only good to 10 ms).
TARGET_BYTES_PER_TIMER = 100
TARGET_IDLE_RATIO = 1.5
IDLE_ALLOWANCE_SECONDS = 0.010


def _last_tick(worker: Worker) -> float:
    return max(worker.last_ticks().values(), default=0.0)


def _idle_cpu_per_tick(worker: Worker, seconds: int) -> dict[str, Any]:
    """CPU the worker uses per second of idle ticks (one tick on every partition).

    Sampled once a second and summarised by the median: a garbage collection, a
    RocksDB compaction or a neighbour's burst lands in one sample, not in the figure.
    """
    tick0 = _last_tick(worker)
    began = time.monotonic()
    cpu = [cpu_seconds(worker.pid)]
    for n in range(1, seconds + 1):
        time.sleep(max(0.0, began + n - time.monotonic()))  # the sampling period
        cpu.append(cpu_seconds(worker.pid))
    wall = time.monotonic() - began
    ticks = _last_tick(worker) - tick0
    if ticks < seconds / 2:
        raise RuntimeError(f"the worker processed {ticks:.0f} ticks in {wall:.0f} s while idle")
    per_second = [b - a for a, b in itertools.pairwise(cpu)]
    return {
        "per_tick": statistics.median(per_second) * wall / ticks,
        "samples": per_second,
        "tick_seconds": ticks,
        "wall_seconds": wall,
    }


def _wait_stored(worker: Worker, level: int, timeout: float) -> None:
    wait_until(
        lambda: worker.metric("kafka_timers_scheduled_total") >= level,
        timeout,
        f"{level:,} timers stored",
        0.5,
    )


def _measure(worker: Worker) -> dict[str, Any]:
    return {
        "rss": rss_bytes(worker.pid),
        "peak_rss": peak_rss_bytes(worker.pid),
        "disk": disk_bytes(worker.data_dir),
        "pending_gauge": worker.metric("kafka_timers_pending"),
    }


def run(ctx: RunContext) -> ScenarioResult:
    cfg = ctx.config
    levels = sorted(set(cfg.capacity_levels) | {0})
    top = levels[-1]
    points: dict[int, dict[str, Any]] = {}
    idle: dict[int, dict[str, Any]] = {}
    with ctx.stack("capacity") as stack:
        callbacks = stack.topic("capacity-callbacks")
        stack.oscillator("oscillator-1")
        worker = stack.worker("worker-1")
        wait_serving([worker], cfg.partitions)
        load = RequestLoad(stack, callbacks)
        first_due = int(time.time()) + 86400
        loaded = 0
        for level in levels:
            if level > loaded:
                ctx.say(f"capacity: filling to {level:,} pending")
                ids = timer_ids("capacity", level - loaded, start=loaded)
                load.send(
                    TimerSpec(timer_id, first_due + (loaded + i) % SPREAD_SECONDS)
                    for i, timer_id in enumerate(ids)
                )
                load.flush()
                _wait_stored(worker, level, 60 + (level - loaded) / 500)
                loaded = level
            time.sleep(SETTLE_SECONDS)  # let it settle: this is the idle state being measured
            points[level] = _measure(worker)
            if level in (0, top):
                idle[level] = _idle_cpu_per_tick(worker, cfg.idle_seconds)
        ctx.say("capacity: restarting the worker on its data directory")
        worker.process.stop()
        began = time.monotonic()
        worker = stack.worker("worker-1")
        wait_serving([worker], cfg.partitions, timeout=120 + top / 5000)
        ready_seconds = time.monotonic() - began
        time.sleep(SETTLE_SECONDS)
        restarted = _measure(worker)
    empty = points[0]
    growth = points[top]["rss"] - empty["rss"]
    per_timer = growth / top if top else 0.0
    idle_ratio = idle[top]["per_tick"] / max(idle[0]["per_tick"], 1e-9)
    idle_met = idle[top]["per_tick"] <= TARGET_IDLE_RATIO * idle[0]["per_tick"] + (
        IDLE_ALLOWANCE_SECONDS
    )
    figures = []
    for level in levels:
        p = points[level]
        figures.append(
            Figure(
                "capacity",
                f"RSS / disk at {fmt_count(level)} pending",
                f"{fmt_bytes(p['rss'])} / {fmt_bytes(p['disk'])}",
                "" if level == 0 else f"empty worker {fmt_bytes(empty['rss'])}",
                value=p["rss"],
                detail=p,
            )
        )
    figures += [
        Figure(
            "capacity",
            f"RSS growth at {fmt_count(top)} pending",
            f"{fmt_bytes(growth)} ({per_timer:.0f} B/timer)",
            f"empty worker {fmt_bytes(empty['rss'])}",
            f"≤ {TARGET_BYTES_PER_TIMER * top / 1e6:,.0f} MB",
            per_timer <= TARGET_BYTES_PER_TIMER,
            value=growth,
        ),
        Figure(
            "capacity",
            f"CPU per idle tick (all partitions), {fmt_count(top)} pending",
            fmt_ms(idle[top]["per_tick"]),
            f"0 pending {fmt_ms(idle[0]['per_tick'])} ({idle_ratio:.2f}x)",
            f"≤ {TARGET_IDLE_RATIO}x 0 pending",
            idle_met,
            value=idle[top]["per_tick"],
            detail={"idle": idle},
        ),
        Figure(
            "capacity",
            f"restart with {fmt_count(top)} pending: ticking again after",
            fmt_seconds(ready_seconds),
            f"RSS then {fmt_bytes(restarted['rss'])}",
            value=ready_seconds,
            detail=restarted,
        ),
    ]
    return ScenarioResult(
        figures=figures,
        details={
            "levels": points,
            "idle": idle,
            "restart_seconds": ready_seconds,
            "after_restart": restarted,
        },
    )
