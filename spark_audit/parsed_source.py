"""The Kafka source with the audit's parsing done where the records are read.

With :class:`spark_audit.kafka_source.KafkaDataSource` and a parsing Arrow UDF after it,
every record crosses from Python to the JVM and back to another Python worker before it
is parsed: measured at 5M timers, reading and parsing both topics took 231 s on two
cores where one process took 219 s on one. This source parses each Arrow batch in the
same Python worker that read it (the same functions, :func:`parse_request_arrays` and
:func:`parse_fired_arrays`), so a record crosses once, already parsed. Its rows have the
columns :func:`spark_audit.pipeline.parse_requests` / ``parse_fired`` give.

Options: those of the Kafka source, plus ``parse`` (``requests`` or ``fired``) and, for
requests, ``policy``: the worker's :class:`app.core.policy.RequestPolicy`, pickled and
base64-encoded by :func:`policy_option` (options are strings), and ``partitions``: the
request topic's partition count, by which workers route (:mod:`spark_audit.routing`).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from app.core.policy import RequestPolicy
from spark_audit.fired_parsing import PARSED_FIRED_TYPE, parse_fired_arrays
from spark_audit.kafka_source import KafkaDataSource, KafkaTopicReader
from spark_audit.parsing import PARSED_REQUEST_TYPE, parse_request_arrays

__all__ = [
    "PARSED_FIRED_SCHEMA",
    "PARSED_REQUESTS_SCHEMA",
    "PARSED_SOURCE_NAME",
    "ParsedKafkaDataSource",
    "policy_option",
]

#: Name to use with ``spark.read.format(...)``.
PARSED_SOURCE_NAME = "kafka_timers_parsed"

_DDL = {pa.string(): "string", pa.int32(): "int", pa.int64(): "bigint", pa.bool_(): "boolean"}


def _ddl(fields: list[tuple[str, pa.DataType]]) -> str:
    return ", ".join(f"{name} {_DDL[kind]}" for name, kind in fields)


_REQUEST_COORDINATES = [
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("ts_ms", pa.int64()),
]
_FIRED_COORDINATES = [
    ("rec_topic", pa.string()),
    ("rec_partition", pa.int32()),
    ("rec_offset", pa.int64()),
    ("ts_ms", pa.int64()),
]
_REQUEST_FIELDS = _REQUEST_COORDINATES + [(f.name, f.type) for f in PARSED_REQUEST_TYPE]
_FIRED_FIELDS = _FIRED_COORDINATES + [(f.name, f.type) for f in PARSED_FIRED_TYPE]
#: Rows of ``parse=requests``: coordinates, then :data:`PARSED_REQUEST_TYPE`'s fields.
PARSED_REQUESTS_SCHEMA = _ddl(_REQUEST_FIELDS)
#: Rows of ``parse=fired``: coordinates, then :data:`PARSED_FIRED_TYPE`'s fields.
PARSED_FIRED_SCHEMA = _ddl(_FIRED_FIELDS)


def policy_option(policy: RequestPolicy) -> str:
    """``policy`` as the ``policy`` option's string (cloudpickle, as Spark ships UDFs)."""
    from pyspark import cloudpickle

    return base64.b64encode(cloudpickle.dumps(policy)).decode()  # type: ignore[no-untyped-call]


def _policy(text: str) -> RequestPolicy:
    import pickle

    policy = pickle.loads(base64.b64decode(text))
    assert isinstance(policy, RequestPolicy)
    return policy


class ParsedTopicReader(KafkaTopicReader):
    """Reads like :class:`KafkaTopicReader`, and parses each batch before yielding it."""

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(options)
        self.parse = options.get("parse") or ""
        if self.parse not in ("requests", "fired"):
            raise ValueError(f"the {PARSED_SOURCE_NAME} source needs parse=requests or fired")
        self.policy_text = options.get("policy") or ""
        if self.parse == "requests" and not self.policy_text:
            raise ValueError(f"the {PARSED_SOURCE_NAME} source needs the policy to parse requests")
        self.routed_by = int(options.get("partitions") or 0) or None

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        policy = _policy(self.policy_text) if self.parse == "requests" else None
        for raw in super().read(partition):
            yield self._parsed(raw, policy)

    def _parsed(self, raw: pa.RecordBatch, policy: RequestPolicy | None) -> pa.RecordBatch:
        ts_ms = pa.array(
            [
                None if t is None else t // 1000
                for t in raw.column("timestamp").cast(pa.int64()).to_pylist()
            ],
            pa.int64(),
        )
        coordinates = [raw.column("topic"), raw.column("partition"), raw.column("offset"), ts_ms]
        if policy is not None:
            parsed = parse_request_arrays(
                raw.column("topic"),
                raw.column("partition"),
                raw.column("offset"),
                ts_ms,
                raw.column("key"),
                raw.column("value"),
                raw.column("headers"),
                policy,
                raw.column("defect"),
                self.routed_by,
            )
            fields = _REQUEST_FIELDS
        else:
            parsed = parse_fired_arrays(raw.column("value"))
            fields = _FIRED_FIELDS
        return pa.RecordBatch.from_arrays(
            [*coordinates, *parsed.flatten()], schema=pa.schema(fields)
        )


class ParsedKafkaDataSource(KafkaDataSource):
    """``spark.read.format("kafka_timers_parsed").option("parse", "fired")...``."""

    @classmethod
    def name(cls) -> str:
        return PARSED_SOURCE_NAME

    def schema(self) -> str:
        return (
            PARSED_REQUESTS_SCHEMA
            if self.options.get("parse") == "requests"
            else PARSED_FIRED_SCHEMA
        )

    def reader(self, schema: StructType) -> ParsedTopicReader:
        return ParsedTopicReader(self.options)
