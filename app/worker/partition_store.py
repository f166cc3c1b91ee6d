"""One partition of the Faust timer table, written directly: RocksDB plus changelog.

Faust owns the table's lifecycle: it opens one RocksDB (rocksdict) per assigned
partition, rebuilds it from the changelog topic on assignment, and closes it on
revocation. Writing through ``table[key] = value`` costs a full Faust round per key
(about 3,000 writes/s measured here), so the worker writes the same two things itself —
the RocksDB put and the changelog record on the mirrored partition — through librdkafka,
in batches. Faust's recovery reads those changelog records exactly like its own.

Before a store is used it is read up to its changelog's true end: :mod:`app.worker.catch_up`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from rocksdict import Rdict, ReadOptions, WriteBatch

from app.core.backoff import Backoff
from app.core.keys import CAUGHT_UP, FAUST_OFFSET, UNCONFIRMED
from app.worker.catch_up import (
    CATCH_UP_BACKOFF,
    DEFAULT_STALL_SECONDS,
    CatchUpReport,
    catch_up_until_done,
    persisted_offset,
)
from app.worker.changelog_repair import ChangelogRepairer, foreign_offsets
from app.worker.output import OutputProducer

__all__ = ["ChangeloggedKV", "RocksDBStores"]

log = logging.getLogger(__name__)


class ChangeloggedKV:
    """The :class:`~app.core.wheel.OrderedKV` of a partition: RocksDB, mirrored to the changelog."""

    def __init__(
        self,
        db: Rdict,
        output: OutputProducer,
        changelog_topic: str,
        partition: int,
        clock: Callable[[], float] = time.time,
        check_writers: bool = False,
        repairer: ChangelogRepairer | None = None,
    ) -> None:
        """``check_writers``: the store checks that every changelog record after the
        offset it was caught up to is its worker's, by the output's count of them (see
        :meth:`record_persisted`); not in exactly-once mode, whose transaction markers
        take offsets too. ``repairer``: with ``check_writers``, writes over another
        writer's records once they show (:mod:`app.worker.changelog_repair`)."""
        self._db = db
        self._output = output
        self._topic = changelog_topic
        self.partition = partition
        self._clock = clock
        self._repairer = repairer
        #: The offset the store was caught up to when opened (-1: none), if it checks
        #: that no other worker writes its changelog.
        self._opened_offset: int | None = None
        #: The changelog offset through which every other writer's record was found.
        self._checked = -1
        if check_writers:
            opened = persisted_offset(db)
            self._opened_offset = self._checked = -1 if opened is None else opened
            output.count_changelog_after(partition, self._opened_offset)
        #: Another writer's records were found among this worker's: the persisted offset
        #: stays where the changelog was last known to hold only what this store holds.
        self._foreign = False
        #: Local writes held back until the unit's transaction commits (exactly-once mode).
        self._deferred: dict[bytes, bytes | None] | None = None
        #: Whether local writes were applied since the last acknowledged flush (and the
        #: store carries the UNCONFIRMED marker).
        self._unconfirmed = db.get(UNCONFIRMED) is not None
        #: Whether the next local batches are to carry the marker (mark_unconfirmed).
        self._marking = False

    def get(self, key: bytes) -> bytes | None:
        if self._deferred is not None and key in self._deferred:
            return self._deferred[key]
        value: bytes | None = self._db.get(key)
        return value

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        values: list[bytes | None] = self._db.get(list(keys)) or []  # RocksDB's multi-get
        deferred = self._deferred
        if deferred:
            return [deferred.get(k, v) for k, v in zip(keys, values, strict=True)]
        return values

    def put(self, key: bytes, value: bytes) -> None:
        # _write_local inline, here and in delete: a forgotten timer is three of these
        # calls, and a unit's writes are almost always deferred (one dict store each).
        deferred = self._deferred
        if deferred is not None:
            deferred[key] = value
        else:
            self._db.put(key, value)
        self._output.changelog(self._topic, self.partition, key, value)

    def delete(self, key: bytes) -> None:
        deferred = self._deferred
        if deferred is not None:
            deferred[key] = None
        else:
            self._db.delete(key)
        self._output.changelog(self._topic, self.partition, key, None)

    def put_changelog(self, key: bytes, value: bytes) -> None:
        """Write the changelog only; :meth:`put_local` follows once it is durable."""
        self._output.changelog(self._topic, self.partition, key, value)

    def put_local(self, key: bytes, value: bytes) -> None:
        """Write only the local store: for a value whose changelog record is already out."""
        self._write_local(key, value)

    def _write_local(self, key: bytes, value: bytes | None) -> None:
        if self._deferred is not None:
            self._deferred[key] = value
        elif value is None:
            self._db.delete(key)
        else:
            self._db.put(key, value)

    def defer_local_writes(self) -> None:
        """Hold local writes back (reads see them) until :meth:`apply_deferred`.

        In exactly-once mode a tick's deletes must reach RocksDB only once its
        transaction committed: a crash before that must leave the timers in place.
        """
        self._deferred = {}

    def apply_deferred(self) -> None:
        """Write the held-back changes to RocksDB in one batch; after
        :meth:`mark_unconfirmed`, with the marker of :func:`~app.worker.catch_up.is_unconfirmed`."""
        deferred, self._deferred = self._deferred or {}, None
        if deferred:
            batch = WriteBatch(raw_mode=True)
            if self._marking:
                batch.put(UNCONFIRMED, b"1")
                self._unconfirmed = True
            for key in sorted(deferred):
                value = deferred[key]
                if value is None:
                    batch.delete(key)
                else:
                    batch.put(key, value)
            self._db.write(batch)

    def discard_deferred(self) -> None:
        """Drop the held-back changes (their transaction was aborted)."""
        self._deferred = None

    def mark_unconfirmed(self) -> None:
        """The local writes from now on are a unit of requests', ahead of its changelog:
        each batch of them carries the :data:`~app.core.keys.UNCONFIRMED` marker, until
        :meth:`record_persisted` says the changelog holds them. (A tick's writes are not
        marked: deletes of delivered timers and a series' next occurrence are what
        any owner would write again, whatever it read.)"""
        self._marking = True

    def scan(self, low: bytes, high: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The keys from ``low`` up to (not including) ``high``, in order, with values.

        rocksdict's own item iterator, delegated to: a tick's scan and a held timer's
        take read a key each, and four cursor calls a key from Python were a quarter of
        a key's read (3,310 instructions against 2,507, callgrind over 10,000 keys).
        A generator still, and on purpose: its frame keeps the options and both bounds
        alive for as long as the scan is read. rocksdict's iterator does not: returned
        as is from here, a tick's scan (whose bounds are temporaries of the call) walked
        past its upper bound once the call returned, 501 keys of a second that holds
        500 (tests/unit/test_changelogged_kv.py)."""
        options = ReadOptions()
        options.set_iterate_upper_bound(high)  # stop at the bound, never walk past it
        yield from self._db.items(from_key=low, read_opt=options)

    def record_persisted(self, offset: int, acked: int | None = None) -> None:
        """Tell Faust's recovery that changelog records up to ``offset`` are in this DB;
        everything produced so far is acknowledged, so the local writes are confirmed.

        ``offset`` is the newest of this worker's records the broker acknowledged, and
        ``acked`` how many of them it acknowledged past the offset the store was caught
        up to when opened (:meth:`OutputProducer.count_changelog_after`). That
        the store holds every record up to ``offset`` is true only if no other worker
        wrote the changelog since the store was caught up, which one worker owning a
        partition at a time should ensure. But a stale owner does write: a worker
        frozen past its session (SIGSTOP, a VM stall) that applies a batch on waking
        before it learns that the group moved on, or records held up by a cut-off
        network and delivered after the partition had moved. Its records and the new
        owner's then interleave, and each store that recorded its own newest offset
        claimed the other's records it never applied: its next catch-up started after
        them. (The nemesis on Apache Kafka lost occurrences of four series so: a worker
        woken from a 13 s SIGSTOP applied a batch at once, and when the group gave it the
        partition back it resumed its store past the new owner's records, which held
        the series' next occurrences.) So the offsets past the opening are counted: while
        every one of them holds a record of this worker's, the offset is recorded; once
        another writer's records show among them, the store
        keeps the last offset recorded before them, for as long as it is open, and its
        next load reads everything after that again (a warning says so). ``acked``
        None, or a store opened without ``check_writers``: not checked."""
        self._marking = False
        self.find_foreign(offset)
        holds = offset if self._holds_all_through(offset, acked) else None
        if self._unconfirmed:
            batch = WriteBatch(raw_mode=True)
            if holds is not None:
                batch.put(FAUST_OFFSET, str(holds).encode())
            batch.delete(UNCONFIRMED)
            self._db.write(batch)
            self._unconfirmed = False
        elif holds is not None:
            self._db.put(FAUST_OFFSET, str(holds).encode())

    def _holds_all_through(self, offset: int, acked: int | None) -> bool:
        """Whether every changelog record up to ``offset`` is in this store: those up to
        its opening, and after it only this worker's (``acked``: see record_persisted)."""
        if self._foreign:
            return False
        opened = self._opened_offset
        if acked is None or opened is None:
            return True
        if acked == 0:  # none of this worker's records since the opening
            return False
        if offset - opened == acked:
            return True
        self._foreign = True
        log.warning(
            "changelog %s[%d]: offsets %d to %d hold %d records this worker did not write "
            "(another worker wrote the partition while this one held it: one of the two "
            "was a stale owner); the store is known to hold the changelog only up to its "
            "last offset before them, and its next load reads the rest from the changelog",
            self._topic,
            self.partition,
            opened + 1,
            offset,
            offset - opened - acked,
        )
        return False

    def find_foreign(self, through: int) -> None:
        """Have the repairer write over another writer's records up to changelog offset
        ``through`` (every record of this worker's there acknowledged), if it checks
        writers: after a flush, and when the changelog's end passed this worker's last
        record while it wrote nothing (an idle owner: RocksDBStores.find_foreign)."""
        if self._opened_offset is None or through <= self._checked:
            return
        own = self._output.take_own_changelog(self.partition, through)
        foreign = foreign_offsets(self._checked, through, own)
        self._checked = through
        if foreign and self._repairer is not None:
            self._repairer.submit(self, foreign)

    def write_over(self, keys: set[bytes]) -> int:
        """Write the value this store holds now for each of ``keys`` to the changelog (a
        tombstone where it holds none), over another writer's records of them
        (:mod:`app.worker.changelog_repair`); how many were written, 0 once the store is
        closed (its partition gone: the next owner reads the changelog as it is)."""
        try:
            values = self.get_many(sorted(keys))
        except Exception:  # rocksdict raises on a closed database
            return 0
        for key, value in zip(sorted(keys), values, strict=True):
            self._output.changelog(self._topic, self.partition, key, value)
        return len(keys)

    async def flush(self) -> None:
        """Wait until everything written so far is acknowledged."""
        await self._output.flush()

    def mark_caught_up(self) -> None:
        """Record (locally) that this store holds everything its changelog holds, now.

        True for as long as this worker owns the partition: it writes the changelog.
        """
        self._db.put(CAUGHT_UP, repr(self._clock()).encode())


class RocksDBStores:
    """The worker's :class:`~app.worker.stores.StoreFactory`: Faust's RocksDB partitions.

    Opening a partition reads its changelog on to the true end first. The worker caught
    each store up before Faust's recovery, which then read to the broker's end offset;
    on the dev broker that end is short, so this reads the rest (a short tail, usually
    nothing). Should Faust replay old records over the store, it also brings it forward.

    Every catch-up (:meth:`catch_up`, and the one in :meth:`open`) retries until it
    completes (:func:`~app.worker.catch_up.catch_up_until_done`), one at a time: two
    catch-ups of one store at once could leave it at the shorter one's end.
    """

    def __init__(
        self,
        db_for_partition: Callable[[int], Rdict],
        output: OutputProducer,
        changelog_topic: str,
        catchup_consumer_conf: dict[str, Any],
        *,
        max_age: float | None = None,
        clock: Callable[[], float] = time.time,
        stall_timeout: float = DEFAULT_STALL_SECONDS,
        backoff: Backoff = CATCH_UP_BACKOFF,
        report: CatchUpReport | None = None,
        should_stop: Callable[[], bool] | None = None,
        repairer: ChangelogRepairer | None = None,
    ) -> None:
        self._repairer = repairer
        self._db_for_partition = db_for_partition
        self._output = output
        self._topic = changelog_topic
        self._catchup_conf = catchup_consumer_conf
        self._max_age = max_age
        self._clock = clock
        self._stall_timeout = stall_timeout
        self._backoff = backoff
        self._report = report
        self._should_stop = should_stop
        self._lock = threading.Lock()

    def catch_up(self, dbs: Mapping[int, Rdict]) -> dict[int, int]:
        """Bring ``dbs`` (opened by the caller, by partition) to their changelog's end.

        Blocks until done, retrying with backoff (run it in a thread); raises
        :class:`~app.worker.catch_up.CatchUpAbandoned` if the worker stops first.
        """
        with self._lock:
            return catch_up_until_done(
                dbs,
                self._catchup_conf,
                self._topic,
                stall_timeout=self._stall_timeout,
                max_age=self._max_age,
                clock=self._clock,
                backoff=self._backoff,
                report=self._report,
                should_stop=self._should_stop,
            )

    async def find_foreign(self, stores: Mapping[int, Any]) -> None:
        """Look whether another writer's records ended the changelogs of ``stores`` (the
        ones this worker holds) while this worker wrote nothing: a stale owner's late
        records reaching an idle owner would otherwise wait for its next write
        (:mod:`app.worker.changelog_repair`). Only while nothing of this worker's is on
        its way: a record in flight would look like another writer's."""
        kvs = {p: kv for p, kv in stores.items() if isinstance(kv, ChangeloggedKV)}
        if self._repairer is None or self._output.transactional:
            return  # exactly-once: not checked (app.worker.changelog_repair)
        if not kvs or self._output.in_flight():
            return
        loop = asyncio.get_running_loop()
        ends = await loop.run_in_executor(None, self._repairer.ends, sorted(kvs))
        if self._output.in_flight():
            return
        for p, end in ends.items():
            if p in kvs and end > self._output.changelog_acked.get(p, -1) + 1:
                kvs[p].find_foreign(end - 1)

    def open(self, partition: int) -> ChangeloggedKV:
        db = self._db_for_partition(partition)
        self.catch_up({partition: db})
        return ChangeloggedKV(
            db,
            self._output,
            self._topic,
            partition,
            self._clock,
            check_writers=not self._output.transactional,
            repairer=self._repairer,
        )
