"""Putting a partition's changelog right after a stale owner wrote into it.

In at-least-once mode nothing fences a worker that lost its partitions: records it
produced while it still believed it owned them can reach the broker long after the
group moved on. A worker cut off from the broker (a network partition, a frozen VM) has
its produce requests held in the network; it gives up (its flush times out) or is
killed, but the requests are delivered when the network heals, after the records of
the partition's new owner. The changelog is compacted, last record per key wins, and
whoever restores the partition next (a restart, a takeover) gets the stale owner's
values back: the nemesis on Apache Kafka lost four reschedules so, the older version
coming back and firing, the newer one gone (tests/integration/test_stale_writer.py).

The owner finds such records and writes over them. Its output knows the offset of every
changelog record it wrote since the store opened
(:meth:`app.worker.output.OutputProducer.take_own_changelog`); when a flush is
acknowledged, every other offset up to the newest acknowledged one is another writer's
(:func:`foreign_offsets`). The owner reads those records' keys
(:func:`read_changelog_keys`) and writes, for each, the value its store holds now, or a
tombstone where it holds none: the changelog again ends with what the owner holds. Only
while the group lease says it still owns the partition
(:class:`app.worker.group_lease.GroupLease`): a worker that is itself the stale one
(woken from the cut, its last flush answered at the heal) must not write its own old
values over the new owner's.

A busy owner finds them at its next flush; an idle one when it next asks its
changelogs' end offsets (every few seconds:
:meth:`app.worker.partition_store.RocksDBStores.find_foreign`). What it cannot cover: an
owner that stops between the late records' arrival and then leaves them for the next
restore to apply.

Not in exactly-once mode, whose transaction markers take offsets of their own (they would
look like another writer's records). There a stale owner's transaction is fenced once
the coordinator aborts it (``transaction.timeout.ms``, 15 s); a cut-off writer whose
held requests and commit reach the broker before that is not, a window this module does
not close.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, TopicPartition

__all__ = [
    "REPAIR_READ_TIMEOUT",
    "ChangelogRepairer",
    "RepairedStore",
    "foreign_offsets",
    "read_changelog_keys",
]

log = logging.getLogger(__name__)

#: How long reading the foreign records' keys may take, seconds; past it the repair
#: writes over what it read (the rest stays for the next load, as before).
REPAIR_READ_TIMEOUT = 10.0


def foreign_offsets(checked: int, through: int, own: Iterable[int]) -> list[int]:
    """The offsets after ``checked`` up to ``through`` that are not in ``own`` (this
    worker's acknowledged records there), in order. Pure."""
    mine = {o for o in own if checked < o <= through}
    return [o for o in range(checked + 1, through + 1) if o not in mine]


def read_changelog_keys(
    consumer_conf: dict[str, Any],
    topic: str,
    partition: int,
    offsets: list[int],
    timeout: float = REPAIR_READ_TIMEOUT,
) -> set[bytes]:
    """The keys of the records at ``offsets`` (sorted) of changelog ``partition``: the
    ones compaction left (a removed record's key has a later record, read too if it is
    another writer's). Blocking: run it off the event loop."""
    if not offsets:
        return set()
    conf = dict(consumer_conf)
    conf.update(
        {
            "group.id": f"kafka-timers-repair-{uuid.uuid4().hex}",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    wanted = set(offsets)
    last = offsets[-1]
    keys: set[bytes] = set()
    consumer = Consumer(conf)
    try:
        consumer.assign([TopicPartition(topic, partition, offsets[0])])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.1):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return keys
                    continue
                offset = msg.offset()
                if offset is None:
                    continue
                key = msg.key()
                if offset in wanted and key is not None:
                    keys.add(key)
                if offset >= last:
                    return keys
        return keys
    finally:
        consumer.close()


class RepairedStore(Protocol):
    """What a repair needs of a partition's store
    (:class:`~app.worker.partition_store.ChangeloggedKV`)."""

    partition: int

    def write_over(self, keys: set[bytes]) -> int:
        """Write each key's value held now (a tombstone where none) to the changelog;
        returns how many were written (0 if the store is closed)."""
        ...

    async def flush(self) -> None:
        """Wait until what was written is acknowledged."""
        ...


class ChangelogRepairer:
    """Reads the keys of another writer's changelog records off the event loop, then
    has the store write over them on it, while the group lease holds."""

    def __init__(
        self,
        consumer_conf: dict[str, Any],
        topic: str,
        *,
        owns: Callable[[RepairedStore], bool],
        repaired: Callable[[int], None],
    ) -> None:
        """``owns``: whether this worker still certainly owns the store's partition, and
        holds it in this very store (the group lease, and no rebalance since);
        ``repaired``: told how many records each repair wrote (the metric)."""
        self._conf = consumer_conf
        self._topic = topic
        self._owns = owns
        self._repaired = repaired
        #: Asks the changelog's end offsets (:meth:`ends`), made at the first ask.
        self._consumer: Consumer | None = None

    def ends(self, partitions: list[int]) -> dict[int, int]:
        """The changelog's end offset (high watermark) of each of ``partitions``, asked of
        the broker now; none past the first it did not answer in time (a broker away
        holds one executor thread for seconds, not for a timeout per partition).
        Blocking."""
        if self._consumer is None:
            conf = dict(self._conf)
            conf["group.id"] = f"kafka-timers-repair-{uuid.uuid4().hex}"
            self._consumer = Consumer(conf)
        ends: dict[int, int] = {}
        for p in partitions:
            try:
                _, high = self._consumer.get_watermark_offsets(
                    TopicPartition(self._topic, p), timeout=2, cached=False
                )
            except Exception:  # the broker away or slow: looked at again next time
                break
            ends[p] = high
        return ends

    def submit(self, store: RepairedStore, offsets: list[int]) -> None:
        """Repair ``store``'s changelog at ``offsets`` (another writer's records), in the
        background. Called on the event loop's thread."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop: nothing to hand the writes back to
            log.warning(
                "changelog %s[%d]: no event loop to repair on", self._topic, store.partition
            )
            return

        def read() -> None:
            try:
                keys = read_changelog_keys(self._conf, self._topic, store.partition, offsets)
            except Exception:
                log.exception(
                    "changelog %s[%d]: reading the other writer's records failed",
                    self._topic,
                    store.partition,
                )
                return
            asyncio.run_coroutine_threadsafe(self._write_over(store, keys, offsets), loop)

        threading.Thread(target=read, name="changelog-repair", daemon=True).start()

    async def _write_over(self, store: RepairedStore, keys: set[bytes], offsets: list[int]) -> None:
        if not self._owns(store):
            log.warning(
                "changelog %s[%d]: %d records another writer wrote left as they are: this "
                "worker's group lease ran out or the partition moved (it may be the stale one)",
                self._topic,
                store.partition,
                len(offsets),
            )
            return
        written = store.write_over(keys)
        if not written:
            return
        try:
            await store.flush()
        except Exception:
            log.exception(
                "changelog %s[%d]: the repair was not acknowledged", self._topic, store.partition
            )
            return
        self._repaired(written)
        log.warning(
            "changelog %s[%d]: %d records at offsets %d to %d were another worker's (a stale "
            "owner's, delivered late); wrote this store's %d keys over them",
            self._topic,
            store.partition,
            len(offsets),
            offsets[0],
            offsets[-1],
            written,
        )
