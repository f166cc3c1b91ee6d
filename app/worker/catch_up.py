"""Reading a partition store up to its changelog's true end, on any broker, after any
absence, and without ever giving the worker up.

Correct on any broker: :func:`catch_up_changelog` reads the
changelog partition from the store's persisted offset to the true end (EOF from the
fetch high watermark), because some brokers — the dev broker among them — answer
ListOffsets with a wrong end offset and Faust's own recovery stops early there.

And correct over years: the changelog is compacted, and compaction removes a tombstone
``delete.retention.ms`` after it cleaned it. A store that comes back after longer than
that (a worker restarted on an old data directory) would resume from its persisted
offset and never see the deletes whose tombstones are gone: fired timers would fire
again, forgotten ids would be remembered for ever. Each store therefore records,
locally, when it was last caught up (:data:`app.core.keys.CAUGHT_UP`), and a store
older than the tombstone retention, less a margin, is emptied and rebuilt from the
start of the changelog.

And it never gives the worker up: a catch-up that cannot reach the end (a broker that
never signals it, one too slow to answer the fetch's wait, one that is away) keeps the
applied part, reports itself stalled (the worker stays alive and not ready: ``/readyz``
says why, ``kafka_timers_recovery_stalled`` is 1) and tries again with bounded
exponential backoff, each attempt letting the broker wait longer per fetch
(:mod:`app.core.backoff`), until the broker lets it finish
(:func:`catch_up_until_done`). It used to raise after 60 s, and with a slow broker every
worker exited, in a loop, while their partitions' timers waited.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from rocksdict import Rdict, WriteBatch

from app.core.backoff import Backoff, fetch_wait_ms
from app.core.keys import CAUGHT_UP, FAUST_OFFSET, UNCONFIRMED

__all__ = [
    "CATCH_UP_BACKOFF",
    "DEFAULT_STALL_SECONDS",
    "STALE_MARGIN_SECONDS",
    "CatchUpAbandoned",
    "CatchUpIncomplete",
    "CatchUpReport",
    "catch_up_changelog",
    "catch_up_changelogs",
    "catch_up_until_done",
    "empty_store",
    "is_stale",
    "is_unconfirmed",
    "persisted_offset",
    "stale_after",
]

log = logging.getLogger(__name__)

#: Most of the safety margin taken off the tombstone retention (clocks, the time a
#: catch-up takes): a store is rebuilt once it is older than the retention less this.
STALE_MARGIN_SECONDS = 3600.0

#: Seconds an attempt of the catch-up may go without reading a record or reaching a
#: partition's end before it is counted as stalled and retried
#: (``KAFKA_TIMERS_CATCHUP_STALL_SECONDS``). Progress resets it: a long catch-up that
#: keeps reading is never cut short.
DEFAULT_STALL_SECONDS = 60.0

#: Between two attempts of a stalled catch-up: 1 s, doubling, at most 30 s, less up to
#: a fifth at random (workers stalled by one broker do not retry in step).
CATCH_UP_BACKOFF = Backoff(initial=1.0, maximum=30.0, factor=2.0, jitter=0.2)

#: How often a backoff wait looks whether the worker is stopping.
_STOP_CHECK_SECONDS = 0.2


class CatchUpIncomplete(RuntimeError):
    """An attempt of the catch-up ended before every partition's end was reached.

    What it applied is kept (the stores hold a prefix of their changelog, and say up to
    which offset); the next attempt goes on from there.
    """


class CatchUpAbandoned(Exception):
    """The worker is stopping: the catch-up stopped retrying without finishing."""


class CatchUpReport(Protocol):
    """Told when a catch-up stalls and when it completes after a stall (the worker's
    readiness and metrics: :class:`app.worker.health.RecoveryStalls`). Called from the
    catch-up's thread."""

    def stalled(
        self, partitions: Sequence[int], reason: str, attempt: int, retry_in: float
    ) -> None: ...

    def resumed(self, partitions: Sequence[int]) -> None: ...


def stale_after(tombstone_retention: float) -> float:
    """Age (seconds) past which a store may have missed compacted-away tombstones."""
    return tombstone_retention - min(STALE_MARGIN_SECONDS, tombstone_retention / 10)


def is_stale(db: Rdict, now: float, max_age: float) -> bool:
    """Whether ``db`` holds data but was last caught up more than ``max_age`` ago.

    A store with an offset but no record of when it was caught up (written before the
    record existed) counts as stale: rebuilding is slower, never wrong.
    """
    if persisted_offset(db) is None:
        return False  # empty or never caught up: it is read from the start anyway
    raw = db.get(CAUGHT_UP)
    if raw is None:
        return True
    return now - float(raw) > max_age


def is_unconfirmed(db: Rdict) -> bool:
    """Whether ``db`` holds local writes of a unit whose changelog records were not
    known to be durable when its worker stopped (the :data:`~app.core.keys.UNCONFIRMED`
    marker: set with a unit's local writes, cleared once its flush is acknowledged).

    Such a store may be ahead of its changelog, and the changelog may since have been
    written by another owner that applied the same requests otherwise (a request read
    again after a crash is stored for the next tick, not at its own second). Caught up
    on top of that, the store would keep writes nobody else has: an older version of a
    timer at its old second, fired later, a reschedule undone. It is rebuilt instead:
    reading the changelog costs what is pending, once, after a crash.
    """
    return db.get(UNCONFIRMED) is not None


