"""Scale-out: what two workers on two cores store per second, against one, in the same run.

Two workers and an oscillator are started and the group settles (every partition
ticking on one worker, both holding some), then a backlog of 2N requests (N per worker:
the ingest scenario's size) is produced as fast as librdkafka goes, encoded beforehand
(about a second for 400,000: the workers store it for several). The rate is 2N over the
span of the changelog records' timestamps, as for ingest. Then the same with one worker
and N requests, right after. Preloading the backlog before the workers start, as ingest
does, measures a rebalance instead: the first worker to join takes every partition and
starts storing, and the second one's join pauses both (measured: partitions started
5 s apart). Checked all the same: every partition's first record within
:data:`MAX_START_SKEW` of the others' (reported otherwise; the pause is then inside the
span, so the figure errs low), and each worker's share of the requests.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from bench.context import RunContext, ScenarioResult
from bench.load import RequestLoad, TimerSpec, timer_ids
from bench.procstat import cpu_seconds
from bench.report import Figure, fmt_rate, fmt_seconds
from bench.scan import read_topic, timestamp_ms
from bench.stack import wait_until
from bench.stats import rate
from bench.targets import scale_out_verdict

__all__ = ["MAX_START_SKEW", "run", "start_skew"]

#: Partitions whose first stored request is further apart than this (seconds) did not
#: start together: the group rebalanced while the backlog was being stored.
MAX_START_SKEW = 1.5
DAY = 86400


def start_skew(records: list[tuple[int, int]]) -> float:
    """Seconds between the first and the last partition to store its first record, from
    ``(partition, timestamp_ms)`` pairs."""
    first: dict[int, int] = {}
    for partition, stamp in records:
        first[partition] = min(stamp, first.get(partition, stamp))
    return (max(first.values()) - min(first.values())) / 1000 if first else 0.0


def _store(ctx: RunContext, workers: int) -> dict[str, Any]:
    """Start ``workers`` workers, then produce N requests per worker; time the storing."""
    count = ctx.config.ingest_requests * workers
    with ctx.stack(f"scaleout-{workers}") as stack:
        callbacks = stack.topic("scaleout-callbacks")
        started = stack.serving(workers, oscillators=1)
        due = int(time.time()) + DAY  # never due here
        load = RequestLoad(stack, callbacks)
        backlog = load.encode(TimerSpec(timer_id, due) for timer_id in timer_ids("scale", count))
        ctx.say(f"scale-out: {workers} worker(s) serving; producing {count:,} requests")
        cpu_start = [cpu_seconds(w.pid) for w in started]
        load.send_encoded(backlog)
        load.flush()

        def stored() -> float:
            return sum(w.metric("kafka_timers_scheduled_total") for w in started)

        wait_until(lambda: stored() >= count, 60 + count / 500, f"{count:,} requests stored", 0.1)
        cpu = [cpu_seconds(w.pid) - c for w, c in zip(started, cpu_start, strict=True)]
        shares = [w.metric("kafka_timers_scheduled_total") / count for w in started]
        records = read_topic(
            stack.settings, stack.changelog, lambda m: (m.partition() or 0, timestamp_ms(m))
        )
    stamps = [t for _, t in records]
    span = (max(stamps) - min(stamps)) / 1000
    # Per partition: records, and its first and last record after the first of all (s).
    origin = min(stamps)
    by_partition: dict[int, list[float]] = defaultdict(lambda: [0, float("inf"), 0.0])
    for partition, stamp in records:
        row = by_partition[partition]
        row[0] += 1
        row[1] = min(row[1], (stamp - origin) / 1000)
        row[2] = max(row[2], (stamp - origin) / 1000)
    detail: dict[str, Any] = {
        "workers": workers,
        "requests": count,
        "span_seconds": span,
        "rate": rate(count - 1, span),
        "start_skew_seconds": start_skew(records),
        "worker_shares": shares,
        "worker_cpu_us_per_request": sum(cpu) / count * 1e6,
        "partitions_records_first_last": dict(sorted(by_partition.items())),
    }
    ctx.say(
        f"scale-out: {workers} worker(s) stored {fmt_rate(detail['rate'])} "
        f"(partitions started {detail['start_skew_seconds']:.1f} s apart)"
    )
    return detail


def run(ctx: RunContext) -> ScenarioResult:
    two = _store(ctx, 2)
    ctx.baselines.ingest_two_workers = two["rate"]
    one = _store(ctx, 1)
    baseline, target, met = scale_out_verdict(two["rate"], one["rate"])
    skewed = two["start_skew_seconds"] > MAX_START_SKEW
    note = f" (rebalanced: partitions started {fmt_seconds(two['start_skew_seconds'])} apart)"
    return ScenarioResult(
        figures=[
            Figure(
                "scale-out",
                f"requests stored/s, 2 workers on 2 cores, {two['requests']:,} requests"
                + (note if skewed else ""),
                fmt_rate(two["rate"]),
                baseline + f"; shares {' '.join(f'{s:.2f}' for s in two['worker_shares'])}",
                target,
                met,
                value=two["rate"],
                detail={"two": two, "one": one},
            ),
            Figure(
                "scale-out",
                "worker CPU per request stored, 2 workers",
                f"{two['worker_cpu_us_per_request']:.1f} µs",
                f"1 worker {one['worker_cpu_us_per_request']:.1f} µs",
                value=two["worker_cpu_us_per_request"],
            ),
        ],
        details={"two": two, "one": one},
    )
