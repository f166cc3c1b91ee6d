"""``make nemesis``: the stack, the load and the nemesis for ``NEMESIS_MINUTES`` (60), then
heal, wait, read the topics and judge (:mod:`tests.nemesis.checker`).

Environment: ``NEMESIS_MINUTES`` (a float), ``NEMESIS_SEED`` (replays a run's draws; a
new one is printed otherwise), ``NEMESIS_DIR`` (where the history, the observations and
every process's log go; a new directory under the system's temporary one otherwise).
The last line is the verdict; the exit status is 0 only when nothing was lost, early,
fired after its cancel's answer, undone or made up.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from app.core.fired import FiredKind, FiredRecord
from app.core.routing import HOP_HEADER, owner_of
from app.dev.stack import wait_until_firing
from app.kafka.records import Record
from app.kafka.topics import ensure_topics
from app.settings import Settings
from kafka_timers_client import protowire
from kafka_timers_client.client import TimerClient
from tests.nemesis.audit import compare, run_audit, skewed_ids
from tests.nemesis.checker import Verdict, check
from tests.nemesis.faults import Nemesis
from tests.nemesis.history import (
    Answer,
    Arrival,
    Callback,
    DeadLetter,
    Fire,
    Observed,
    read_history,
    read_observed,
    write_line,
)
from tests.nemesis.load import Load
from tests.nemesis.stack import (
    LIMITED_TOPIC,
    PARTITIONS,
    PLAIN_TOPIC,
    SPREAD_TOPIC,
    NemesisStack,
)
from tests.nemesis.tailing import Tail

__all__ = ["main", "observe"]

#: Once every expected callback came, how long to read on for duplicates on their way.
QUIET = 20.0
#: The longest the drain after the heal may take: what has not come by then is lost.
DRAIN_LIMIT = 600.0
CALLBACK_TOPICS = (PLAIN_TOPIC, SPREAD_TOPIC, LIMITED_TOPIC)


def _header(record: Record, name: str) -> bytes | None:
    for key, value in record.headers:
        if key == name:
            return value
    return None


def observe(settings: Settings, records: dict[str, list[Record]]) -> Observed:
    """Everything the checker needs, from the topics' ``records`` (all of them, from
    :meth:`Tail.read_to_end <tests.nemesis.tailing.Tail.read_to_end>`): the callbacks,
    the ``fired`` records and every request as it reached its id's owner partition."""
    requests_topic, fired_topic = settings.topics.requests, settings.topics.fired
    dlq_topic = settings.topics.dlq
    observed = Observed()
    for topic in CALLBACK_TOPICS:
        for r in records[topic]:
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
    for r in records[fired_topic]:
        try:
            fired = FiredRecord.from_json(r.value or b"{}")
        except ValueError:
            continue
        if fired.event is FiredKind.CANCEL and fired.outcome:
            observed.answers.append(Answer(fired.id, fired.worker, fired.outcome))
        if fired.event is FiredKind.FIRED and fired.fired_at_ms is not None:
            observed.fires.append(
                Fire(fired.id, fired.seq, fired.fired_at_ms, fired.worker, fired.request_offset)
            )
    for r in records[requests_topic]:
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
    for r in records[dlq_topic]:
        timer_id = _header(r, "timer-id")
        if timer_id:
            observed.dead.append(
                DeadLetter(
                    timer_id.decode(errors="replace"),
                    (_header(r, "dlq-reason") or b"").decode(errors="replace"),
                    (_header(r, "dlq-detail") or b"").decode(errors="replace"),
                )
            )
    return observed


def _drain(
    callbacks: dict[str, list[Record]], expected: dict[tuple[str, int], frozenset[str]]
) -> int:
    """Watch the callback topics' records (``callbacks``, growing as the run's
    :class:`~tests.nemesis.tailing.Tail` reads them) until every callback in ``expected``
    has come (by ``(id, seq)``: one of its payloads), then :data:`QUIET` s more (a
    duplicate on its way); give up after :data:`DRAIN_LIMIT` s. Returns how many never
    came (the checker then says which, and why)."""
    missing = dict(expected)
    seen = dict.fromkeys(CALLBACK_TOPICS, 0)
    deadline = time.monotonic() + DRAIN_LIMIT
    report = time.monotonic() + 30
    done_at: float | None = None
    while time.monotonic() < deadline:
        for topic in CALLBACK_TOPICS:
            fresh = callbacks[topic][seen[topic] :]
            seen[topic] += len(fresh)
            for r in fresh:
                seq = _header(r, "timer-seq")
                timer_id = (_header(r, "timer-id") or b"").decode()
                key = (timer_id, int(seq or 0))
                if (r.value or b"").decode() in missing.get(key, ()):
                    del missing[key]
        if not missing and done_at is None:
            done_at = time.monotonic()
        if done_at is not None and time.monotonic() - done_at > QUIET:
            return 0
        if time.monotonic() > report:
            report += 30
            print(f"nemesis: draining, {len(missing)} callbacks still to come", flush=True)
        time.sleep(0.3)  # a poll interval: the tail's thread reads the topics
    return len(missing)


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


