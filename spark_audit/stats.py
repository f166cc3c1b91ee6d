"""Aggregates over the judged timers: counts, lateness percentiles, histogram, fire rate.

All computed in Spark, in as few jobs as possible (each job costs about half a second
however small the data): one for the counts, one for every fire statistic at once
(grouping sets), one for the list of violations. Only small results reach the driver.

Lateness is measured on the *first* fire of each version (a duplicate is reported as a
duplicate, not as a second sample), from the due second, or from the request when it
came after its due second (a request for a past second fires at once, by design); a
fire a trigger or a backfill asked for is no sample (it came when asked, not when due).
The fire rate counts every fire: each one is a callback delivered.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_audit.summary import LatenessRow
from spark_audit.verdicts import REFUSED_OUTCOMES

__all__ = [
    "HISTOGRAM_EDGES_MS",
    "Counts",
    "FireStats",
    "counts",
    "fire_stats",
    "fires",
    "first_of_each",
    "histogram_labels",
    "occurrence_counts",
    "violations",
]

#: Lower edges of the lateness histogram's bins, ms (a bin below 0 holds early fires).
HISTOGRAM_EDGES_MS = (0, 50, 100, 250, 500, 1000, 2000, 5000, 10_000, 30_000, 60_000)

_PERCENTILES = [0.5, 0.9, 0.99]

# grouping_id() bits for the columns (topic, hour, bin, minute): 1 = not grouped on.
_ALL, _BY_TOPIC, _BY_HOUR, _BY_BIN, _BY_MINUTE = 0b1111, 0b0111, 0b1011, 0b1101, 0b1110


@dataclass(frozen=True)
class FireStats:
    """Every statistic about fires that the reports show."""

    overall: LatenessRow | None
    by_topic: list[LatenessRow]
    by_hour: list[LatenessRow]
    #: ``(bin label, first fires)``, every bin, in order.
    histogram: list[tuple[str, int]]
    #: ``(minute as epoch seconds, fires)`` in time order.
    per_minute: list[tuple[int, int]]


def violations(timers: DataFrame) -> DataFrame:
    """One row per violation: partition, id, kind, token, due, at_ms, detail, and the
    timer's final callback topic (``final_topic``)."""
    return timers.select(
        "partition", "id", "final_topic", F.explode("violations").alias("x")
    ).select("partition", "id", "x.*", "final_topic")


def fires(timers: DataFrame) -> DataFrame:
    """One row per distinct fire: partition, id, token, due, fired_at_ms, topic, ..."""
    return timers.select("partition", "id", F.explode("fires").alias("f")).select(
        "partition", "id", "f.*"
    )


@dataclass(frozen=True)
class Counts:
    """Timers per status and violations per kind, overall and per callback topic."""

    statuses: dict[str, int]
    kinds: dict[str, int]
    #: ``{callback topic: {status or violation kind: count}}`` (``?``: no topic known).
    by_topic: dict[str, dict[str, int]]


def counts(timers: DataFrame, violations: DataFrame) -> Counts:
    """Timers per status and violations per kind, overall and per topic, in one job."""
    topic = F.coalesce(F.col("final_topic"), F.lit("?")).alias("topic")
    labels = timers.select(topic, F.concat(F.lit("s:"), "status").alias("k")).unionByName(
        violations.select(topic, F.concat(F.lit("v:"), "kind").alias("k"))
    )
    statuses: dict[str, int] = {}
    kinds: dict[str, int] = {}
    by_topic: dict[str, dict[str, int]] = {}
    for row in labels.groupBy("topic", "k").count().collect():
        target = statuses if row["k"].startswith("s:") else kinds
        name, n = row["k"][2:], int(row["count"])
        target[name] = target.get(name, 0) + n
        per_topic = by_topic.setdefault(row["topic"], {})
        per_topic[name] = per_topic.get(name, 0) + n
    return Counts(statuses, kinds, by_topic)


def occurrence_counts(
    timers: DataFrame,
) -> tuple[dict[str, int], dict[str, int], int, dict[str, int]]:
    """Occurrences fired, skipped (``skip-after``) and coalesced, over every timer: the
    late-fire policy's work, reported beside the violations, never as one; the extra
    fires, ``triggered`` and ``backfilled`` (:mod:`spark_audit.extras`); the fires
    of versions whose replacement or cancel reached the worker after them
    (``reached_late``); and the schedule requests the worker refused, by its answer
    (``over_quota``, ``wrong_token``: never stored). One job."""
    row = timers.agg(
        F.sum("occurrences_fired").alias("fired"),
        F.sum("occurrences_skipped").alias("skipped"),
        F.sum("occurrences_coalesced").alias("coalesced"),
        F.sum("extra_triggered").alias("triggered"),
        F.sum("extra_backfilled").alias("backfilled"),
        F.sum("reached_late").alias("reached_late"),
        *(F.sum(f"refused_{name}").alias(name) for name in REFUSED_OUTCOMES),
    ).collect()[0]
    occurrences = {name: int(row[name] or 0) for name in ("fired", "skipped", "coalesced")}
    extra = {name: int(row[name] or 0) for name in ("triggered", "backfilled")}
    refused = {name: int(row[name] or 0) for name in REFUSED_OUTCOMES}
    return occurrences, extra, int(row["reached_late"] or 0), refused


