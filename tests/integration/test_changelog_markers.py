"""Catch-up and recovery on a changelog whose end is a control record.

A log written by transactions ends in a commit or abort marker, which takes an offset
and which no consumer ever receives: the last record's offset + 1 is below the high
watermark. Every broker here writes them (the dev broker too), so these run on every
broker, with real offsets; ``test_exactly_once.py`` runs the worker through takeovers
and restarts on top of it.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from rocksdict import Options, Rdict

from app.kafka.config import confluent_consumer
from app.settings import Settings
from app.worker.catch_up import catch_up_changelogs, persisted_offset
from app.worker.faust_internals.recovery import _recovery_targets


def high_watermarks(settings: Settings, topic: str) -> dict[int, int]:
    """Partition 0's high watermark, as the broker's fetch reports it."""
    consumer = Consumer({"bootstrap.servers": settings.bootstrap_servers, "group.id": "hw"})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        return {0: high}
    finally:
        consumer.close()


def _transactions(settings: Settings, topic: str, batches: list[tuple[list[bytes], bool]]) -> None:
    """Write each batch of keys (value = key + b"!") in a transaction, committed or aborted."""
    producer = Producer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "transactional.id": f"markers-{uuid.uuid4().hex}",
        }
    )
    producer.init_transactions(30)
    for keys, commit in batches:
        producer.begin_transaction()
        for key in keys:
            producer.produce(topic, key=key, value=key + b"!", partition=0)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


def _catch_up(settings: Settings, topic: str, db: Rdict) -> int:
    conf = confluent_consumer(settings, group_id="unused")
    return catch_up_changelogs({0: db}, conf, topic, timeout=30)[0]


def test_catch_up_ends_past_commit_markers(settings: Settings, tmp_path: Path) -> None:
    topic = settings.changelog_topic
    _transactions(settings, topic, [([b"a", b"b", b"c"], True), ([b"a"], True)])
    end = high_watermarks(settings, topic)[0]
    # Four records and two commit markers: the end is past the last record.
    assert end == 6, end
    db = Rdict(str(tmp_path / "p0"), Options(raw_mode=True))
    try:
        assert _catch_up(settings, topic, db) == 4
        assert db[b"a"] == b"a!" and db[b"c"] == b"c!"
        # The position reached, less one: a marker's offset, not the last record's (4).
        assert persisted_offset(db) == end - 1
        # Nothing left: a second catch-up starts at the end and applies nothing.
        assert _catch_up(settings, topic, db) == 0
        assert persisted_offset(db) == end - 1
    finally:
        db.close()


class _Table:
    def __init__(self, db: Rdict) -> None:
        self._db = db

    def persisted_offset(self, tp: Any) -> int | None:
        return persisted_offset(self._db)


class _TP:
    def __init__(self, topic: str, partition: int) -> None:
        self.topic, self.partition = topic, partition


class _Consumer:
    """Faust's consumer as its recovery uses it: the end offsets, from the broker."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    async def highwaters(self, *tps: _TP) -> dict[_TP, int]:
        ends = high_watermarks(self._settings, tps[0].topic)
        return {tp: ends[tp.partition] for tp in tps}


class _Recovery:
    log: Any = None

    def __init__(self, table: _Table, tp: _TP, own: frozenset[str]) -> None:
        self.tp_to_table = {tp: table}
        self._kafka_timers_own_recovery = own

    def _highwater_logtable(self, highwaters: Any, *, title: str) -> str:
        return ""


def test_faust_recovery_ends_where_the_catch_up_ended(settings: Settings, tmp_path: Path) -> None:
    """Faust's target (high watermark - 1) can be a marker, which never arrives: for the
    worker's changelog it is where the worker's catch-up ended, so nothing is left."""
    import logging

    topic = settings.changelog_topic
    _transactions(settings, topic, [([b"x", b"y"], True)])
    db = Rdict(str(tmp_path / "p0"), Options(raw_mode=True))
    try:
        _catch_up(settings, topic, db)
        caught_up = persisted_offset(db)
        # Then a zombie's transaction is aborted: a record and a marker, neither of
        # which a read_committed reader ever receives.
        _transactions(settings, topic, [([b"z"], False)])
        end = high_watermarks(settings, topic)[0]
        assert caught_up is not None and end - 1 > caught_up
        tp = _TP(topic, 0)
        for own, target in ((frozenset(), end - 1), (frozenset({topic}), caught_up)):
            recovery = _Recovery(_Table(db), tp, own)
            recovery.log = logging.getLogger("test")
            destination: dict[Any, int] = {}
            asyncio.run(
                _recovery_targets(recovery, _Consumer(settings), {tp}, destination, "active")
            )
            assert destination[tp] == target
    finally:
        db.close()
