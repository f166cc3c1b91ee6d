"""Request lag and the informational offset commits, with fake consumers (no broker).

``tests/integration/test_request_lag.py`` checks the same against a real group on a
real broker, with a worker stopped while requests keep coming.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import TopicPartition

from app.core.raw_record import RawRecord
from app.worker.metrics import WorkerMetrics
from app.worker.request_progress import COMMIT_INTERVAL, COMMIT_REFRESH, RequestProgress
from tests.support.fake_clock import Clocks

TOPIC = "requests"
NOW = 1_767_225_600.0


class FakeCommitter:
    def __init__(self) -> None:
        self.commits: list[dict[int, int]] = []
        self.high = {0: 0, 1: 0, 2: 0}

    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool) -> None:
        assert asynchronous, "informational commits must never block the reader"
        self.commits.append({tp.partition: tp.offset for tp in offsets})

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        latest: dict[int, int] = {}
        for c in self.commits:
            latest.update(c)
        return [TopicPartition(TOPIC, tp.partition, latest.get(tp.partition, -1001)) for tp in tps]

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        return 0, self.high[tp.partition]


class FakeReader:
    def __init__(self) -> None:
        self.positions: dict[int, int] = {}
        self.high: dict[int, int] = {}

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [
            TopicPartition(TOPIC, tp.partition, self.positions.get(tp.partition, -1001))
            for tp in tps
        ]

    def get_watermark_offsets(self, tp: TopicPartition, cached: bool) -> tuple[int, int]:
        assert cached, "the held partitions' lag must not cost a broker round trip"
        return 0, self.high.get(tp.partition, -1001)


def record(partition: int, offset: int, ts: float) -> RawRecord:
    return RawRecord(TOPIC, partition, offset, int(ts * 1000), None, b"{}")


def gauge(metrics: WorkerMetrics, name: str, partition: int) -> float | None:
    return metrics.registry.get_sample_value(name, {"partition": str(partition)})


def make() -> tuple[RequestProgress, FakeCommitter, FakeReader, WorkerMetrics, Clocks]:
    committer, reader, metrics, clocks = (
        FakeCommitter(),
        FakeReader(),
        WorkerMetrics(),
        Clocks(NOW, 10.0),
    )
    progress = RequestProgress(
        committer,  # type: ignore[arg-type]
        TOPIC,
        3,
        metrics,
        clock=lambda: clocks.now,
        monotonic=lambda: clocks.mono,
    )
    return progress, committer, reader, metrics, clocks


def test_lag_of_held_partitions_from_position_and_cached_high_watermark() -> None:
    progress, _, reader, metrics, clocks = make()
    progress.assigned([TopicPartition(TOPIC, 0, 10), TopicPartition(TOPIC, 1, -2)])
    reader.positions, reader.high = {0: 10}, {0: 50, 1: 7}
    progress.update(reader)  # type: ignore[arg-type]
    assert gauge(metrics, "kafka_timers_request_lag_records", 0) == 40
    # Nothing applied yet: the age counts from the assignment (a lower bound).
    assert gauge(metrics, "kafka_timers_request_lag_seconds", 0) == 0
    # Started at the beginning with nothing read yet: everything from the low watermark.
    assert gauge(metrics, "kafka_timers_request_lag_records", 1) == 7
    clocks.advance(3)
    progress.applied([record(0, 10, NOW - 20), record(0, 29, NOW - 12)])
    reader.positions[0] = 30
    progress.update(reader)  # type: ignore[arg-type]
    assert gauge(metrics, "kafka_timers_request_lag_records", 0) == 20
    assert gauge(metrics, "kafka_timers_request_lag_seconds", 0) == 15  # newest applied's age
    reader.positions[0] = 50
    progress.update(reader)  # type: ignore[arg-type]
    assert gauge(metrics, "kafka_timers_request_lag_records", 0) == 0
    assert gauge(metrics, "kafka_timers_request_lag_seconds", 0) == 0


def test_commits_are_the_offset_after_the_applied_batch_at_most_once_a_second() -> None:
    progress, committer, reader, _, clocks = make()
    progress.assigned([TopicPartition(TOPIC, 0, 0)])
    progress.applied([record(0, 0, NOW), record(0, 4, NOW)])
    assert committer.commits == [{0: 5}]
    clocks.advance(COMMIT_INTERVAL / 2)
    progress.applied([record(0, 5, NOW)])
    assert committer.commits == [{0: 5}], "committed twice within the interval"
    clocks.advance(COMMIT_INTERVAL / 2)
    reader.positions, reader.high = {0: 6}, {0: 6}
    progress.update(reader)  # type: ignore[arg-type]  # idle: the pending one goes out
    assert committer.commits == [{0: 5}, {0: 6}]
    clocks.advance(COMMIT_INTERVAL * 10)
    progress.update(reader)  # type: ignore[arg-type]
    assert len(committer.commits) == 2, "an offset that did not move was committed again"
    clocks.advance(COMMIT_REFRESH)
    progress.update(reader)  # type: ignore[arg-type]
    assert committer.commits[-1] == {0: 6}, "an idle group's offsets must be refreshed"


def test_revoke_commits_at_once_and_stops_exporting_the_partition() -> None:
    progress, committer, reader, metrics, _ = make()
    progress.assigned([TopicPartition(TOPIC, 2, 0)])
    progress.applied([record(2, 0, NOW)])
    reader.positions, reader.high = {2: 3}, {2: 3}
    progress.update(reader)  # type: ignore[arg-type]  # within the interval: not committed
    assert committer.commits == [{2: 1}]
    assert gauge(metrics, "kafka_timers_request_lag_records", 2) == 0
    progress.revoked([2])
    assert committer.commits[-1] == {2: 3}
    assert gauge(metrics, "kafka_timers_request_lag_records", 2) is None
    assert gauge(metrics, "kafka_timers_request_lag_seconds", 2) is None


def test_group_lag_covers_every_partition_from_commits_and_high_watermarks() -> None:
    progress, committer, _, metrics, _ = make()
    committer.commits = [{0: 40, 1: 7}]
    committer.high = {0: 100, 1: 7, 2: 12}
    assert progress.refresh_group_lag() == {0: 60, 1: 0, 2: 12}  # 2: never committed
    assert gauge(metrics, "kafka_timers_request_group_lag_records", 0) == 60
    assert gauge(metrics, "kafka_timers_request_group_lag_records", 2) == 12


def test_a_broker_error_leaves_the_group_lag_as_it_was() -> None:
    progress, committer, _, metrics, _ = make()

    def fail(*_: Any) -> Any:
        raise RuntimeError("broker down")

    committer.committed = fail  # type: ignore[method-assign]
    assert progress.refresh_group_lag() == {}
    assert gauge(metrics, "kafka_timers_request_group_lag_records", 0) is None
