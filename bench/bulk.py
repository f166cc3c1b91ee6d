"""Pending timers written straight into a stopped worker's stores: millions in a minute.

Filling a worker with 10,000,000 timers through the request path takes minutes at
today's rates, more than the whole benchmark may. A worker restarted on its data
directory holds whatever its stores hold, so the capacity scenario fills a worker
through the request path, stops it, and this module adds timers to its partition
stores with the worker's own code, while it is stopped:

- each timer is the :class:`~app.core.timer.Timer` the worker makes of the benchmark's
  request for it (:func:`bulk_timer`; ``tests/unit/test_bench_bulk.py`` pins it to
  :func:`app.core.request_format.parse_request` of :func:`bench.load.request_record`);
- stored by :meth:`app.core.wheel.PartitionWheel.schedule`: the keys and values are the
  worker's own (the timer and its index entry);
- into each partition's RocksDB opened as Faust opens it for the worker (Faust's
  ``RocksDBOptions`` with the worker's ``ROCKSDB_OPTIONS``, after the worker's patches),
  in write batches of a few thousand keys: RocksDB's write path, flushes and
  compactions run with the worker's options.

What differs from the request path, and why it does not matter for what is measured
(the restarted worker's memory, disk and idle CPU):

- the changelog does not get these records. The stores' changelog offsets stay where
  the worker left them, so the restarted worker finds nothing to catch up, as after
  any clean stop. A takeover by another worker would not see them; none happens.
- each timer's partition is its number modulo the partition count, not the murmur2
  hash of its id (3.5 µs each in Python): no request for these ids ever arrives, so
  which partition would own them plays no part; the spread is even.

Run as ``python -m bench.bulk`` children (:func:`bulk_fill`), one per share of the
partitions, in parallel: the Python side of each timer costs ~7 µs.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocksdict import Rdict, WriteBatch

from app.core.timer import Timer
from app.core.wheel import PartitionWheel
from bench.load import CALLBACK_VALUE_BYTES

__all__ = ["BATCH_KEYS", "BatchKV", "BulkTimers", "bulk_fill", "bulk_timer", "main", "store_paths"]

#: Keys per RocksDB write batch (a request batch of the worker's is 2,000 requests,
#: about 4,000 keys, spread over its partitions).
BATCH_KEYS = 4000


def bulk_timer(timer_id: str, due: int, callback_topic: str) -> Timer:
    """The timer the worker stores for the benchmark's request ``timer_id`` due at ``due``
    (see :func:`bench.load.request_record`), built without encoding and parsing it."""
    raw_id = timer_id.encode()
    value = (b'{"timer":"%s","pad":"' % raw_id).ljust(CALLBACK_VALUE_BYTES - 2, b"x") + b'"}'
    return Timer(
        id=timer_id,
        due=due,
        topic=callback_topic,
        key=raw_id,
        value=value,
        token=f"{zlib.crc32(raw_id):08x}" * 2,
    )


class BatchKV:
    """The store a :class:`PartitionWheel` writes through here: a RocksDB write batch.

    Reads find nothing: every id written is new, so the wheel never needs one.
    """

    def __init__(self, db: Rdict) -> None:
        self._db = db
        self._batch = WriteBatch(raw_mode=True)
        #: Keys in the batch not yet written.
        self.size = 0

    def get(self, key: bytes) -> bytes | None:
        return None

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return [None] * len(keys)

    def put(self, key: bytes, value: bytes) -> None:
        self._batch.put(key, value)
        self.size += 1

    def delete(self, key: bytes) -> None:
        self._batch.delete(key)
        self.size += 1

    def scan(self, low: bytes, high: bytes) -> Iterator[tuple[bytes, bytes]]:
        return iter(())

    def write(self) -> None:
        """Write the batch to RocksDB and start a new one."""
        if self.size:
            self._db.write(self._batch)
            self._batch = WriteBatch(raw_mode=True)
            self.size = 0


def store_paths(data_dir: Path, partitions: Sequence[int]) -> dict[int, Path]:
    """Each partition's RocksDB directory under a worker's ``data_dir`` (it must have
    held the partition: Faust made the directory)."""
    paths: dict[int, Path] = {}
    for p in partitions:
        found = sorted(data_dir.glob(f"**/timers-{p}.db"))
        if len(found) != 1:
            raise RuntimeError(f"{len(found)} stores of partition {p} under {data_dir}")
        paths[p] = found[0]
    return paths


def _open_like_the_worker(path: Path) -> Rdict:
    # Imported here: the Faust app module is heavy, and only the children need it.
    from faust.stores.rocksdb import RocksDBOptions

    from app.worker.faust_app import ROCKSDB_OPTIONS
    from app.worker.faust_internals import apply_patches

    apply_patches()  # whatever the worker changes in how Faust opens a store applies here
    db: Rdict = RocksDBOptions(**ROCKSDB_OPTIONS).open(path)  # type: ignore[arg-type]
    return db


@dataclass(frozen=True)
class BulkTimers:
    """The timers a bulk fill writes: number ``i`` is ``<prefix><i:09d>``, due at
    ``first_due + i % spread``, its callback to ``callback_topic``."""

    prefix: str
    first_due: int
    spread: int
    callback_topic: str

    def timer(self, i: int) -> Timer:
        return bulk_timer(
            f"{self.prefix}{i:09d}", self.first_due + i % self.spread, self.callback_topic
        )


def write_timers(
    data_dir: Path, partitions: int, mine: Sequence[int], start: int, stop: int, timers: BulkTimers
) -> int:
    """Timers ``start..stop-1`` (those of partitions ``mine``) into a stopped worker's stores."""
    dbs = {p: _open_like_the_worker(path) for p, path in store_paths(data_dir, mine).items()}
    kvs = {p: BatchKV(db) for p, db in dbs.items()}
    wheels = {p: PartitionWheel(kv) for p, kv in kvs.items()}
    written = 0
    try:
        for i in range(start, stop):
            p = i % partitions
            wheel = wheels.get(p)
            if wheel is None:
                continue
            wheel.schedule(timers.timer(i))
            written += 1
            if kvs[p].size >= BATCH_KEYS:
                kvs[p].write()
        for kv in kvs.values():
            kv.write()
    finally:
        for db in dbs.values():
            db.close()
    return written


