"""The Spark plan of the audit: raw topics in, one verdict row per timer out.

1. request records are parsed by the worker's own code in an Arrow UDF
   (:mod:`spark_audit.parsing`); fired-topic records are JSON, parsed in the JVM;
2. both become *events* keyed by (request partition, timer id), the unit of the
   worker's wheel: a fired record names the request partition it fired from;
3. events are grouped per timer into one sorted array (a single shuffle) and judged,
   a batch of timers per Arrow UDF call (:mod:`spark_audit.judging`).

No row-at-a-time Python UDF anywhere: those cost a Python call and a pickle per row.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from app.core.fired import FIRED_RECORD_DDL, TOKEN_DIGEST_PREFIX
from app.core.policy import RequestPolicy
from spark_audit.judging import (
    SOURCE_FIRE,
    SOURCE_REPORT,
    SOURCE_REQUEST,
    SOURCE_SKIP,
    VERDICT_DDL,
    judge_arrays,
)
from spark_audit.parsing import PARSED_REQUEST_DDL, parse_request_arrays
from spark_audit.reconcile import Rules

__all__ = ["FIRED_JSON_DDL", "judge_timers", "parse_fired", "parse_requests", "timer_events"]

#: The JSON the worker writes on the fired topic (:class:`app.core.fired.FiredRecord`).
FIRED_JSON_DDL = FIRED_RECORD_DDL


def _arrow_udf() -> Any:
    from spark_audit.errors import AuditSetupError

    try:
        from pyspark.sql.functions import arrow_udf  # type: ignore[attr-defined]
    except ImportError as exc:  # added in PySpark 4.1
        raise AuditSetupError("the audit needs PySpark 4.1 or newer (arrow_udf)") from exc
    return arrow_udf


def parse_requests(raw: DataFrame, policy: RequestPolicy) -> DataFrame:
    """partition, offset, ts_ms and the parsed request (``reject`` set if refused)."""

    def parse(
        topic: pa.Array,
        partition: pa.Array,
        offset: pa.Array,
        timestamp_ms: pa.Array,
        key: pa.Array,
        value: pa.Array,
        headers: pa.Array,
    ) -> pa.Array:
        return parse_request_arrays(
            topic, partition, offset, timestamp_ms, key, value, headers, policy
        )

    udf = _arrow_udf()(parse, PARSED_REQUEST_DDL)
    ts_ms = F.unix_millis(F.col("timestamp"))
    parsed = udf(
        F.col("topic"),
        F.col("partition"),
        F.col("offset"),
        ts_ms,
        F.col("key"),
        F.col("value"),
        F.col("headers"),
    )
    return raw.select(
        F.col("partition"), F.col("offset"), ts_ms.alias("ts_ms"), parsed.alias("r")
    ).select("partition", "offset", "ts_ms", "r.*")


def parse_fired(raw: DataFrame) -> DataFrame:
    """The fired topic's JSON records, with ``readable`` false for anything malformed."""
    doc = F.from_json(F.col("value").cast("string"), FIRED_JSON_DDL)
    parsed = raw.select(doc.alias("j")).select("j.*")
    # Records written before tokens were digested carry the token itself: digest it the
    # way app.core.fired.token_digest does, so versions compare digest to digest.
    token = F.col("token")
    digested = token.startswith(TOKEN_DIGEST_PREFIX) | (token == "")
    parsed = parsed.withColumn(
        "token",
        F.when(digested | token.isNull(), token).otherwise(
            F.concat(F.lit(TOKEN_DIGEST_PREFIX), F.substring(F.sha2(token, 256), 1, 24))
        ),
    )
    common = F.col("id").isNotNull() & F.col("partition").isNotNull() & F.col("token").isNotNull()
    fired_ok = (
        (F.col("event") == "fired") & F.col("due").isNotNull() & F.col("fired_at_ms").isNotNull()
    )
    cancel_ok = (
        (F.col("event") == "cancel") & F.col("outcome").isNotNull() & F.col("at_ms").isNotNull()
    )
    skipped_ok = (
        (F.col("event") == "skipped")
        & F.col("due").isNotNull()
        & F.col("at_ms").isNotNull()
        & F.col("reason").isNotNull()
    )
    readable = common & (fired_ok | cancel_ok | skipped_ok)
    return parsed.withColumn("readable", F.coalesce(readable, F.lit(False)))


