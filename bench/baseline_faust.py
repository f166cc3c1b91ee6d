"""Baseline: a plain Faust agent forwarding each event with ``await topic.send(...)``.

What "a Faust service" costs per event on this machine in this run: the targets ask the
worker to ingest and fire at least twice this fast, because a timer service that paid
Faust's per-event price for every timer could not. Measured like ingest: a backlog of
request records is preloaded, the agent starts, and the rate is the count over the span
of the forwarded records' timestamps (start-up and group join excluded).
"""

from __future__ import annotations

from dataclasses import replace

from bench.context import RunContext, ScenarioResult
from bench.load import RequestLoad, TimerSpec, timer_ids
from bench.report import Figure, fmt_rate
from bench.scan import TopicFollower, timestamp_ms
from bench.stats import rate

__all__ = ["run"]

#: Longest the agent may take to start and forward everything, seconds.
TIMEOUT = 240.0


def run(ctx: RunContext) -> ScenarioResult:
    count = ctx.config.faust_events
    with ctx.stack("baseline-faust") as stack:
        out = stack.topic("passthrough-out")
        load = RequestLoad(stack, out)
        load.send(TimerSpec(i, 0) for i in timer_ids("pass", count))
        load.flush()
        settings = replace(
            stack.settings, worker_id="passthrough", data_dir=str(stack.base_dir / "passthrough")
        )
        stack.spawn("passthrough", "bench.faust_passthrough", settings, BENCH_PASSTHROUGH_OUT=out)
        with TopicFollower(stack.settings, out, timestamp_ms) as follower:
            stamps = follower.wait_for_count(count, TIMEOUT, "Faust passthrough")
    span = (max(stamps) - min(stamps)) / 1000
    per_second = rate(len(stamps) - 1, span)
    ctx.baselines.faust_passthrough = per_second
    return ScenarioResult(
        figures=[
            Figure(
                "baseline",
                "Faust passthrough (await send per event)",
                fmt_rate(per_second),
                value=per_second,
                detail={"events": count, "span_seconds": span},
            )
        ],
        details={"events": count, "span_seconds": span},
    )
