"""The Spark plan of the audit: raw topics in, one verdict row per timer out.

1. request records are parsed by the worker's own code in an Arrow UDF
   (:mod:`spark_audit.parsing`), and so are fired-topic records
   (:mod:`spark_audit.fired_parsing`): a record either becomes a row or is set aside
   with its reason, never an exception;
2. both become *events* keyed by (request partition, timer id), the unit of the
   worker's wheel: a fired record names the request partition it fired from, and a
   request counts on the partition whose worker applied it (:func:`routed_requests`:
   a forwarded original on its copy's partition, a replayed copy nowhere);
3. events are grouped per timer into one sorted array (a single shuffle) and judged,
   a batch of timers per Arrow UDF call (:mod:`spark_audit.judging`).

No row-at-a-time Python UDF anywhere: those cost a Python call and a pickle per row.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from app.core.fired import FIRED_RECORD_DDL
from app.core.policy import RequestPolicy
from kafka_timers_client.extra_fires import BACKFILL, TRIGGER
from spark_audit.extras import APPLIED_OUTCOMES
from spark_audit.fired_parsing import PARSED_FIRED_DDL, parse_fired_arrays
from spark_audit.judging import (
    CANCEL_REPORT,
    DROPPED_ANSWER,
    SOURCE_FIRE,
    SOURCE_REPORT,
    SOURCE_REQUEST,
    SOURCE_SKIP,
    VERDICT_DDL,
    judge_arrays,
)
from spark_audit.parsing import PARSED_REQUEST_DDL, RECONCILED_KINDS, parse_request_arrays
from spark_audit.verdicts import Rules

__all__ = [
    "FIRED_JSON_DDL",
    "judge_timers",
    "parse_fired",
    "parse_requests",
    "routed_requests",
    "routing_counts",
    "timer_events",
]

#: The JSON the worker writes on the fired topic (:class:`app.core.fired.FiredRecord`).
FIRED_JSON_DDL = FIRED_RECORD_DDL


def _arrow_udf() -> Any:
    from spark_audit.errors import AuditSetupError

    try:
        from pyspark.sql.functions import arrow_udf  # type: ignore[attr-defined]
    except ImportError as exc:  # added in PySpark 4.1
        raise AuditSetupError("the audit needs PySpark 4.1 or newer (arrow_udf)") from exc
    return arrow_udf


def parse_requests(
    raw: DataFrame, policy: RequestPolicy, partitions: int | None = None
) -> DataFrame:
    """topic, partition, offset, ts_ms and the parsed request (``reject`` set if refused);
    ``partitions``: the request topic's partition count, by which workers route."""

    def parse(
        topic: pa.Array,
        partition: pa.Array,
        offset: pa.Array,
        timestamp_ms: pa.Array,
        key: pa.Array,
        value: pa.Array,
        headers: pa.Array,
        defect: pa.Array,
    ) -> pa.Array:
        return parse_request_arrays(
            topic, partition, offset, timestamp_ms, key, value, headers, policy, defect, partitions
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
        F.col("defect"),
    )
    return raw.select(
        F.col("topic"), F.col("partition"), F.col("offset"), ts_ms.alias("ts_ms"), parsed.alias("r")
    ).select("topic", "partition", "offset", "ts_ms", "r.*")


def parse_fired(raw: DataFrame) -> DataFrame:
    """The fired topic's records, by the worker's definition, checked field by field.

    ``rec_topic``, ``rec_partition``, ``rec_offset``: where the record is (``partition`` is
    the *request* partition it names); ``set_aside`` and ``detail`` say why a record the
    audit cannot use was set aside (then the other fields are null); ``readable`` is the
    opposite of ``set_aside``. A header defect does not matter here: headers are unused.
    """

    def parse(value: pa.Array) -> pa.Array:  # arrow_udf reads the kind from these hints
        return parse_fired_arrays(value)

    udf = _arrow_udf()(parse, PARSED_FIRED_DDL)
    return raw.select(
        F.col("topic").alias("rec_topic"),
        F.col("partition").alias("rec_partition"),
        F.col("offset").alias("rec_offset"),
        F.unix_millis(F.col("timestamp")).alias("ts_ms"),
        udf(F.col("value")).alias("f"),
    ).select(
        "rec_topic",
        "rec_partition",
        "rec_offset",
        "ts_ms",
        "f.*",
        F.col("f.set_aside").isNull().alias("readable"),
    )


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
    spread: Column | None = None,
    request_offset: Column | None = None,
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
        (null if spread is None else spread).cast("bigint").alias("spread"),
        (null if request_offset is None else request_offset).cast("bigint").alias("request_offset"),
    )


