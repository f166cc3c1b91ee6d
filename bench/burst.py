"""Burst: 1,000,000 timers due in the same second with 2 workers.

The timers are keyed by id like the client keys them, so they spread over the
partitions by hash; each partition's worker fires its share when that second's tick
arrives. Reported: time from the due second to the last callback delivered (readable by
a consumer: taken from the consumer here, polled every 50 ms; the last one's record
timestamp, when it was produced, is kept too), and each partition's share of the burst
(from the audit records, which name the partition and worker).
Beside them, how long the same burst would take at this run's Faust passthrough rate
and at the raw librdkafka rate, split over the same two workers.

The due second is set far enough ahead that both workers have stored every timer
before it comes (estimated from this run's ingest rate; checked, and reported if not).
"""

from __future__ import annotations

import json
import time
from collections import Counter

from confluent_kafka import Message

from bench.context import RunContext, ScenarioResult
from bench.load import RequestLoad, TimerSpec, timer_ids
from bench.report import Figure, fmt_seconds
from bench.scan import TopicFollower, read_topic, timestamp_ms
from bench.stack import wait_serving
from bench.stats import rate
from bench.targets import BURST_SECONDS, BURST_SHARE

__all__ = ["run"]

#: Ingest rate assumed per worker when this run has not measured one (requests/s).
FALLBACK_INGEST = 3_000.0
WORKERS = 2


def _audit(msg: Message) -> tuple[str, int, str, int] | None:
    record = json.loads(msg.value() or b"{}")
    if record.get("event") != "fired":
        return None
    return record["id"], record["partition"], record["worker"], record["fired_at_ms"]


def run(ctx: RunContext) -> ScenarioResult:
    cfg = ctx.config
    count = cfg.burst_timers
    per_worker = ctx.baselines.ingest or FALLBACK_INGEST
    lead = 10 + 1.5 * count / (WORKERS * per_worker)
    with ctx.stack("burst") as stack:
        callbacks = stack.topic("burst-callbacks")
        stack.oscillator("oscillator-1")
        stack.oscillator("oscillator-2")
        workers = [stack.worker(f"worker-{n}") for n in range(1, WORKERS + 1)]
        wait_serving(workers, cfg.partitions)
        due = int(time.time() + lead)
        ctx.say(f"burst: {count:,} timers due at {due} ({lead:.0f} s ahead)")
        load = RequestLoad(stack, callbacks)
        load.send(TimerSpec(timer_id, due) for timer_id in timer_ids("burst", count))
        load.flush()
        stored_at = None
        next_check = 0.0
        with TopicFollower(stack.settings, callbacks, timestamp_ms) as follower:
            while len(follower.items) < count:
                if stored_at is None and time.monotonic() >= next_check:
                    next_check = time.monotonic() + 0.5  # the workers' metrics, not too often
                    if sum(w.metric("kafka_timers_scheduled_total") for w in workers) >= count:
                        stored_at = time.time()
                if time.time() > due + 120:
                    raise TimeoutError(f"{len(follower.items):,} of {count:,} fired by due+120s")
                follower.poll(0.05)
            stamps = follower.items
            arrived = follower.arrived
        audits = [a for a in read_topic(stack.settings, stack.settings.topics.fired, _audit) if a]
    last = max(arrived) - due
    by_partition = Counter(p for _, p, _, _ in audits)
    by_worker = Counter(w for _, _, w, _ in audits)
    finish = {
        p: max(f for _, q, _, f in audits if q == p) / 1000 - due for p in sorted(by_partition)
    }
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
        "partition_finish_seconds": finish,
        "worker_share": {w: n / count for w, n in by_worker.items()},
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
