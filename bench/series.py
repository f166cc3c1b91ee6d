"""Series: what recurring timers cost against one-shot timers, in the same run.

The ingest scenario's method, for one-shot timers and for series side by side: N
requests (one-shot, or a series every day, 2 occurrences, the first due at one second,
a few seconds ahead) are preloaded, one worker stores them, then that second's tick fires them — and
for a series the worker computes occurrence 2 and stores it in the same unit as the
fire. Ingest and fire rates are measured exactly as :mod:`bench.ingest` measures them.
Four rounds, one-shot, series, series, one-shot, each on a fresh broker and worker,
and the mean of each kind's two (six rounds, as first designed, cost half a minute more
of the ten the whole run may take): measured alone, whichever of two
scenarios ran second was up to 1.5x slower on this shared machine, as large as the
difference sought. The worker's CPU time per timer (``/proc``, from its first stored
request; for the fire, from the tick to the bucket complete) is shown beside the rates: it is
what a timer costs, and other jobs on the machine disturb it far less.
The target: series cost at most 1.5x one-shot timers (rates at least two thirds).

An interval series, not a cron one: the interval is the common case and its next
occurrence is arithmetic; a cron occurrence adds the cronsim walk (~10-30 µs, see
docs/performance.md) on top of what is measured here.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from app.core.keys import bucket_floor
from bench import fire
from bench.callgrind import COUNTED_TIMERS, FIRE_PATH_PROBE, REPO, counted_instructions
from bench.context import RunContext, ScenarioResult
from bench.ingest import cpu_while_storing
from bench.load import RequestLoad, TimerSpec, timer_ids
from bench.report import Figure, fmt_rate
from bench.rocks import count_pending_keys
from bench.scan import next_offsets, read_topic, timestamp_ms
from bench.stack import wait_until
from bench.stats import rate

__all__ = ["MAX_COST_RATIO", "run"]

#: Series may cost at most this much more than one-shot timers (rates this much lower).
MAX_COST_RATIO = 1.5
DAY = 86400


def _verdict(series: float, one_shot: float) -> tuple[str, str, bool]:
    ratio = one_shot / series if series else float("inf")
    baseline = f"one-shot {fmt_rate(one_shot)} (series cost {ratio:.2f}x)"
    return baseline, f"≤ {MAX_COST_RATIO}x one-shot", ratio <= MAX_COST_RATIO


def _measure(ctx: RunContext, kind: str, round_no: int) -> dict[str, Any]:
    """Store ``count`` timers of ``kind`` (``one-shot`` or ``series``) with one worker,
    then fire them all at one tick; the rates, and what was stored."""
    count = ctx.config.series_requests
    series = kind == "series"
    with ctx.stack(f"series-{round_no}-{kind}") as stack:
        callbacks = stack.topic("series-callbacks")
        # Due a few seconds from now: no tick comes before the one this scenario sends,
        # and by then the worker's clock has passed the second, so the worker does not
        # hold the tick as one from the future (it would, for a far second).
        due = int(time.time()) + 5
        load = RequestLoad(stack, callbacks)
        load.send(
            TimerSpec(timer_id, due, every=DAY if series else None, count=2 if series else None)
            for timer_id in timer_ids("s", count)
        )
        load.flush()
        worker = stack.worker("worker-1")
        # CPU from the first request stored (start-up and the group join excluded) ...
        ingest_cpu = cpu_while_storing(
            worker, count, f"the worker to store {count:,} requests ({kind})"
        )
        records = read_topic(
            stack.settings,
            stack.changelog,
            lambda m: (timestamp_ms(m), m.partition() or 0, m.offset() or 0),
        )
        stamps = [t for t, _, _ in records]
        stored = sum(count_pending_keys(worker.data_dir).values())
        # ... and for the fire, from the tick to the forgetting (and each series' next)
        # written: see bench.fire.
        fired = fire.fire_bucket(
            stack,
            worker,
            callbacks,
            due,
            count,
            next_offsets((p, o) for _, p, o in records),
            pending_after=count if series else 0,
        )
        after = 0
        if series:  # occurrence 2 stored in the same unit as occurrence 1's fire
            next_bucket = bucket_floor(due + DAY)
            wait_until(
                lambda: sum(count_pending_keys(worker.data_dir, next_bucket).values()) >= count,
                60,
                "occurrence 2 of every series to be stored",
                0.5,
            )
            after = sum(count_pending_keys(worker.data_dir).values())
        fire_cpu = fired["worker_cpu_us_per_timer"] * count / 1e6
    detail = {
        "kind": kind,
        "requests": count,
        "ingest_rate": rate(count - 1, (max(stamps) - min(stamps)) / 1000),
        "fire_rate": fired["rate"],
        "ingest_cpu_us": ingest_cpu / count * 1e6,
        "fire_cpu_us": fire_cpu / count * 1e6,
        "changelog_records": len(stamps),
        "in_rocksdb": stored,
        "pending_after_fire": after,
        "fire": fired,
    }
    if stored != count or len(stamps) < count or (series and after != count):
        raise RuntimeError(f"not every timer was stored (and continued): {detail}")
    ctx.say(
        f"series round {round_no} {kind}: ingest {fmt_rate(detail['ingest_rate'])} "
        f"({detail['ingest_cpu_us']:.0f} µs CPU each), fire {fmt_rate(fired['rate'])} "
        f"({detail['fire_cpu_us']:.0f} µs CPU each)"
    )
    return detail


def fire_instructions(timers: int = COUNTED_TIMERS) -> dict[str, float] | None:
    """Instructions per occurrence fired, one-shot timers and series (each fire storing the
    next), in-process on RocksDB stores (``bench/fire_path_probe.py --rocksdb``), counted
    by callgrind in the fire alone; None without valgrind.

    The rates above move with the machine's other load; these counts repeat to 0.01%,
    so they show what a change to the series path did, whatever the machine was doing.
    """
    counts: dict[str, float] = {}
    for kind, flags in (("one-shot", ["--rocksdb"]), ("series", ["--rocksdb", "--series"])):
        counted = counted_instructions(FIRE_PATH_PROBE, [str(timers), "0", *flags], REPO)
        if counted is None:
            return None
        counts[kind] = counted / timers
    return counts


def run(ctx: RunContext) -> ScenarioResult:
    # A B B A: a machine that speeds up or slows down during the run (other jobs on it,
    # caches warming) weighs on both kinds alike; the median (mean) of each kind's two.
    order = ("one-shot", "series", "series", "one-shot")
    rounds = [_measure(ctx, kind, n) for n, kind in enumerate(order, 1)]

    def median(kind: str, name: str) -> float:
        return float(statistics.median(r[name] for r in rounds if r["kind"] == kind))

    figures = []
    for name, what in (
        ("ingest", "series stored/s, 1 worker"),
        ("fire", "occurrences fired (and next stored)/s, 1 worker"),
    ):
        series, one_shot = median("series", f"{name}_rate"), median("one-shot", f"{name}_rate")
        baseline, target, met = _verdict(series, one_shot)
        figures.append(
            Figure("series", what, fmt_rate(series), baseline, target, met, value=series)
        )
        cpu_series, cpu_one = (
            median("series", f"{name}_cpu_us"),
            median("one-shot", f"{name}_cpu_us"),
        )
        figures.append(
            Figure(
                "series",
                f"worker CPU per {'request stored' if name == 'ingest' else 'fire'}",
                f"{cpu_series:.0f} µs",
                f"one-shot {cpu_one:.0f} µs ({cpu_series / cpu_one:.2f}x)",
                value=cpu_series,
            )
        )
    counted = fire_instructions()
    if counted is not None:
        series, one_shot = counted["series"], counted["one-shot"]
        figures.append(
            Figure(
                "series",
                f"instructions per occurrence fired (in-process, RocksDB, callgrind, "
                f"{COUNTED_TIMERS:,} due at once)",
                f"{series:,.0f}",
                f"one-shot {one_shot:,.0f} ({series / one_shot:.2f}x)",
                value=series,
            )
        )
    return ScenarioResult(figures=figures, details={"rounds": rounds, "fire_instructions": counted})
