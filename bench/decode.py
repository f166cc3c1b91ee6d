"""Request decoding: the protobuf runtime (upb) against the hand-written codec.

``python -m bench.decode`` prints, for realistic request records, microseconds per
record of:

* ``protowire.decode``: the hand codec, bytes to values;
* ``Future.FromString``: the protobuf runtime's parse alone (:mod:`app.core.proto`);
* ``parse_request``, hand codec: the worker's request parsing as it was, on
  ``protowire.decode`` (kept here, as :func:`hand_from_protobuf`, for this comparison);
* ``parse_request``, protobuf runtime: as the worker parses requests now.

Records: the article's (fields 1-3, keyed by the due second); the client's (topic, key,
80-byte value, 32-hex id, 16-hex token, due), with 0 and 2 headers; and the benchmark's
own load (``bench.load.request_record``). Each figure is the best of ``--repeat`` timings
of ``--number`` passes over 1,000 distinct records, less an empty pass. Both
``parse_request`` variants must return the same result for every record first.
``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python`` measures the pure-Python runtime.

``--ingest N`` also measures the whole ingest path of a real worker (dev broker, one
oscillator): the worker's CPU time (``/proc``) per request while it stores ``N``
requests, less its idle ticking. CPU time, unlike requests/s, hardly moves when other
jobs share the machine. It measures the code installed: to compare two decoders, run it
at both commits.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
import timeit
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.core import proto, request_format, request_rules
from app.core.raw_record import RawRecord, derived_id
from app.core.request_format import parse_request
from app.core.timer import Cancel, Timer
from bench.load import RequestLoad, TimerSpec, request_record, timer_ids
from bench.procstat import cpu_seconds
from bench.stack import BenchStack, wait_serving, wait_until
from kafka_timers_client import protowire
from kafka_timers_client.errors import RejectedRequest, RejectReason

__all__ = ["hand_from_protobuf", "ingest_cpu_us", "main", "pools"]

POOL = 1000
START = 1_767_225_600


def hand_from_protobuf(record: RawRecord) -> Timer | Cancel:
    """The protobuf branch of ``parse_request`` on the hand codec, as it was."""
    assert record.value is not None
    try:
        future = protowire.decode(record.value)
    except protowire.DecodeError as exc:
        raise RejectedRequest(RejectReason.MALFORMED, f"not protobuf or JSON: {exc}") from exc
    if future.action == protowire.ACTION_CANCEL:
        if not future.id:
            raise RejectedRequest(RejectReason.MALFORMED, "cancel without a timer id")
        return Cancel(id=future.id, token=future.token or "")
    if future.action != protowire.ACTION_SCHEDULE:
        raise RejectedRequest(RejectReason.UNKNOWN_FORMAT, f"unknown action {future.action}")
    due = future.due if future.due is not None else request_rules.due_from_key(record)
    return Timer(
        id=future.id or derived_id(record),
        due=due,
        topic=future.callback_topic or "",
        key=None if future.callback_key is None else future.callback_key.encode(),
        value=future.callback if future.callback is not None else b"",
        token=future.token or "",
        headers=tuple(future.headers),
    )


@contextmanager
def hand_codec() -> Iterator[None]:
    """``parse_request`` with its protobuf branch on the hand codec, for the duration."""
    shipped = request_format.from_protobuf
    request_format.from_protobuf = hand_from_protobuf
    try:
        yield
    finally:
        request_format.from_protobuf = shipped


def pools() -> dict[str, list[RawRecord]]:
    """1,000 distinct records of each kind, seeded: every run times the same bytes."""
    rng = random.Random(7)
    topics = ["billing-reminds", "orders-timeouts", "session-expires", "payment-retries"]

    def client(i: int, headers: int) -> tuple[bytes, bytes]:
        timer_id = rng.randbytes(16).hex()
        future = protowire.Future(
            callback_topic=rng.choice(topics),
            callback_key=f"cust-{rng.randrange(10**5):05d}",
            callback=b'{"order":%d,"action":"remind"}' % rng.randrange(10**9),
            id=timer_id,
            token=rng.randbytes(8).hex(),
            due=START + rng.randrange(30 * 86_400),
            headers=[("source", b"billing"), ("attempt", b"3")][:headers],
        )
        future.callback = (future.callback or b"").ljust(80)
        return timer_id.encode(), protowire.encode(future)

    def article(i: int) -> tuple[bytes, bytes]:
        future = protowire.Future(
            callback_topic=rng.choice(topics),
            callback_key=f"cust-{rng.randrange(10**5):05d}",
            callback=b"x" * 80,
        )
        return str(START + rng.randrange(30 * 86_400)).encode(), protowire.encode(future)

    def load(i: int) -> tuple[bytes, bytes]:
        timer_id = f"ingest{i:09d}"
        return timer_id.encode(), request_record(TimerSpec(timer_id, START + 86_400), "cb")

    makers: dict[str, Callable[[int], tuple[bytes, bytes]]] = {
        "article (fields 1-3)": article,
        "client, 0 headers": lambda i: client(i, 0),
        "client, 2 headers": lambda i: client(i, 2),
        "bench load": load,
    }
    return {
        name: [
            RawRecord("timer-request", i % 8, i, START * 1000, key, value)
            for i, (key, value) in enumerate(make(i) for i in range(POOL))
        ]
        for name, make in makers.items()
    }


def per_record_us(fn: Callable[[RawRecord], Any], records: list[RawRecord], args: Any) -> float:
    def one_pass() -> None:
        for record in records:
            fn(record)

    def empty_pass() -> None:
        for _record in records:
            pass

    def best(f: Callable[[], None]) -> float:
        return min(timeit.repeat(f, number=args.number, repeat=args.repeat))

    return (best(one_pass) - best(empty_pass)) / args.number / len(records) * 1e6


def ingest_cpu_us(requests: int, work_dir: Path, idle_seconds: float = 5.0) -> float:
    """Worker CPU microseconds per request stored, its idle ticking subtracted."""
    with BenchStack("decode-ingest", work_dir) as stack:
        stack.oscillator()
        worker = stack.worker("worker-1")
        wait_serving([worker], stack.partitions)
        cpu, started = cpu_seconds(worker.pid), time.monotonic()
        time.sleep(idle_seconds)  # the measurement window of idle ticking, not a wait
        idle_rate = (cpu_seconds(worker.pid) - cpu) / (time.monotonic() - started)
        load = RequestLoad(stack, stack.topic("decode-callbacks"))
        due = int(time.time()) + 86_400
        cpu, started = cpu_seconds(worker.pid), time.monotonic()
        load.send(TimerSpec(timer_id, due) for timer_id in timer_ids("d", requests))
        load.flush()
        wait_until(
            lambda: worker.metric("kafka_timers_scheduled_total") >= requests,
            60 + requests / 500,
            f"the worker to store {requests:,} requests",
            0.1,
        )
        used = cpu_seconds(worker.pid) - cpu - idle_rate * (time.monotonic() - started)
    return used / requests * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.decode", description=__doc__)
    parser.add_argument("--repeat", type=int, default=15, help="timings per figure (best kept)")
    parser.add_argument("--number", type=int, default=20, help="passes per timing")
    parser.add_argument(
        "--ingest", type=int, metavar="N", help="also: worker CPU per request, storing N"
    )
    parser.add_argument("--ingest-runs", type=int, default=3, help="runs of --ingest")
    args = parser.parse_args(argv)
    parse = proto.Future.FromString
    print(
        f"protobuf runtime: {proto.IMPLEMENTATION}; microseconds per record, best of "
        f"{args.repeat} x {args.number} passes over {POOL:,} records\n"
    )
    print(
        "| records | bytes | protowire.decode | Future.FromString | parse_request, hand "
        "| parse_request, protobuf | hand / protobuf |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, records in pools().items():
        shipped = [parse_request(r) for r in records]
        with hand_codec():
            assert [parse_request(r) for r in records] == shipped, f"{name}: results differ"
            hand = per_record_us(parse_request, records, args)
        upb = per_record_us(parse_request, records, args)
        decode = per_record_us(lambda r: protowire.decode(r.value or b""), records, args)
        parse_only = per_record_us(lambda r: parse(r.value or b""), records, args)
        size = sum(len(r.value or b"") for r in records) / len(records)
        print(
            f"| {name} | {size:.0f} | {decode:.2f} | {parse_only:.2f} | {hand:.2f} "
            f"| {upb:.2f} | {hand / upb:.1f}x |"
        )
    if args.ingest:
        with tempfile.TemporaryDirectory() as work_dir:
            runs = [ingest_cpu_us(args.ingest, Path(work_dir)) for _ in range(args.ingest_runs)]
        print(
            f"\nworker CPU per request stored ({args.ingest:,} requests of the bench load): "
            f"{', '.join(f'{r:.1f}' for r in runs)} us; median {sorted(runs)[len(runs) // 2]:.1f}"
        )


if __name__ == "__main__":
    main()
