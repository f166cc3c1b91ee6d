"""A PySpark Python Data Source that reads a Kafka topic, partition-parallel, to its end.

Spark's own ``kafka`` source lives in the spark-sql-kafka jar, which cannot be downloaded
everywhere (not on these machines). This source needs only confluent-kafka and pyarrow on
the executors. Its rows have the columns of Spark's ``kafka`` source (topic, partition,
offset, timestamp, key, value, headers), so everything downstream works with either.

One Spark input partition per Kafka partition, or per offset range of one with the
``maxOffsetsPerPartition`` option. Every read goes on to the end of its partition as
the Fetch response reports it (``enable.partition.eof``): brokers whose ListOffsets
"latest" is wrong (Tansu, see the platform notes) would otherwise lose the tail. Offset
ranges are planned from the watermarks, so only the last range of a partition is open
and reads to EOF; a short watermark then costs balance, never records.

Options: ``subscribe`` (the topic), ``kafka.<librdkafka setting>`` for the client
(address, TLS, SASL), ``maxOffsetsPerPartition``, ``batchSize`` (records per Arrow
batch) and ``stallTimeoutSeconds`` (give up when a partition sends nothing that long).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from app.kafka.records import to_record

__all__ = [
    "ARROW_SCHEMA",
    "RAW_SCHEMA",
    "SOURCE_NAME",
    "KafkaDataSource",
    "KafkaOffsetRange",
    "KafkaTopicReader",
    "plan_ranges",
]

#: Name to use with ``spark.read.format(...)``.
SOURCE_NAME = "kafka_timers_kafka"

#: Columns of Spark's ``kafka`` source (less ``timestampType``), in this order, and
#: ``defect``: why a record could not be read as one (a header name that is not UTF-8,
#: see :func:`app.kafka.records.to_record`), else null.
RAW_SCHEMA = (
    "topic string, partition int, offset bigint, timestamp timestamp, key binary, "
    "value binary, headers array<struct<key:string,value:binary>>, defect string"
)

#: The same schema as Arrow types, for the record batches ``read`` yields.
ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        ("defect", pa.string()),
    ]
)

#: Record timestamps Arrow and Spark can hold (microseconds in an int64), ms: a producer
#: may set any int64, and one far out of range must not fail the read.
_MAX_TIMESTAMP_MS = (2**63 - 1) // 1000

_BEGINNING = -2  # librdkafka's OFFSET_BEGINNING, without importing it on the planner


class KafkaOffsetRange(InputPartition):
    """Offsets ``[start, end)`` of one Kafka partition; ``end=None`` reads to EOF."""

    def __init__(self, topic: str, partition: int, start: int, end: int | None) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        #: First offset, or -2 for the beginning of the partition.
        self.start = start
        #: First offset *not* read, or ``None`` for everything up to EOF.
        self.end = end


def plan_ranges(
    topic: str, watermarks: Mapping[int, tuple[int, int]], max_offsets: int | None
) -> list[KafkaOffsetRange]:
    """Split each partition's ``(low, high)`` watermarks into ranges of ``max_offsets``.

    The last range of each partition is open (reads to EOF), because ``high`` may be
    short of the true end. Without ``max_offsets`` a partition is one open range.
    """
    ranges: list[KafkaOffsetRange] = []
    for partition in sorted(watermarks):
        low, high = watermarks[partition]
        # Starting at a real offset spares the consumer an offset query (0.5 s each);
        # a low watermark that went stale meanwhile resets to the earliest record.
        start = low if low >= 0 else _BEGINNING
        if max_offsets:
            bound = max(low, 0) + max_offsets
            while bound < high:
                ranges.append(KafkaOffsetRange(topic, partition, start, bound))
                start, bound = bound, bound + max_offsets
        ranges.append(KafkaOffsetRange(topic, partition, start, None))
    return ranges


def _client_conf(options: Mapping[str, str]) -> dict[str, Any]:
    """librdkafka settings from the ``kafka.*`` options, for a reader without a group."""
    conf: dict[str, Any] = {
        # An empty fetch at the end returns after this long: it is how EOF is noticed.
        "fetch.wait.max.ms": 50,
    }
    conf.update(
        {
            key[len("kafka.") :]: value
            for key, value in options.items()
            if key.lower().startswith("kafka.")
        }
    )
    conf.update(
        {
            # assign() only: the group is never joined, nothing is committed.
            "group.id": f"kafka-timers-audit-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    return conf


class _BatchBuilder:
    """Column lists for one Arrow record batch."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.clear()

    def clear(self) -> None:
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.headers: list[list[dict[str, Any]] | None] = []
        self.defects: list[str | None] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, msg: Any) -> None:
        # The worker's reading of a message (total: a header name that is not UTF-8
        # becomes a defect, not an exception), so the audit sees what the worker saw.
        record = to_record(msg)
        self.offsets.append(record.offset)
        ts = max(-_MAX_TIMESTAMP_MS, min(record.timestamp_ms, _MAX_TIMESTAMP_MS))
        self.timestamps.append(ts * 1000)
        self.keys.append(record.key)
        self.values.append(record.value)
        self.headers.append(
            [{"key": k, "value": v} for k, v in record.headers] if record.headers else None
        )
        self.defects.append(record.defect)

    def take(self) -> pa.RecordBatch:
        n = len(self.offsets)
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array([self.topic] * n, pa.string()),
                pa.array([self.partition] * n, pa.int32()),
                pa.array(self.offsets, pa.int64()),
                pa.array(self.timestamps, ARROW_SCHEMA.field("timestamp").type),
                pa.array(self.keys, pa.binary()),
                pa.array(self.values, pa.binary()),
                pa.array(self.headers, ARROW_SCHEMA.field("headers").type),
                pa.array(self.defects, pa.string()),
            ],
            schema=ARROW_SCHEMA,
        )
        self.clear()
        return batch


