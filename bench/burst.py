"""Burst: 1,000,000 timers due in the same second with 2 workers.

The timers are keyed by id like the client keys them, so they spread over the
partitions by hash; each partition's worker fires its share when that second's tick
arrives. Reported: time from the due second to the last callback delivered (readable by
a consumer: taken from the consumer here, polled every 50 ms; the last one's record
timestamp, when it was produced, is kept too), and each partition's share of the burst:
callbacks per partition of the callback topic, which is keyed by timer id like the
request topic, so a callback's partition is its request's (the audit records say the
same, at the price of a million JSON records to read back).
Beside them, how long the same burst would take at this run's Faust passthrough rate
and at the raw librdkafka rate, split over the same two workers.

The due second is set far enough ahead that both workers have stored every timer
before it comes (estimated from this run's two-worker storing rate, from the scale-out
scenario; checked, and reported if not: a timer stored after its second fires at once,
one request batch at a time, which is not a burst).
"""

from __future__ import annotations

import time
from collections import Counter

from confluent_kafka import Message

from bench.context import RunContext, ScenarioResult
from bench.load import RequestLoad, TimerSpec, timer_ids
from bench.report import Figure, fmt_seconds
from bench.scan import TopicFollower, timestamp_ms
from bench.stats import rate
from bench.targets import BURST_SECONDS, BURST_SHARE

__all__ = ["run"]

#: Ingest rate assumed per worker when this run has not measured one (requests/s).
FALLBACK_INGEST = 3_000.0
WORKERS = 2


def _callback(msg: Message) -> tuple[int, int]:
    return msg.partition() or 0, timestamp_ms(msg)


def run(ctx: RunContext) -> ScenarioResult:
    cfg = ctx.config
    count = cfg.burst_timers
    group_rate = ctx.baselines.ingest_two_workers or WORKERS * (
        ctx.baselines.ingest or FALLBACK_INGEST
    )
    lead = 15 + 1.5 * count / group_rate
    with ctx.stack("burst") as stack:
        callbacks = stack.topic("burst-callbacks")
        workers = stack.serving(WORKERS)
        due = int(time.time() + lead)
        ctx.say(f"burst: {count:,} timers due at {due} ({lead:.0f} s ahead)")
        load = RequestLoad(stack, callbacks)
        load.send(TimerSpec(timer_id, due) for timer_id in timer_ids("burst", count))
        load.flush()
        with TopicFollower(stack.settings, callbacks, _callback) as follower:
            stored_at = follower.wait_noting_stored(
                count,
                due + 120,
                "due+120s",
                lambda: sum(w.metric("kafka_timers_scheduled_total") for w in workers),
                poll=0.05,
            )
            follower.poll(1.0)  # anything extra (a duplicate) would show here
            fired = follower.items
            arrived = follower.arrived
        fired_by_worker = {w.name: w.metric("kafka_timers_fired_total") for w in workers}
    last = max(arrived) - due
    stamps = [stamp for _, stamp in fired]
    by_partition = Counter(p for p, _ in fired)
    finish: dict[int, float] = {}
    for p, stamp in fired:
        finish[p] = max(finish.get(p, 0.0), stamp / 1000 - due)
    fair = count / cfg.partitions
    shares = {p: by_partition.get(p, 0) / fair for p in range(cfg.partitions)}
    worst = max(shares.values())
    detail = {
        "timers": count,
        "due": due,
        "lead_seconds": lead,
        "stored_before_due": stored_at is not None and stored_at < due,
        "stored_seconds_before_due": (due - stored_at) if stored_at else None,
        "last_delivered_after_due_seconds": last,
        "last_fire_after_due_seconds": max(stamps) / 1000 - due,
        "first_fire_after_due_seconds": min(stamps) / 1000 - due,
        "partition_share": shares,
        "callbacks": len(fired),
        "partition_finish_seconds": dict(sorted(finish.items())),
        "worker_share": {w: n / count for w, n in fired_by_worker.items()},
    }
    baseline = []
    if ctx.baselines.faust_passthrough:
        baseline.append(f"Faust {fmt_seconds(count / (WORKERS * ctx.baselines.faust_passthrough))}")
    if ctx.baselines.raw_produce:
        baseline.append(f"raw {fmt_seconds(count / ctx.baselines.raw_produce)}")
    note = "" if detail["stored_before_due"] else " (NOT all stored before due)"
    return ScenarioResult(
        figures=[
            Figure(
                "burst",
                f"{count:,} due in one second, 2 workers: last delivered after{note}",
                fmt_seconds(last),
                "; ".join(baseline),
                f"≤ {BURST_SECONDS:.0f} s",
                last <= BURST_SECONDS and bool(detail["stored_before_due"]),
                value=last,
                detail=detail,
            ),
            Figure(
                "burst",
                "largest partition share",
                f"{worst:.2f}x fair",
                "fair share 1.00x; " + " ".join(f"{shares[p]:.2f}" for p in sorted(shares)),
                f"≤ {BURST_SHARE}x fair",
                worst <= BURST_SHARE,
                value=worst,
            ),
            Figure(
                "burst",
                "fire rate over the burst, 2 workers",
                f"{rate(count, last):,.0f}/s",
                value=rate(count, last),
            ),
        ],
        details=detail,
    )