def _event(
    src: int,
    seq: Column,
    ts_ms: Column,
    kind: Column,
    token: Column,
    due: Column,
    check_token: Column,
    topic: Column,
    outcome: Column,
    worker: Column,
    series: Column | None = None,
    occurrence: Column | None = None,
    coalesced: Column | None = None,
) -> Column:
    null = F.lit(None)
    return F.struct(
        F.lit(src).alias("src"),
        seq.cast("bigint").alias("seq"),
        ts_ms.cast("bigint").alias("ts_ms"),
        kind.cast("string").alias("kind"),
        token.cast("string").alias("token"),
        due.cast("bigint").alias("due"),
        check_token.cast("boolean").alias("check_token"),
        topic.cast("string").alias("topic"),
        outcome.cast("string").alias("outcome"),
        worker.cast("string").alias("worker"),
        (null if series is None else series).cast("string").alias("series"),
        (null if occurrence is None else occurrence).cast("bigint").alias("occurrence"),
        (null if coalesced is None else coalesced).cast("bigint").alias("coalesced"),
    )


def timer_events(requests: DataFrame, fired: DataFrame) -> DataFrame:
    """(partition, id, ev): every accepted request and readable fired record as an event."""
    null = F.lit(None)
    accepted = requests.where(F.col("reject").isNull())
    request_events = accepted.select(
        "partition",
        "id",
        _event(
            SOURCE_REQUEST,
            F.col("offset"),
            F.col("ts_ms"),
            F.col("kind"),
            F.col("token"),
            F.col("due"),
            F.col("check_token"),
            F.col("callback_topic"),
            null,
            null,
            F.col("series"),
        ).alias("ev"),
    )
    readable = fired.where(F.col("readable"))
    fire_events = readable.where(F.col("event") == "fired").select(
        "partition",
        "id",
        _event(
            SOURCE_FIRE,
            F.col("fired_at_ms"),
            F.col("fired_at_ms"),
            F.lit("fired"),
            F.col("token"),
            F.col("due"),
            null,
            F.col("topic"),
            null,
            F.col("worker"),
            None,
            F.col("seq"),
            F.col("coalesced"),
        ).alias("ev"),
    )
    skip_events = readable.where(F.col("event") == "skipped").select(
        "partition",
        "id",
        _event(
            SOURCE_SKIP,
            F.col("at_ms"),
            F.col("at_ms"),
            F.lit("skipped"),
            F.col("token"),
            F.col("due"),
            null,
            F.col("topic"),
            F.col("reason"),
            F.col("worker"),
            None,
            F.col("seq"),
            F.col("coalesced"),
        ).alias("ev"),
    )
    report_events = readable.where(F.col("event") == "cancel").select(
        "partition",
        "id",
        _event(
            SOURCE_REPORT,
            F.col("at_ms"),
            F.col("at_ms"),
            F.lit("cancel_report"),
            F.col("token"),
            null,
            null,
            null,
            F.col("outcome"),
            F.col("worker"),
        ).alias("ev"),
    )
    return (
        request_events.unionByName(fire_events).unionByName(report_events).unionByName(skip_events)
    )


def judge_timers(
    events: DataFrame, rules: Rules, incomplete: frozenset[int] = frozenset()
) -> DataFrame:
    """One row per timer: partition, id and the verdict's columns.

    ``incomplete``: request partitions whose oldest records retention has deleted.
    """

    def judge(events: pa.Array, partitions: pa.Array) -> pa.Array:
        return judge_arrays(events, rules, partitions, incomplete)

    udf = _arrow_udf()(judge, VERDICT_DDL)
    grouped = events.groupBy("partition", "id").agg(
        F.sort_array(F.collect_list("ev")).alias("events")
    )
    return grouped.select(
        "partition", "id", udf(F.col("events"), F.col("partition")).alias("v")
    ).select("partition", "id", "v.*")
