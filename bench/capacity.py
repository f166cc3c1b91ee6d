"""Capacity: memory, disk and idle CPU of one worker by pending timers, up to 10,000,000.

One worker (and one oscillator, so it ticks) is filled in steps through the normal
request path, with timers due over the next week starting tomorrow (realistic buckets,
none due during the run). At each level, after a short settle: RSS (``VmRSS``), its
high-water mark, and the disk its data directory occupies (allocated blocks). At 0
pending and at the top level, **idle CPU**: the worker's CPU time sampled once a second
(nanosecond counters, see :mod:`bench.procstat`) while its partitions tick and nothing
is due; the figure is the median sample, as a share of one core.

Then the worker is stopped and started again on its data directory, as an operator's
worker restarts: the time until every partition ticks again, and RSS and disk once it
has settled. Then, stopped again, its stores get more timers in bulk — the same timers
the request path would have stored next, written by the worker's own code into its
RocksDB (:mod:`bench.bulk`) — up to ``memory_pending`` (10,000,000), and it is restarted
once more. It must then report holding every one of them (its pending gauge; its
store-keys gauge is kept). **Memory** compares the two restarted workers, measured the
same way: RSS at 10M against RSS at 1M (not against the live worker at 1M, whose caches
and allocator hold what the ingest left). **Disk** is the data directory at 10M per
pending timer.
"""

from __future__ import annotations

import itertools
import statistics
import time
from typing import Any

from bench import bulk
from bench.context import RunContext, ScenarioResult
from bench.load import RequestLoad, TimerSpec, timer_ids
from bench.procstat import (
    cpu_between,
    cpu_seconds,
    disk_bytes,
    peak_rss_bytes,
    rss_bytes,
    thread_cpu_ns,
    thread_names,
    thread_shares,
    thread_wakeups,
)
from bench.report import Figure, fmt_bytes, fmt_count, fmt_ms, fmt_seconds
from bench.stack import BenchStack, Worker, wait_serving, wait_until
from bench.targets import (
    DISK_BYTES_PER_TIMER,
    IDLE_CORE_SHARE,
    MEMORY_GROWTH_BYTES,
)

__all__ = ["idle_summary", "run"]

#: Seconds to let a worker settle (memtables, allocator, GC) before measuring it.
SETTLE_SECONDS = 5.0
#: Due times are spread over this many seconds, starting a day out.
SPREAD_SECONDS = 7 * 86400
#: Round one's target: RSS growth per pending timer of the live worker at the last level.
TARGET_BYTES_PER_TIMER = 100
#: Id prefix of every timer here (the bulk ones continue the request path's numbering).
PREFIX = "capacity"


def _last_tick(worker: Worker) -> float:
    return max(worker.last_ticks().values(), default=0.0)


def idle_summary(
    samples: list[float], wall: float, cpu: float, ticks: float
) -> dict[str, float | list[float]]:
    """The idle figures from one-second samples (each a share of one core): the median
    (the figure), the mean over the whole window from the kernel's process counters
    (``cpu`` seconds in ``wall``), and the CPU per second of ticks on all partitions."""
    share = statistics.median(samples)
    return {
        "share": share,
        "mean_share": cpu / wall,
        "per_tick_seconds": share * wall / ticks if ticks else float("nan"),
        "samples": samples,
        "wall_seconds": wall,
        "tick_seconds": ticks,
    }


def _idle_cpu(worker: Worker, seconds: int) -> dict[str, Any]:
    """The worker's CPU, sampled once a second for ``seconds`` while it idles (ticking)."""
    tick0 = _last_tick(worker)
    began = time.monotonic()
    stat0 = cpu_seconds(worker.pid)
    woke0 = thread_wakeups(worker.pid)
    readings = [(began, thread_cpu_ns(worker.pid))]
    for n in range(1, seconds + 1):
        time.sleep(max(0.0, began + n - time.monotonic()))  # the sampling period
        readings.append((time.monotonic(), thread_cpu_ns(worker.pid)))
    wall = readings[-1][0] - began
    cpu = cpu_seconds(worker.pid) - stat0
    ticks = _last_tick(worker) - tick0
    if ticks < seconds / 2:
        raise RuntimeError(f"the worker processed {ticks:.0f} ticks in {wall:.0f} s while idle")
    samples = [cpu_between(a, b) / (tb - ta) for (ta, a), (tb, b) in itertools.pairwise(readings)]
    threads = thread_shares(
        thread_names(worker.pid),
        (readings[0][1], readings[-1][1]),
        (woke0, thread_wakeups(worker.pid)),
        wall,
    )
    return {**idle_summary(samples, wall, cpu, ticks), "threads": threads}


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
        "store_keys_pending": worker.metric("kafka_timers_store_keys", kind="pending"),
    }


def _restart(stack: BenchStack, worker: Worker, pending: int) -> tuple[Worker, dict[str, Any]]:
    """Stop ``worker`` and start it again on its data directory; measure it once settled."""
    worker.process.stop()
    began = time.monotonic()
    worker = stack.worker(worker.name)
    wait_serving([worker], stack.partitions, timeout=120 + pending / 50_000)
    ready = time.monotonic() - began
    time.sleep(SETTLE_SECONDS)  # let it settle: this is the idle state being measured
    measured = {**_measure(worker), "ready_seconds": ready}
    if measured["pending_gauge"] != pending:
        raise RuntimeError(
            f"restarted on {pending:,} pending, the worker reports {measured['pending_gauge']:,.0f}"
        )
    return worker, measured