def first_of_each(
    frame: DataFrame, group: list[str], order: list[str], limit: int
) -> list[dict[str, Any]]:
    """The first ``limit`` rows of each ``group`` by ``order``, as plain dicts.

    A window per group (sorted and spilled by Spark), so a kind with millions of rows
    does not crowd out a kind with five: every kind shows.
    """
    if limit <= 0:
        return []
    from pyspark.sql import Window

    rank = F.row_number().over(Window.partitionBy(*group).orderBy(*order))
    rows = (
        frame.withColumn("_rank", rank)
        .where(F.col("_rank") <= limit)
        .drop("_rank")
        .orderBy(*group, *order)
        .collect()
    )
    return [row.asDict() for row in rows]


def histogram_labels() -> list[str]:
    """Bin labels in order: ``< 0 ms`` (early), then one per edge."""

    def fmt(ms: int) -> str:
        return f"{ms // 1000} s" if ms >= 1000 else f"{ms} ms"

    labels = ["< 0 ms"]
    for low, high in pairwise(HISTOGRAM_EDGES_MS):
        labels.append(f"{fmt(low)}-{fmt(high)}")
    labels.append(f">= {fmt(HISTOGRAM_EDGES_MS[-1])}")
    return labels


def _bin(lateness: Column) -> Column:
    index: Column = F.lit(0)
    for i, edge in enumerate(HISTOGRAM_EDGES_MS, start=1):
        index = F.when(lateness >= edge, F.lit(i)).otherwise(index)
    return index


def _lateness_row(label: str, row: Any) -> LatenessRow:
    p50, p90, p99 = row["p"]
    return LatenessRow(
        label, int(row["first"]), float(p50), float(p90), float(p99), float(row["max"])
    )


def fire_stats(all_fires: DataFrame) -> FireStats:
    """Lateness overall, per callback topic and per hour (UTC), histogram, fires per minute."""
    # A trigger's or a backfill's fire is as late as its request made it: not a sample.
    sample = F.col("first") & F.col("extra").isNull()
    first_lateness = F.when(sample, F.col("lateness_ms"))
    frame = all_fires.select(
        F.coalesce(F.col("topic"), F.lit("?")).alias("topic"),
        F.date_format(F.timestamp_millis(F.col("fired_at_ms")), "yyyy-MM-dd HH:00").alias("hour"),
        F.when(sample, _bin(F.col("lateness_ms"))).alias("bin"),
        (F.floor(F.col("fired_at_ms") / 60_000) * 60).cast("bigint").alias("minute"),
        first_lateness.alias("lateness"),
    )
    rows = (
        frame.groupingSets(
            [[], ["topic"], ["hour"], ["bin"], ["minute"]], "topic", "hour", "bin", "minute"
        )
        .agg(
            F.grouping_id().alias("gid"),
            F.count(F.lit(1)).alias("all"),
            F.count("lateness").alias("first"),
            F.percentile_approx("lateness", _PERCENTILES, 10_000).alias("p"),
            F.max("lateness").alias("max"),
        )
        .collect()
    )
    overall: LatenessRow | None = None
    by_topic: list[LatenessRow] = []
    by_hour: list[LatenessRow] = []
    bins: dict[int, int] = {}
    per_minute: list[tuple[int, int]] = []
    for row in rows:
        gid, has_first = row["gid"], row["first"] > 0
        if gid == _ALL and has_first:
            overall = _lateness_row("all", row)
        elif gid == _BY_TOPIC and has_first:
            by_topic.append(_lateness_row(row["topic"], row))
        elif gid == _BY_HOUR and has_first:
            by_hour.append(_lateness_row(row["hour"], row))
        elif gid == _BY_BIN and row["bin"] is not None:
            bins[int(row["bin"])] = int(row["first"])
        elif gid == _BY_MINUTE:
            per_minute.append((int(row["minute"]), int(row["all"])))
    return FireStats(
        overall=overall,
        by_topic=sorted(by_topic, key=lambda r: r.group),
        by_hour=sorted(by_hour, key=lambda r: r.group),
        histogram=[(label, bins.get(i, 0)) for i, label in enumerate(histogram_labels())],
        per_minute=sorted(per_minute),
    )
