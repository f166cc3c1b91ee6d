"""Reading a topic into a DataFrame: the Python source here, Spark's ``kafka`` on a cluster.

Both give the same columns (:data:`spark_audit.kafka_source.RAW_SCHEMA`). The Python
source is the default because it needs nothing but the packages already installed; the
JVM ``kafka`` source is faster where the spark-sql-kafka jar is on the classpath
(``spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>``).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

from app.core.policy import RequestPolicy
from app.kafka.config import confluent_common
from app.settings import Settings
from spark_audit.errors import AuditSetupError
from spark_audit.kafka_source import SOURCE_NAME, KafkaDataSource

__all__ = [
    "SourceKind",
    "jvm_kafka_options",
    "python_source_options",
    "read_parsed_topic",
    "read_topic",
]

_RAW_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")


class SourceKind(str, Enum):
    """Which Spark source reads Kafka."""

    #: :class:`spark_audit.kafka_source.KafkaDataSource`: confluent-kafka in Python workers.
    PYTHON = "python"
    #: Spark's own ``kafka`` source (needs the spark-sql-kafka jar).
    KAFKA = "kafka"


def python_source_options(settings: Settings) -> dict[str, str]:
    """``kafka.*`` options for the Python source: the service's own librdkafka settings."""
    return {f"kafka.{k}": str(v) for k, v in confluent_common(settings).items()}


def _jaas(mechanism: str, username: str, password: str) -> str:
    module = (
        "org.apache.kafka.common.security.scram.ScramLoginModule"
        if mechanism.upper().startswith("SCRAM")
        else "org.apache.kafka.common.security.plain.PlainLoginModule"
    )
    escaped = [v.replace("\\", "\\\\").replace('"', '\\"') for v in (username, password)]
    return f'{module} required username="{escaped[0]}" password="{escaped[1]}";'


def jvm_kafka_options(settings: Settings) -> dict[str, str]:
    """``kafka.*`` options for Spark's ``kafka`` source: the same address and security.

    The Java client names things differently from librdkafka: SASL credentials go in a
    JAAS line and a CA file is a PEM trust store. A client certificate (mutual TLS) has
    no one-to-one translation; pass ``--kafka-option kafka.ssl.keystore.*`` for it.
    """
    sec = settings.security
    options = {
        "kafka.bootstrap.servers": settings.bootstrap_servers,
        "kafka.security.protocol": sec.protocol,
    }
    if sec.protocol.startswith("SASL"):
        mechanism = sec.sasl_mechanism or "PLAIN"
        options["kafka.sasl.mechanism"] = mechanism
        if sec.sasl_username is not None:
            options["kafka.sasl.jaas.config"] = _jaas(
                mechanism, sec.sasl_username, sec.sasl_password or ""
            )
    if sec.ssl_cafile:
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.location"] = sec.ssl_cafile
    return options


def read_topic(
    spark: Any,
    settings: Settings,
    topic: str,
    *,
    source: SourceKind = SourceKind.PYTHON,
    max_offsets_per_partition: int | None = None,
    extra_options: Mapping[str, str] | None = None,
) -> Any:
    """Every record of ``topic`` up to its end now, as a DataFrame of the raw columns."""
    extra = dict(extra_options or {})
    if source is SourceKind.PYTHON:
        spark.dataSource.register(KafkaDataSource)
        reader = spark.read.format(SOURCE_NAME).options(**python_source_options(settings))
        if max_offsets_per_partition:
            reader = reader.option("maxOffsetsPerPartition", str(max_offsets_per_partition))
        return reader.options(**extra).option("subscribe", topic).load()
    from pyspark.errors import AnalysisException

    options = {
        **jvm_kafka_options(settings),
        "startingOffsets": "earliest",
        "endingOffsets": "latest",
        "includeHeaders": "true",
    }
    # Spark's source splits by its own ``minPartitions`` option (pass it with --kafka-option).
    try:
        frame = spark.read.format("kafka").options(**options, **extra).option("subscribe", topic)
        from pyspark.sql import functions as F

        # Java decodes header names itself (a bad byte becomes U+FFFD): no defects here.
        return frame.load().select(*_RAW_COLUMNS, F.lit(None).cast("string").alias("defect"))
    except AnalysisException as exc:
        if "kafka" in str(exc).lower() and "find" in str(exc).lower():
            raise AuditSetupError(
                "Spark's kafka source is not on the classpath (add the spark-sql-kafka jar, "
                "e.g. spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:"
                "<spark version>), or use --source python"
            ) from exc
        raise


def read_parsed_topic(
    spark: Any,
    settings: Settings,
    topic: str,
    parse: str,
    *,
    policy: RequestPolicy | None = None,
    max_offsets_per_partition: int | None = None,
    extra_options: Mapping[str, str] | None = None,
    partitions: int | None = None,
) -> Any:
    """``topic`` read by the Python source and parsed where it is read (``parse``:
    ``requests`` with the worker's ``policy``, or ``fired``), in one Python hop: the
    columns of :func:`spark_audit.pipeline.parse_requests` / ``parse_fired``.
    ``partitions``: the request topic's partition count, by which workers route."""
    from pyspark.sql import functions as F

    from spark_audit.parsed_source import (
        PARSED_SOURCE_NAME,
        ParsedKafkaDataSource,
        policy_option,
    )

    spark.dataSource.register(ParsedKafkaDataSource)
    reader = spark.read.format(PARSED_SOURCE_NAME).options(**python_source_options(settings))
    if max_offsets_per_partition:
        reader = reader.option("maxOffsetsPerPartition", str(max_offsets_per_partition))
    reader = reader.options(**dict(extra_options or {})).option("parse", parse)
    if policy is not None:
        reader = reader.option("policy", policy_option(policy))
    if partitions:
        reader = reader.option("partitions", str(partitions))
    frame = reader.option("subscribe", topic).load()
    if parse == "fired":
        frame = frame.withColumn("readable", F.col("set_aside").isNull())
    return frame
