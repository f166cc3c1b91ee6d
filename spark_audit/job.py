"""One audit run: read both topics once, judge every timer, aggregate, write the results.

Each topic is read exactly once: the parsed records are written to Parquet and read back
before anything counts them, so every figure in the report comes from the same snapshot
of the topics, and no step holds a whole table in memory (Spark streams and spills; the
driver only ever receives aggregates and the first N rows of a list).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.kafka.config import confluent_common
from app.kafka.topics import wait_for_broker
from app.settings import Settings
from spark_audit import stats
from spark_audit.errors import AuditError, AuditOutOfMemory, failure_line, is_out_of_memory
from spark_audit.options import AuditOptions
from spark_audit.parsing import policy_for
from spark_audit.pipeline import (
    judge_timers,
    parse_fired,
    parse_requests,
    routing_counts,
    timer_events,
)
from spark_audit.reading import SourceKind, read_parsed_topic, read_topic
from spark_audit.results import write_summary
from spark_audit.summary import AuditSummary, ReadCounts
from spark_audit.verdicts import Rules

__all__ = [
    "audit_settings",
    "check_topics",
    "partition_count",
    "partitions_with_deleted_records",
    "read_counts",
    "run_audit",
    "set_aside_records",
]

log = logging.getLogger(__name__)


def audit_settings(settings: Settings, options: AuditOptions) -> Settings:
    """``settings`` with the flags applied: they name the broker and topics to audit.

    The topics go into the settings (not only the reads) because the request policy,
    like the worker's, refuses callbacks to the service's own topics.
    """
    topics = replace(
        settings.topics,
        requests=options.requests_topic or settings.topics.requests,
        fired=options.fired_topic or settings.topics.fired,
    )
    return replace(settings.with_overrides(bootstrap_servers=options.bootstrap), topics=topics)


def check_topics(settings: Settings, topics: tuple[str, ...], timeout: float = 15.0) -> None:
    """Fail with one clear line, before Spark starts, if the broker or a topic is missing.

    Lists all topics rather than asking for each by name: a metadata request naming a
    topic can auto-create it, and an audit of an empty topic would pass.
    """
    from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

    wait_for_broker(settings, timeout)
    existing = AdminClient(confluent_common(settings)).list_topics(timeout=timeout).topics
    for topic in topics:
        if topic not in existing:
            raise AuditError(
                f"topic {topic!r} does not exist at {settings.bootstrap_servers} "
                "(check KAFKA_TIMERS_REQUEST_TOPIC / KAFKA_TIMERS_FIRED_TOPIC or the flags)"
            )


def partition_count(settings: Settings, topic: str, timeout: float = 15.0) -> int | None:
    """How many partitions ``topic`` has: the count by which workers route its requests
    (``None`` if the broker does not say)."""
    from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

    info = AdminClient(confluent_common(settings)).list_topics(timeout=timeout).topics.get(topic)
    return len(info.partitions) if info is not None and info.partitions else None


def partitions_with_deleted_records(
    settings: Settings, topic: str, timeout: float = 15.0
) -> frozenset[int]:
    """Partitions of ``topic`` whose first records are gone (low watermark above 0).

    Retention deletes a topic's oldest segments; a fire whose request is not found on
    such a partition may be a fire of one of those requests, not an unrequested one.
    """
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

    metadata = AdminClient(confluent_common(settings)).list_topics(timeout=timeout)
    info = metadata.topics.get(topic)
    if info is None:
        return frozenset()
    conf = {**confluent_common(settings), "group.id": "kafka-timers-audit-watermarks"}
    consumer = Consumer(conf)
    try:
        return frozenset(
            p
            for p in info.partitions
            if consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[0] > 0
        )
    finally:
        consumer.close()


def run_audit(
    spark: Any,
    settings: Settings,
    options: AuditOptions,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> AuditSummary:
    """Audit the request and fired topics of ``settings``; write the results.

    Raises :class:`AuditError` (:class:`AuditOutOfMemory` when memory ran out) when Spark
    fails: the caller reports it as one line and exit status 2, never as violations.
    """
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    try:
        return _run(spark, settings, options, clock)
    except (PySparkException, Py4JError) as exc:
        log.debug("the audit's Spark job failed", exc_info=True)
        if is_out_of_memory(exc):
            raise AuditOutOfMemory(failure_line(exc)) from exc
        raise AuditError(failure_line(exc)) from exc


def _run(
    spark: Any,
    settings: Settings,
    options: AuditOptions,
    clock: Callable[[], float],
) -> AuditSummary:
    started = clock()
    requests_topic, fired_topic = settings.topics.requests, settings.topics.fired
    base = (options.tables_uri or str(Path(options.output_dir).resolve())).rstrip("/")

    def read(topic: str) -> Any:
        return read_topic(
            spark,
            settings,
            topic,
            source=options.source,
            max_offsets_per_partition=options.max_offsets_per_partition,
            extra_options=options.kafka_options,
        )

    def stage(frame: Any, name: str) -> Any:
        # Written once and read back instead of cached: every later job reads the same
        # snapshot of the topics from disk, and nothing has to fit in memory (a cache of
        # millions of rows is what ran the driver's heap out at 5M timers).
        frame.write.mode("overwrite").parquet(f"{base}/{name}")
        return spark.read.parquet(f"{base}/{name}")

    phases: dict[str, float] = {}
    mark = started

    def phase(name: str) -> None:
        nonlocal mark
        now = clock()
        phases[name] = round(now - mark, 2)
        mark = now

    policy = policy_for(settings)
    # Workers route by the request topic's partition count (spark_audit.routing).
    partitions = partition_count(settings, requests_topic)
    if options.source is SourceKind.PYTHON:
        # Parsed in the Python worker that reads the records: one hop to the JVM, not three.
        def parsed(topic: str, parse: str) -> Any:
            return read_parsed_topic(
                spark,
                settings,
                topic,
                parse,
                policy=policy if parse == "requests" else None,
                max_offsets_per_partition=options.max_offsets_per_partition,
                extra_options=options.kafka_options,
                partitions=partitions if parse == "requests" else None,
            )

        requests_frame, fired_frame = (
            parsed(requests_topic, "requests"),
            parsed(fired_topic, "fired"),
        )
    else:
        requests_frame = parse_requests(read(requests_topic), policy, partitions)
        fired_frame = parse_fired(read(fired_topic))
    requests = stage(requests_frame, "parsed_requests")
    phase("read_requests")
    fired = stage(fired_frame, "parsed_fired")
    phase("read_fired")

    aside = stage(set_aside_records(requests, fired), "set_aside")
    reads = read_counts(requests, fired)
    aside_sample = stats.first_of_each(
        aside, ["disposition", "topic", "reason"], ["partition", "offset"], options.max_listed
    )
    phase("set_aside")

    rules = Rules(as_of_ms=options.as_of_ms, grace_ms=options.grace_ms, since_ms=options.since_ms)
    incomplete = partitions_with_deleted_records(settings, requests_topic)
    if incomplete:
        log.info(
            "request partitions %s lost records to retention: fires without a request "
            "there are request_gone, not unrequested",
            sorted(incomplete),
        )
    timers = stage(judge_timers(timer_events(requests, fired), rules, incomplete), "timers")
    phase("judge")
    routing = routing_counts(requests)

    violations = stage(stats.violations(timers), "violations")
    counted = stats.counts(timers, violations)
    statuses, violation_counts = counted.statuses, counted.kinds
    fire_stats = stats.fire_stats(stats.fires(timers))
    occurrences, extra_fires, reached_late, refused = stats.occurrence_counts(timers)
    routing["reached_late"] = reached_late
    summary = AuditSummary(
        as_of_ms=options.as_of_ms,
        grace_ms=options.grace_ms,
        since_ms=options.since_ms,
        requests_topic=requests_topic,
        fired_topic=fired_topic,
        source=options.source.value,
        allow_duplicates=options.allow_duplicates,
        reads=reads,
        timers=sum(statuses.values()),
        statuses=statuses,
        violation_counts=violation_counts,
        violations=stats.first_of_each(violations, ["kind"], ["id", "at_ms"], options.max_listed),
        violations_limit=options.max_listed,
        lateness_overall=fire_stats.overall,
        lateness_by_topic=fire_stats.by_topic,
        lateness_by_hour=fire_stats.by_hour,
        histogram=fire_stats.histogram,
        fires_per_minute=fire_stats.per_minute,
        output_dir=options.output_dir,
        occurrences=occurrences,
        extra_fires=extra_fires,
        routing=routing,
        refused=refused,
        set_aside=aside_sample,
        by_topic=counted.by_topic,
        max_set_aside=options.max_set_aside,
    )
    phase("aggregate")
    summary.extra["phase_seconds"] = phases
    summary.elapsed_s = clock() - started
    write_summary(options.output_dir, summary)
    return summary


def set_aside_records(requests: Any, fired: Any) -> Any:
    """Every record that became no evidence, with its coordinates and why.

    ``disposition`` is ``refused`` for a request the worker's rules refuse (it
    dead-letters them: they never became timers, which is judged, not a doubt) and
    ``set_aside`` for a fired-topic record the audit cannot read: evidence lost, counted
    against ``--max-set-aside``.
    """
    from pyspark.sql import functions as F

    refused = requests.where(F.col("reject").isNotNull()).select(
        F.lit("refused").alias("disposition"),
        "topic",
        "partition",
        "offset",
        "ts_ms",
        F.col("reject").alias("reason"),
        "detail",
    )
    unreadable = fired.where(~F.col("readable")).select(
        F.lit("set_aside").alias("disposition"),
        F.col("rec_topic").alias("topic"),
        F.col("rec_partition").alias("partition"),
        F.col("rec_offset").alias("offset"),
        "ts_ms",
        F.col("set_aside").alias("reason"),
        "detail",
    )
    return refused.unionByName(unreadable)


def read_counts(requests: Any, fired: Any) -> ReadCounts:
    """How many records each topic held, refused and set aside (one small job)."""
    from pyspark.sql import functions as F

    row = (
        requests.agg(F.count(F.lit(1)).alias("requests"), F.count("reject").alias("rejected"))
        .crossJoin(
            fired.agg(
                F.count(F.lit(1)).alias("fired"),
                F.count(F.when(~F.col("readable"), 1)).alias("unreadable"),
            )
        )
        .collect()[0]
    )
    return ReadCounts(
        request_records=int(row["requests"]),
        rejected_requests=int(row["rejected"]),
        fired_records=int(row["fired"]),
        unreadable_fired_records=int(row["unreadable"]),
    )
