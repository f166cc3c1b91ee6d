"""Instructions (or CPU) per request of the worker's request path, in-process: a script.

``python bench/request_path_probe.py <requests> <passes> [--crc32]`` with ``PYTHONPATH``
set to a tree (its ``app`` and ``tests/support``) reads ``requests`` protobuf requests
(the benchmark load's: 100-byte callback, id, token, due second) as consumed
confluent-kafka messages (``confluent_kafka.Message``), turns each into a record as the
request reader does (``to_record``) and hands them, 2,000 a batch, to
:meth:`TimerService.handle_requests` on RocksDB stores (the worker's ``ChangeloggedKV``
over ``rocksdict``) with a fake output: routing on (8 partitions, a hop secret), as a
worker runs. Each request is placed on its id's owner partition, or with ``--crc32``
where librdkafka's default partitioner puts its key: then most are forwarded, and the
copies (``timer-hop`` signed as the output would send them) are read as a second round,
as their owner reads them: the figure is then per request *stored*, both reads in it.

``passes`` 0 is the **counting** mode, for callgrind (see :mod:`bench.callgrind`): one
pass whose reading and handling alone run inside ``sys.call_tracing``, with
``time.perf_counter`` held still (:func:`_still_budget`): a unit of requests lets the
event loop run each time its 20 ms of work are spent, and under valgrind's ~50x
slowdown that came every 16 requests or so, at points that moved with the machine's
load (each pause applies the unit's writes so far), so the count of one tree moved by
2% from run to run; natively a 2,000-request batch pauses about three times. Otherwise it
prints the best CPU seconds per request over ``passes`` fresh passes. Not counted:
librdkafka's produce (the fake output), its threads and the flush's wait.

:mod:`bench.before` counts it on this tree and on the trees before the redesign and
before the features past the anchors. Imports only ``app``, ``tests.support``, the
client package (the tree's own, where it has one), confluent-kafka and rocksdict.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import tempfile
import time
import zlib
from typing import Any

PARTITIONS = 8
DUE = 1_767_225_600
BATCH = 2_000
SECRET = "probe-secret-probe-secret-probe-secret"


class _RocksDBStores:
    def __init__(self, output: Any, root: str) -> None:
        self._output = output
        self._root = root

    def open(self, partition: int) -> Any:
        from rocksdict import Options, Rdict

        from app.worker.partition_store import ChangeloggedKV

        db = Rdict(f"{self._root}/p{partition}", Options(raw_mode=True))
        return ChangeloggedKV(db, self._output, "changelog", partition)


def _service(root: str) -> tuple[Any, Any]:
    from app.core.policy import RequestPolicy
    from app.worker.metrics import WorkerMetrics
    from app.worker.service import TimerService
    from tests.support.memstores import FakeOutput

    output = FakeOutput()
    service = TimerService(
        policy=RequestPolicy.build(
            allow_patterns=(".*",),
            own_topics=("ticks", "requests", "fired", "dlq"),
            app_id="probe",
            max_payload_bytes=100_000,
            horizon_seconds=86400 * 365,
        ),
        output=output,
        metrics=WorkerMetrics(),
        stores=_RocksDBStores(output, root),
        clock=lambda: DUE - 3600.0,
        request_partitions=PARTITIONS,
        hop_secret=SECRET,
    )
    return service, output


def _messages(count: int, crc32: bool) -> list[Any]:
    from confluent_kafka import Message

    from app.core.routing import owner_of

    try:
        from kafka_timers_client import protowire
    except ImportError:  # a tree from before the client package (app.core re-exported it)
        from app.core import protowire  # type: ignore[attr-defined,no-redef]

    out = []
    offsets = [0] * PARTITIONS
    for i in range(count):
        timer_id = f"probe-{i:09d}"
        value = (b'{"timer":"%s","pad":"' % timer_id.encode()).ljust(98, b"x") + b'"}'
        future = protowire.Future(
            callback_topic="callbacks",
            callback_key=timer_id,
            callback=value,
            id=timer_id,
            token=f"{zlib.crc32(timer_id.encode()):08x}" * 2,
            due=DUE,
        )
        key = timer_id.encode()
        p = zlib.crc32(key) % PARTITIONS if crc32 else owner_of(timer_id, PARTITIONS)
        out.append(
            Message(
                topic="requests",
                partition=p,
                offset=offsets[p],
                key=key,
                value=protowire.encode(future),
                timestamp=(1, (DUE - 3600) * 1000),
            )
        )
        offsets[p] += 1
    return out


def _copies(output: Any, start: int) -> list[Any]:
    """The forwarded copies as their owner consumes them: hop header appended."""
    from confluent_kafka import Message

    from app.core.routing import HOP_HEADER

    out = []
    offsets: dict[int, int] = {}
    forwarded = output.pending.forwarded + output.durable.forwarded
    hops = output.pending.hops + output.durable.hops
    for (record, partition), hop in zip(forwarded, hops, strict=True):
        offset = offsets.get(partition, start)
        offsets[partition] = offset + 1
        out.append(
            Message(
                topic=record.topic,
                partition=partition,
                offset=offset,
                key=record.key,
                value=record.value,
                headers=[*record.headers, (HOP_HEADER, hop)],
                timestamp=(1, record.timestamp_ms),
            )
        )
    return out


async def _handle(service: Any, messages: list[Any]) -> None:
    from app.kafka.records import to_record

    for start in range(0, len(messages), BATCH):
        await service.handle_requests([to_record(m) for m in messages[start : start + BATCH]])


def _still_budget() -> None:
    """Hold ``time.perf_counter`` still for the rest of the process: a unit of requests
    never runs out of its time budget (see the module's docstring). Counting mode only:
    the timing mode measures CPU as the worker spends it."""
    time.perf_counter = lambda: 0.0


def _pass(count: int, crc32: bool, root: str, counting: bool) -> float:
    service, output = _service(root)
    messages = _messages(count, crc32)
    loop = asyncio.new_event_loop()
    try:
        # Open the stores first: not the request path.
        loop.run_until_complete(service.handle_requests([]))
        for p in range(PARTITIONS):
            loop.run_until_complete(service._partition(p))
        gc.collect()
        spent = 0.0
        rounds = [messages]
        while rounds:
            batch = rounds.pop()
            began = time.process_time()
            if counting:
                sys.call_tracing(loop.run_until_complete, (_handle(service, batch),))
            else:
                loop.run_until_complete(_handle(service, batch))
            spent += time.process_time() - began
            if crc32 and batch is messages:
                copies = _copies(output, count)
                if copies:
                    rounds.append(copies)
        stored = int(service._metrics.scheduled._value.get())
        assert stored == count, (stored, count)
    finally:
        loop.close()
    return spent


def main(argv: list[str]) -> int:
    flags = {a for a in argv if a.startswith("--")}
    args = [a for a in argv if not a.startswith("--")]
    count, passes = int(args[0]), int(args[1])
    crc32 = "--crc32" in flags
    with tempfile.TemporaryDirectory(prefix="request-path-probe-") as tmp:
        if passes == 0:
            _still_budget()
            _pass(count, crc32, tempfile.mkdtemp(dir=tmp), counting=True)
            print(json.dumps({"requests": count, "counted": True}))
            return 0
        best = min(_pass(count, crc32, tempfile.mkdtemp(dir=tmp), False) for _ in range(passes))
    print(json.dumps({"requests": count, "cpu_per_request_us": best / count * 1e6}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
