"""Read a whole topic to its end, keeping only what a figure needs from each record.

:class:`app.kafka.records.TopicReader` builds a full record object per message, which is right
for tests and slow for the 10^5-10^6 records a benchmark reads afterwards. This reads to
EOF the same way (no consumer group; the fetch high watermark, which the dev broker gets
right where its ListOffsets does not) and hands each message to an extractor.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Generic, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from app.kafka.config import confluent_consumer
from app.settings import Settings

#: librdkafka settings for the benchmark's own clients: critical messages only. A client
#: still open when a scenario stops its broker logs "Disconnected" and "Connect failed"
#: lines otherwise; a real failure shows as the scenario's exception or timeout anyway.
QUIET = {"log_level": 2}

__all__ = ["QUIET", "TopicFollower", "header", "next_offsets", "read_topic", "timestamp_ms"]

T = TypeVar("T")


def timestamp_ms(msg: Message) -> int:
    """The record's timestamp (CreateTime: when the producer called ``produce``)."""
    return int(msg.timestamp()[1])


def next_offsets(positions: Iterable[tuple[int, int]]) -> dict[int, int]:
    """Per partition, the offset after the last of ``(partition, offset)`` pairs read:
    where to start following a topic for what comes next (the dev broker's ListOffsets
    end is wrong, so the end is taken from what was read to EOF)."""
    after: dict[int, int] = {}
    for partition, offset in positions:
        after[partition] = max(after.get(partition, 0), offset + 1)
    return after


def header(msg: Message, name: str) -> bytes | None:
    """The first header called ``name``."""
    headers: list[tuple[str, bytes]] = msg.headers() or []  # type: ignore[assignment]
    for key, value in headers:
        if key == name:
            return value if isinstance(value, bytes) else None
    return None


def read_topic(
    settings: Settings,
    topic: str,
    extract: Callable[[Message], T],
    *,
    timeout: float = 120.0,
) -> list[T]:
    """``extract(message)`` for every record of every partition of ``topic``, to the end."""
    consumer = Consumer(
        confluent_consumer(
            settings,
            group_id=f"bench-scan-{uuid.uuid4().hex}",
            **{"fetch.max.bytes": 52428800, "queued.max.messages.kbytes": 262144, **QUIET},
        )
    )
    out: list[T] = []
    try:
        meta = consumer.list_topics(topic, timeout=10)
        info = meta.topics.get(topic)
        if info is None or info.error is not None:
            raise RuntimeError(f"topic {topic!r} not found")
        partitions = set(info.partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        eof: set[int] = set()
        deadline = time.monotonic() + timeout
        while eof != partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"did not read {topic!r} to its end within {timeout:.0f}s")
            for msg in consumer.consume(10000, 0.5):
                err = msg.error()
                if err is None:
                    out.append(extract(msg))
                    eof.discard(msg.partition() or 0)
                elif err.code() == KafkaError._PARTITION_EOF:
                    eof.add(msg.partition() or 0)
                else:
                    raise RuntimeError(f"reading {topic!r}: {err}")
    finally:
        consumer.close()
    return out


class TopicFollower(Generic[T]):
    """Follows every partition of a topic, extracting as records arrive.

    For waiting on progress ("have N callbacks arrived?") without re-reading the topic.
    From the beginning, or from ``starts`` (partition -> first offset to read; see
    :func:`next_offsets`). ``arrived`` holds, beside each item, when the record was
    taken from the consumer here (epoch seconds): when it had become readable, to
    within the polling interval.
    """

    def __init__(
        self,
        settings: Settings,
        topic: str,
        extract: Callable[[Message], T],
        starts: Mapping[int, int] | None = None,
    ) -> None:
        self._consumer = Consumer(
            confluent_consumer(
                settings,
                group_id=f"bench-follow-{uuid.uuid4().hex}",
                **{"enable.partition.eof": False, "fetch.wait.max.ms": 50, **QUIET},
            )
        )
        meta = self._consumer.list_topics(topic, timeout=10)
        info = meta.topics.get(topic)
        if info is None or info.error is not None:
            raise RuntimeError(f"topic {topic!r} not found")
        starts = starts or {}
        self._consumer.assign(
            [TopicPartition(topic, p, starts.get(p, OFFSET_BEGINNING)) for p in info.partitions]
        )
        self._extract = extract
        self.items: list[T] = []
        self.arrived: list[float] = []

    def poll(self, timeout: float = 0.2) -> int:
        """Take whatever arrives within ``timeout``; return how many records."""
        fresh = 0
        messages = self._consumer.consume(10000, timeout)
        now = time.time()
        for msg in messages:
            if msg.error() is None:
                self.items.append(self._extract(msg))
                fresh += 1
        self.arrived.extend([now] * fresh)
        return fresh

    def wait_for_count(self, count: int, timeout: float, what: str) -> list[T]:
        """Poll until ``count`` records arrived; raise ``TimeoutError`` naming ``what``."""
        deadline = time.monotonic() + timeout
        while len(self.items) < count:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{what}: {len(self.items)} of {count} records within {timeout:.0f}s"
                )
            self.poll(0.2)
        return self.items

    def wait_noting_stored(
        self, count: int, deadline: float, by: str, stored: Callable[[], float], poll: float
    ) -> float | None:
        """Poll every ``poll`` seconds until ``count`` records arrived, meanwhile reading
        ``stored()`` (the workers' count of timers stored: their metrics, at most twice a
        second) until it reaches ``count``; return when it did (epoch seconds), None if
        not before the last record arrived. ``TimeoutError`` past ``deadline`` (epoch
        seconds), which ``by`` names."""
        stored_at = None
        next_check = 0.0
        while len(self.items) < count:
            if stored_at is None and time.monotonic() >= next_check:
                next_check = time.monotonic() + 0.5  # the workers' metrics, not too often
                if stored() >= count:
                    stored_at = time.time()
            if time.time() > deadline:
                raise TimeoutError(f"{len(self.items):,} of {count:,} fired by {by}")
            self.poll(poll)
        return stored_at

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> TopicFollower[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