def _routing(requests: DataFrame) -> DataFrame:
    """Every request with ``here``: whether it is reconciled on the partition it was read
    on (:func:`spark_audit.routing.reconciled_where_landed`), and ``route``: ``owner``
    (an original on its owner), ``forwarded`` (an original a copy of which exists),
    ``stayed`` (an original off its owner without a copy), ``copy`` or ``replayed``.

    A copy is a replay when its origin offset is at or below the highest one of the
    copies from the same origin partition before it on its partition (a window in
    offset order, refused copies included: the worker checks before it parses)."""
    from pyspark.sql import Window

    before = (
        Window.partitionBy("partition", "origin_partition")
        .orderBy("offset")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    copies = requests.where(F.col("origin_partition").isNotNull())
    marked = copies.withColumn(
        "route",
        F.when(
            F.col("origin_offset") <= F.max("origin_offset").over(before), F.lit("replayed")
        ).otherwise(F.lit("copy")),
    )
    named = copies.select(
        F.col("origin_partition").alias("partition"),
        F.col("origin_offset").alias("offset"),
        F.lit(True).alias("copied"),
    ).distinct()
    originals = requests.where(F.col("origin_partition").isNull())
    off_owner = F.col("owner").isNotNull() & (F.col("owner") != F.col("partition"))
    away = (
        originals.where(off_owner)
        .join(named, ["partition", "offset"], "left")
        .withColumn("route", F.when(F.col("copied"), F.lit("forwarded")).otherwise(F.lit("stayed")))
        .drop("copied")
    )
    home = originals.where(~off_owner | F.col("owner").isNull()).withColumn("route", F.lit("owner"))
    return (
        marked.unionByName(away)
        .unionByName(home)
        .withColumn("here", ~F.col("route").isin("forwarded", "replayed"))
    )


def routed_requests(requests: DataFrame) -> DataFrame:
    """The accepted requests the audit reconciles, each on the partition whose worker
    applied it (:mod:`spark_audit.routing`)."""
    accepted = requests.where(F.col("reject").isNull() & F.col("kind").isin(*RECONCILED_KINDS))
    return (
        _routing(requests)
        .where(F.col("here") & F.col("reject").isNull() & F.col("kind").isin(*RECONCILED_KINDS))
        .select(*accepted.columns)
    )


def routing_counts(requests: DataFrame) -> dict[str, int]:
    """Accepted requests by ``route`` (see :func:`_routing`): one small job."""
    accepted = F.col("reject").isNull() & F.col("kind").isin(*RECONCILED_KINDS)
    rows = _routing(requests).where(accepted).groupBy("route").count().collect()
    counts = dict.fromkeys(("owner", "forwarded", "copy", "replayed", "stayed"), 0)
    counts.update({row["route"]: int(row["count"]) for row in rows})
    return counts


def timer_events(requests: DataFrame, fired: DataFrame) -> DataFrame:
    """(partition, id, ev): every accepted request (on the partition whose worker applied
    it: :func:`routed_requests`) and readable fired record as an event."""
    null = F.lit(None)
    request_events = routed_requests(requests).select(
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
            spread=F.col("spread"),
        ).alias("ev"),
    )
    readable = fired.where(F.col("readable"))
    # A series' extra fire (a trigger's or a backfill's, under a derived id) is judged
    # with its series: keyed by the series id, with the number its id names.
    fire_events = readable.where(F.col("event") == "fired").select(
        "partition",
        F.coalesce(F.col("extra_of"), F.col("id")).alias("id"),
        _event(
            SOURCE_FIRE,
            F.col("fired_at_ms"),
            F.col("fired_at_ms"),
            F.coalesce(F.col("extra"), F.lit("fired")),
            F.col("token"),
            F.col("due"),
            null,
            F.col("topic"),
            null,
            F.col("worker"),
            None,
            F.coalesce(F.col("extra_n"), F.col("seq")),
            F.col("coalesced"),
            request_offset=F.col("request_offset"),
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
    # The answers to cancels, to the triggers and backfills the worker applied (when
    # what they fire was stored) and to the schedules it dropped (occurrence: the
    # request's offset).
    answered = (
        (F.col("event") == "cancel")
        | (F.col("event").isin(TRIGGER, BACKFILL) & F.col("outcome").isin(*APPLIED_OUTCOMES))
        | (F.col("event") == DROPPED_ANSWER)
    )
    report_events = readable.where(answered).select(
        "partition",
        "id",
        _event(
            SOURCE_REPORT,
            F.col("at_ms"),
            F.col("at_ms"),
            F.when(F.col("event") == "cancel", F.lit(CANCEL_REPORT)).otherwise(F.col("event")),
            F.col("token"),
            null,
            null,
            null,
            F.col("outcome"),
            F.col("worker"),
            None,
            F.col("request_offset"),
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
