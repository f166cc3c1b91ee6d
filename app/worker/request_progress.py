"""How far behind the request topic the workers are, where Kafka's own tools can see it.

The request reader never joins a consumer group (it is *assigned* its partitions) and
resumes from the offset stored in the table, so Kafka's lag tooling —
``kafka-consumer-groups --describe``, Burrow, lag exporters — would see nothing. This
module makes the same progress visible in three ways:

1. **Committed offsets**, informational only: after a batch is durable, the offset after
   it is committed (asynchronously, at most every :data:`COMMIT_INTERVAL` seconds per
   partition, and again every :data:`COMMIT_REFRESH` seconds while idle, so an idle
   group's offsets do not expire under ``offsets.retention.minutes``) to the group
   :attr:`app.settings.Settings.request_group` (``<app id>-requests``). No process ever
   joins that group: Kafka accepts offset commits from a non-member only while a group
   has no members, and the workers' own Faust group has them. Nothing ever resumes from
   these offsets; the table stays the source of truth.
2. ``kafka_timers_request_lag_records{partition}`` and ``..._lag_seconds{partition}``
   for the partitions this worker holds, live from its reader: records not yet applied
   (high watermark minus position), and the age of the newest request applied while any
   wait (an upper bound of the oldest waiting one's age; 0 when caught up).
3. ``kafka_timers_request_group_lag_records{partition}`` for *every* partition, from the
   group's committed offsets and the high watermarks, refreshed by every worker every
   few seconds: a stopped or wedged worker cannot report its own lag, its partner does.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence

from confluent_kafka import Consumer, TopicPartition

from app.core.raw_record import RawRecord
from app.worker.metrics import WorkerMetrics

__all__ = ["COMMIT_INTERVAL", "COMMIT_REFRESH", "RequestProgress"]

log = logging.getLogger(__name__)

#: Fewest seconds between two commits of one partition's offset.
COMMIT_INTERVAL = 1.0
#: A partition's offset is committed again after this long even if it did not move, so
#: Kafka keeps an idle group's offsets (it drops them 7 days after the last commit).
COMMIT_REFRESH = 3600.0
#: librdkafka's "no offset" value in committed() and get_watermark_offsets().
_INVALID = -1001


class RequestProgress:
    """Commits and exports the request reader's progress (see the module docstring)."""

    def __init__(
        self,
        committer: Consumer,
        topic: str,
        partitions: int,
        metrics: WorkerMetrics,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        #: A consumer of the informational group; never subscribes nor is assigned.
        self._committer = committer
        self._topic = topic
        self._partitions = partitions
        self._metrics = metrics
        self._clock = clock
        self._monotonic = monotonic
        #: Offset after the newest request applied, per held partition (None: unknown yet).
        self._position: dict[int, int | None] = {}
        self._committed: dict[int, tuple[int, float]] = {}
        #: Timestamp (epoch s) of the newest request applied, per held partition.
        self._newest_ts: dict[int, float] = {}
        self._assigned_at: dict[int, float] = {}

    # -- called by the request reader ------------------------------------------------

    def assigned(self, starts: Iterable[TopicPartition]) -> None:
        """The reader starts ``starts`` (offsets; negative: a logical start, unknown)."""
        for tp in starts:
            self._position[tp.partition] = tp.offset if tp.offset >= 0 else None
            self._assigned_at[tp.partition] = self._clock()

    def revoked(self, partitions: Iterable[int]) -> None:
        """The reader gave ``partitions`` up: commit where it got to, stop exporting them."""
        gone = set(partitions)
        self._commit(gone, force=True)
        for p in gone:
            self._position.pop(p, None)
            self._committed.pop(p, None)
            self._newest_ts.pop(p, None)
            self._assigned_at.pop(p, None)
            for gauge in (self._metrics.request_lag_records, self._metrics.request_lag_seconds):
                with contextlib.suppress(KeyError):
                    gauge.remove(str(p))

    def applied(self, records: Sequence[RawRecord]) -> None:
        """``records`` are durable: move the positions past them."""
        # Per partition the last record is its highest offset (a partition's records
        # come in offset order): one dict store a record, the rest once a partition.
        last = {record.partition: record for record in records}
        position = self._position
        for p, record in last.items():
            if p in position:
                position[p] = max(position[p] or 0, record.offset + 1)
                self._newest_ts[p] = record.timestamp_ms / 1000
        self._commit(set(last))

    def update(self, reader: Consumer) -> None:
        """Export each held partition's lag from ``reader`` (cached watermarks: no I/O)."""
        held = [TopicPartition(self._topic, p) for p in sorted(self._position)]
        if not held:
            return
        for tp in reader.position(held):
            if tp.offset >= 0:  # the reader's position: where it got to, even to EOF
                self._position[tp.partition] = tp.offset
        now = self._clock()
        for p, position in self._position.items():
            low, high = reader.get_watermark_offsets(TopicPartition(self._topic, p), cached=True)
            if position is None:  # started at the beginning, nothing returned yet
                position = low
            if position == _INVALID or high == _INVALID:
                continue
            behind = max(0, high - position)
            self._metrics.request_lag_records.labels(partition=str(p)).set(behind)
            since = self._newest_ts.get(p, self._assigned_at.get(p, now))
            self._metrics.request_lag_seconds.labels(partition=str(p)).set(
                max(0.0, now - since) if behind else 0.0
            )
        self._commit(set(self._position))

    # -- commits ------------------------------------------------------------------------

    def _commit(self, partitions: set[int], *, force: bool = False) -> None:
        mono = self._monotonic()
        offsets = []
        for p in sorted(partitions):
            position = self._position.get(p)
            if position is None:
                continue
            last = self._committed.get(p)
            if last is not None and not force:
                moved, age = position != last[0], mono - last[1]
                if not (moved and age >= COMMIT_INTERVAL) and age < COMMIT_REFRESH:
                    continue
            offsets.append(TopicPartition(self._topic, p, position))
            self._committed[p] = (position, mono)
        if offsets:
            try:
                self._committer.commit(offsets=offsets, asynchronous=True)
            except Exception as exc:  # informational: never let it stop the reader
                log.warning("committing request offsets (informational): %s", exc)

    # -- the whole topic, from the group ----------------------------------------------

    def refresh_group_lag(self, timeout: float = 5.0) -> dict[int, int]:
        """Records lag of every partition from the group's commits; blocking (executor).

        A partition the group never committed counts from its low watermark.
        """
        tps = [TopicPartition(self._topic, p) for p in range(self._partitions)]
        lag = {}
        try:
            committed = {tp.partition: tp.offset for tp in self._committer.committed(tps, timeout)}
            for tp in tps:
                low, high = self._committer.get_watermark_offsets(tp, timeout=timeout)
                start = committed.get(tp.partition, _INVALID)
                lag[tp.partition] = max(0, high - (start if start >= 0 else low))
        except Exception as exc:  # informational: try again at the next refresh
            log.warning("request group lag not refreshed: %s", exc)
            return {}
        for p, n in lag.items():
            self._metrics.request_group_lag.labels(partition=str(p)).set(n)
        return lag

    def close(self) -> None:
        self._committer.close()
