"""CPU per timer of the worker's fire path, in-process: run as a script on a source tree.

``python bench/fire_path_probe.py <timers> <passes> [limited-topic]`` with ``PYTHONPATH``
set to an extracted tree (its ``app`` and ``tests/support``) prints one JSON line: the
best (least) CPU seconds per timer of :meth:`TimerService.handle_ticks` firing
``timers`` timers due in one second on 8 partitions, over ``passes`` fresh services on
in-memory stores (no broker, no RocksDB: the service's own work, which a limit check
would add to). :mod:`bench.rate_limit` runs it on the tree before rate limits and on
this one, alternating, to show what the gates cost a fire path with no limit set;
:mod:`bench.before` counts it on the trees before the redesign and before the features
past the anchors.

``passes`` 0 is the **counting** mode, for ``valgrind --tool=callgrind
--collect-atstart=no --toggle-collect=_PyEval_CallTracing``: one pass whose fire alone
runs inside ``sys.call_tracing`` (a C function that only calls its argument), so the
instructions callgrind counts are the fire's and nothing else's. With
``PYTHONHASHSEED`` fixed the count repeats to 0.01%; this machine's CPU time for the
same pass varies by a third from run to run (48-91 µs a timer, measured), which no
number of alternated passes settles to the 2% an A/B asks.

Three flags after the arguments (the current tree only): ``--series`` makes every timer
a series (every day, 2 occurrences: each fire also stores the next), ``--rocksdb`` puts
the stores on RocksDB (the worker's ``ChangeloggedKV`` over ``rocksdict``, in a temporary
directory) instead of memory. :mod:`bench.series` counts one-shot timers against series
with both: the memory stores' own costs (a sorted list's ``remove`` per delete) hid
what a series costs more, which RocksDB does not. ``--held`` limits the timers' own
topic to :data:`HELD_RATE` a second (on the probe's clock): the fire is then the tick
that holds them and the release rounds, every 50 ms of that clock, that deliver them
(at-least-once mode: their forgetting is left behind, as in a worker), then the
forgetting of what they left behind (:meth:`TimerService.forget_behind`, as the release
loop's spare time does it): the whole work of a burst to a limited topic. ``--hot`` puts
every timer in one partition (a hot business key), whose share of the limit is all of it
(as the demand exchange sets it for a partition that alone holds a backlog): the
rate-limit bench's one-partition burst, where one worker delivers and forgets it all.
``--settle`` settles the heap before the fire as a serving worker does
(:mod:`app.worker.heap`: startup's objects frozen, the collector's thresholds raised):
without it the collector's full passes over the probe's young heap (every timer held,
taken and left behind is tracked) were a large and erratic part of a held timer's count.

Imports only ``app`` and ``tests.support`` (from the tree under test), never ``bench``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import tempfile
import time
from typing import Any

PARTITIONS = 8
DUE = 1_767_225_600
#: ``--held``: the limit on the timers' topic, callbacks a second (the rate-limit bench's).
HELD_RATE = 50_000.0
#: ``--held``: the probe's clock between two release rounds (the worker's interval).
HELD_ROUND_SECONDS = 0.05


class _RocksDBStores:
    """Partition stores as the worker has them (RocksDB, mirrored to ``output``'s
    changelog), without Faust: each in its own directory under ``root``."""

    def __init__(self, output: Any, root: str) -> None:
        self._output = output
        self._root = root

    def open(self, partition: int) -> Any:
        from rocksdict import Options, Rdict

        from app.worker.partition_store import ChangeloggedKV

        db = Rdict(f"{self._root}/p{partition}", Options(raw_mode=True))
        return ChangeloggedKV(db, self._output, "changelog", partition)


def _service(
    limited: str | None, rocksdb: str | None = None, held: bool = False, hot: bool = False
) -> tuple[Any, Any]:
    from app.core.policy import RequestPolicy
    from app.worker.metrics import WorkerMetrics
    from app.worker.service import TimerService
    from tests.support.memstores import FakeOutput, MemoryStores

    clock = [DUE - 10.0]
    output = FakeOutput()
    stores: Any = MemoryStores(output) if rocksdb is None else _RocksDBStores(output, rocksdb)
    options: dict[str, Any] = {}
    if limited is not None:
        from app.worker.topic_gates import TopicGates

        options["gates"] = TopicGates({limited: 1.0}, partitions=PARTITIONS)
    if held:
        from app.worker.topic_gates import TopicGates

        gates = TopicGates({"callbacks": HELD_RATE}, partitions=PARTITIONS, clock=lambda: clock[0])
        if hot:  # partition 0 alone holds a backlog: its share is the limit
            gates.share("callbacks", {0: HELD_RATE})
        options["gates"] = gates
    service = TimerService(
        policy=RequestPolicy.build(
            allow_patterns=(".*",),
            own_topics=("ticks", "requests", "fired", "dlq"),
            app_id="probe",
            max_payload_bytes=100_000,
            horizon_seconds=86400,
        ),
        output=output,
        metrics=WorkerMetrics(),
        stores=stores,
        clock=lambda: clock[0],
        **options,
    )
    return service, clock


def _collect(settle: bool) -> None:
    """Collect garbage before a fire; ``settle``: then freeze the heap and raise the
    thresholds as :func:`app.worker.heap.settle_heap` does (inline: an older tree under
    test may not have it)."""
    gc.collect()
    if settle:
        gc.freeze()
        gc.set_threshold(50_000, 20, 100)


def _pass(
    timers: int,
    limited: str | None,
    *,
    counting: bool = False,
    series: bool = False,
    rocksdb: str | None = None,
    held: bool = False,
    hot: bool = False,
    settle: bool = False,
) -> float:
    try:
        from app.core.raw_record import RawRecord
    except ImportError:  # a tree from before the request reader was split by format
        from app.core.request_format import RawRecord  # type: ignore[attr-defined,no-redef]
    from kafka_timers_client import protowire

    service, clock = _service(limited, rocksdb, held, hot)
    records = []
    # A series (every day from DUE, 2 occurrences) is requested before its first occurrence.
    when: dict[str, int] = {"every": 86400, "start": DUE, "count": 2} if series else {"due": DUE}
    sent_ms = (DUE - 5 if series else DUE) * 1000
    for i in range(timers):
        p = 0 if hot else i % PARTITIONS
        future = protowire.Future(
            callback_topic="callbacks",
            callback_key=f"t{i:09d}",
            callback=b'{"pad":"' + b"x" * 88 + b'"}',
            id=f"t{i:09d}",
            token=f"{i:016x}",
            **when,
        )
        records.append(
            RawRecord(
                "requests",
                p,
                i if hot else i // PARTITIONS,
                sent_ms,
                None,
                protowire.encode(future),
            )
        )

    async def deliver() -> int:
        fired: int = await service.handle_ticks(
            [(p, DUE, None, "probe") for p in range(PARTITIONS)]
        )
        assert not held or fired == 0, "the limit held nothing back"  # its buckets start empty
        while held and any(w.holding for w in service.wheels().values()):
            clock[0] += HELD_ROUND_SECONDS
            fired += await service.release_gated()
        while held and any(w.behind for w in service.wheels().values()):
            await service.forget_behind(3600.0)  # all of it: no deadline in a count
        return fired

    async def fire() -> float:
        for start in range(0, len(records), 2000):
            await service.handle_requests(records[start : start + 2000])
        clock[0] = DUE + 0.01
        _collect(settle)
        began = time.process_time()
        fired = await deliver()
        spent = time.process_time() - began
        assert fired == timers, (fired, timers)
        return spent

    if not counting:
        return asyncio.run(fire())
    loop = asyncio.new_event_loop()
    try:
        for start in range(0, len(records), 2000):
            loop.run_until_complete(service.handle_requests(records[start : start + 2000]))
        clock[0] = DUE + 0.01
        _collect(settle)
        fired = sys.call_tracing(loop.run_until_complete, (deliver(),))  # counted: this alone
        assert fired == timers, (fired, timers)
    finally:
        loop.close()
    return 0.0


def main(argv: list[str]) -> int:
    flags = {a for a in argv if a.startswith("--")}
    args = [a for a in argv if not a.startswith("--")]
    timers, passes = int(args[0]), int(args[1])
    limited = args[2] if len(args) > 2 else None
    series = "--series" in flags
    with tempfile.TemporaryDirectory(prefix="fire-path-probe-") as tmp:

        def one(counting: bool = False) -> float:
            root = None
            if "--rocksdb" in flags:
                root = tempfile.mkdtemp(dir=tmp)  # fresh stores for every pass
            return _pass(
                timers,
                limited,
                counting=counting,
                series=series,
                rocksdb=root,
                held="--held" in flags,
                hot="--hot" in flags,
                settle="--settle" in flags,
            )

        if passes == 0:
            one(counting=True)
            print(json.dumps({"timers": timers, "counted": True}))
            return 0
        best = min(one() for _ in range(passes))
    print(json.dumps({"timers": timers, "cpu_per_timer_us": best / timers * 1e6}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
