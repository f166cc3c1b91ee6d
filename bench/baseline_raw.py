"""Baseline: raw confluent-kafka through the broker, at the request record size.

The ceiling any Kafka service on this machine works under right now: produce N records
with the producer settings the worker itself uses for its output, then read them all
back. Everything the service does per timer costs more than this, so it tells how much
of a figure is the broker and the machine, and how much is the service.
"""

from __future__ import annotations

import time

from bench.context import RunContext, ScenarioResult
from bench.load import TimerSpec, request_record, timer_ids
from bench.report import Figure, fmt_rate
from bench.scan import read_topic
from bench.stats import rate

__all__ = ["run"]


def run(ctx: RunContext) -> ScenarioResult:
    count = ctx.config.raw_records
    with ctx.stack("baseline-raw") as stack:
        topic = stack.topic("raw-baseline")
        # The very bytes a timer request has, keyed the same way.
        values = [
            (request_record(TimerSpec(i, 0), topic), i.encode())
            for i in timer_ids("raw", min(count, 10_000))
        ]
        producer = stack.producer()
        produce, poll = producer.produce, producer.poll
        started = time.perf_counter()
        for n in range(count):
            value, key = values[n % len(values)]
            while True:
                try:
                    produce(topic, value, key)
                    break
                except BufferError:
                    poll(0.01)  # local queue full: let deliveries drain
        remaining = producer.flush(60)
        produce_seconds = time.perf_counter() - started
        if remaining:
            raise RuntimeError(f"{remaining} baseline records not acknowledged")
        # Timed from the first record to the last, like every rate here: not the consumer's
        # start-up, which is fixed cost, not throughput.
        arrivals = read_topic(
            stack.settings, topic, lambda m: (time.perf_counter(), len(m.value() or b""))
        )
        consume_seconds = arrivals[-1][0] - arrivals[0][0]
        sizes = [size for _, size in arrivals]
    if len(sizes) != count:
        raise RuntimeError(f"read back {len(sizes)} of {count} baseline records")
    produced, consumed = rate(count, produce_seconds), rate(count - 1, consume_seconds)
    ctx.baselines.raw_produce, ctx.baselines.raw_consume = produced, consumed
    record_bytes = sum(sizes) / len(sizes)
    detail = {"records": count, "record_bytes": record_bytes}
    return ScenarioResult(
        figures=[
            Figure(
                "baseline",
                f"raw confluent-kafka produce ({record_bytes:.0f} B)",
                fmt_rate(produced),
                value=produced,
                detail={**detail, "seconds": produce_seconds},
            ),
            Figure(
                "baseline",
                "raw confluent-kafka consume",
                fmt_rate(consumed),
                value=consumed,
                detail={**detail, "seconds": consume_seconds},
            ),
        ],
        details={**detail, "produce_seconds": produce_seconds, "consume_seconds": consume_seconds},
    )
