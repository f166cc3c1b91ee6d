"""A deployment's pending timers, read from its changelog topic (never from a worker).

The timer table's changelog (``<app id>-timers-changelog``) mirrors every partition's
store: ``T<due>\\0<id>`` holds a pending timer, ``I<id>`` the state of its newest
version, ``R`` the offset of the last request the partition applied (see
:mod:`app.core.keys`). It is compacted, so it is read from the start of every
partition to its end — to EOF as the fetch reports it, not to the ListOffsets end,
which some brokers (the dev broker) give short — keeping the newest value of each key
and dropping keys whose newest record is a tombstone. What is left is what a worker
taking the partition over would load.

**Consistency.** With the workers stopped, the snapshot is exactly the state they left:
every partition as of its last applied request (``R``), as a restarted worker would
find it. With workers running, each partition is read up to some moment of its own:
one partition's state (the timers it held, and ``R``) at the end of what was read,
possibly in the middle of a unit of work (a batch's first timers in, its ``R`` not yet),
and different partitions at slightly different moments. Every timer in such a snapshot
was pending at the moment its partition was read; a timer that fired or was cancelled
just after is still in it, and one scheduled just after is not. For a backup that is
fine (an import is idempotent, and a timer imported after it fired fires again only
if it was a series that had since moved on); for a move, stop the workers first
(``kafka-timers migrate``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from app.core.keys import INDEX, PENDING, REQUEST_OFFSET, parse_timer_key
from app.core.stored import unpack_timer
from app.core.timer import Timer
from app.kafka.config import confluent_common
from app.kafka.topics import wait_for_broker
from app.settings import Settings
from kafka_timers_client.errors import BrokerUnavailable, KafkaTimersError

__all__ = ["PendingTimer", "Snapshot", "partition_end", "read_snapshot"]


@dataclass(frozen=True)
class PendingTimer:
    """A pending timer and the partition of the deployment that held it."""

    timer: Timer
    partition: int


@dataclass
class Snapshot:
    """What a deployment's changelog holds: pending timers and where each partition's
    request reading stands."""

    #: The changelog topic read.
    topic: str
    #: Its partition count (the deployment's).
    partitions: int
    #: Pending timers, one per id, by partition then due second.
    timers: list[PendingTimer] = field(default_factory=list)
    #: Offset of the last request each partition applied (``R``); absent: none yet.
    request_offsets: dict[int, int] = field(default_factory=dict)
    #: Changelog records read, tombstones included.
    records: int = 0

    @property
    def series(self) -> int:
        return sum(1 for p in self.timers if p.timer.recurrence is not None)


def partition_end(msg: Message, at_end: set[int], what: str) -> bool:
    """Whether ``msg`` only marks the end of its partition, which joins ``at_end``; a
    record takes its partition out of it. Any other error raises
    :class:`KafkaTimersError` naming ``what`` (the topic read) and the partition."""
    p = msg.partition() or 0
    err = msg.error()
    if err is not None:
        if err.code() == KafkaError._PARTITION_EOF:
            at_end.add(p)
            return True
        raise KafkaTimersError(f"reading {what}[{p}]: {err}")
    at_end.discard(p)
    return False


def _latest_by_key(
    settings: Settings, topic: str, timeout: float
) -> tuple[int, dict[int, dict[bytes, bytes]], int]:
    """``(partitions, {partition: {key: newest value}}, records read)`` of ``topic``."""
    conf = confluent_common(settings)
    conf.update(
        {
            "group.id": f"kafka-timers-export-{uuid.uuid4().hex}",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
            # Records of an aborted transaction (exactly-once mode) never happened.
            "isolation.level": "read_committed",
        }
    )
    consumer = Consumer(conf)
    try:
        try:
            meta = consumer.list_topics(timeout=min(timeout, 15.0))
        except Exception as exc:  # librdkafka's KafkaException: no broker answered
            raise BrokerUnavailable(
                f"no Kafka broker answered at {settings.bootstrap_servers}: {exc}"
            ) from exc
        info = meta.topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            raise KafkaTimersError(
                f"changelog topic {topic!r} not found at {settings.bootstrap_servers}: "
                "is KAFKA_TIMERS_APP_ID (or --app-id) the deployment's?"
            )
        partitions = sorted(info.partitions)
        # Offset 0, not OFFSET_BEGINNING (which costs an offset query per partition); a
        # compacted log that starts later is reset to its start by auto.offset.reset.
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        state: dict[int, dict[bytes, bytes]] = {p: {} for p in partitions}
        at_end: set[int] = set()
        records = 0
        deadline = time.monotonic() + timeout
        while at_end != set(partitions):
            if time.monotonic() > deadline:
                raise KafkaTimersError(
                    f"reading changelog {topic!r} did not reach the end of partitions "
                    f"{sorted(set(partitions) - at_end)} within {timeout:g}s"
                )
            for msg in consumer.consume(10000, 0.2):
                if partition_end(msg, at_end, f"changelog {topic}"):
                    continue
                p = msg.partition() or 0
                records += 1
                key = msg.key()
                if key is None:
                    continue
                value = msg.value()
                if value is None:
                    state[p].pop(key, None)
                else:
                    state[p][key] = value
        return len(partitions), state, records
    finally:
        consumer.close()


def _pending_of(store: dict[bytes, bytes]) -> Iterator[Timer]:
    """The pending timers of one partition's keys: one per id.

    Normally each pending id has one ``T`` key, the one its ``P`` index entry names. A
    unit of work cut short (a worker that crashed, or is running while this reads) can
    leave two for one id (a series' next occurrence written before the fired one's
    delete), or one whose index entry is not written yet: the worker then fires what
    the ``T`` keys hold, so that is what is kept; of two, the one the index names, else
    the later occurrence.
    """
    by_id: dict[str, list[tuple[int, bytes]]] = {}
    for key, value in store.items():
        if key[:1] == PENDING:
            slot, timer_id = parse_timer_key(key)
            by_id.setdefault(timer_id, []).append((slot, value))
    for timer_id, found in by_id.items():
        if len(found) == 1:
            yield unpack_timer(found[0][1])
            continue
        index = store.get(INDEX + timer_id.encode())
        named = int(index[1:13]) if index is not None and index[:1] == b"P" else None
        chosen = next((v for s, v in found if s == named), None)
        if chosen is not None:
            yield unpack_timer(chosen)
        else:
            yield max((unpack_timer(v) for _, v in found), key=lambda t: (t.seq, t.due))


def read_snapshot(settings: Settings, timeout: float = 120.0) -> Snapshot:
    """Read the changelog of ``settings``' deployment (its app id) to its end."""
    wait_for_broker(settings, min(timeout, 15.0))
    topic = settings.changelog_topic
    partitions, state, records = _latest_by_key(settings, topic, timeout)
    snapshot = Snapshot(topic=topic, partitions=partitions, records=records)
    for p in sorted(state):
        store = state[p]
        raw = store.get(REQUEST_OFFSET)
        if raw is not None:
            snapshot.request_offsets[p] = int(raw)
        timers = sorted(_pending_of(store), key=lambda t: (t.due, t.id))
        snapshot.timers.extend(PendingTimer(t, p) for t in timers)
    return snapshot
