"""Fire: callbacks one worker produces per second when a large bucket comes due.

One worker stores N timers all due in the same second, far in the future; once all are
stored, the benchmark sends that second's tick (as an oscillator would) and times the
callbacks. The rate is N over the time from the tick to the last callback's timestamp:
it includes the scan, the callbacks and their audit records, the flush and the
forgetting — everything a real due bucket costs.
"""

from __future__ import annotations

import time

from bench.context import RunContext, ScenarioResult
from bench.load import RequestLoad, TimerSpec, timer_ids
from bench.report import Figure, fmt_rate, fmt_seconds
from bench.scan import TopicFollower, timestamp_ms
from bench.stack import BenchStack, wait_until
from bench.stats import rate
from bench.targets import rate_verdict
from bench.ticks import send_tick

__all__ = ["run"]


def run(ctx: RunContext) -> ScenarioResult:
    count = ctx.config.fire_timers
    with BenchStack("fire", ctx.work_dir, partitions=ctx.config.partitions) as stack:
        callbacks = stack.topic("fire-callbacks")
        due = int(time.time()) + 86400
        load = RequestLoad(stack, callbacks)
        load.send(TimerSpec(timer_id, due) for timer_id in timer_ids("fire", count))
        load.flush()
        worker = stack.worker("worker-1")
        wait_until(
            lambda: worker.metric("kafka_timers_scheduled_total") >= count,
            60 + count / 500,
            f"the worker to store {count:,} timers",
            0.5,
        )
        ctx.say(f"fire: {count:,} timers stored, all due at one second; sending its tick")
        with TopicFollower(stack.settings, callbacks, timestamp_ms) as follower:
            follower.poll(0.5)  # take the assignment before the first callback
            tick_at = send_tick(
                stack.producer(), stack.settings.topics.ticks, stack.partitions, due
            )
            stamps = follower.wait_for_count(count, 60 + count / 500, "callbacks")
            follower.poll(1.0)  # anything extra (a duplicate) would show here
            stamps = follower.items
    last = max(stamps) / 1000
    seconds = last - tick_at
    per_second = rate(count, seconds)
    detail = {
        "timers": count,
        "callbacks": len(stamps),
        "tick_to_last_seconds": seconds,
        "first_to_last_rate": rate(len(stamps) - 1, (max(stamps) - min(stamps)) / 1000),
        "tick_to_first_seconds": min(stamps) / 1000 - tick_at,
    }
    baseline, target, met = rate_verdict(per_second, ctx.baselines, 20_000)
    return ScenarioResult(
        figures=[
            Figure(
                "fire",
                f"callbacks/s, 1 worker, {count:,} due at once",
                fmt_rate(per_second),
                baseline,
                target,
                met,
                value=per_second,
                detail=detail,
            ),
            Figure(
                "fire",
                "tick to last callback",
                fmt_seconds(seconds),
                value=seconds,
                detail=detail,
            ),
        ],
        details=detail,
    )