def bulk_fill(
    data_dir: Path,
    partitions: int,
    start: int,
    stop: int,
    timers: BulkTimers,
    *,
    processes: int = 2,
    timeout: float = 900.0,
) -> float:
    """Write timers ``start..stop-1`` into the stopped worker's stores under ``data_dir``
    with ``processes`` children, each for its share of the partitions; the seconds taken."""
    began = time.monotonic()
    children = []
    for n in range(processes):
        mine = ",".join(str(p) for p in range(n, partitions, processes))
        args = [
            f"--data-dir={data_dir}",
            f"--partitions={partitions}",
            f"--mine={mine}",
            f"--start={start}",
            f"--stop={stop}",
            f"--prefix={timers.prefix}",
            f"--first-due={timers.first_due}",
            f"--spread={timers.spread}",
            f"--callback-topic={timers.callback_topic}",
        ]
        children.append(subprocess.Popen([sys.executable, "-m", "bench.bulk", *args]))
    try:
        for child in children:
            if child.wait(max(1.0, timeout - (time.monotonic() - began))) != 0:
                raise RuntimeError(f"bulk writer exited with {child.returncode}")
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    return time.monotonic() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bulk", description=__doc__)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--mine", required=True, help="comma-separated partitions to write")
    parser.add_argument("--start", type=int, required=True)
    parser.add_argument("--stop", type=int, required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--first-due", type=int, required=True)
    parser.add_argument("--spread", type=int, required=True)
    parser.add_argument("--callback-topic", required=True)
    args = parser.parse_args(argv)
    write_timers(
        args.data_dir,
        args.partitions,
        [int(p) for p in args.mine.split(",")],
        args.start,
        args.stop,
        BulkTimers(args.prefix, args.first_due, args.spread, args.callback_topic),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