def run(ctx: RunContext) -> ScenarioResult:
    cfg = ctx.config
    levels = sorted(set(cfg.capacity_levels) | {0})
    top = levels[-1]
    most = max(cfg.memory_pending, top)
    points: dict[int, dict[str, Any]] = {}
    idle: dict[int, dict[str, Any]] = {}
    with ctx.stack("capacity") as stack:
        callbacks = stack.topic("capacity-callbacks")
        [worker] = stack.serving(1, oscillators=1)
        load = RequestLoad(stack, callbacks)
        first_due = int(time.time()) + 86400
        loaded = 0
        for level in levels:
            if level > loaded:
                ctx.say(f"capacity: filling to {level:,} pending through the request path")
                ids = timer_ids(PREFIX, level - loaded, start=loaded)
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
                idle[level] = _idle_cpu(worker, cfg.idle_seconds)
        ctx.say(f"capacity: restarting the worker on its data directory ({top:,} pending)")
        worker, at_top = _restart(stack, worker, top)
        worker.process.stop()
        ctx.say(f"capacity: writing timers {top:,} to {most:,} into its stores (stopped)")
        bulk_seconds = bulk.bulk_fill(
            worker.data_dir,
            cfg.partitions,
            top,
            most,
            bulk.BulkTimers(PREFIX, first_due, SPREAD_SECONDS, callbacks),
        )
        ctx.say(f"capacity: written in {bulk_seconds:.0f} s; restarting on {most:,} pending")
        worker, at_most = _restart(stack, worker, most)
    return ScenarioResult(
        figures=_figures(levels, points, idle, at_top, at_most, top, most),
        details={
            "levels": points,
            "idle": idle,
            "restarted": {top: at_top, most: at_most},
            "bulk_seconds": bulk_seconds,
        },
    )


def _figures(
    levels: list[int],
    points: dict[int, dict[str, Any]],
    idle: dict[int, dict[str, Any]],
    at_top: dict[str, Any],
    at_most: dict[str, Any],
    top: int,
    most: int,
) -> list[Figure]:
    empty = points[0]
    growth = points[top]["rss"] - empty["rss"]
    per_timer = growth / top if top else 0.0
    figures = [
        Figure(
            "capacity",
            f"RSS / disk at {fmt_count(level)} pending (live, request path)",
            f"{fmt_bytes(points[level]['rss'])} / {fmt_bytes(points[level]['disk'])}",
            "" if level == 0 else f"empty worker {fmt_bytes(empty['rss'])}",
            value=points[level]["rss"],
            detail=points[level],
        )
        for level in levels
    ]
    figures.append(
        Figure(
            "capacity",
            f"RSS growth at {fmt_count(top)} pending (live)",
            f"{fmt_bytes(growth)} ({per_timer:.0f} B/timer)",
            f"empty worker {fmt_bytes(empty['rss'])}",
            f"≤ {TARGET_BYTES_PER_TIMER * top / 1e6:,.0f} MB",
            per_timer <= TARGET_BYTES_PER_TIMER,
            value=growth,
        )
    )
    share, base = idle[top]["share"], idle[0]["share"]
    figures.append(
        Figure(
            "idle",
            f"worker CPU, nothing due, {fmt_count(top)} pending (median of "
            f"{len(idle[top]['samples'])} 1-s samples)",
            f"{share:.1%} of a core",
            f"same worker at 0 pending {base:.1%}; means over the samples "
            f"{idle[top]['mean_share']:.1%} and {idle[0]['mean_share']:.1%}",
            f"≤ {IDLE_CORE_SHARE:.0%} of a core",
            share <= IDLE_CORE_SHARE,
            value=share,
            detail={
                "per_tick": fmt_ms(idle[top]["per_tick_seconds"]),
                "per_tick_at_0": fmt_ms(idle[0]["per_tick_seconds"]),
                # (share of a core, wakeups a second) by thread: where the CPU went
                "threads": idle[top]["threads"],
                "threads_at_0": idle[0]["threads"],
            },
        )
    )
    growth_top = at_most["rss"] - at_top["rss"]
    per_pending = at_most["disk"] / most
    figures += [
        Figure(
            "memory",
            f"RSS after a restart on {fmt_count(most)} pending",
            f"{fmt_bytes(at_most['rss'])} (+{fmt_bytes(growth_top)})",
            f"after a restart on {fmt_count(top)}: {fmt_bytes(at_top['rss'])}",
            f"≤ +{fmt_bytes(MEMORY_GROWTH_BYTES)}",
            growth_top <= MEMORY_GROWTH_BYTES,
            value=at_most["rss"],
            detail=at_most,
        ),
        Figure(
            "memory",
            f"disk per pending timer at {fmt_count(most)}",
            f"{per_pending:.0f} B ({fmt_bytes(at_most['disk'])})",
            f"at {fmt_count(top)}: {at_top['disk'] / top:.0f} B ({fmt_bytes(at_top['disk'])})",
            f"≤ {DISK_BYTES_PER_TIMER} B",
            per_pending <= DISK_BYTES_PER_TIMER,
            value=per_pending,
        ),
        Figure(
            "memory",
            f"restart on {fmt_count(most)} / {fmt_count(top)} pending: ticking again after",
            f"{fmt_seconds(at_most['ready_seconds'])} / {fmt_seconds(at_top['ready_seconds'])}",
            f"holds {fmt_count(at_most['pending_gauge'])} pending "
            f"({fmt_count(at_most['store_keys_pending'])} pending keys)",
            value=at_most["ready_seconds"],
        ),
    ]
    return figures