class KafkaTopicReader(DataSourceReader):
    """Plans offset ranges on the driver and reads each with its own consumer."""

    def __init__(self, options: Mapping[str, str]) -> None:
        topic = options.get("subscribe") or options.get("topic")
        if not topic:
            raise ValueError(f"the {SOURCE_NAME} source needs option 'subscribe' (a topic)")
        self.topic: str = topic
        self.conf = _client_conf(options)
        max_offsets = options.get("maxOffsetsPerPartition")
        self.max_offsets = int(max_offsets) if max_offsets else None
        self.batch_size = int(options.get("batchSize") or 20000)
        self.stall_timeout = float(options.get("stallTimeoutSeconds") or 60)

    def partitions(self) -> list[KafkaOffsetRange]:  # type: ignore[override]
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(self.conf)
        try:
            meta = consumer.list_topics(self.topic, timeout=self.stall_timeout)
            info = meta.topics.get(self.topic)
            if info is None or info.error is not None or not info.partitions:
                raise ValueError(f"topic {self.topic!r} does not exist")
            if not self.max_offsets:
                # One open range per partition from offset 0, which is either the first
                # record or out of range and reset to the earliest: no offset queries.
                return plan_ranges(self.topic, dict.fromkeys(info.partitions, (0, 0)), None)
            watermarks: dict[int, tuple[int, int]] = {
                p: consumer.get_watermark_offsets(
                    TopicPartition(self.topic, p), timeout=self.stall_timeout, cached=False
                )
                for p in info.partitions
            }
        finally:
            consumer.close()
        return plan_ranges(self.topic, watermarks, self.max_offsets)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

        assert isinstance(partition, KafkaOffsetRange)
        consumer = Consumer(self.conf)
        try:
            consumer.assign([TopicPartition(partition.topic, partition.partition, partition.start)])
            builder = _BatchBuilder(partition.topic, partition.partition)
            last_progress = time.monotonic()
            done = False
            while not done:
                # A short wait: consume() waits this long whenever a batch is not full.
                messages = consumer.consume(self.batch_size, 0.1)
                if not messages and time.monotonic() - last_progress > self.stall_timeout:
                    raise TimeoutError(
                        f"{partition.topic}[{partition.partition}] sent nothing, not even its "
                        f"end, for {self.stall_timeout:.0f}s"
                    )
                for msg in messages:
                    last_progress = time.monotonic()
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            done = True
                            break
                        raise KafkaException(err)
                    offset = msg.offset() or 0
                    if partition.end is not None and offset >= partition.end:
                        done = True
                        break
                    builder.add(msg)
                if len(builder) >= self.batch_size:
                    yield builder.take()
            if len(builder):
                yield builder.take()
        finally:
            consumer.close()


class KafkaDataSource(DataSource):
    """``spark.read.format("kafka_timers_kafka").option("subscribe", topic)``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return RAW_SCHEMA

    def reader(self, schema: StructType) -> KafkaTopicReader:
        return KafkaTopicReader(self.options)
