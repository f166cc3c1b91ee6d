"""The hop: what routing by id costs requests that land off their owner partition.

The same requests as the ingest scenario, but placed the way librdkafka's default
partitioner places a record keyed by its id (CRC32 of the key, as confluent-kafka for
Python, Go and .NET do): with 8 partitions, about 7 in 8 land off the partition that
owns their id, and the worker forwards each there before storing it (one produce, and a
second read of the copy). One worker works through the backlog, as in the ingest
scenario; its CPU per request stored and its rate are set beside ingest's from this run,
where every request was already on its owner.
"""

from __future__ import annotations

import time
import zlib

from bench.context import RunContext, ScenarioResult
from bench.ingest import cpu_while_storing
from bench.load import RequestLoad, TimerSpec, timer_ids
from bench.report import Figure, fmt_rate
from bench.stats import rate

__all__ = ["per_forwarded_us", "run"]


def run(ctx: RunContext) -> ScenarioResult:
    count = ctx.config.ingest_requests
    with ctx.stack("hop") as stack:
        callbacks = stack.topic("hop-callbacks")
        partitions = stack.settings.partition_count
        due = int(time.time()) + 3600
        load = RequestLoad(stack, callbacks)
        specs = [
            TimerSpec(timer_id, due, partition=zlib.crc32(timer_id.encode()) % partitions)
            for timer_id in timer_ids("hop", count)
        ]
        load.send(specs)
        load.flush()
        ctx.say(f"hop: {count:,} requests preloaded where CRC32 puts them; starting one worker")
        worker = stack.worker("worker-1")
        started = time.monotonic()
        cpu = cpu_while_storing(worker, count, f"the worker to store {count:,} requests")
        per_second = rate(count, time.monotonic() - started)
        forwarded = worker.metric("kafka_timers_requests_forwarded_total")
    cpu_us = cpu / count * 1e6
    ingest_cpu = ctx.baselines.ingest_cpu_us
    baseline = f"{forwarded:,.0f} of {count:,} forwarded"
    if ingest_cpu:
        baseline += (
            f"; on their owner (ingest, this run): {ingest_cpu:.1f} µs ({cpu_us / ingest_cpu:.2f}x)"
        )
    forwarded_cpu = per_forwarded_us(cpu_us, count, forwarded, ingest_cpu)
    if forwarded_cpu is not None:
        ctx.baselines.forwarded_cpu_us = forwarded_cpu
        baseline += f"; a forwarded one {forwarded_cpu:.1f} µs"
    return ScenarioResult(
        figures=[
            Figure(
                "hop",
                "worker CPU per request stored, placed by librdkafka's default (CRC32)",
                f"{cpu_us:.1f} µs",
                baseline,
                value=cpu_us,
            ),
            Figure(
                "hop",
                "requests stored/s, 1 worker, placed by CRC32 (from the worker's start)",
                fmt_rate(per_second),
                f"ingest this run: {fmt_rate(ctx.baselines.ingest or 0)}",
                value=per_second,
            ),
        ],
        details={
            "requests": count,
            "forwarded": forwarded,
            "cpu_us_per_request": cpu_us,
            "cpu_us_per_forwarded": forwarded_cpu,
        },
    )


def per_forwarded_us(
    cpu_us: float, count: int, forwarded: float, owner_cpu_us: float | None
) -> float | None:
    """Worker CPU per forwarded request stored, µs: the run's CPU (``cpu_us`` per
    request, ``count`` of them) less the requests that landed on their owner, each at
    ``owner_cpu_us`` (the ingest scenario's, this run), over the ``forwarded`` ones.
    None without ingest's figure or without a forwarded request."""
    if not owner_cpu_us or forwarded < 1:
        return None
    return (cpu_us * count - owner_cpu_us * (count - forwarded)) / forwarded
