"""Durable for years: real processes whose clocks jump a day, 40 days, 400 days, 9 years.

The oscillator and the workers run as real, separately started processes; between jumps
they are restarted with their wall clocks moved further ahead (``tests/support/clock.py``),
in every way a deployment restarts: SIGTERM, ``kill -9``, a lost data directory, a
worker that joins while another leaves. Workers are restarted one at a time and the
oscillator is stopped meanwhile, so no tick is processed while clocks disagree and the
consumer group never empties. Each restart on an old data directory also runs the
stale-store rebuild (the store is older than the changelog's tombstone retention).

The second test measures state: 8 days after 3,000 timers fired, the worker's RocksDB
and the changelog's live keys (newest record per key, not a tombstone: what compaction
keeps) are back to the pending timers and a few bookkeeping keys.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from app.dev.broker import free_port
from app.dev.stack import ServiceProcess
from bench.changelog import live_keys
from bench.rocks import count_keys_by_kind
from kafka_timers_client.client import TimerClient
from tests.support.faults import Fire, FireWatch, Planned, schedule_spread
from tests.support.stack import Stack
from tests.support.waiting import wait_until

DAY = 86_400
#: Moved clocks are set so that a horizon's timers come due this long after the plan:
#: the budget for restarting the workers one by one (measured: 14-21 s here).
LEAD_SECONDS = 40
#: "At its second": one tick's trip through the broker and Faust's fetch, with room for
#: a busy 2-core machine. Early is never allowed.
MAX_LATENESS_MS = 5000
READY_TIMEOUT = 90.0
FIRE_TIMEOUT = LEAD_SECONDS + 90.0
PER_HORIZON = 16


@dataclass
class Member:
    """One worker process of the group, with what it takes to restart it."""

    name: str
    data_dir: Path
    web_port: int
    process: ServiceProcess
    starts: int = 1


@dataclass
class MovedStack:
    """The stack, plus the clock offset every process now runs on."""

    stack: Stack
    offset: float = 0.0
    members: dict[str, Member] = field(default_factory=dict)
    oscillator: ServiceProcess | None = None
    log: list[str] = field(default_factory=list)

    def start_worker(self, name: str, data_dir: Path | None = None) -> Member:
        previous = self.members.get(name)
        starts = previous.starts + 1 if previous else 1
        data_dir = data_dir or (previous.data_dir if previous else self.stack.base_dir / name)
        web_port = free_port()
        process = self.stack.worker(
            name,
            clock_offset=self.offset,
            loglevel="info",
            data_dir=data_dir,
            web_port=web_port,
            log_name=f"{name}-{starts}",
        )
        member = Member(name, data_dir, web_port, process, starts)
        self.members[name] = member
        return member

    def wait_ready(self, member: Member) -> None:
        """Until the worker holds partitions and has recovered them (``/readyz``)."""

        def ready() -> bool:
            url = f"http://127.0.0.1:{member.web_port}/readyz"
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    body = json.loads(response.read())
            except (OSError, urllib.error.HTTPError, ValueError):
                return False
            return bool(body.get("ready") and body.get("partitions"))

        wait_until(ready, READY_TIMEOUT, f"{member.name} to hold and recover partitions", 0.25)

    def stop_oscillator(self) -> None:
        if self.oscillator is not None:
            assert self.oscillator.stop() == 0
            self.oscillator = None

    def start_oscillator(self) -> None:
        self.oscillator = self.stack.oscillator(
            f"oscillator-{len(self.log)}", clock_offset=self.offset
        )

    def moved_now(self) -> float:
        return time.time() + self.offset


def restart(moved: MovedStack, how: str) -> None:
    """Restart every worker on ``moved.offset``, one at a time, the way ``how`` says."""
    names = sorted(moved.members)
    if how == "sigterm":
        for name in names:
            assert moved.members[name].process.stop() == 0, f"{name} did not stop cleanly"
            moved.wait_ready(moved.start_worker(name))
    elif how == "kill-9":
        for name in names:
            moved.members[name].process.kill()
            moved.wait_ready(moved.start_worker(name))
    elif how == "lost-disk":
        first, *rest = names
        moved.members[first].process.stop()
        shutil.rmtree(moved.members[first].data_dir)
        moved.wait_ready(moved.start_worker(first))
        for name in rest:
            moved.members[name].process.stop()
            moved.wait_ready(moved.start_worker(name))
    elif how == "join-and-leave":
        joiner = moved.start_worker(f"worker-{len(names) + 1}")
        moved.wait_ready(joiner)
        leaver, *stay = names
        assert moved.members.pop(leaver).process.stop() == 0
        for name in stay:
            moved.members[name].process.stop()
            moved.wait_ready(moved.start_worker(name))
    else:
        raise ValueError(how)


def check_fires(fires: list[Fire], planned: dict[str, Planned]) -> list[int]:
    """Every planned timer fired exactly once, at its second; returns the lateness (ms)."""
    mine = [f for f in fires if f.id in planned]
    counts = Counter(f.id for f in mine)
    assert counts == Counter(dict.fromkeys(planned, 1)), f"lost or repeated: {counts}"
    lateness = []
    for fire in mine:
        due_ms = planned[fire.id].due * 1000
        assert fire.fired_at_ms >= due_ms, f"early by {due_ms - fire.fired_at_ms} ms: {fire}"
        assert fire.fired_at_ms - due_ms < MAX_LATENESS_MS, f"not at its second: {fire}"
        lateness.append(fire.fired_at_ms - due_ms)
    return lateness


HORIZONS = (
    ("+1 day", DAY, "sigterm"),
    ("+40 days", 40 * DAY, "kill-9"),
    ("+400 days", 400 * DAY, "lost-disk"),
    ("+9 years", 9 * 365 * DAY + 2 * DAY, "join-and-leave"),
)


@pytest.mark.fault
@pytest.mark.timeout(1200)
def test_timers_fire_at_their_second_a_day_40_days_400_days_and_9_years_ahead(
    stack: Stack,
) -> None:
    settings = stack.settings
    topic = stack.callback_topic("horizon-callbacks")
    moved = MovedStack(stack)
    moved.start_oscillator()
    for name in ("worker-1", "worker-2"):
        moved.wait_ready(moved.start_worker(name))
    watch = FireWatch(settings, topic)
    real_start = int(time.time())
    warm = schedule_spread(settings, topic, 16, real_start, real_start, prefix="warm")
    watch.wait(lambda w: w.fired_ids() >= set(warm), FIRE_TIMEOUT, "the workers to fire")
    plans = {
        label: schedule_spread(
            settings,
            topic,
            PER_HORIZON,
            real_start + horizon,
            real_start + horizon + 3,
            prefix=f"h{i}-",
        )
        for i, (label, horizon, _) in enumerate(HORIZONS)
    }
    report = []
    for label, _horizon, how in HORIZONS:
        planned = plans[label]
        first_due = min(p.due for p in planned.values())
        moved.stop_oscillator()
        # everything comes due LEAD_SECONDS of real time from now
        moved.offset = first_due - LEAD_SECONDS - time.time()
        began = time.monotonic()
        restart(moved, how)
        restarted_in = time.monotonic() - began
        assert moved.moved_now() < first_due - 5, (
            f"restarting took {restarted_in:.0f} s, more than the {LEAD_SECONDS} s budget"
        )
        moved.log.append(label)
        moved.start_oscillator()
        watch.wait(
            lambda w, ids=set(planned): w.fired_ids() >= ids,
            FIRE_TIMEOUT,
            f"the timers due {label} to fire",
        )
        watch.poll(1.0)
        lateness = check_fires(watch.fires(), planned)
        later = {t for lbl, p in plans.items() for t in p if lbl not in moved.log}
        assert not (watch.fired_ids() & later), f"a later horizon fired at {label}"
        report.append(
            f"{label} ({how}, restarted in {restarted_in:.0f} s): {len(lateness)} fired once, "
            f"0 early, lateness {min(lateness)}-{max(lateness)} ms"
        )
    everything = {**warm, **{t: p for plan in plans.values() for t, p in plan.items()}}
    counts = Counter(f.id for f in watch.fires())
    assert counts == Counter(dict.fromkeys(everything, 1))
    logs = "\n".join(m.process.log_text() for m in moved.members.values())
    assert "rebuilding it from the changelog" in logs, "no stale store was rebuilt"
    print("\n".join(report))


def _store_keys(member: Member) -> dict[str, float] | None:
    """The worker's ``kafka_timers_store_keys`` by kind, from ``/status/data``; None
    while it answers 503 (its web views at their share of the event loop, which a
    loaded machine reaches: ask again)."""
    url = f"http://127.0.0.1:{member.web_port}/status/data"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            body: dict[str, Any] = json.loads(response.read())
    except urllib.error.HTTPError as refused:
        if refused.code == 503:
            return None
        raise
    return {k: float(v) for k, v in body["store_keys"].items()}


def _held(member: Member) -> list[int]:
    """The partitions ``member`` holds now (its ``/readyz``)."""
    url = f"http://127.0.0.1:{member.web_port}/readyz"
    with urllib.request.urlopen(url, timeout=5) as response:
        partitions: list[int] = json.loads(response.read())["partitions"]
    return partitions


def _sum_keys(moved: MovedStack) -> dict[str, float] | None:
    """The store keys of every worker added up; None if one of them was busy."""
    total: Counter[str] = Counter()
    for member in moved.members.values():
        keys = _store_keys(member)
        if keys is None:
            return None
        total.update(keys)
    return dict(total)


@pytest.mark.fault
@pytest.mark.timeout(600)
def test_eight_days_after_3000_fired_state_is_back_to_pending_and_bookkeeping(
    stack: Stack,
) -> None:
    settings = stack.settings
    topic = stack.callback_topic("state-callbacks")
    moved = MovedStack(stack)
    moved.start_oscillator()
    for name in ("worker-1", "worker-2"):
        moved.wait_ready(moved.start_worker(name))
    watch = FireWatch(settings, topic)
    now = int(time.time())
    fired = schedule_spread(settings, topic, 3000, now + 5, now + 25, prefix="f")
    kept = schedule_spread(settings, topic, 40, now + 30 * DAY, now + 31 * DAY, prefix="k")
    client = TimerClient(settings)
    for i in range(200):  # cancels for ids that never come: remembered, then forgotten
        client.cancel(f"never-{i}", "tok")
    cancelled = [client.schedule(topic, b"c", at=now + 60 * DAY) for _ in range(20)]
    for timer in cancelled:
        client.cancel(timer.id, timer.token)
    client.flush()
    watch.wait(lambda w: w.fired_ids() >= set(fired), FIRE_TIMEOUT, "3,000 timers to fire")
    watch.poll(1.0)
    check_fires(watch.fires(), fired)
    remembered_ids = 3000 + 200 + 20
    # A fired id is its index entry and a share of an expiry batch (a key for up to 256
    # ids forgotten together, app.core.expiry_batch); a cancelled id its index entry and
    # its expiry key. So: every fired timer forgotten (none pending but the kept), and
    # at least one batch key beside the index entries.
    least = remembered_ids + 220 + 1

    def settled() -> dict[str, float] | None:
        keys = _sum_keys(moved)
        if keys is None or keys["pending"] != 2 * len(kept):
            return None
        return keys if least <= keys["remembered"] <= least - 1 + 3000 else None

    before = wait_until(settled, 30, "every fire and cancel to be remembered")
    assert before["pending"] == 2 * len(kept)
    changelog_before = live_keys(settings, settings.changelog_topic)

    # Eight days later (a day past the 7-day window), every process restarted.
    moved.stop_oscillator()
    moved.offset = 8 * DAY
    restart(moved, "sigterm")
    moved.start_oscillator()

    def forgotten() -> dict[str, float] | None:
        keys = _sum_keys(moved)
        return keys if keys is not None and keys["remembered"] == 0 else None

    after = wait_until(forgotten, FIRE_TIMEOUT, "the remembered ids to be forgotten")
    assert after["pending"] == 2 * len(kept)
    assert (
        after["bookkeeping"] <= (5 + settings.partition_count) * settings.partition_count
    )  # + A and O keys
    held = {name: _held(member) for name, member in moved.members.items()}
    assert sorted(p for ps in held.values() for p in ps) == list(range(settings.partition_count))
    moved.stop_oscillator()
    for member in moved.members.values():
        assert member.process.stop() == 0
    in_rocksdb: Counter[str] = Counter()
    for name, member in moved.members.items():
        in_rocksdb.update(count_keys_by_kind(member.data_dir, held[name]))
    changelog_after = live_keys(settings, settings.changelog_topic)
    live_after = changelog_after.by_kind()

    assert in_rocksdb["remembered"] == 0
    assert in_rocksdb["pending"] == 2 * len(kept)
    assert live_after["remembered"] == 0
    assert changelog_after.total <= 300, f"{changelog_after.total} live keys in the changelog"
    assert changelog_before.total >= least
    print(
        f"changelog live keys: {changelog_before.total} after the fires "
        f"({changelog_before.by_kind()}), {changelog_after.total} 8 days later "
        f"({live_after}); records read {changelog_after.records}\n"
        f"RocksDB keys 8 days later: {dict(in_rocksdb)}; gauge before {before}, after {after}"
    )
