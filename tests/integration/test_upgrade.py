"""Upgrading from the previous release, and rolling back to it, on real processes.

The previous release is the newest line of RELEASES, taken from git at its commit (``git
archive``): a clone without that history fails here, loudly, as it should. Its
oscillator and workers run from the extracted tree in this virtualenv (``python -m app``
with the tree first on ``PYTHONPATH``, as its Procfile's ``kafka-timers`` commands do).

Upgrade: the previous release makes its topics (its own ``kafka-timers topics``) and
stores timers of every kind through its own client and raw records: one-shot in each
request format (protobuf from ``TimerClient``, JSON, etf1), with and without tokens,
with a late-fire policy (stored layout 2), an interval series firing every occurrence
and a cron series in a zone with the default coalesce, and cancels by token and by etf1
tombstone. Some fire under it; then every old process is stopped, the operator's upgrade
step runs (this tree's ``kafka-timers topics``), and this tree's oscillator and workers
start on the same topics, group and RocksDB directories. Each timer must fire once,
none early, cancelled ones never; a timer and a series the old release stored are
cancelled by this release's client and answered ``cancelled``. Rollback: the same with
the releases swapped (this tree writes layouts 1 and 2, which the previous release
reads; docs/deploy.md, Upgrades and rollbacks).

A last test puts a timer in a stored layout newer than this release reads into the
changelog: the worker must stop with one line and exit 78, the timer left in place.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

import pytest
from confluent_kafka import Producer

from app.core.keys import index_key, timer_key
from app.core.stored import NEWEST_LAYOUT, pack_timer
from app.core.timer import Timer
from app.dev.broker import free_port
from app.dev.stack import ServiceProcess, child_env, wait_until_firing
from app.kafka.config import confluent_producer
from app.kafka.records import Record, TopicReader
from app.settings import Settings
from kafka_timers_client.client import TimerClient
from tests.conftest import fresh_settings
from tests.support.broker import BrokerInfo
from tests.support.stack import Stack, running_stack
from tests.support.waiting import keep_reading, wait_until

ROOT = Path(__file__).resolve().parents[2]
WORKERS = ("w-a", "w-b")
#: Seconds after the old client starts at which the timers stored for "after the
#: upgrade" are due: every old process must be stopped by then (asserted).
AFTER_S = 32
#: Tracebacks the released workers are known to log, fixed in this tree since: Faust's
#: recovery seeking a partition a rebalance took away meanwhile logs aiokafka's
#: ``IllegalStateError`` before Faust starts its recovery over (seen on Apache Kafka in
#: the rollback; this tree's recovery patch, ``faust_internals.recovery._recovery_wait``,
#: starts over with one warning line instead). The timers are judged all the same.
OLD_RELEASE_TRACEBACKS = ("IllegalStateError: No current assignment for partition",)


def previous_release() -> tuple[str, str]:
    """``(version, commit)`` of the newest release in RELEASES."""
    rows = [
        line.split()[:2]
        for line in (ROOT / "RELEASES").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    version, commit = rows[-1]
    return version, commit


@pytest.fixture(scope="module")
def old_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's code (app/ and oscillator/), from git at its commit."""
    version, commit = previous_release()
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit, "app", "oscillator"],
        cwd=ROOT,
        capture_output=True,
    )
    if archive.returncode != 0:
        pytest.fail(
            f"cannot extract release {version} ({commit[:7]}) with git archive: "
            f"{archive.stderr.decode(errors='replace').strip()} (the upgrade test needs the "
            "repository's history: clone without --depth)"
        )
    tree = tmp_path_factory.mktemp(f"release-{version}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.10.12+, 3.11.4+
            tar.extractall(tree, filter="data")
        else:  # our own repository's archive: nothing to filter out
            tar.extractall(tree)
    return tree


class OldProcess(ServiceProcess):
    """A process of the old release: ``python -m app <args>`` from the extracted tree.

    The tree is first on ``PYTHONPATH`` and the working directory (``-m`` puts it first
    on ``sys.path``), so nothing of this tree's ``app`` package is imported.
    """

    def __init__(
        self, tree: Path, name: str, args: list[str], settings: Settings, log_dir: Path
    ) -> None:
        self.name = name
        self.settings = settings
        self.log_path = log_dir / f"{name}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log: IO[bytes] = self.log_path.open("ab")
        env = child_env(settings.to_env())
        env["PYTHONPATH"] = str(tree)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app", *args],
            cwd=tree,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


#: Run with either release's ``app``: stores the timers through its own client and raw
#: records in its request formats, cancels some, and prints what it stored.
CLIENT_SCRIPT = r"""
import json, sys, time
from confluent_kafka import Producer
try:  # a release whose service still had its own path to the client
    from app.client import TimerClient
except ImportError:  # this tree: the client package is the one import path
    from kafka_timers_client import TimerClient
from app.kafka.config import confluent_producer
from app.settings import Settings

topic = sys.argv[1]
settings = Settings.from_env()
t0 = int(time.time())
soon, after = t0 + 6, t0 + int(sys.argv[2])
import app
plan = {"t0": t0, "one_shot": [], "series": [], "cancelled": [], "cancel_later": [],
        "app": app.__file__}
with TimerClient(settings) as client:
    def one(name, due, **kw):
        t = client.schedule(topic, name.encode(), key="k-" + name, at=due, timer_id=name, **kw)
        plan["one_shot"].append({"id": t.id, "token": t.token, "due": t.due, "key": "k-" + name})
        return t
    for group, due in (("soon", soon), ("after", after)):
        for i in range(3):
            one(f"pb-{group}-{i}", due)
        one(f"pb-{group}-skip", due, late="skip-after 1h")  # stored layout 2
    for i in range(2):  # the first release's own cancel, answered by its worker
        t = client.schedule(topic, b"never", at=after, timer_id=f"pb-cancel-old-{i}")
        outcome = client.cancel(t.id, t.token, wait=20)
        assert outcome.value == "cancelled", outcome
        plan["cancelled"].append(t.id)
    for name, due in (("pb-cancel-new", after + 3600),):  # cancelled by the second release
        t = client.schedule(topic, b"never", at=due, timer_id=name)
        plan["cancel_later"].append({"id": t.id, "token": t.token, "series": False})
    # series: every 3 s with every occurrence fired (all); cron every 3 s in a zone with
    # the default coalesce; one that the second release cancels
    for name, kw in (
        ("sr-every-all", {"every": 3, "count": 8, "late": "all"}),
        ("sr-cron", {"cron": "*/3 * * * * *", "tz": "Europe/Paris", "count": 8}),
    ):
        t = client.schedule(topic, name.encode(), key="k-" + name, timer_id=name, **kw)
        plan["series"].append({"id": t.id, "token": t.token, "count": kw["count"],
                               "late": kw.get("late", "coalesce")})
    t = client.schedule(topic, b"s", timer_id="sr-cancel-new", every=2, late="all")
    plan["cancel_later"].append({"id": t.id, "token": t.token, "series": True})
    client.flush()

producer = Producer(confluent_producer(settings))
def raw(key, value, headers=None):
    producer.produce(settings.topics.requests, value, key, headers=headers or [])
for group, due in (("soon", soon), ("after", after)):
    for name, extra in ((f"js-{group}", {"token": "jt-" + group}),
                        (f"js-{group}-notoken", {}),
                        (f"js-{group}-skip", {"token": "jk", "late": "skip-after 1h"})):
        body = {"topic": topic, "key": "k-" + name, "value": name, "at": due, "id": name, **extra}
        raw(name.encode(), json.dumps(body).encode())
        plan["one_shot"].append({"id": name, "token": extra.get("token", ""), "due": due,
                                 "key": "k-" + name})
    name = f"etf-{group}"
    raw(name.encode(), name.encode(), [("scheduler-epoch", str(due).encode()),
                                       ("scheduler-target-topic", topic.encode()),
                                       ("scheduler-target-key", ("k-" + name).encode())])
    plan["one_shot"].append({"id": name, "token": "", "due": due, "key": "k-" + name})
raw(b"etf-tombstoned", b"never", [("scheduler-epoch", str(after).encode()),
                                  ("scheduler-target-topic", topic.encode())])
producer.flush(10)
raw(b"etf-tombstoned", None)  # etf1's cancel: a tombstone for the key
producer.flush(10)
plan["cancelled"].append("etf-tombstoned")
print(json.dumps(plan))
"""


def fires_by_id(records: list[Record]) -> dict[str, list[Record]]:
    fired: dict[str, list[Record]] = {}
    for record in records:
        fired.setdefault((record.header("timer-id") or b"").decode(), []).append(record)
    return fired


def header_int(record: Record, name: str) -> int:
    return int(record.header(name) or b"-1")


@pytest.fixture
def bare_stack(broker: BrokerInfo, tmp_path: Path) -> Iterator[Stack]:
    """Fresh names, and no service topic made yet: the first release makes its own."""
    with running_stack(fresh_settings(broker.bootstrap), tmp_path) as s:
        yield s


class Release:
    """One side of the switch: the previous release (an extracted tree) or this tree.

    Its processes are started the way its own README says (``kafka-timers topics``,
    ``oscillator``, ``worker``: ``python -m app ...``), its client script runs with its
    own ``app`` package.
    """

    def __init__(self, stack: Stack, tree: Path | None, version: str) -> None:
        self.stack, self.tree, self.version = stack, tree, version
        self.processes: list[ServiceProcess] = []

    @property
    def cwd(self) -> Path:
        return self.tree or ROOT

    def run(self, args: Sequence[str], timeout: float = 90) -> str:
        env = child_env(self.stack.settings.to_env())
        if self.tree is not None:
            env["PYTHONPATH"] = str(self.tree)
        done = subprocess.run(
            [sys.executable, *args],
            cwd=self.cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, (
            f"{self.version}: {args[:2]} exited {done.returncode}: {done.stderr[-3000:]}"
        )
        return done.stdout

    def start(self, base: Path) -> None:
        """Its oscillator and workers (on the workers' usual data directories)."""
        stack, settings = self.stack, self.stack.settings
        if self.tree is None:
            self.processes.append(stack.oscillator("oscillator-new"))
            for name in WORKERS:
                worker = stack.worker(name, data_dir=base / name, log_name=f"{name}-new")
                self.processes.append(worker)
            return
        old = [
            OldProcess(
                self.tree, "oscillator-old", ["oscillator"], replace(settings, worker_id="o"), base
            )
        ]
        for name in WORKERS:
            changes = {"worker_id": name, "data_dir": str(base / name), "web_port": free_port()}
            old.append(
                OldProcess(
                    self.tree,
                    f"{name}-old",
                    ["worker", "--loglevel", "info"],
                    replace(settings, **changes),
                    base,
                )
            )
        self.processes.extend(old)
        stack.services.extend(old)  # shown and stopped with the stack on failure

    def stop(self) -> None:
        for process in self.processes:  # every process, as a deploy replaces them
            assert process.stop() == 0, f"{self.version}: {process.name} did not stop cleanly"


CANCEL_SCRIPT = r"""
import json, sys
try:  # a release whose service still had its own path to the client
    from app.client import TimerClient
except ImportError:  # this tree: the client package is the one import path
    from kafka_timers_client import TimerClient
from app.settings import Settings
with TimerClient(Settings.from_env()) as client:
    todo = json.loads(sys.argv[1])
    print(json.dumps({t["id"]: client.cancel(t["id"], t["token"], wait=20).value for t in todo}))
"""


def judge(
    plan: dict[str, Any], fired: dict[str, list[Record]], switched_ms: int, cancelled_ms: int
) -> list[str]:
    """What went wrong: each one-shot timer once, never early, unchanged; series whole;
    cancelled ones never; the timers due after the switch fired by the second release."""
    problems: list[str] = []
    for t in plan["one_shot"]:
        timer_id, records = t["id"], fired.get(t["id"], [])
        if len(records) != 1:
            problems.append(f"{timer_id} fired {len(records)} times")
            continue
        record = records[0]
        fired_at = header_int(record, "timer-fired-at")
        if fired_at < t["due"] * 1000:
            problems.append(f"{timer_id} early: {fired_at} ms < due {t['due']} s")
        if record.key != t["key"].encode() or record.value != timer_id.encode():
            problems.append(f"{timer_id}: key or value changed: {record.key!r} {record.value!r}")
        if (record.header("timer-token") or b"").decode() != t["token"]:
            problems.append(f"{timer_id}: token {record.header('timer-token')!r}")
        if "-after" in timer_id and fired_at <= switched_ms:
            problems.append(f"{timer_id} fired before the first release stopped")
    for timer_id in plan["cancelled"]:
        if timer_id in fired:
            problems.append(f"{timer_id} was cancelled and fired")
    for s in plan["series"]:
        records = fired.get(s["id"], [])
        seqs = Counter(header_int(r, "timer-seq") for r in records)
        if any(n > 1 for n in seqs.values()):
            problems.append(f"{s['id']}: occurrences fired twice: {seqs}")
        if any(
            header_int(r, "timer-fired-at") < header_int(r, "timer-due") * 1000 for r in records
        ):
            problems.append(f"{s['id']}: occurrences early")
        covered = sum(1 + max(header_int(r, "timer-coalesced"), 0) for r in records)
        if covered != s["count"] or max(seqs, default=0) != s["count"]:
            problems.append(f"{s['id']}: occurrences {sorted(seqs)} cover {covered}/{s['count']}")
        if s["late"] == "all" and sorted(seqs) != list(range(1, s["count"] + 1)):
            problems.append(f"{s['id']} (late all): occurrences {sorted(seqs)}")
        if not any(header_int(r, "timer-fired-at") > switched_ms for r in records):
            problems.append(f"{s['id']}: no occurrence fired by the second release")
    for t in plan["cancel_later"]:
        later = [
            r for r in fired.get(t["id"], []) if header_int(r, "timer-fired-at") > cancelled_ms
        ]
        if len(later) > int(t["series"]):  # one occurrence may be on its way at the cancel
            problems.append(f"{t['id']}: {len(later)} fires after the second release cancelled it")
    return problems


@pytest.mark.parametrize("direction", ["upgrade", "rollback"])
def test_timers_stored_by_one_release_fire_once_after_the_switch_to_the_other(
    direction: str, old_tree: Path, bare_stack: Stack
) -> None:
    """upgrade: the previous release stores, this tree fires. rollback: this tree stores
    (layouts 1 and 2, the only ones it writes), the previous release fires."""
    stack, settings, base = bare_stack, bare_stack.settings, bare_stack.base_dir
    version, commit = previous_release()
    old, new = Release(stack, old_tree, version), Release(stack, None, "this tree")
    first, second = (old, new) if direction == "upgrade" else (new, old)
    callbacks = stack.callback_topic(f"cb-upgrade-{settings.app_id}")
    probes = stack.callback_topic(f"probe-upgrade-{settings.app_id}")

    # -- the first release: its topics, oscillator and workers; it stores everything ----
    first.run(["-m", "app", "topics"])
    first.start(base)
    with TimerClient(settings) as client:
        wait_until_firing(settings, client, probes, timeout=90)
    plan = json.loads(first.run(["-c", CLIENT_SCRIPT, callbacks, str(AFTER_S)]))
    assert Path(plan["app"]).is_relative_to(first.cwd), plan["app"]  # that release's code
    t0 = plan["t0"]
    soon = {t["id"] for t in plan["one_shot"] if "-soon" in t["id"]}
    reader = stack.reader(callbacks)

    def fired_ids() -> set[str]:
        reader.poll(0.5)
        return set(fires_by_id(reader.records))

    wait_until(
        lambda: soon <= fired_ids(),
        timeout=40,
        message=f"{first.version} did not fire the timers due soon",
    )
    first.stop()
    switched_ms = int(time.time() * 1000)
    assert switched_ms < (t0 + AFTER_S) * 1000, (
        f"{first.version} was still running when the timers meant for after the switch came "
        f"due ({(switched_ms / 1000 - t0):.1f} s after they were stored): the test proves "
        "nothing about them on a machine this slow"
    )

    # -- the operator's step (an upgrade: this tree's topics command, which checks the
    # topics' configurations and fixes what it may), then the second release on the
    # same topics, group and RocksDB directories ---------------------------------------
    if second is new:
        second.run(["-m", "app", "topics"])
    second.start(base)
    with TimerClient(settings) as client:
        wait_until_firing(settings, client, probes, timeout=90)
    answers = json.loads(second.run(["-c", CANCEL_SCRIPT, json.dumps(plan["cancel_later"])]))
    cancelled_ms = int(time.time() * 1000)
    assert set(answers.values()) == {"cancelled"}, answers

    def series_done() -> bool:
        fired = fires_by_id(reader.records)
        return all(
            any(header_int(r, "timer-seq") == s["count"] for r in fired.get(s["id"], []))
            for s in plan["series"]
        )

    wait_until(
        lambda: {t["id"] for t in plan["one_shot"]} <= fired_ids() and series_done(),
        timeout=90,
        message=f"not every timer {first.version} stored fired under {second.version}",
    )
    # A duplicate or a cancelled timer's fire would come with or right after the last
    # expected one: keep reading that long for it to show.
    keep_reading(reader.poll, 2.0)
    problems = judge(plan, fires_by_id(reader.records), switched_ms, cancelled_ms)
    assert not problems, "\n".join(problems)
    for process in second.processes:
        log = process.log_text()
        known = OLD_RELEASE_TRACEBACKS if second is old else ()
        unexpected = [t for t in tracebacks(log) if not any(k in t for k in known)]
        assert not unexpected, f"{process.name}: {unexpected[0][-3000:]}"
    print(
        f"\n{direction} {first.version} -> {second.version} ({version} is {commit[:7]}): "
        f"{len(plan['one_shot'])} one-shot timers once each, {len(plan['series'])} series "
        f"whole, {len(plan['cancelled'])} cancelled by the first and "
        f"{len(plan['cancel_later'])} by the second release: none fired; switched "
        f"{switched_ms / 1000 - t0:.1f} s after storing"
    )


def tracebacks(log: str) -> list[str]:
    """Each traceback in a worker's log, up to the next log line (``[<date> ...``)."""
    found: list[str] = []
    current: list[str] | None = None
    for line in log.splitlines():
        if "Traceback (most recent call last)" in line:
            if current is not None:
                found.append("\n".join(current))
            current = [line]
        elif current is not None:
            if line.startswith("[20"):
                found.append("\n".join(current))
                current = None
            else:
                current.append(line)
    if current is not None:
        found.append("\n".join(current))
    return found


def test_a_stored_layout_newer_than_this_release_stops_the_worker_in_one_line(
    settings: Settings, stack: Stack
) -> None:
    due = int(time.time()) + 3600
    timer = Timer(id="from-a-later-release", due=due, topic="cb", key=None, value=b"v", token="t")
    newer = bytes([NEWEST_LAYOUT + 1]) + pack_timer(timer)[1:]
    producer = Producer(confluent_producer(settings))
    producer.produce(settings.changelog_topic, newer, timer_key(due, timer.id), partition=0)
    producer.produce(settings.changelog_topic, b"P%012dt" % due, index_key(timer.id), partition=0)
    assert producer.flush(10) == 0
    worker = stack.worker("w-old", loglevel="info")
    wait_until(lambda: not worker.alive, timeout=60, message="the worker did not stop")
    assert worker.process.returncode == 78
    log = worker.log_text()
    refusals = [line for line in log.splitlines() if "layout version" in line]
    assert len(refusals) == 1, log[-3000:]
    assert "CRITICAL" in refusals[0] and f"layout version {NEWEST_LAYOUT + 1}" in refusals[0]
    assert "Traceback" not in log, log[-3000:]
    # Not dropped: the timer is still in the changelog, for the release that wrote it.
    with TopicReader(settings, settings.changelog_topic) as changelog:
        records = changelog.read_to_end(timeout=20)
    assert any(r.key == timer_key(due, timer.id) and r.value == newer for r in records)
