"""The request reader against a real broker: a long idle read never holds up a rebalance.

An idle read waits up to its idle wait (here 5 s) for a first record, holding the
reader's lock, so a revoke or an assignment must end it early (it polls in slices and
gives up when an assignment change waits) rather than wait it out. Through revokes,
new partitions and a partition taken back, every partition's requests are applied in
offset order, each once, and only while held; and a batch read after the group lease
ran out is applied only once it is held again, never after a revoke.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

from confluent_kafka import Producer

from app.core.raw_record import RawRecord
from app.kafka.config import confluent_consumer, confluent_producer
from app.settings import Settings
from app.worker.group_lease import GroupLease
from app.worker.request_reader import RequestReader
from tests.support.waiting import wait_until_async

IDLE_WAIT = 5.0


def _produce(settings: Settings, counts: dict[int, int]) -> None:
    producer = Producer(confluent_producer(settings))
    for partition, n in counts.items():
        for i in range(n):
            producer.produce(settings.topics.requests, b"%d" % i, key=b"k", partition=partition)
    assert producer.flush(30) == 0


def _reader(
    settings: Settings,
    handle: Callable[[list[RawRecord]], Awaitable[None]],
    resume_offset: Callable[[int], Awaitable[int | None]],
    **options: Any,
) -> RequestReader:
    """A reader of the request topic with short fetch waits and small batches."""
    return RequestReader(
        confluent_consumer(settings, group_id=settings.app_id, **{"fetch.wait.max.ms": 50}),
        settings.topics.requests,
        handle=handle,
        resume_offset=resume_offset,
        batch_size=100,
        batch_wait=0.02,
        **options,
    )


async def _scenario(settings: Settings) -> dict[int, list[int]]:
    applied: dict[int, list[int]] = defaultdict(list)
    held: set[int] = set()
    stored: dict[int, int] = {}  # the offset a store would hold (key R): last applied

    async def handle(records: list[RawRecord]) -> None:
        for record in records:
            assert record.partition in held, f"applied a request of {record.partition}"
            applied[record.partition].append(record.offset)
            stored[record.partition] = record.offset

    async def resume_offset(partition: int) -> int | None:
        return stored.get(partition)

    reader = _reader(settings, handle, resume_offset, idle_wait=IDLE_WAIT)

    async def assign(partitions: set[int]) -> float:
        held.update(partitions)  # before: a new partition's records may come at once
        began = time.monotonic()
        await reader.assign(partitions)
        held.intersection_update(partitions)
        return time.monotonic() - began

    _produce(settings, {0: 50, 1: 50, 2: 50})
    task = asyncio.create_task(reader.run())
    try:
        await assign({0, 1})
        # assign() returns once the waiting requests of its new partitions are applied.
        assert len(applied[0]) == 50 and len(applied[1]) == 50, dict(applied)

        await wait_until_async(lambda: reader.idle_waiting, 20, "the reader's idle read")
        revoke_took = await assign({0})
        assert revoke_took < IDLE_WAIT / 2, f"the revoke waited {revoke_took:.1f} s for a read"

        _produce(settings, {0: 10, 1: 10})
        await wait_until_async(lambda: len(applied[0]) == 60, 20, "partition 0's new requests")

        # 1 taken back and 2 new, while an idle read waits: it ends early, and both are
        # read to their end before assign() returns.
        await wait_until_async(lambda: reader.idle_waiting, 20, "the reader's idle read")
        took = await assign({0, 1, 2})
        assert took < IDLE_WAIT / 2, f"the assignment waited {took:.1f} s for an idle read"
        assert len(applied[1]) == 60 and len(applied[2]) == 50, dict(applied)

        # Given up and taken back at once: nothing is applied twice or out of order.
        await wait_until_async(lambda: reader.idle_waiting, 20, "the reader's idle read")
        await assign({0, 1})
        await assign({0, 1, 2})
        _produce(settings, {2: 5})
        await wait_until_async(lambda: len(applied[2]) == 55, 20, "partition 2's new requests")
        # Shut down as Faust does: the task is cancelled while its idle read waits in a
        # thread; close() then waits for that read's current slice, not its whole wait.
        await wait_until_async(lambda: reader.idle_waiting, 20, "the reader's idle read")
        task.cancel()
        began = time.monotonic()
        reader.close()
        closing_took = time.monotonic() - began
        assert closing_took < IDLE_WAIT / 2, f"close() waited {closing_took:.1f} s for a read"
    finally:
        if not task.done():
            reader.stop()
            await asyncio.gather(task, return_exceptions=True)
            reader.close()
    return dict(applied)


def test_assignment_changes_end_an_idle_read_and_keep_order(settings: Settings) -> None:
    applied = asyncio.run(_scenario(settings))
    for partition, offsets in applied.items():
        assert offsets == sorted(set(offsets)), f"partition {partition}: {offsets}"
    assert {p: len(o) for p, o in applied.items()} == {0: 60, 1: 60, 2: 55}


async def _lapsed_scenario(settings: Settings) -> tuple[list[int], int]:
    """A worker whose group lease ran out (frozen past its session) reads a batch."""
    now = [1000.0]
    lease = GroupLease(6.0, clock=lambda: now[0])
    lease.renew(now[0])
    applied: list[int] = []
    stored: dict[int, int] = {}

    async def handle(records: list[RawRecord]) -> None:
        for record in records:
            applied.append(record.offset)
            stored[record.partition] = record.offset

    async def resume_offset(partition: int) -> int | None:
        return stored.get(partition)

    reader = _reader(settings, handle, resume_offset, idle_wait=0.5, lease=lease)
    _produce(settings, {0: 20})
    task = asyncio.create_task(reader.run())
    try:
        await reader.assign({0})
        assert len(applied) == 20
        # Frozen past the session: the next batch is read, put back, and waits.
        now[0] += 10
        _produce(settings, {0: 5})
        await wait_until_async(lambda: reader.batches_put_back >= 1, 20, "a batch put back")
        assert len(applied) == 20, "applied while the group may have moved on"
        # A heartbeat answered: this worker still owns it, and the batch goes on as read.
        lease.renew(now[0])
        await wait_until_async(lambda: len(applied) == 25, 20, "the batch put back")
        # Frozen again, and this time the group moved on: the revoke ends the wait at
        # once, nothing of the batch applied; the next owner resumes from the store.
        now[0] += 10
        _produce(settings, {0: 5})
        await wait_until_async(lambda: reader.batches_put_back >= 2, 20, "a batch put back")
        began = time.monotonic()
        await reader.assign(set())
        revoke_took = time.monotonic() - began
        assert len(applied) == 25, "applied by a worker the group had moved on from"
        lease.renew(now[0])
        await reader.assign({0})
        assert len(applied) == 30
        # Frozen while partitions are assigned: their waiting requests are put back too,
        # and an empty one read to its end in the same batch is still at its end.
        now[0] += 10
        _produce(settings, {1: 5})
        assigning = asyncio.create_task(reader.assign({0, 1, 2}))
        await wait_until_async(lambda: reader.batches_put_back >= 3, 20, "a batch put back")
        assert len(applied) == 30 and not assigning.done()
        lease.renew(now[0])
        await asyncio.wait_for(assigning, 20)
        assert len(applied) == 35
    finally:
        reader.stop()
        await asyncio.gather(task, return_exceptions=True)
        reader.close()
    return applied, round(revoke_took)


def test_a_batch_read_after_the_group_lease_ran_out_waits_for_it(settings: Settings) -> None:
    applied, revoke_took = asyncio.run(_lapsed_scenario(settings))
    assert applied == list(range(30)) + list(range(5)), "every request applied once, in order"
    assert revoke_took < 2, f"the revoke waited {revoke_took} s for a batch put back"
