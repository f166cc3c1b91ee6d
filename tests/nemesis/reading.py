"""Reading a topic through the dev broker's ``s3://`` engine, for the load and the runner."""

from __future__ import annotations

import uuid

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, TopicPartition

from app.kafka.config import confluent_consumer
from app.kafka.records import Record, to_record
from app.settings import Settings

__all__ = ["Reader"]

#: A fetch's longest wait. On its ``s3://`` engine the dev broker lists every batch object
#: of a partition on each fetch and returns nothing when the wait runs out first: after
#: 20 minutes of a run, 500 ms read nothing at all, 10 s read a callback topic in 12 s.
FETCH_WAIT_MS = 10_000


class Reader:
    """Every partition of a topic from its start (or end), with fetches that may wait
    :data:`FETCH_WAIT_MS`: with the readers' usual 10 ms wait a topic of thousands of
    callbacks is never read to its end on the dev broker's ``s3://`` engine."""

    def __init__(self, settings: Settings, topic: str, *, from_end: bool = False) -> None:
        conf = confluent_consumer(
            settings,
            group_id=f"nemesis-reader-{uuid.uuid4().hex}",
            **{"fetch.wait.max.ms": FETCH_WAIT_MS, "log_level": 3},
        )
        self._consumer = Consumer(conf)
        meta = self._consumer.list_topics(topic, timeout=30)
        self.partitions = set(meta.topics[topic].partitions)
        start = OFFSET_END if from_end else OFFSET_BEGINNING
        self._consumer.assign([TopicPartition(topic, p, start) for p in self.partitions])
        self.at_end: set[int] = set()

    def poll(self, timeout: float) -> list[Record]:
        fresh = []
        for msg in self._consumer.consume(10_000, timeout):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self.at_end.add(msg.partition() or 0)
                continue
            self.at_end.discard(msg.partition() or 0)
            fresh.append(to_record(msg))
        return fresh

    def close(self) -> None:
        self._consumer.close()
