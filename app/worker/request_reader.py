"""Timer requests read with librdkafka, for the partitions Faust gave this worker.

Faust's stream machinery costs about 80-100 µs per event on the dev machines: an agent
that does nothing but ``take_events`` reads 10-13k events/s there, so a worker reading
requests through it could never store more, whatever the service does. Requests
therefore bypass it: a confluent-kafka consumer is *assigned* (never subscribed) request
partition n whenever Faust assigns this worker tick partition n. The topics are
co-partitioned, so that is exactly the partition whose table this worker holds. Faust
keeps what it is good at: group membership, the assignment, the table and its recovery.

Where to resume is kept in the table itself: each batch writes the offset of the last
request it applied to a partition into that partition's store (key ``R``), in the same
flush (or transaction) as the timers it stored. Whoever owns the partition next reads it
from the recovered table, so a request is applied again only if its effects were not
durable: at-least-once as before, with no consumer-group offset to keep in step.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from app.core.raw_record import RawRecord
from app.kafka.records import to_record
from app.worker.group_lease import GroupLease
from app.worker.request_progress import RequestProgress

__all__ = ["IDLE_WAIT", "LEASE_CHECK", "RequestReader"]

log = logging.getLogger(__name__)

#: How long an idle reader waits in one read for its first record, seconds. ``poll``
#: returns as soon as a record arrives, so this adds no latency; it only sets how often
#: an idle reader hands back to the event loop: once a second. Ten times a second cost
#: an idle worker 0.3-0.5% of a core (measured), each a thread's future resolved on the
#: loop.
IDLE_WAIT = 1.0
#: An idle read polls in slices this long, seconds, and ends early when an assignment
#: change waits for the reader's lock: librdkafka's ``incremental_unassign`` waits for a
#: ``poll`` in another thread to return (measured: 4.5 s into a 5 s poll), so a revoke
#: waits at most one slice. Between slices only the reading thread wakes, not the loop.
IDLE_SLICE = 0.1
#: While nothing arrives, lag metrics and the informational commits are refreshed this
#: often, seconds (after every batch otherwise).
IDLE_REPORT_INTERVAL = 1.0
#: How often a batch put back while the group lease has run out looks whether the lease
#: is held again (or an assignment change waits), seconds.
LEASE_CHECK = 0.05


class RequestReader:
    """Reads request batches for the assigned partitions and hands them to the service.

    One lock covers every use of the consumer: reading and applying a batch, and
    changing the assignment. So a batch is never read under one assignment and applied
    under another, and a revoke returns only once no batch of its partitions is in
    progress.
    """

    def __init__(
        self,
        consumer_conf: dict[str, Any],
        topic: str,
        *,
        handle: Callable[[list[RawRecord]], Awaitable[None]],
        resume_offset: Callable[[int], Awaitable[int | None]],
        batch_size: int,
        batch_wait: float,
        progress_interval: float = 10.0,
        progress: RequestProgress | None = None,
        idle_wait: float = IDLE_WAIT,
        lease: GroupLease | None = None,
    ) -> None:
        """``lease``: whether the group still certainly gives this worker its partitions
        (:mod:`app.worker.group_lease`); a batch read after it ran out is put back, not
        applied (:meth:`_put_back`). None: not checked."""
        self._lease = lease
        #: Batches put back because the lease had run out (for tests and status).
        self.batches_put_back = 0
        self._consumer = Consumer({**consumer_conf, "enable.partition.eof": True})
        self._topic = topic
        self._handle = handle
        self._resume_offset = resume_offset
        self._batch_size = batch_size
        self._batch_wait = batch_wait
        self._idle_wait = idle_wait
        self._progress_interval = progress_interval
        #: Lag metrics and informational offset commits (None: neither).
        self._progress = progress
        self._assigned: set[int] = set()
        self._lock = asyncio.Lock()
        #: Set while an assignment change waits for the lock: ends an idle read early.
        self._assignment_waits = threading.Event()
        #: Held by the reading thread while it reads; :meth:`close` waits for it.
        self._reading = threading.Lock()
        #: Set by :meth:`stop` and :meth:`close`: a read in progress ends at its next slice.
        self._closing = threading.Event()
        #: Whether an idle read is waiting for a first record now (set by its thread).
        self.idle_waiting = False
        self._wakeup = asyncio.Event()
        self._stopped = False

    async def assign(self, partitions: Iterable[int]) -> None:
        """Read exactly ``partitions`` from now on, each from its stored offset.

        Returns once every request already waiting on a newly assigned partition has
        been applied. Called before Faust resumes the tick streams after a rebalance,
        this keeps the old order: a request that was in the topic when this worker took
        the partition is applied before any of that partition's ticks is processed, so
        a cancel sent before its timer's second still wins after a restart.
        """
        wanted = set(partitions)
        self._assignment_waits.set()
        async with self._lock:
            self._assignment_waits.clear()
            gone, new = self._assigned - wanted, wanted - self._assigned
            if gone:
                self._consumer.incremental_unassign(
                    [TopicPartition(self._topic, p) for p in sorted(gone)]
                )
                if self._progress is not None:
                    self._progress.revoked(gone)
            starts = []
            for p in sorted(new):
                stored = await self._resume_offset(p)
                start = stored + 1 if stored is not None else self._committed(p)
                starts.append(TopicPartition(self._topic, p, start))
            if starts:
                self._consumer.incremental_assign(starts)
                if self._progress is not None:
                    self._progress.assigned(starts)
                log.info(
                    "reading requests from %s",
                    ", ".join(f"{tp.partition}@{tp.offset}" for tp in starts),
                )
            self._assigned = wanted
            await self._drain(new)
            self._report_progress()
        self._wakeup.set()

    async def revoke(self, partitions: Iterable[int]) -> None:
        """Stop reading ``partitions``; returns once no batch of theirs is in progress."""
        await self.assign(self._assigned - set(partitions))

    def _committed(self, partition: int) -> int:
        """Offset committed for ``partition`` by a worker that read requests through Faust
        (same group id), so an upgrade does not re-read the whole topic; else the start."""
        try:
            (tp,) = self._consumer.committed([TopicPartition(self._topic, partition)], 10)
        except Exception as exc:  # no committed offset to be had: read from the start
            log.warning("no committed offset for %s[%d]: %s", self._topic, partition, exc)
            return OFFSET_BEGINNING
        return tp.offset if tp.offset >= 0 else OFFSET_BEGINNING

    async def _drain(self, partitions: set[int]) -> None:
        """Apply batches until each of ``partitions`` has been read to its end.

        However long that takes: a big backlog (a worker down for an hour) is applied at
        ~20,000 requests/s, and ticks must not overtake it. Progress is logged every
        :attr:`progress_interval` seconds, so a stuck read is visible, not silent.
        """
        waiting = set(partitions)
        next_report = time.monotonic() + self._progress_interval
        while waiting:
            if time.monotonic() > next_report:
                log.warning("still reading the waiting requests of partitions %s", sorted(waiting))
                next_report += self._progress_interval
            read, at_end = await self._read_batch(0.05)
            if read < 0 and (self._assignment_waits.is_set() or self._closing.is_set()):
                return  # put back, and the group moved on: the next assignment reads them
            waiting -= at_end

    async def _read_batch(self, wait: float, first_wait: float = 0.0) -> tuple[int, set[int]]:
        """Read one batch and apply it; return how many messages it held, and the
        partitions that reached their end; -1 if it was put back (:meth:`_put_back`),
        with the partitions at their end that had no record in it.

        With ``first_wait``, wait up to that long for the first message (``poll`` returns
        as soon as one arrives), then up to ``wait`` for the rest of the batch.
        """
        loop = asyncio.get_running_loop()
        if first_wait:
            messages = await loop.run_in_executor(None, self._consume_when_ready, wait, first_wait)
        else:
            messages = await loop.run_in_executor(None, self._consume, wait)
        records, at_end = [], set()
        for msg in messages:
            err = msg.error()
            if err is None:
                if msg.partition() in self._assigned:
                    records.append(to_record(msg))
            elif err.code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition() or 0)
            else:
                log.warning("reading requests: %s", err)
        if records and self._lease is not None and not self._lease.held():
            # A partition at its end with no record in the batch stays at its end.
            return -1, at_end - await self._put_back(records)
        if records:
            await self._handle(records)
            if self._progress is not None:
                self._progress.applied(records)
        return len(messages), at_end

    async def _put_back(self, records: list[RawRecord]) -> set[int]:
        """Put a batch read after the group lease ran out back, and wait until the lease
        is held again or the assignment changes; return the partitions put back.

        A worker frozen past its session (SIGSTOP, a VM stall) wakes believing it still
        owns its partitions, and its first batch used to be applied at once, before a
        heartbeat told it the group had moved on: the new owner had applied the same
        requests and fired since, and the woken worker's writes went to the changelog
        after the new owner's (in the nemesis, a series' request applied again by the
        woken worker moved the series back to its first second after occurrence 1 had
        fired, and no occurrence fired again). Ticks already waited for the lease
        (:mod:`app.worker.group_lease`); requests now do too: each partition of the
        batch is read again from its first record, so a renewed lease applies the batch
        as it was, and a revocation leaves it to the next owner, which resumes from the
        offset its store holds. A unit under way when the worker froze still ends after
        it wakes: the window left is one unit."""
        assert self._lease is not None
        first: dict[int, int] = {}
        for record in records:
            if record.offset < first.get(record.partition, record.offset + 1):
                first[record.partition] = record.offset
        for partition, offset in first.items():
            self._consumer.seek(TopicPartition(self._topic, partition, offset))
        self.batches_put_back += 1
        log.warning(
            "no heartbeat answered for %.0f s past the session timeout: a batch of %d "
            "requests waits (read again from %s) until the broker confirms this worker "
            "still owns its partitions, or the group gives them to another",
            self._lease.lapsed_for(),
            len(records),
            ", ".join(f"{p}@{o}" for p, o in sorted(first.items())),
        )
        while not (self._lease.held() or self._assignment_waits.is_set() or self._closing.is_set()):
            await asyncio.sleep(LEASE_CHECK)
        return set(first)

    def _consume(self, wait: float) -> list[Message]:
        """In the reading thread: a batch, waiting up to ``wait`` for it."""
        with self._reading:
            if self._closing.is_set():
                return []
            return self._consumer.consume(self._batch_size, wait)  # type: ignore[no-any-return]

    def _consume_when_ready(self, wait: float, first_wait: float) -> list[Message]:
        """In the reading thread: wait up to ``first_wait`` for a first message, in
        :data:`IDLE_SLICE` slices, giving up early when an assignment change waits or
        the reader closes; then up to ``wait`` for the rest of the batch."""
        with self._reading:
            deadline = time.monotonic() + first_wait
            first = None
            self.idle_waiting = True
            try:
                while first is None:
                    left = deadline - time.monotonic()
                    if left <= 0 or self._assignment_waits.is_set() or self._closing.is_set():
                        return []
                    first = self._consumer.poll(min(left, IDLE_SLICE))
            finally:
                self.idle_waiting = False
            return [first, *self._consumer.consume(self._batch_size - 1, wait)]

    def _report_progress(self) -> None:
        """Lag and commits, under the lock: every batch read so far has been applied."""
        if self._progress is not None:
            self._progress.update(self._consumer)

    async def run(self) -> None:
        """Read and apply batches until :meth:`stop`.

        After a read that found nothing, the next waits up to :data:`IDLE_WAIT` for its
        first message; a read that found some is followed at once by the next.
        """
        idle = False
        reported = time.monotonic()
        while not self._stopped:
            if not self._assigned:
                await self._wakeup.wait()
                self._wakeup.clear()
                continue
            async with self._lock:
                if self._assigned:
                    read, _ = await self._read_batch(
                        self._batch_wait, self._idle_wait if idle else 0.0
                    )
                    idle = not read
                    now = time.monotonic()
                    if read or now - reported >= IDLE_REPORT_INTERVAL:
                        self._report_progress()
                        reported = now

    def stop(self) -> None:
        """End :meth:`run` after the read in progress, which ends at its next slice."""
        self._stopped = True
        self._closing.set()
        self._wakeup.set()

    def close(self) -> None:
        """Close the consumer once no read is in it: a task cancelled at shutdown leaves
        its read running in the executor, which ends at its next slice."""
        self._closing.set()
        acquired = self._reading.acquire(timeout=IDLE_SLICE + self._batch_wait + 1.0)
        try:
            self._consumer.close()
        finally:
            if acquired:
                self._reading.release()
