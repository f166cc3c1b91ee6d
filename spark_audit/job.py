"""One audit run: read both topics once, judge every timer, aggregate, write the results.

Each topic is read exactly once: the parsed records are persisted before anything counts
them, so every figure in the report comes from the same snapshot of the topics.
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
from spark_audit.errors import AuditError
from spark_audit.options import AuditOptions
from spark_audit.parsing import policy_for
from spark_audit.pipeline import judge_timers, parse_fired, parse_requests, timer_events
from spark_audit.reading import read_topic
from spark_audit.reconcile import Rules
from spark_audit.results import write_summary, write_tables
from spark_audit.summary import AuditSummary, ReadCounts

__all__ = ["audit_settings", "check_topics", "partitions_with_deleted_records", "run_audit"]

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


def _short(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    causes = [line for line in lines if "Error" in line or "Exception" in line]
    return (causes[-1] if causes else lines[0] if lines else type(exc).__name__)[:300]


def run_audit(
    spark: Any,
    settings: Settings,
    options: AuditOptions,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> AuditSummary:
    """Audit the request and fired topics of ``settings``; write the results."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    cached: list[Any] = []
    try:
        return _run(spark, settings, options, clock, cached)
    except (PySparkException, Py4JError) as exc:
        log.debug("the audit's Spark job failed", exc_info=True)
        raise AuditError(f"the audit's Spark job failed: {_short(exc)}") from exc
    finally:
        for frame in cached:  # the session may be the caller's: leave no cache behind
            frame.unpersist()


def _run(
    spark: Any,
    settings: Settings,
    options: AuditOptions,
    clock: Callable[[], float],
    cached: list[Any],
) -> AuditSummary:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    started = clock()
    requests_topic, fired_topic = settings.topics.requests, settings.topics.fired

    def read(topic: str) -> Any:
        return read_topic(
            spark,
            settings,
            topic,
            source=options.source,
            max_offsets_per_partition=options.max_offsets_per_partition,
            extra_options=options.kafka_options,
        )

    def persist(frame: Any) -> Any:
        cached.append(frame.persist(StorageLevel.MEMORY_AND_DISK))
        return frame

    phases: dict[str, float] = {}
    mark = started

    def phase(name: str) -> None:
        nonlocal mark
        now = clock()
        phases[name] = round(now - mark, 2)
        mark = now

    requests = persist(parse_requests(read(requests_topic), policy_for(settings)))
    fired = persist(parse_fired(read(fired_topic)))
    # One job reads (and caches) both topics, side by side.
    read_counts = (
        requests.agg(F.count(F.lit(1)).alias("requests"), F.count("reject").alias("rejected"))
        .crossJoin(
            fired.agg(
                F.count(F.lit(1)).alias("fired"),
                F.count(F.when(~F.col("readable"), 1)).alias("unreadable"),
            )
        )
        .collect()[0]
    )
    reads = ReadCounts(
        request_records=int(read_counts["requests"]),
        rejected_requests=int(read_counts["rejected"]),
        fired_records=int(read_counts["fired"]),
        unreadable_fired_records=int(read_counts["unreadable"]),
    )
    phase("read_and_parse")

    rules = Rules(as_of_ms=options.as_of_ms, grace_ms=options.grace_ms, since_ms=options.since_ms)
    incomplete = partitions_with_deleted_records(settings, requests_topic)
    if incomplete:
        log.info(
            "request partitions %s lost records to retention: fires without a request "
            "there are request_gone, not unrequested",
            sorted(incomplete),
        )
    timers = persist(judge_timers(timer_events(requests, fired), rules, incomplete))
    timer_count = timers.count()
    requests.unpersist()
    fired.unpersist()
    phase("judge")

    violations = stats.violations(timers)
    statuses, violation_counts = stats.counts(timers, violations)
    fire_stats = stats.fire_stats(stats.fires(timers))
    summary = AuditSummary(
        as_of_ms=options.as_of_ms,
        grace_ms=options.grace_ms,
        since_ms=options.since_ms,
        requests_topic=requests_topic,
        fired_topic=fired_topic,
        source=options.source.value,
        allow_duplicates=options.allow_duplicates,
        reads=reads,
        timers=timer_count,
        statuses=statuses,
        violation_counts=violation_counts,
        violations=stats.violation_sample(violations, options.max_listed),
        violations_limit=options.max_listed,
        lateness_overall=fire_stats.overall,
        lateness_by_topic=fire_stats.by_topic,
        lateness_by_hour=fire_stats.by_hour,
        histogram=fire_stats.histogram,
        fires_per_minute=fire_stats.per_minute,
        output_dir=options.output_dir,
        occurrences=stats.occurrence_counts(timers),
    )
    phase("aggregate")
    write_tables(options.tables_uri or str(Path(options.output_dir).resolve()), timers, violations)
    phase("write_tables")
    summary.extra["phase_seconds"] = phases
    summary.elapsed_s = clock() - started
    write_summary(options.output_dir, summary)
    return summary
