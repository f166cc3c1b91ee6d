"""The scale run: write a history of N timers straight to a broker, then time the audit.

``python -m spark_audit.scale --timers 1000000`` starts a dev broker (or uses
``--bootstrap``), produces N schedule requests (1 % rescheduled, 1 % cancelled, with the
worker's cancel reports) and their fires as a healthy worker would have written them,
plants a few violations of every kind, runs the audit on ``local[*]`` and prints how long
each part took. Exit status 0 when the audit found exactly the planted violations.

No worker runs: at a few thousand fires per second per worker, a million real fires
would take longer than the audit is meant to measure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from app.core.fired import FiredRecord
from app.core.timer import Timer
from app.kafka.topics import ensure_topics
from app.settings import Settings, TopicNames
from kafka_timers_client import protowire
from spark_audit.verdicts import Rules

__all__ = ["generate_history", "main"]

#: Violations planted per kind (each on its own timer).
PLANTED_PER_KIND = 5


class _Writer:
    """A fast confluent-kafka producer to explicit partitions, with timestamps."""

    def __init__(self, settings: Settings) -> None:
        from confluent_kafka import Producer

        from app.kafka.config import confluent_producer

        self._producer = Producer(
            confluent_producer(
                settings,
                **{
                    "linger.ms": 50,
                    "batch.num.messages": 10000,
                    "queue.buffering.max.messages": 500000,
                    "max.in.flight.requests.per.connection": 5,
                },
            )
        )
        self.count = 0

    def send(self, topic: str, partition: int, key: str, value: bytes, ts_ms: int) -> None:
        while True:
            try:
                self._producer.produce(
                    topic, value, key.encode(), partition=partition, timestamp=ts_ms
                )
                break
            except BufferError:
                self._producer.poll(0.05)
        self.count += 1
        if self.count % 10000 == 0:
            self._producer.poll(0)

    def flush(self) -> None:
        if self._producer.flush(120):
            raise RuntimeError("records not acknowledged within 120 s")


def _fired(timer_id: str, token: str, due: int, at_ms: int, partition: int) -> bytes:
    timer = Timer(timer_id, due, f"callbacks-{partition % 3}", None, None, token)
    record = FiredRecord.fired(
        timer, partition=partition, worker=f"w{partition % 2}", fired_at_ms=at_ms
    )
    return record.to_json()


def _send_fire(
    out: _Writer, topic: str, partition: int, timer_id: str, token: str, due: int, at_ms: int
) -> None:
    """The fired record of ``timer_id``'s version (``token``, ``due``), fired at ``at_ms``."""
    out.send(topic, partition, timer_id, _fired(timer_id, token, due, at_ms, partition), at_ms)


def _report(timer_id: str, token: str, outcome: str, at_ms: int, partition: int) -> bytes:
    record = FiredRecord.cancel(
        timer_id, token, outcome, partition=partition, worker="w0", at_ms=at_ms
    )
    return record.to_json()


