"""``make nemesis``: the stack, the load and the nemesis for ``NEMESIS_MINUTES`` (60), then
heal, wait, read the topics and judge (:mod:`tests.nemesis.checker`).

Environment: ``NEMESIS_MINUTES`` (a float), ``NEMESIS_SEED`` (replays a run's draws; a
new one is printed otherwise), ``NEMESIS_DIR`` (where the history, the observations and
every process's log go; a new directory under the system's temporary one otherwise).
The last line is the verdict; the exit status is 0 only when nothing was lost, early,
fired after its cancel's answer, undone or made up.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, TopicPartition

from app.client import TimerClient
from app.core import protowire
from app.core.fired import FiredKind, FiredRecord
from app.core.routing import HOP_HEADER, owner_of
from app.dev.stack import wait_until_firing
from app.kafka.config import confluent_consumer
from app.kafka.records import Record, to_record
from app.kafka.topics import ensure_topics
from app.settings import Settings
from tests.nemesis.checker import Verdict, check
from tests.nemesis.faults import Nemesis
from tests.nemesis.history import (
    Arrival,
    Callback,
    Fire,
    Observed,
    read_history,
    read_observed,
    write_line,
)
from tests.nemesis.load import Load
from tests.nemesis.stack import (
    LIMIT_PER_SECOND,
    LIMITED_TOPIC,
    PARTITIONS,
    PLAIN_TOPIC,
    SPREAD_TOPIC,
    NemesisStack,
)

__all__ = ["main", "observe"]

#: After the last second anything was due, how long callbacks may still come.
GRACE = 60.0
#: Once that has passed: no new callback for this long means the run is over.
QUIET = 20.0
#: The longest the drain may take, whatever still comes.
DRAIN_LIMIT = 900.0


def _header(record: Record, name: str) -> bytes | None:
    for key, value in record.headers:
        if key == name:
            return value
    return None


class _Reader:
    """Every partition of a topic from its start (or end), with fetches that wait up to
    half a second: on its ``s3://`` engine the dev broker lists a partition's every batch
    on each fetch, and with the readers' usual 10 ms wait a topic of thousands of
    callbacks is never read to its end."""

    def __init__(self, settings: Settings, topic: str, *, from_end: bool = False) -> None:
        conf = confluent_consumer(
            settings,
            group_id=f"nemesis-reader-{uuid.uuid4().hex}",
            **{"fetch.wait.max.ms": 500, "log_level": 3},
        )
        self._consumer = Consumer(conf)
        meta = self._consumer.list_topics(topic, timeout=30)
        self.partitions = set(meta.topics[topic].partitions)
        start = OFFSET_END if from_end else OFFSET_BEGINNING
        self._consumer.assign([TopicPartition(topic, p, start) for p in self.partitions])
        self.at_end: set[int] = set()

    def poll(self, timeout: float) -> list[Record]:
        fresh = []
        for msg in self._consumer.consume(10_000, timeout):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self.at_end.add(msg.partition() or 0)
                continue
            self.at_end.discard(msg.partition() or 0)
            fresh.append(to_record(msg))
        return fresh

    def close(self) -> None:
        self._consumer.close()


def _read(settings: Settings, topic: str, timeout: float = 600.0) -> list[Record]:
    """``topic`` from its start to the end of every partition."""
    reader = _Reader(settings, topic)
    try:
        records: list[Record] = []
        deadline = time.monotonic() + timeout
        while reader.at_end != reader.partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic} not read to its end within {timeout:g} s")
            records += reader.poll(1.0)
        return records
    finally:
        reader.close()


def observe(settings: Settings, requests_topic: str, fired_topic: str) -> Observed:
    """Everything the checker needs, read from the topics: the callbacks, the ``fired``
    records and every request as it reached its id's owner partition."""
    observed = Observed()
    for topic in (PLAIN_TOPIC, SPREAD_TOPIC, LIMITED_TOPIC):
        for r in _read(settings, topic):
            seq = _header(r, "timer-seq")
            observed.callbacks.append(
                Callback(
                    (_header(r, "timer-id") or b"").decode(),
                    (r.value or b"").decode(errors="replace"),
                    int(seq) if seq else None,
                    int(_header(r, "timer-fired-at") or r.timestamp_ms),
                    topic,
                    r.partition,
                    r.offset,
                )
            )
    for r in _read(settings, fired_topic):
        try:
            fired = FiredRecord.from_json(r.value or b"{}")
        except ValueError:
            continue
        if fired.event is FiredKind.FIRED and fired.fired_at_ms is not None:
            observed.fires.append(Fire(fired.id, fired.seq, fired.fired_at_ms, fired.worker))
    for r in _read(settings, requests_topic):
        try:
            future = protowire.decode(r.value or b"")
        except ValueError:
            continue
        if not future.id or owner_of(future.id, PARTITIONS) != r.partition:
            continue
        payload = (
            ""
            if future.action != protowire.ACTION_SCHEDULE
            else ((future.callback or b"").decode(errors="replace"))
        )
        copy = any(k == HOP_HEADER for k, _ in r.headers)
        observed.arrivals.append(Arrival(future.id, payload, r.offset, copy))
    return observed


