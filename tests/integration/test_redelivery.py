"""Per-message acknowledgement and redelivery (``kafka_timers_client.redelivery``), on
real processes: a worker and an oscillator, and the application in its own process
(tests/support/redelivery_app.py), killed -9 once in the middle.

The application acknowledges 90% of the messages and ignores the other 10% on their
first delivery. Every message must be acknowledged at least once (nothing lost), every
ignored one must come back after the visibility timeout and be acknowledged, and an
acknowledged message may come back only for a reason the test names: its ack was still
in the killed process's producer (the ack never reached the broker), or it raced the
timeout (the worker answered the cancel ``already_fired``). No message is handed out
twice: offsets are committed before a batch is handed out. A message can come back twice
with one count, and the test says why: the killed process had scheduled a batch's
timers and not yet committed it, and some fired before the next process read the batch
again and scheduled them anew.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from app.dev.broker import free_port
from app.dev.stack import wait_until_firing
from app.kafka.config import confluent_common, confluent_producer
from app.settings import Settings
from kafka_timers_client import TimerClient
from tests.support.probes import committed_offsets, metric_total
from tests.support.stack import Stack
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
#: Seconds: short, so the test is quick; 30 (the default) for runs much larger than
#: 10,000 messages, whose timers a loaded worker may apply later than 5 s after they are
#: sent (each ack would then race its timer).
VISIBILITY = 5
LARGE_VISIBILITY = 30
BATCH = 500


@dataclass
class Delivery:
    kind: str
    number: int
    count: int
    topic: str
    partition: int
    offset: int
    pid: int
    #: The timer that sent this copy (``-``: the message as it was first written).
    timer: str


@dataclass
class Outcome:
    """What the application's log and the fired topic say happened."""

    deliveries: dict[int, list[Delivery]] = field(default_factory=lambda: defaultdict(list))
    figures: dict[str, object] = field(default_factory=dict)


