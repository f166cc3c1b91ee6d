"""The run's topics, each read once, from its start, as records come.

A :class:`Tail` follows topics in a thread of its own: the request topic from the load's
start (the load follows the requests' arrivals at their owner partitions in it), the
callback topics, ``timer-fired`` and the dead-letter topic from the heal (the drain waits
on its callbacks). The judging then reads only what came after their last fetch. On the
dev broker's ``s3://`` engine every fetch lists each batch object of a partition, so
reading the topics from their start once the drain was over took minutes (139 s for
three minutes of seed 4 on a loaded machine, to about 1 s read this way), and the
drain's own readers had read the callbacks from their start once already.
"""

from __future__ import annotations

import threading
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from app.kafka.config import confluent_consumer
from app.kafka.records import Record, to_record
from app.settings import Settings
from tests.nemesis.reading import FETCH_WAIT_MS

__all__ = ["Tail"]

#: How long one poll of the following thread waits for records (their latency to the load).
POLL_S = 0.2


class Tail:
    """``topics`` from their start, followed by a thread until :meth:`read_to_end`.

    ``records[topic]`` grows as records come (appends only: a reader may take the new
    ones by index while the thread runs)."""

    def __init__(self, settings: Settings, topics: tuple[str, ...]) -> None:
        conf = confluent_consumer(
            settings,
            group_id=f"nemesis-tail-{uuid.uuid4().hex}",
            **{"fetch.wait.max.ms": FETCH_WAIT_MS, "log_level": 3},
        )
        self._consumer = Consumer(conf)
        assigned = []
        for topic in topics:
            meta = self._consumer.list_topics(topic, timeout=30)
            assigned += [
                TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.topics[topic].partitions
            ]
        self._consumer.assign(assigned)
        self._partitions = [(tp.topic, tp.partition) for tp in assigned]
        self.records: dict[str, list[Record]] = {topic: [] for topic in topics}
        #: The partitions whose last news was their end (librdkafka's partition EOF: the
        #: last fetch found nothing after the records read), as a new reader's are once
        #: it has read them to their end.
        self._at_end: set[tuple[str, int]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="nemesis-tail", daemon=True)

    def start(self) -> Tail:
        self._thread.start()
        return self

    def _poll(self, timeout: float) -> None:
        for msg in self._consumer.consume(10_000, timeout):
            key = (msg.topic() or "", msg.partition() or 0)
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self._at_end.add(key)
                continue
            self._at_end.discard(key)
            self.records[key[0]].append(to_record(msg))

    def _follow(self) -> None:
        while not self._stop.is_set():
            self._poll(POLL_S)

    def read_to_end(self, timeout: float = 600.0) -> dict[str, list[Record]]:
        """Stop following, read on until every partition is at its end, and close: every
        record of the topics, as a reader started now would find them.

        Not the ends asked of the broker (``ListOffsets``): on the ``s3://`` engine each
        answer took seconds, a minute and more for the run's 48 partitions."""
        self._stop.set()
        self._thread.join()
        try:
            deadline = time.monotonic() + timeout
            while len(self._at_end) < len(self._partitions):
                if time.monotonic() > deadline:
                    behind = sorted(set(self._partitions) - self._at_end)
                    raise TimeoutError(f"{behind} not read to their end within {timeout:g} s")
                self._poll(1.0)
            return self.records
        finally:
            self._consumer.close()
