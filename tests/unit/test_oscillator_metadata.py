"""A failed metadata lookup does not end the oscillator: it keeps its last partition count."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, KafkaException

from oscillator import ticker
from oscillator.ticker import Oscillator


class _Partitions:
    def __init__(self, n: int) -> None:
        self.partitions = dict.fromkeys(range(n))
        self.error = None


class _Producer:
    """Answers metadata with ``count`` partitions, or raises while ``away``."""

    def __init__(self) -> None:
        self.away = False
        self.count = 4
        self.lookups = 0

    def list_topics(self, topic: str, timeout: float) -> Any:
        self.lookups += 1
        if self.away:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata"))
        return type("Meta", (), {"topics": {topic: _Partitions(self.count)}})()


def _oscillator(producer: _Producer) -> Oscillator:
    osc = Oscillator({"bootstrap.servers": "127.0.0.1:1"}, "ticks", oscillator_id="o")
    osc._producer = producer  # type: ignore[assignment]
    return osc


def test_a_lookup_that_fails_keeps_the_last_count_and_is_tried_at_the_next_refresh(
    monkeypatch: Any,
) -> None:
    now = [1000.0]
    monkeypatch.setattr("oscillator.ticker.time.monotonic", lambda: now[0])
    producer = _Producer()
    osc = _oscillator(producer)
    assert osc._partition_count() == 4
    producer.away, producer.count = True, 8
    now[0] += ticker.METADATA_REFRESH_SECONDS + 1
    assert osc._partition_count() == 4  # the broker away: no exception, the last count
    assert producer.lookups == 2
    now[0] += 1
    assert osc._partition_count() == 4 and producer.lookups == 2  # not asked every tick
    producer.away = False
    now[0] += ticker.METADATA_REFRESH_SECONDS + 1
    assert osc._partition_count() == 8


def test_without_any_count_yet_a_failed_lookup_sends_nothing_and_asks_again() -> None:
    producer = _Producer()
    producer.away = True
    osc = _oscillator(producer)
    assert osc._partition_count() == 0
    producer.away = False
    assert osc._partition_count() == 4
    assert producer.lookups == 2
