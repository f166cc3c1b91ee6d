"""Reading topics without a consumer group: assign every partition and read to the end.

Used by the demo, the tests, the benchmarks and ``status``. No group means no join
delay and nothing left behind on the broker; reading to EOF (the fetch high watermark)
is right even on brokers whose ListOffsets end is wrong.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    Message,
    TopicPartition,
)

from app.core.raw_record import RawRecord
from app.kafka.config import confluent_consumer
from app.settings import Settings
from kafka_timers_client.message_headers import read_headers

__all__ = ["Record", "TopicReader", "to_record"]


#: One consumed record. The same type the service parses (:func:`parse_request`), so
#: what a reader returns can be handed to it as it is.
Record = RawRecord


def to_record(msg: Message) -> Record:
    """A consumed confluent-kafka message as a :data:`Record`; total.

    A record whose headers cannot be read (confluent-kafka decodes header names as
    UTF-8 and raises on anything else) still becomes a record, without its headers and
    with a :attr:`~app.core.raw_record.RawRecord.defect` saying why, so the worker
    can dead-letter it instead of dying on it.
    """
    headers, defect = read_headers(msg)
    key, value = msg.key(), msg.value()
    # By position (topic, partition, offset, timestamp, key, value, headers, defect):
    # every request read passes here, and eight keywords cost a quarter of this call.
    return Record(
        msg.topic() or "",
        msg.partition() or 0,
        msg.offset() or 0,
        msg.timestamp()[1],
        key.encode() if isinstance(key, str) else key,
        value.encode() if isinstance(value, str) else value,
        headers,
        defect,
    )


class TopicReader:
    """Reads every partition of one topic, from the beginning (or the end)."""

    def __init__(self, settings: Settings, topic: str, *, from_end: bool = False) -> None:
        self._consumer = Consumer(
            confluent_consumer(settings, group_id=f"kafka-timers-reader-{uuid.uuid4().hex}")
        )
        meta = self._consumer.list_topics(topic, timeout=10)
        info = meta.topics.get(topic)
        partitions = sorted(info.partitions) if info is not None and info.error is None else []
        start = OFFSET_END if from_end else OFFSET_BEGINNING
        self._consumer.assign([TopicPartition(topic, p, start) for p in partitions])
        self._partitions = set(partitions)
        #: Partitions whose end was reached and that have had no record since.
        self._at_end: set[int] = set()
        self.records: list[Record] = []

    def poll(self, timeout: float = 0.2, max_records: int = 10000) -> list[Record]:
        """Whatever arrives within ``timeout`` (appended to :attr:`records` too)."""
        fresh: list[Record] = []
        for msg in self._consumer.consume(max_records, timeout):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self._at_end.add(msg.partition() or 0)
                    continue
                raise RuntimeError(f"reading {msg.topic()}: {err}")
            record = to_record(msg)
            self._at_end.discard(record.partition)
            fresh.append(record)
        self.records.extend(fresh)
        return fresh

    def read_to_end(self, timeout: float = 30.0) -> list[Record]:
        """Everything up to the end of every partition (as of when each end was reached)."""
        deadline = time.monotonic() + timeout
        while self._at_end != self._partitions and time.monotonic() < deadline:
            self.poll(0.5)
        if self._at_end != self._partitions:
            raise TimeoutError(f"did not reach the end of every partition within {timeout}s")
        return self.records

    def wait_for(self, predicate: Callable[[list[Record]], bool], timeout: float) -> list[Record]:
        """Poll until ``predicate(all records so far)`` holds; raise ``TimeoutError`` if never."""
        deadline = time.monotonic() + timeout
        while not predicate(self.records):
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"condition not met within {timeout}s ({len(self.records)} records)"
                )
            self.poll(0.2)
        return self.records

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> TopicReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
