"""Ingest: timer requests one worker process stores per second; then Fire, on the same worker.

A backlog of requests is preloaded, then one worker starts and works through it. A
request counts as stored once it is in the changelog and in RocksDB (counted in the
worker's live databases, opened read-only). The rate is the number of requests over
the span of the changelog records' timestamps, exactly as the Faust baseline's rate is
taken over its forwarded records: start-up and group join are excluded from both. The
worker's CPU time per request (``/proc``, from its first stored request to its last) is
shown beside it: other jobs on the machine move it far less than the rate.

All these timers are due in the same second, a moment ahead, so the worker now holds
one large bucket: :func:`bench.fire.fire_bucket` makes it due and times the callbacks.
Measuring both on one worker saves storing the bucket twice.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Message

from bench import fire
from bench.changelog import LiveKeys
from bench.context import RunContext, ScenarioResult
from bench.load import RequestLoad, TimerSpec, timer_ids
from bench.procstat import cpu_seconds
from bench.report import Figure, fmt_rate
from bench.rocks import count_pending_keys
from bench.scan import next_offsets, read_topic, timestamp_ms
from bench.stack import Worker, wait_until
from bench.stats import rate
from bench.targets import INGEST_FLOOR, ingest_verdict

__all__ = ["run"]


def cpu_while_storing(worker: Worker, count: int, what: str) -> float:
    """Wait until ``worker`` has stored ``count`` requests; its CPU seconds from the first
    stored (start-up and the group join excluded) to the last."""
    wait_until(lambda: worker.metric("kafka_timers_scheduled_total") > 0, 120, "a request")
    cpu_start = cpu_seconds(worker.pid)
    wait_until(
        lambda: worker.metric("kafka_timers_scheduled_total") >= count,
        60 + count / 500,
        what,
        0.05,
    )
    return cpu_seconds(worker.pid) - cpu_start


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
        ingest_cpu = cpu_while_storing(worker, count, f"the worker to store {count:,} requests")
        live = LiveKeys()

        def position(msg: Message) -> tuple[int, int, int]:
            live.apply(msg)
            return timestamp_ms(msg), msg.partition() or 0, msg.offset() or 0

        records = read_topic(stack.settings, stack.changelog, position)
        stored = count_pending_keys(worker.data_dir)
        ctx.say(f"fire: {count:,} timers stored, all due at one second; sending its tick")
        fired = fire.fire_bucket(
            stack, worker, callbacks, due, count, next_offsets((p, o) for _, p, o in records)
        )
    stamps = [t for t, _, _ in records]
    span = (max(stamps) - min(stamps)) / 1000
    per_second = rate(count - 1, span)
    ctx.baselines.ingest = per_second
    ctx.baselines.ingest_cpu_us = ingest_cpu / count * 1e6
    ctx.baselines.fire_cpu_us = fired["worker_cpu_us_per_timer"]
    in_rocksdb = sum(stored.values())
    detail: dict[str, Any] = {
        "requests": count,
        "changelog_records": len(stamps),
        "changelog_live_keys": live.by_kind(),
        "in_rocksdb": in_rocksdb,
        "span_seconds": span,
        "worker_cpu_us_per_request": ingest_cpu / count * 1e6,
    }
    # Every timer in RocksDB, and at least one live pending key per timer in the changelog.
    if in_rocksdb != count or live.by_kind()["pending"] < count:
        raise RuntimeError(f"not everything was stored: {detail}")
    baseline, target, met = ingest_verdict(per_second, ctx.baselines)
    rows = [
        Figure(
            "ingest",
            f"requests stored/s, 1 worker, {count:,} preloaded",
            fmt_rate(per_second),
            baseline,
            target,
            met,
            value=per_second,
            detail=detail,
        ),
        Figure(
            "ingest",
            "worker CPU per request stored",
            f"{detail['worker_cpu_us_per_request']:.1f} µs",
            f"{1e6 / INGEST_FLOOR:.0f} µs: one core's worth at {fmt_rate(INGEST_FLOOR)}",
            value=detail["worker_cpu_us_per_request"],
        ),
    ]
    return ScenarioResult(
        figures=[*rows, *fire.figures(fired, ctx.baselines)],
        details={"ingest": detail, "fire": fired},
    )