def empty_store(db: Rdict) -> None:
    """Remove every key (timers, index, bookkeeping, offsets) from ``db``."""
    batch = WriteBatch(raw_mode=True)
    # Every key starts with an ASCII letter or "_" (app.core.keys): one range covers all.
    batch.delete_range(b"\x00", b"\xff")
    db.write(batch)


def persisted_offset(db: Rdict) -> int | None:
    """The changelog offset this RocksDB is known to contain, if any."""
    raw = db.get(FAUST_OFFSET)
    return int(raw) if raw is not None else None


def catch_up_changelog(
    db: Rdict,
    consumer_conf: dict[str, Any],
    topic: str,
    partition: int,
    timeout: float = DEFAULT_STALL_SECONDS,
) -> int:
    """Apply every changelog record after the persisted offset, up to the true end.

    Returns how many records were applied. Reads to EOF (the fetch high watermark), so
    it is right even where the broker's ListOffsets end is wrong. One attempt: raises
    :class:`CatchUpIncomplete` after ``timeout`` seconds without progress.
    """
    return catch_up_changelogs({partition: db}, consumer_conf, topic, timeout)[partition]


def catch_up_changelogs(
    dbs: Mapping[int, Rdict],
    consumer_conf: dict[str, Any],
    topic: str,
    timeout: float = DEFAULT_STALL_SECONDS,
    *,
    max_age: float | None = None,
    clock: Callable[[], float] = time.time,
    fetch_wait: int = 10,
    should_stop: Callable[[], bool] | None = None,
) -> dict[int, int]:
    """:func:`catch_up_changelog` for several partitions at once, with one consumer.

    librdkafka applies a changelog at hundreds of thousands of records a second, where
    Faust's own recovery (a Python event per record) manages about ten thousand: run
    before Faust's recovery, this leaves it nothing to do. A store last caught up more
    than ``max_age`` seconds ago (see :func:`stale_after`) is emptied first and rebuilt
    from the start; every store is then marked caught up as of now.

    One attempt. ``timeout`` is how long it may go without progress (a record read, or
    a partition's end reached): then it raises :class:`CatchUpIncomplete`, as it does on
    a consumer error; :class:`CatchUpAbandoned` when ``should_stop`` says so. Either
    way what it applied is written first, with the offset it reached (never the
    caught-up time): the next attempt goes on from there. ``fetch_wait`` is
    librdkafka's ``fetch.wait.max.ms``.
    """
    applied = dict.fromkeys(dbs, 0)
    if not dbs:
        return applied
    now = clock()
    for p, db in dbs.items():
        if max_age is not None and is_stale(db, now, max_age):
            raw = db.get(CAUGHT_UP)
            age = "an unknown time" if raw is None else f"{(now - float(raw)) / 86400:.1f} days"
            log.warning(
                "store of %s[%d] was last caught up %s ago, longer than the changelog keeps "
                "tombstones (%.1f days with the margin): rebuilding it from the changelog",
                topic,
                p,
                age,
                max_age / 86400,
            )
            empty_store(db)
        elif is_unconfirmed(db):
            log.warning(
                "store of %s[%d] holds writes of a unit not known to be durable (its "
                "worker stopped in the middle): rebuilding it from the changelog",
                topic,
                p,
            )
            empty_store(db)
    conf = dict(consumer_conf)
    conf.update(
        {
            "group.id": f"kafka-timers-catchup-{uuid.uuid4().hex}",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            # EOF is reported only after a fetch that waits this long: 500 ms by default,
            # per partition, on the takeover path. A later attempt waits longer
            # (app.core.backoff.fetch_wait_ms): a broker slower than the wait answers
            # nothing at all.
            "fetch.wait.max.ms": fetch_wait,
        }
    )
    consumer = Consumer(conf)
    batches = {p: WriteBatch(raw_mode=True) for p in dbs}
    # The offset each partition's store holds through: its last record applied, and
    # once at the end, the end itself less one. A log written by transactions ends in a
    # commit or abort marker (a control record no consumer receives), so the last
    # record's offset + 1 is below the end; under read_committed the end is the last
    # stable offset. Recording the position reached, not the last record seen, is what
    # lets a later reader (Faust's recovery, the next catch-up) start past the markers.
    last: dict[int, int] = {}
    done = False
    try:
        starts = {p: persisted_offset(db) for p, db in dbs.items()}
        # Offset 0, not OFFSET_BEGINNING: resolving that costs librdkafka another ~500 ms;
        # a compacted log that starts later is reset to its start by auto.offset.reset.
        consumer.assign(
            [TopicPartition(topic, p, 0 if s is None else s + 1) for p, s in starts.items()]
        )
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while at_end != set(dbs):
            if time.monotonic() > deadline:
                waiting = sorted(set(dbs) - at_end)
                raise CatchUpIncomplete(
                    f"changelog catch-up of {topic} {waiting} read nothing and reached no "
                    f"partition's end for {timeout:g} s (fetch wait {fetch_wait} ms)"
                )
            if should_stop is not None and should_stop():
                raise CatchUpAbandoned(f"changelog catch-up of {topic}: the worker is stopping")
            # consume(n, t) waits for n records or the whole t: keep t short, loop instead.
            for msg in consumer.consume(10000, 0.05):
                p = msg.partition() or 0
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        end = msg.offset()
                        if end is not None and end > 0 and end - 1 > last.get(p, -1):
                            last[p] = end - 1
                        if p not in at_end:
                            at_end.add(p)
                            deadline = time.monotonic() + timeout
                        continue
                    raise CatchUpIncomplete(f"changelog catch-up of {topic}[{p}] failed: {err}")
                at_end.discard(p)
                deadline = time.monotonic() + timeout
                key = msg.key()
                if key is None:
                    continue
                value = msg.value()
                if value is None:
                    batches[p].delete(key)
                else:
                    batches[p].put(key, value)
                last[p] = msg.offset() or 0
                applied[p] += 1
        done = True
    finally:
        try:
            consumer.close()
        finally:
            # Complete or not, what was read is a prefix of each changelog: keep it, with
            # the offset it reached. Only a complete catch-up is marked caught up.
            for p, offset in last.items():
                batches[p].put(FAUST_OFFSET, str(offset).encode())
            for p, db in dbs.items():
                if done:
                    batches[p].put(CAUGHT_UP, repr(clock()).encode())
                if done or p in last:
                    db.write(batches[p])
    for p, count in applied.items():
        if count:
            log.info(
                "changelog catch-up %s[%d]: applied %d records (through offset %d)%s",
                topic,
                p,
                count,
                last[p],
                "" if done else ", not yet at the end",
            )
    return applied