def judge(base: Path) -> tuple[Verdict, set[str]]:
    """Judge a run's saved files (``python -m tests.nemesis --check DIR`` again); with the
    verdict, the ids a moved worker clock stamped (:func:`~tests.nemesis.audit.skewed_ids`),
    for the comparison with the audit."""
    history = read_history(base / "history.jsonl")
    observed = read_observed(base / "observed.jsonl")
    verdict = check(history, observed)
    for line in verdict.lines():
        print(f"nemesis: {line}", flush=True)
    return verdict, skewed_ids(history, observed)


def _audit_agrees(settings: Settings, base: Path, verdict: Verdict, skewed: set[str]) -> bool:
    """Run the PySpark audit over the run's topics and print whether it finds what the
    checker found (:mod:`tests.nemesis.audit`); ``NEMESIS_AUDIT=0`` skips it."""
    if os.environ.get("NEMESIS_AUDIT", "1") == "0":
        print("nemesis: audit skipped (NEMESIS_AUDIT=0)", flush=True)
        return True
    print("nemesis: auditing the topics with the PySpark audit", flush=True)
    try:
        audit_summary, audit_line = run_audit(settings, base / "audit", time.time())
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"nemesis: the audit failed to run: {exc}", flush=True)
        return False
    agreement = compare(verdict, audit_summary, audit_line, skewed)
    print(f"nemesis: {agreement.line()}", flush=True)
    return agreement.agrees


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(f"nemesis: signal {signum}: stopping the stack")


def main() -> int:
    if sys.argv[1:2] == ["--check"]:
        base = Path(sys.argv[2])
        verdict, skewed = judge(base)
        audited = base / "audit" / "summary.json"
        if audited.exists():  # the audit's verdict on the run, beside the checker's again
            agreement = compare(verdict, json.loads(audited.read_text()), skewed=skewed)
            print(f"nemesis: {agreement.line()}", flush=True)
            return 0 if verdict.ok and agreement.agrees else 1
        return 0 if verdict.ok else 1
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
        # The request topic followed from the load's start (the load follows the arrivals
        # at the owners in it); the others from the heal, read meanwhile from their start
        # while the drain waits (not during the faults: each fetch on the s3:// engine
        # lists every batch object of each partition it asks for).
        arrivals = Tail(settings, (settings.topics.requests,)).start()
        with history_path.open("w") as out:
            requests = arrivals.records[settings.topics.requests]
            load = Load(settings, out, random.Random(rng.getrandbits(32)), lock, requests)
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
            topics = settings.topics
            outcomes = Tail(settings, (*CALLBACK_TOPICS, topics.fired, topics.dlq)).start()
            nemesis.heal()
            unanswered = load.stop()
            print(f"nemesis: healed; {unanswered} requests never acknowledged", flush=True)
            missing = _drain(outcomes.records, load.expected())
            print(f"nemesis: drained; {missing} expected callbacks never came", flush=True)
            nemesis.stop()
        observed = observe(settings, {**arrivals.read_to_end(), **outcomes.read_to_end()})
        print("nemesis: read the topics to their end", flush=True)
        with (base / "observed.jsonl").open("w") as seen:
            for entry in (
                *observed.callbacks,
                *observed.fires,
                *observed.arrivals,
                *observed.dead,
                *observed.answers,
            ):
                write_line(seen, entry)
        verdict, skewed = judge(base)
        agrees = _audit_agrees(settings, base, verdict, skewed)
        print(summary(minutes, sorted(nemesis.counts.items()), verdict), flush=True)
        return 0 if not verdict.lost and not verdict.early and verdict.ok and agrees else 1
    finally:
        stack.close()


if __name__ == "__main__":
    sys.exit(main())
