"""What a compacted changelog keeps: the newest record per key, unless it is a tombstone.

The dev broker never compacts, so this reads the whole changelog and replays it the way
compaction would settle it. On Apache Kafka that is what a rebuild from the changelog
reads once the cleaner has run (plus tombstones younger than ``delete.retention.ms``).
"""

from __future__ import annotations

from collections import Counter

from confluent_kafka import Message

from app.core.wheel import key_kind
from app.settings import Settings
from bench.scan import read_topic

__all__ = ["LiveKeys", "live_keys"]


class LiveKeys:
    """Live keys of a changelog, per partition, and by kind."""

    def __init__(self) -> None:
        #: partition -> key -> kind, for keys whose newest record has a value
        self._live: dict[int, dict[bytes, str]] = {}
        #: every record read, tombstones included
        self.records = 0

    def apply(self, msg: Message) -> None:
        self.records += 1
        key = msg.key()
        if key is None:
            return
        live = self._live.setdefault(msg.partition() or 0, {})
        value = msg.value()
        if value is None:
            live.pop(key, None)
        else:
            live[key] = key_kind(key, value)

    @property
    def total(self) -> int:
        return sum(len(keys) for keys in self._live.values())

    def by_kind(self) -> dict[str, int]:
        counts: Counter[str] = Counter({"pending": 0, "remembered": 0, "bookkeeping": 0})
        for keys in self._live.values():
            counts.update(keys.values())
        return dict(counts)

    def keys(self) -> set[bytes]:
        return {k for keys in self._live.values() for k in keys}


def live_keys(settings: Settings, topic: str, timeout: float = 300.0) -> LiveKeys:
    """Read ``topic`` to its end and keep what compaction would."""
    result = LiveKeys()
    read_topic(settings, topic, result.apply, timeout=timeout)
    return result