def generate_history(settings: Settings, timers: int, now: float, seed: int = 7) -> Counter[str]:
    """Produce the history; return the violations planted, per kind."""
    rng = random.Random(seed)
    out = _Writer(settings)
    requests, fired = settings.topics.requests, settings.topics.fired
    start = int(now) - 3 * 3600  # dues spread over two hours, the last one an hour ago
    planted: Counter[str] = Counter()
    for i in range(timers):
        timer_id = f"t{i:08d}"
        partition = i % settings.partition_count
        due = start + (i * 7200) // timers
        token = f"k{i:x}"
        requested_ms = (due - 60 - rng.randrange(600)) * 1000
        request = protowire.Future(
            callback_topic=f"callbacks-{partition % 3}",
            callback_key=timer_id,
            callback=b"payload-%d" % i,
            id=timer_id,
            token=token,
            due=due,
        )
        out.send(requests, partition, timer_id, protowire.encode(request), requested_ms)
        fired_ms = due * 1000 + int(rng.expovariate(1 / 120))
        slot = i % 100
        plant = i // 100 < PLANTED_PER_KIND
        if slot == 0:  # rescheduled 30 s later with a new token
            new_token, new_due = token + "r", due + 30
            request.token, request.due = new_token, new_due
            out.send(requests, partition, timer_id, protowire.encode(request), requested_ms + 5000)
            if plant:  # the old version fires anyway
                _send_fire(out, fired, partition, timer_id, token, due, fired_ms)
                planted["superseded_fire"] += 1
            token, due, fired_ms = new_token, new_due, fired_ms + 30_000
        elif slot == 1:  # cancelled in time
            cancel = protowire.Future(id=timer_id, token=token, action=protowire.ACTION_CANCEL)
            cancel_ms = requested_ms + 5000
            out.send(requests, partition, timer_id, protowire.encode(cancel), cancel_ms)
            out.send(
                fired,
                partition,
                timer_id,
                _report(timer_id, token, "cancelled", cancel_ms + 3, partition),
                cancel_ms + 3,
            )
            if plant:
                _send_fire(out, fired, partition, timer_id, token, due, fired_ms)
                planted["fire_after_cancel"] += 1
            continue
        elif plant and slot == 2:
            planted["missing"] += 1
            continue
        elif plant and slot == 3:
            fired_ms = due * 1000 - 400
            planted["early"] += 1
        elif plant and slot == 4:
            _send_fire(out, fired, partition, timer_id, token, due, fired_ms + 900)
            planted["duplicate"] += 1
        _send_fire(out, fired, partition, timer_id, token, due, fired_ms)
    out.flush()
    return planted


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def _rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class PeakMemory:
    """Peak total RSS of a set of processes, sampled twice a second (Linux ``/proc``).

    ``descendants``: this process's children and theirs (Spark's JVM and its Python
    workers), less ``exclude`` (the dev broker, whose memory holds the topics); otherwise
    this process alone (the single-process reconciliation).
    """

    def __init__(self, *, descendants: bool, exclude: frozenset[int] = frozenset()) -> None:
        self.descendants, self.exclude = descendants, exclude
        self.peak_mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _pids(self) -> list[int]:
        if not self.descendants:
            return [os.getpid()]
        tree, found, todo = _children(), [], [os.getpid()]
        while todo:
            for child in tree.get(todo.pop(), []):
                if child not in self.exclude:
                    found.append(child)
                    todo.append(child)
        return found

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.peak_mib = max(self.peak_mib, sum(_rss_mib(p) for p in self._pids()))

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark_audit.scale", description=__doc__)
    parser.add_argument("--timers", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--bootstrap", help="an existing broker (default: start a dev broker)")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--output", default=".kafka-timers/audit-scale")
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also reconcile the same records in this one process, and compare",
    )
    args = parser.parse_args(argv)

    from app.dev.broker import DevBroker
    from spark_audit.main import main as audit_main

    broker = None if args.bootstrap else DevBroker().start()
    bootstrap = args.bootstrap or (broker.bootstrap if broker else "")
    tag = f"scale-{int(time.time())}"
    settings = replace(
        Settings(),
        bootstrap_servers=bootstrap,
        partitions=args.partitions,
        topics=TopicNames.named(lambda kind: f"{tag}-{kind}"),
    )
    try:
        ensure_topics(settings, list(settings.topics.all()))
        now = time.time()
        t0 = time.monotonic()
        planted = generate_history(settings, args.timers, now)
        produced_s = time.monotonic() - t0
        print(f"produced {args.timers} timers in {produced_s:.1f} s; planted {dict(planted)}")
        t1 = time.monotonic()
        broker_pid = broker.process.pid if broker is not None and broker.process else None
        exclude = frozenset() if broker_pid is None else frozenset({broker_pid})
        with PeakMemory(descendants=True, exclude=exclude) as audit_memory:
            code = audit_main(
                [
                    "--bootstrap-server",
                    bootstrap,
                    "--request-topic",
                    settings.topics.requests,
                    "--fired-topic",
                    settings.topics.fired,
                    "--master",
                    args.master,
                    "--as-of",
                    str(now),
                    "--output",
                    args.output,
                    "--max-listed",
                    "100",
                ]
            )
        audit_s = time.monotonic() - t1
        baseline = None
        if args.compare:
            from spark_audit.baseline import reconcile_in_process
            from spark_audit.options import DEFAULT_WINDOW, parse_options

            options = parse_options(["--as-of", str(now), "--since", DEFAULT_WINDOW])
            rules = Rules(options.as_of_ms, options.grace_ms, options.since_ms)
            with PeakMemory(descendants=False) as baseline_memory:
                baseline = reconcile_in_process(settings, rules)
    finally:
        if broker is not None:
            broker.stop()
    found = json.loads((Path(args.output) / "summary.json").read_text())["violation_counts"]
    ok = code == 1 and found == dict(planted)
    print(
        f"audit of {args.timers} timers: {audit_s:.1f} s wall clock (process start to exit "
        f"code, Spark start-up included), peak memory {audit_memory.peak_mib:,.0f} MiB "
        f"(Spark's JVM and Python workers); found {found}; "
        f"{'as planted' if ok else 'MISMATCH'}"
    )
    if baseline is not None:
        same = baseline.violation_counts == found
        ok = ok and same
        total = baseline.read_s + baseline.judge_s
        print(
            f"single-process reconciliation: {total:.1f} s ({baseline.read_s:.1f} s reading "
            f"and parsing, {baseline.judge_s:.1f} s judging), peak memory "
            f"{baseline_memory.peak_mib:,.0f} MiB; {baseline.timers} timers, found "
            f"{baseline.violation_counts}; {'the same' if same else 'DIFFERENT'}; "
            f"audit / single process = {audit_s / total:.2f}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
