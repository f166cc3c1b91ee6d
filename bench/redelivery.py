"""Redelivery: messages acknowledged one by one, per second, through the client's
:class:`~kafka_timers_client.redelivery.RedeliveringConsumer`, set beside a plain
consumer that commits its offsets, reading the same messages in the same run.

Both read the same preloaded queue topic, in batches of the same size. The plain
consumer commits each batch's offsets (synchronously, as a consumer that must not lose
a message does). The redelivering one schedules a timer per message, waits for the
batch's timers, commits, and acknowledges every message (a cancel each, never waited
for): two requests per message for the worker. The visibility timeout is long enough
that nothing comes back during the run. Figures: messages acknowledged per second (to
the last ack with the broker), the same with the plain consumer, the client's own CPU
per message, and the worker's CPU per message (its two requests), from its first
request stored to its last cancel applied.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, TopicPartition

from bench.context import RunContext, ScenarioResult
from bench.procstat import cpu_seconds
from bench.report import Figure, fmt_rate
from bench.stack import BenchStack, wait_serving, wait_until
from bench.stats import rate
from kafka_timers_client.config import confluent_consumer
from kafka_timers_client.redelivery import RedeliveringConsumer

__all__ = ["run"]

#: Messages in the queue: quick, full.
MESSAGES = {"quick": 20_000, "full": 200_000}
BATCH = 500
VALUE = b"x" * 150


def _preload(stack: BenchStack, topic: str, count: int) -> None:
    producer = stack.producer(**{"linger.ms": 20})
    for number in range(count):
        while True:
            try:
                producer.produce(topic, VALUE, b"job-%d" % number)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError("the queue was not preloaded")


def _consumer(stack: BenchStack, topic: str) -> Consumer:
    config = stack.settings.client_config()
    consumer = Consumer(
        confluent_consumer(
            config, f"bench-queue-{uuid.uuid4().hex[:8]}", **{"fetch.wait.max.ms": 10}
        )
    )
    consumer.subscribe([topic])
    return consumer


def _plain(stack: BenchStack, topic: str, count: int) -> float:
    """Seconds a plain consumer takes to read ``count`` messages, committing each batch."""
    consumer = _consumer(stack, topic)
    seen = 0
    started = None
    try:
        while seen < count:
            batch = [m for m in consumer.consume(BATCH, 1.0) if m.error() is None]
            if not batch:
                continue
            started = started or time.monotonic()
            seen += len(batch)
            ends: dict[tuple[str, int], int] = {}
            for m in batch:
                ends[(m.topic() or "", m.partition() or 0)] = (m.offset() or 0) + 1
            consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in ends.items()], asynchronous=False
            )
        return time.monotonic() - (started or time.monotonic())
    finally:
        consumer.close()


def _acked(stack: BenchStack, topic: str, dlt: str, count: int) -> tuple[float, float]:
    """Seconds to hand out and ack ``count`` messages (the last ack with the broker), and
    this process's CPU seconds for it."""
    consumer = _consumer(stack, topic)
    queue = RedeliveringConsumer(
        consumer,
        stack.settings.client_config(),
        dead_letter_topic=dlt,
        visibility_timeout=3600,
        namespace=f"bench-{uuid.uuid4().hex[:8]}",
        batch_size=BATCH,
    )
    acked = 0
    started = cpu_started = None
    try:
        while acked < count:
            batch = queue.consume(BATCH, 1.0)
            if not batch:
                continue
            if started is None:
                started, cpu_started = time.monotonic(), time.process_time()
            for message in batch:
                queue.ack(message)
            acked += len(batch)
        queue.flush()
        assert started is not None and cpu_started is not None
        return time.monotonic() - started, time.process_time() - cpu_started
    finally:
        queue.close()
        consumer.close()


def run(ctx: RunContext) -> ScenarioResult:
    count = MESSAGES.get(ctx.config.name, MESSAGES["full"])
    with ctx.stack("redelivery") as stack:
        queue_topic = stack.topic("queue")
        dlt = stack.topic("queue-dlt")
        worker = stack.worker("worker-1")
        stack.oscillator()
        wait_serving([worker], stack.partitions)
        _preload(stack, queue_topic, count)
        ctx.say(f"redelivery: {count:,} messages preloaded; a plain consumer reads them")
        plain_seconds = _plain(stack, queue_topic, count)
        ctx.say("redelivery: the same through RedeliveringConsumer, each acked")
        scheduled0 = worker.metric("kafka_timers_scheduled_total")
        cancelled0 = worker.metric("kafka_timers_cancelled_total")
        cpu0 = cpu_seconds(worker.pid)
        acked_seconds, client_cpu = _acked(stack, queue_topic, dlt, count)
        wait_until(
            lambda: (
                worker.metric("kafka_timers_scheduled_total") - scheduled0 >= count
                and worker.metric("kafka_timers_cancelled_total") - cancelled0 >= count
            ),
            120 + count / 500,
            f"the worker to store {count:,} timers and apply their {count:,} acks",
            0.05,
        )
        worker_cpu = cpu_seconds(worker.pid) - cpu0
        pending = worker.metric("kafka_timers_pending")
    plain_rate = rate(count, plain_seconds)
    acked_rate = rate(count, acked_seconds)
    worker_us = worker_cpu / count * 1e6
    client_us = client_cpu / count * 1e6
    return ScenarioResult(
        figures=[
            Figure(
                "redelivery",
                f"messages acked/s through RedeliveringConsumer (batches of {BATCH})",
                fmt_rate(acked_rate),
                f"plain consumer committing each batch, this run: {fmt_rate(plain_rate)} "
                f"({acked_rate / plain_rate:.2f}x)",
                value=acked_rate,
            ),
            Figure(
                "redelivery",
                "worker CPU per message acked (its timer stored, then cancelled)",
                f"{worker_us:.1f} µs",
                f"{count:,} messages, {pending:,.0f} timers left pending",
                value=worker_us,
            ),
            Figure(
                "redelivery",
                "client CPU per message (schedule, commit, ack)",
                f"{client_us:.1f} µs",
                value=client_us,
            ),
        ],
        details={
            "messages": count,
            "batch": BATCH,
            "plain_seconds": plain_seconds,
            "acked_seconds": acked_seconds,
            "worker_cpu_seconds": worker_cpu,
            "client_cpu_seconds": client_cpu,
            "pending_after": pending,
        },
    )