def catch_up_until_done(
    dbs: Mapping[int, Rdict],
    consumer_conf: dict[str, Any],
    topic: str,
    *,
    stall_timeout: float = DEFAULT_STALL_SECONDS,
    max_age: float | None = None,
    clock: Callable[[], float] = time.time,
    backoff: Backoff = CATCH_UP_BACKOFF,
    report: CatchUpReport | None = None,
    should_stop: Callable[[], bool] | None = None,
    attempt_once: Callable[..., dict[int, int]] = catch_up_changelogs,
    sleep: Callable[[float], None] = time.sleep,
    rand: Callable[[], float] = random.random,
) -> dict[int, int]:
    """:func:`catch_up_changelogs` until it completes: never raises for a broker that is
    slow, silent or away, only :class:`CatchUpAbandoned` once ``should_stop`` says so.

    Attempt *n* lets each fetch wait :func:`app.core.backoff.fetch_wait_ms` (10 ms, then
    100, 500, 1000) and, should it stall (no progress for ``stall_timeout``) or fail, is
    followed after ``backoff.delay(n)`` by attempt *n* + 1, from where it stopped.
    ``report`` hears of each failed attempt and of the completion after one. Only the
    first attempt may rebuild a stale store (``max_age``): a rebuild cut short is not
    marked caught up, and must not be started over by the next attempt.

    What still raises is not the broker: a RocksDB write that fails (a full or broken
    disk) is the worker's own failure, and stops it.
    """
    partitions = sorted(dbs)
    applied = dict.fromkeys(dbs, 0)
    attempt = 1
    reported = False
    try:
        while True:
            try:
                done = attempt_once(
                    dbs,
                    consumer_conf,
                    topic,
                    stall_timeout,
                    max_age=max_age if attempt == 1 else None,
                    clock=clock,
                    fetch_wait=fetch_wait_ms(attempt),
                    should_stop=should_stop,
                )
            except (CatchUpIncomplete, KafkaException) as exc:
                delay = backoff.delay(attempt, rand)
                reason = " ".join(str(exc).split())
                log.warning(
                    "changelog catch-up of %s %s, attempt %d, did not complete: %s; the "
                    "worker stays up and not ready, and tries again in %.1f s",
                    topic,
                    partitions,
                    attempt,
                    reason,
                    delay,
                )
                if report is not None:
                    reported = True
                    report.stalled(partitions, reason, attempt, delay)
                _wait(delay, should_stop, sleep)
                attempt += 1
                continue
            for p, count in done.items():
                applied[p] += count
            if attempt > 1:
                log.warning(
                    "changelog catch-up of %s %s complete after %d attempts",
                    topic,
                    partitions,
                    attempt,
                )
            return applied
    finally:
        if reported and report is not None:
            report.resumed(partitions)


def _wait(
    seconds: float, should_stop: Callable[[], bool] | None, sleep: Callable[[float], None]
) -> None:
    """Sleep ``seconds`` in slices of :data:`_STOP_CHECK_SECONDS`, looking before each
    whether the worker is stopping."""
    left = seconds
    while left > 0:
        if should_stop is not None and should_stop():
            raise CatchUpAbandoned("the worker is stopping")
        step = min(left, _STOP_CHECK_SECONDS)
        sleep(step)
        left -= step