def _drain(settings: Settings, last_second: int) -> None:
    """Wait until everything due has had its time and the callback topics are quiet."""
    topics = (PLAIN_TOPIC, SPREAD_TOPIC, LIMITED_TOPIC)
    readers = [_Reader(settings, t, from_end=True) for t in topics]
    try:
        deadline = time.monotonic() + DRAIN_LIMIT
        last_new = time.monotonic()
        while time.monotonic() < deadline:
            fresh = sum(len(r.poll(0.3)) for r in readers)
            if fresh:
                last_new = time.monotonic()
            if time.time() > last_second + GRACE and time.monotonic() - last_new > QUIET:
                return
    finally:
        for r in readers:
            r.close()


def summary(minutes: float, faults: list[tuple[str, int]], verdict: Verdict) -> str:
    """The run's last line."""
    kinds = ", ".join(f"{kind} x{n}" for kind, n in faults)
    return (
        f"nemesis: {minutes:g} min, {sum(n for _, n in faults)} faults ({kinds}), "
        f"{verdict.timers} timers, lost {len(verdict.lost)}, early {len(verdict.early)}, "
        f"after cancel {len(verdict.after_cancel)}, undone {len(verdict.undone)}, "
        f"unknown {len(verdict.unknown)}, duplicates {verdict.duplicate_total}, "
        f"max late {verdict.max_late_ms / 1000:.1f} s"
    )


def judge(base: Path) -> Verdict:
    """Judge a run's saved files again (``python -m tests.nemesis --check DIR``)."""
    verdict = check(read_history(base / "history.jsonl"), read_observed(base / "observed.jsonl"))
    for line in verdict.lines():
        print(f"nemesis: {line}", flush=True)
    return verdict


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(f"nemesis: signal {signum}: stopping the stack")


def main() -> int:
    if sys.argv[1:2] == ["--check"]:
        return 0 if judge(Path(sys.argv[2])).ok else 1
    # a SIGTERM (timeout, CI) stops the stack it started, as Ctrl-C does
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    minutes = float(os.environ.get("NEMESIS_MINUTES", "60"))
    seed = int(os.environ.get("NEMESIS_SEED") or random.SystemRandom().getrandbits(32))
    where = os.environ.get("NEMESIS_DIR")
    base = Path(where) if where else Path(tempfile.mkdtemp(prefix=f"nemesis-{seed}-"))
    base.mkdir(parents=True, exist_ok=True)
    print(f"nemesis: seed {seed} (NEMESIS_SEED={seed} replays it), files in {base}", flush=True)
    # librdkafka's clients here log every refused connection while the broker is away
    # (thousands of lines a minute): their stderr goes to a file, the verdict to stdout.
    sys.stderr.flush()
    with (base / "nemesis.stderr").open("ab") as stderr:
        os.dup2(stderr.fileno(), 2)
    rng = random.Random(seed)
    stack = NemesisStack(base)
    history_path = base / "history.jsonl"
    lock = threading.Lock()
    try:
        stack.start()
        settings = stack.settings
        ensure_topics(settings, ["nm-probe"])
        with TimerClient(settings) as probe:
            wait_until_firing(settings, probe, "nm-probe", timeout=180)
        print("nemesis: the stack fires; load and faults start", flush=True)
        with history_path.open("w") as out:
            load = Load(settings, out, random.Random(rng.getrandbits(32)), lock)
            nemesis = Nemesis(stack, out, random.Random(rng.getrandbits(32)), lock)
            load.start()
            time.sleep(10)  # the load alone first: the run's opening, not a wait for a result
            nemesis.start()
            end = time.monotonic() + minutes * 60 - 10
            while time.monotonic() < end:
                time.sleep(min(30.0, max(0.0, end - time.monotonic())))
                print(
                    f"nemesis: {dict(nemesis.counts)} faults, sent {load.sent}",
                    flush=True,
                )
            print("nemesis: healing", flush=True)
            nemesis.heal()
            unanswered = load.stop()
            print(f"nemesis: healed; {unanswered} requests never acknowledged", flush=True)
            limited = load.sent.get("schedules", 0) * 0.2 / LIMIT_PER_SECOND
            _drain(settings, load.last_second + int(limited))
            nemesis.stop()
        observed = observe(settings, settings.topics.requests, settings.topics.fired)
        with (base / "observed.jsonl").open("w") as seen:
            for entry in (*observed.callbacks, *observed.fires, *observed.arrivals):
                write_line(seen, entry)
        verdict = judge(base)
        print(summary(minutes, sorted(nemesis.counts.items()), verdict), flush=True)
        return 0 if not verdict.lost and not verdict.early and verdict.ok else 1
    finally:
        stack.close()


if __name__ == "__main__":
    sys.exit(main())
