"""Reading a topic through the dev broker's ``s3://`` engine, for the load and the runner."""

from __future__ import annotations

import uuid

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, TopicPartition

from app.kafka.config import confluent_consumer
from app.kafka.records import Record, to_record
from app.settings import Settings

__all__ = ["Reader"]


class Reader:
    """Every partition of a topic from its start (or end), with fetches that wait up to
    half a second: on its ``s3://`` engine the dev broker lists a partition's every batch
    on each fetch, and with the readers' usual 10 ms wait a topic of thousands of
    callbacks is never read to its end."""

    def __init__(self, settings: Settings, topic: str, *, from_end: bool = False) -> None:
        conf = confluent_consumer(
            settings,
            group_id=f"nemesis-reader-{uuid.uuid4().hex}",
            **{"fetch.wait.max.ms": 500, "log_level": 3},
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
