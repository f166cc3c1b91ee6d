"""Bulk timer requests, produced straight to the request topic with librdkafka.

The client's :meth:`~kafka_timers_client.TimerClient.schedule` builds one request at a time with
uuids and ``Decimal`` arithmetic — right for users, but at 10^5-10^6 requests it would
measure the load generator rather than the service. Here each request is the same
protobuf ``Future`` the client sends, keyed by timer id exactly as the client keys it,
so requests land on the partitions they would in production.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import Producer

from app.settings import Settings
from bench.stack import BenchStack
from kafka_timers_client import protowire

__all__ = [
    "CALLBACK_VALUE_BYTES",
    "RequestLoad",
    "TimerSpec",
    "request_record",
    "timer_ids",
]

#: Size of each callback value, bytes: a small JSON event, as a payment retry would carry.
CALLBACK_VALUE_BYTES = 100


@dataclass(frozen=True)
class TimerSpec:
    """One timer to schedule."""

    #: Timer id; also the request's key, so it decides the partition.
    id: str
    #: Epoch second it is due.
    due: int
    #: Request partition, where a scenario must place timers on one worker's partitions;
    #: ``None`` (the normal case) hashes the id like the client does.
    partition: int | None = None
    #: A series instead: its interval (seconds), first occurrence at ``due``, ``count``
    #: occurrences.
    every: int | None = None
    count: int | None = None


def request_record(spec: TimerSpec, callback_topic: str) -> bytes:
    """The protobuf request for ``spec``: a 100-byte value to ``callback_topic``, with a token."""
    value = (b'{"timer":"%s","pad":"' % spec.id.encode()).ljust(CALLBACK_VALUE_BYTES - 2, b"x")
    future = protowire.Future(
        callback_topic=callback_topic,
        callback_key=spec.id,
        callback=value + b'"}',
        id=spec.id,
        token=f"{zlib.crc32(spec.id.encode()):08x}" * 2,
        due=spec.due,
    )
    if spec.every is not None:
        future.due, future.every, future.start, future.count = (
            None,
            spec.every,
            spec.due,
            spec.count,
        )
    return protowire.encode(future)


class RequestLoad:
    """Produces timer requests for one scenario; keyed by id like :class:`TimerClient`."""

    def __init__(self, stack: BenchStack, callback_topic: str) -> None:
        self._settings: Settings = stack.settings
        self._topic = stack.settings.topics.requests
        self._callback_topic = callback_topic
        # A longer linger than the service's: this is a bulk loader, not a latency path.
        self._producer: Producer = stack.producer(**{"linger.ms": 20, "batch.num.messages": 10000})
        self.sent = 0

    def encode(self, specs: Iterable[TimerSpec]) -> list[tuple[bytes, bytes]]:
        """``(key, value)`` of each spec's request, for :meth:`send_encoded`: a scenario
        that must produce a backlog as fast as possible encodes it first."""
        callback_topic = self._callback_topic
        return [(spec.id.encode(), request_record(spec, callback_topic)) for spec in specs]

    def send_encoded(self, records: Iterable[tuple[bytes, bytes]]) -> int:
        """Queue encoded requests (keyed: the partitioner places them), as fast as it can."""
        produce, poll, topic = self._producer.produce, self._producer.poll, self._topic
        count = 0
        for key, value in records:
            while True:
                try:
                    produce(topic, value, key)
                    break
                except BufferError:
                    poll(0.01)  # the local queue is full: let deliveries drain first
            count += 1
        self.sent += count
        return count

    def send(self, specs: Iterable[TimerSpec]) -> int:
        """Queue a request per spec (waiting when librdkafka's queue is full)."""
        produce, poll = self._producer.produce, self._producer.poll
        topic, callback_topic = self._topic, self._callback_topic
        count = 0
        for spec in specs:
            value, key = request_record(spec, callback_topic), spec.id.encode()
            while True:
                try:
                    if spec.partition is None:
                        produce(topic, value, key)
                    else:
                        produce(topic, value, key, partition=spec.partition)
                    break
                except BufferError:
                    poll(0.05)  # the local queue is full: let deliveries drain first
            count += 1
            if count % 1000 == 0:
                poll(0)
        self.sent += count
        return count

    def flush(self, timeout: float = 120.0) -> None:
        """Wait until every request is on the broker."""
        started = time.monotonic()
        remaining = self._producer.flush(timeout)
        if remaining:
            raise RuntimeError(
                f"{remaining} requests not acknowledged after {time.monotonic() - started:.0f}s"
            )


def timer_ids(prefix: str, count: int, start: int = 0) -> list[str]:
    """``count`` distinct ids, short enough not to dominate the record size."""
    return [f"{prefix}{i:09d}" for i in range(start, start + count)]
