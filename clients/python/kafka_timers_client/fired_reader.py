"""Reading one partition of the fired topic: a cancel's answer, or a timer's newest record.

The worker writes every fired-topic record to the partition numbered like the timer's
request partition (:mod:`kafka_timers_client.fired`), so one timer's records are all on one known
partition and nothing else needs reading. No consumer group: partitions are assigned,
nothing is committed, nothing is left behind on the broker.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from kafka_timers_client.config import ClientConfig, confluent_consumer
from kafka_timers_client.errors import BrokerUnavailable
from kafka_timers_client.fired import FiredRecord

__all__ = ["FiredPartitionReader"]

#: How long the broker may hold a fetch that has nothing to return (ms). Kafka answers a
#: waiting fetch as soon as a record arrives; the dev broker holds it to the end, so an
#: answer waits up to this long there (the worker's request reader uses the same 50 ms).
#: The cost is at most twenty empty fetches a second while a cancel waits.
FETCH_WAIT_MS = 50
#: Offsets read in the first step back from the end when looking for a timer's newest
#: record; each further step back reads twice as many, up to :data:`MAX_CHUNK`.
FIRST_CHUNK = 2_000
MAX_CHUNK = 256_000
#: Records taken per consume call while scanning.
SCAN_BATCH = 5_000


class FiredPartitionReader:
    """One consumer over the fired topic, pointed at one partition at a time."""

    def __init__(self, config: ClientConfig) -> None:
        self.topic = config.fired_topic
        group = f"kafka-timers-client-{uuid.uuid4().hex}"
        self._consumer = Consumer(
            confluent_consumer(config, group_id=group, **{"fetch.wait.max.ms": FETCH_WAIT_MS})
        )
        # Metadata and ListOffsets go through a consumer that is never assigned: on the
        # fetching one they queue behind a fetch the broker is holding (a broker answers
        # one request per connection at a time), which cost ~100 ms per cancel (measured).
        self._offsets = Consumer(confluent_consumer(config, group_id=group))

    # -- metadata ---------------------------------------------------------------

    def partition_count(self, topic: str, timeout: float) -> int:
        """Partitions of ``topic``; raise :class:`BrokerUnavailable` if it is not there.

        Asked through the consumer, which never auto-creates the topic it asks about.
        """
        try:
            metadata = self._offsets.list_topics(topic, timeout=max(0.1, timeout))
        except KafkaException as exc:
            raise BrokerUnavailable(f"no metadata for topic {topic!r}: {exc}") from exc
        info = metadata.topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            raise BrokerUnavailable(
                f"topic {topic!r} does not exist: start a worker or run `kafka-timers topics`"
            )
        return len(info.partitions)

    def watermarks(self, partition: int, timeout: float) -> tuple[int, int]:
        """``(low, high)`` offsets of ``partition``, asked of the broker now.

        Brokers whose ListOffsets end is short (the dev broker: the newest batch's base
        offset + 1) give a ``high`` a few records early; every caller only starts
        reading there, and reads on to the true end, so that costs a few records.
        """
        try:
            low, high = self._offsets.get_watermark_offsets(
                TopicPartition(self.topic, partition), timeout=max(0.1, timeout), cached=False
            )
        except KafkaException as exc:
            raise BrokerUnavailable(
                f"cannot read the end of {self.topic}[{partition}]: {exc.args[0]}"
            ) from exc
        return int(low), int(high)

    # -- following: a cancel's answer -----------------------------------------------

    def follow(self, partition: int, start: int) -> None:
        """Read ``partition`` from offset ``start`` on (call before the request is sent)."""
        self._consumer.assign([TopicPartition(self.topic, partition, start)])

    def wait_for(
        self, key: bytes, match: Callable[[FiredRecord], bool], deadline: float
    ) -> FiredRecord | None:
        """The first record keyed ``key`` that ``match`` accepts, or ``None`` at ``deadline``
        (``time.monotonic()``). Records of other timers are skipped unparsed."""
        while (remaining := deadline - time.monotonic()) > 0:
            msg = self._consumer.poll(min(remaining, 0.1))
            record = self._parse(msg, key)
            if record is not None and match(record):
                return record
        return None

    # -- looking back: a timer's newest record ----------------------------------------

    def newest(
        self,
        partition: int,
        key: bytes,
        accept: Callable[[FiredRecord], bool],
        *,
        floor_ms: int,
        deadline: float,
    ) -> FiredRecord | None:
        """The newest record keyed ``key`` that ``accept`` takes, looking back no further
        than records stamped ``floor_ms``.

        Reads back from the end in growing steps, so a record written recently costs a
        few thousand records whatever the partition holds. It stops at the first step
        whose oldest record is older than ``floor_ms``, instead of asking the broker for
        an offset by time: the dev broker answers 0 for a time after its newest record.
        Raises :class:`BrokerUnavailable` at ``deadline``.
        """
        low, high = self.watermarks(partition, deadline - time.monotonic())
        end: int | None = None  # the first step reads on to the true end
        chunk = FIRST_CHUNK
        start = max(low, high - chunk)
        while True:
            found, oldest_ms = self._scan(partition, start, end, key, accept, deadline)
            if found is not None:
                return found
            if start <= low or (oldest_ms is not None and oldest_ms < floor_ms):
                return None
            end, chunk = start, min(chunk * 2, MAX_CHUNK)
            start = max(low, end - chunk)

    def _scan(
        self,
        partition: int,
        start: int,
        end: int | None,
        key: bytes,
        accept: Callable[[FiredRecord], bool],
        deadline: float,
    ) -> tuple[FiredRecord | None, int | None]:
        """The last accepted record in ``[start, end)`` (``end=None``: to the end of the
        partition) and the timestamp of the first record read."""
        self._consumer.assign([TopicPartition(self.topic, partition, start)])
        found: FiredRecord | None = None
        oldest_ms: int | None = None
        while True:
            if time.monotonic() >= deadline:
                raise BrokerUnavailable(
                    f"reading {self.topic}[{partition}] did not finish in time "
                    f"(at offset {start}, looking back): try a shorter --since"
                )
            for msg in self._consumer.consume(SCAN_BATCH, 0.2):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return found, oldest_ms
                    raise BrokerUnavailable(f"reading {self.topic}[{partition}]: {err}")
                offset = msg.offset() or 0
                if end is not None and offset >= end:
                    return found, oldest_ms
                if oldest_ms is None:
                    oldest_ms = msg.timestamp()[1]
                record = self._parse(msg, key)
                if record is not None and accept(record):
                    found = record
                if end is not None and offset >= end - 1:
                    return found, oldest_ms

    # -- common ---------------------------------------------------------------------

    @staticmethod
    def _parse(msg: Message | None, key: bytes) -> FiredRecord | None:
        if msg is None or msg.error() is not None or msg.key() != key:
            return None
        try:
            return FiredRecord.from_json(msg.value() or b"{}")
        except ValueError:
            return None  # not ours to judge here: the audit reports malformed records

    def close(self) -> None:
        self._consumer.close()
        self._offsets.close()

    def __enter__(self) -> FiredPartitionReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