class App:
    """The application process, started and killed by the test."""

    def __init__(
        self, settings: Settings, log: Path, queue: str, dlt: str, group: str, **opts: object
    ):
        self.args = [
            sys.executable, "-m", "tests.support.redelivery_app",
            "--bootstrap", settings.bootstrap_servers,
            "--requests", settings.topics.requests,
            "--fired", settings.topics.fired,
            "--queue", queue,
            "--dead-letter", dlt,
            "--group", group,
            "--log", str(log),
        ]  # fmt: skip
        for name, value in opts.items():
            flag = "--" + name.replace("_", "-")
            self.args += [flag] if value is True else [flag, str(value)]
        self.log = log
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        out = self.log.with_suffix(f".{len(self.processes)}.out").open("wb")
        process = subprocess.Popen(self.args, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        self.processes.append(process)
        return process

    def lines(self) -> list[Delivery]:
        if not self.log.exists():
            return []
        out = []
        for line in self.log.read_text().splitlines():
            kind, number, count, topic, partition, offset, pid, timer = line.split()
            place = (topic, int(partition), int(offset))
            out.append(Delivery(kind, int(number), int(count), *place, int(pid), timer))
        return out

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def output(self) -> str:
        return "\n".join(
            p.read_text()[-3000:] for p in sorted(self.log.parent.glob(self.log.stem + ".*.out"))
        )


def _ends(settings: Settings, topic: str) -> dict[int, int]:
    consumer = Consumer({**confluent_common(settings), "group.id": f"ends-{uuid.uuid4().hex}"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(settings.partition_count)
        }
    finally:
        consumer.close()


def _read_all(settings: Settings, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """Every record of ``topic`` as ``(key, value)``, read to the high watermarks."""
    ends = _ends(settings, topic)
    consumer = Consumer(
        {
            **confluent_common(settings),
            "group.id": f"read-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    out: list[tuple[bytes | None, bytes | None]] = []
    positions = dict.fromkeys(ends, 0)
    deadline = time.monotonic() + 60
    try:
        while any(positions[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for msg in consumer.consume(10000, 0.5):
                if msg.error() is None:
                    out.append((msg.key(), msg.value()))
                    positions[msg.partition() or 0] = (msg.offset() or 0) + 1
    finally:
        consumer.close()
    assert all(positions[p] >= ends[p] for p in ends), "could not read the topic to its end"
    return out


@dataclass
class FiredTopic:
    """What the fired topic says of each timer id."""

    #: Every cancel: (token digest, outcome, applied at ms).
    cancels: dict[str, list[tuple[str, str, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    #: Every fire: (token digest, fired at ms).
    fires: dict[str, list[tuple[str, int]]] = field(default_factory=lambda: defaultdict(list))

    def raced(self, timer_id: str) -> str | None:
        """The outcome of a cancel of ``timer_id`` applied once its timer (that very
        version) had fired, or None."""
        for token, outcome, at_ms in self.cancels.get(timer_id, ()):
            if outcome == "already_fired":
                return outcome
            if any(t == token and fired <= at_ms for t, fired in self.fires.get(timer_id, ())):
                return outcome
        return None

    def fired_unacked_version(self, timer_id: str) -> bool:
        """Whether a version of ``timer_id`` that no ack (cancel) ever named fired: the
        killed app scheduled it from a batch it never handed out, and the next app's copy
        (a new token) came after it had fired."""
        named = {token for token, _, _ in self.cancels.get(timer_id, ())}
        return any(token not in named for token, _ in self.fires.get(timer_id, ()))


def _fired_topic(settings: Settings) -> FiredTopic:
    out = FiredTopic()
    for _key, value in _read_all(settings, settings.topics.fired):
        doc = json.loads(value or b"{}")
        if doc.get("event") == "cancel":
            out.cancels[doc["id"]].append((doc["token"], doc["outcome"], doc["at_ms"]))
        elif doc.get("event") == "fired":
            out.fires[doc["id"]].append((doc["token"], doc["fired_at_ms"]))
    return out


def _ready(stack: Stack, settings: Settings, tag: str) -> tuple[str, str, str]:
    """A worker (with metrics) and an oscillator firing; a queue and a dead-letter topic."""
    stack.settings = settings
    port = free_port()
    stack.worker("worker-1", metrics_port=port)
    stack.oscillator()
    queue = stack.callback_topic(f"queue-{tag}")
    dlt = stack.callback_topic(f"queue-{tag}-dlt")
    probes = stack.callback_topic(f"probes-{tag}")
    with TimerClient(settings.client_config()) as client:
        wait_until_firing(settings, client, probes)
    return queue, dlt, f"http://127.0.0.1:{port}"


def _produce(settings: Settings, topic: str, count: int) -> None:
    producer = Producer(confluent_producer(settings, **{"linger.ms": 20}))
    for number in range(count):
        while True:
            try:
                producer.produce(topic, str(number).encode(), f"k{number}".encode())
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


def _settled(settings: Settings, metrics: str, group: str, topics: list[str]) -> bool:
    """No timer pending, and the group has read (and committed) every message."""
    if metric_total(metrics, "kafka_timers_pending") != 0:
        return False
    for topic in topics:
        committed = committed_offsets(settings, group, topic)
        ends = _ends(settings, topic)
        if any(end > 0 and committed.get(p, -1) < end for p, end in ends.items()):
            return False
    return True


def run_queue(stack: Stack, settings: Settings, tmp_path: Path, messages: int) -> Outcome:
    tag = uuid.uuid4().hex[:8]
    queue, dlt, metrics = _ready(stack, settings, tag)
    group = f"app-{tag}"
    _produce(settings, queue, messages)
    # Work paced so that the run lasts about 8 s: the kill lands in the middle of it.
    pause = 8.0 / max(1, messages / BATCH)
    visibility = VISIBILITY if messages <= 10_000 else LARGE_VISIBILITY
    app = App(
        settings, tmp_path / "app.log", queue, dlt, group,
        batch=BATCH, pause=f"{pause:.3f}", visibility=visibility,
    )  # fmt: skip
    try:
        started = time.monotonic()
        killed = app.start()
        wait_until(lambda: len(app.lines()) >= messages // 2, 120, "the app to get halfway")
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        handled_at_kill = len(app.lines())
        app.start()

        def done() -> bool:
            seen = defaultdict(list)
            for d in app.lines():
                seen[d.number].append(d)
            return len(seen) == messages and all(
                any(d.kind == "A" for d in ds) for ds in seen.values()
            )

        wait_until(
            done, 180, lambda: f"every message acked ({len(app.lines())} lines)\n" + app.output()
        )
        all_acked = time.monotonic() - started
        # Then until nothing more can come back: no timer pending, every copy read.
        wait_until(
            lambda: _settled(settings, metrics, group, [queue]),
            120,
            "no timer pending and every copy read",
            interval=0.5,
        )
        settled = time.monotonic() - started
    finally:
        app.stop()
    out = Outcome()
    for d in app.lines():
        out.deliveries[d.number].append(d)
    dead = _read_all(settings, dlt)
    killed_pid = killed.pid
    out.figures.update(
        messages=messages,
        log_lines=len(app.lines()),
        handled_before_kill=handled_at_kill,
        seconds_to_all_acked=round(all_acked, 1),
        seconds_to_settled=round(settled, 1),
        dead_lettered=len(dead),
        killed_pid=killed_pid,
        group=group,
        visibility_timeout=visibility,
    )
    return out


def check(out: Outcome, settings: Settings) -> dict[str, object]:
    """The acceptance checks; the figures (with each exception counted and explained)."""
    figures = out.figures
    group = str(figures["group"])
    messages = int(figures["messages"])  # type: ignore[call-overload]
    killed_pid = int(figures["killed_pid"])  # type: ignore[call-overload]
    assert sorted(out.deliveries) == list(range(messages)), "messages lost"
    lost = [n for n, ds in out.deliveries.items() if not any(d.kind == "A" for d in ds)]
    assert not lost, f"{len(lost)} messages never acked: {lost[:10]}"
    ignored = [n for n, ds in out.deliveries.items() if ds[0].kind == "I"]
    not_back = [
        n for n in ignored if not any(d.kind == "A" and d.count >= 2 for d in out.deliveries[n])
    ]
    assert not not_back, f"ignored messages never redelivered and acked: {not_back[:10]}"
    fired = _fired_topic(settings)
    # Two copies with one delivery count: the killed app had scheduled a batch and not
    # committed it yet; the next app read that batch again and scheduled its timers again
    # (same ids, a new token), but by then some old ones had fired. So one timer id fired
    # with two tokens. Never the same copy handed out twice: offsets are committed before
    # a batch is handed out.
    twice: list[int] = []
    for n, ds in out.deliveries.items():
        counts = [d.count for d in ds]
        for d in ds:
            if counts.count(d.count) > 1:
                assert d.timer != "-", f"a first copy handed out twice: {ds}"
                tokens = {token for token, _ in fired.fires[d.timer]}
                assert len(tokens) == 2, f"copies of one count, one version: {ds}"
        if len(set(counts)) != len(counts):
            twice.append(n)
    assert len(twice) <= BATCH, f"more than a batch scheduled again: {len(twice)}"
    # Acked, then back anyway: each needs a reason.
    races: list[tuple[int, str]] = []
    lost_acks, unexplained, orphans = [], [], []
    for n, ds in out.deliveries.items():
        for d in ds:
            if d.kind != "A" or not any(e.count > d.count for e in ds):
                continue
            timer_id = f"{group}/{d.topic}/{d.partition}/{d.offset}"
            answers = fired.cancels.get(timer_id, [])
            raced = fired.raced(timer_id)
            if raced is not None:
                races.append((n, raced))
            elif not answers and d.pid == killed_pid:
                lost_acks.append(n)
            elif answers and fired.fired_unacked_version(timer_id):
                orphans.append(n)
            else:
                unexplained.append((d, answers))
    ids = [f"{group}/{d.topic}/{d.partition}/{d.offset}" for d, _ in unexplained[:3]]
    assert not unexplained, (
        f"acked messages redelivered for no known reason: {unexplained[:5]}",
        {t: (fired.cancels.get(t), fired.fires.get(t)) for t in ids},
    )
    assert figures["dead_lettered"] == 0, "nothing should reach the dead-letter topic"
    figures.update(
        ignored_first_time=len(ignored),
        redelivered_after_ack_race=len(races),
        # How the worker answered the cancels that came after their fire.
        race_answers=dict(Counter(outcome for _, outcome in races)),
        redelivered_ack_lost_in_kill=len(lost_acks),
        redelivered_by_unhanded_version=len(orphans),
        acked_by_killed_app=sum(
            1 for ds in out.deliveries.values() for d in ds if d.pid == killed_pid and d.kind == "A"
        ),
        copied_twice_after_kill=len(twice),
        in_hand_at_kill=sum(1 for ds in out.deliveries.values() if ds[0].count > 1),
        redelivered_total=sum(len(ds) - 1 for ds in out.deliveries.values()),
    )
    # The kill loses at most what one batch of acks can hold in the producer.
    assert len(lost_acks) <= 2 * BATCH, figures
    # Versions scheduled from the one batch the killed app never handed out.
    assert len(orphans) <= BATCH, figures
    print("redelivery figures:", json.dumps(figures))
    return figures


#: How many messages the acceptance test sends: 10,000 (about a minute); the issue's
#: 100,000 with ``REDELIVERY_MESSAGES=100000``.
MESSAGES = int(os.environ.get("REDELIVERY_MESSAGES", "10000"))


@pytest.mark.fault
@pytest.mark.timeout(900)
def test_acks_ignores_and_a_kill(stack: Stack, settings: Settings, tmp_path: Path) -> None:
    out = run_queue(stack, settings, tmp_path, MESSAGES)
    check(out, settings)


@pytest.mark.fault
def test_a_message_that_keeps_failing_is_dead_lettered(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    """Never acked: handed out exactly ``max_deliveries`` times (the copies through a
    retry topic), then on the dead-letter topic with its count and origin. The
    application reads with ``poll()``, one message at a time."""
    tag = uuid.uuid4().hex[:8]
    queue, dlt, _metrics = _ready(stack, settings, tag)
    retry = stack.callback_topic(f"queue-{tag}-retry")
    _produce(settings, queue, 20)
    app = App(
        settings, tmp_path / "app.log", queue, dlt, f"app-{tag}",
        fail_all=True, max_deliveries=3, retry_topic=retry, visibility=2, one_by_one=True,
    )  # fmt: skip
    try:
        app.start()
        reader = Consumer(
            {
                **confluent_common(settings),
                "group.id": f"dlt-{tag}",
                "auto.offset.reset": "earliest",
            }
        )
        reader.subscribe([dlt])
        dead: list[tuple[int, dict[str, bytes]]] = []

        def all_dead() -> bool:
            for msg in reader.consume(100, 0.2):
                if msg.error() is None:
                    raw: Any = msg.headers() or []
                    dead.append((int(msg.value() or b"-1"), dict(raw)))
            return len(dead) >= 20

        wait_until(all_dead, 90, lambda: f"{len(dead)} of 20 dead-lettered\n" + app.output())
        reader.close()
    finally:
        app.stop()
    assert sorted(n for n, _ in dead) == list(range(20))
    for _, headers in dead:
        assert headers["delivery-count"] == b"3"
        assert headers["delivery-origin"].startswith(f"{queue}/".encode())
        assert headers["timer-id"].startswith(f"app-{tag}/{retry}/".encode())
    seen: dict[int, list[Delivery]] = defaultdict(list)
    for d in app.lines():
        seen[d.number].append(d)
    assert all(d.kind == "I" for ds in seen.values() for d in ds)
    assert {n: sorted(d.count for d in ds) for n, ds in seen.items()} == {
        n: [1, 2, 3] for n in range(20)
    }
    assert {d.topic for ds in seen.values() for d in ds[1:]} == {retry}
