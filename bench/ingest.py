"""Ingest: timer requests one worker process stores per second; then Fire, on the same worker.

A backlog of requests is preloaded, then one worker starts and works through it. A
request counts as stored once it is in the changelog (both of its records) and in
RocksDB (counted in the worker's live databases, opened read-only). The rate is the
number of requests over the span of the changelog records' timestamps, exactly as the
Faust baseline's rate is taken over its forwarded records: start-up and group join are
excluded from both.

All these timers are due in the same second, far in the future, so the worker now holds
one large bucket: :func:`bench.fire.fire_bucket` makes it due and times the callbacks.
Measuring both on one worker saves storing the bucket twice, which on a slow ingest is
the longest part of the run.
"""

from __future__ import annotations

import time

from bench import fire
from bench.context import RunContext, ScenarioResult
from bench.load import RequestLoad, TimerSpec, timer_ids
from bench.report import Figure, fmt_rate
from bench.rocks import count_pending_keys
from bench.scan import read_topic, timestamp_ms
from bench.stack import wait_until
from bench.stats import rate
from bench.targets import rate_verdict

__all__ = ["run"]

#: Ingest target, requests per second per worker process.
TARGET = 10_000


def run(ctx: RunContext) -> ScenarioResult:
    count = ctx.config.ingest_requests
    with ctx.stack("ingest") as stack:
        callbacks = stack.topic("ingest-callbacks")
        due = int(time.time()) + 2  # passed before the worker has started: its tick is not held
        load = RequestLoad(stack, callbacks)
        load.send(TimerSpec(timer_id, due) for timer_id in timer_ids("ingest", count))
        load.flush()
        ctx.say(f"ingest: {count:,} requests preloaded; starting one worker")
        worker = stack.worker("worker-1")
        wait_until(
            lambda: worker.metric("kafka_timers_scheduled_total") >= count,
            60 + count / 500,
            f"the worker to store {count:,} requests",
            0.5,
        )
        stamps = read_topic(stack.settings, stack.changelog, timestamp_ms)
        stored = count_pending_keys(worker.data_dir)
        ctx.say(f"fire: {count:,} timers stored, all due at one second; sending its tick")
        fired = fire.fire_bucket(stack, callbacks, due, count)
    span = (max(stamps) - min(stamps)) / 1000
    per_second = rate(count - 1, span)
    ctx.baselines.ingest = per_second
    in_rocksdb = sum(stored.values())
    detail = {
        "requests": count,
        "changelog_records": len(stamps),
        "in_rocksdb": in_rocksdb,
        "span_seconds": span,
    }
    if in_rocksdb != count or len(stamps) < 2 * count:
        raise RuntimeError(f"not everything was stored: {detail}")
    baseline, target, met = rate_verdict(per_second, ctx.baselines, TARGET)
    figure = Figure(
        "ingest",
        "requests stored/s, 1 worker",
        fmt_rate(per_second),
        baseline,
        target,
        met,
        value=per_second,
        detail=detail,
    )
    return ScenarioResult(
        figures=[figure, *fire.figures(fired, ctx.baselines)],
        details={"ingest": detail, "fire": fired},
    )
