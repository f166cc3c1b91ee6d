"""Recovery: from ``kill -9`` of a worker holding 100k pending timers to the first fire
on its partitions.

Two workers and an oscillator. The victim's partitions get the pending timers (due a
day out) plus a trickle: one timer due every second on each of its partitions, so a
fire on a partition shows the moment it is served again. After ``kill -9`` the other
worker must notice (the group's session timeout), take the partitions over, rebuild
their RocksDB from the changelog and tick: the figure is the time from the kill until
every one of the victim's partitions has fired again (the first partition's time is
kept in the JSON). No trickle timer may be lost on the way.

The baseline is the session timeout itself: no group-based takeover can begin sooner,
whatever the service does.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from datetime import datetime

from confluent_kafka import Message

from bench.context import RunContext, ScenarioResult
from bench.load import RequestLoad, TimerSpec
from bench.report import Figure, fmt_seconds
from bench.scan import TopicFollower, header, timestamp_ms
from bench.stack import wait_serving, wait_until

__all__ = ["run"]

#: Target, seconds from kill to first fire on the victim's partitions.
TARGET_SECONDS = 10.0
#: The trickle starts this many seconds out and lasts this long (it must outlive the
#: recovery, or a late recovery could not be seen).
TRICKLE_START = 5
TRICKLE_SECONDS = 90
#: Seconds of trickle fires to see before the kill (the victim is firing normally).
WARM_SECONDS = 2


#: Timestamp of a Faust log line (local time); lines may start with terminal escapes.
_LOG_TIME = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")


def _rebalance_noticed(log_text: str, after: float) -> float | None:
    """When the survivor's log first says the group is rebalancing, after ``after``.

    Its heartbeat fails with "rebalancing" once the broker has expired the victim's
    session: the moment the takeover can begin.
    """
    for line in log_text.splitlines():
        found = _LOG_TIME.search(line)
        if found is None or "because it is rebalancing" not in line:
            continue
        stamp = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if stamp >= after:
            return stamp
    return None


def _fire(msg: Message) -> tuple[str, int]:
    return (header(msg, "timer-id") or b"").decode(), timestamp_ms(msg)


def run(ctx: RunContext) -> ScenarioResult:
    cfg = ctx.config
    with ctx.stack("recovery") as stack:
        callbacks = stack.topic("recovery-callbacks")
        stack.oscillator("oscillator-1")
        victim, survivor = stack.worker("worker-1"), stack.worker("worker-2")
        wait_serving([victim, survivor], cfg.partitions)
        held = sorted(victim.ticking_partitions())
        now = int(time.time())
        trickle = [
            TimerSpec(f"trickle-{p}-{s}", s, p)
            for s in range(now + TRICKLE_START, now + TRICKLE_START + TRICKLE_SECONDS)
            for p in held
        ]
        bulk = max(cfg.recovery_pending - len(trickle), 0)
        load = RequestLoad(stack, callbacks)
        load.send(trickle)
        load.send(
            TimerSpec(f"pending-{i:09d}", now + 86400 + i % 3600, held[i % len(held)])
            for i in range(bulk)
        )
        load.flush()
        total = len(trickle) + bulk
        ctx.say(f"recovery: {total:,} timers on partitions {held} of {victim.name}")
        wait_until(
            lambda: victim.metric("kafka_timers_scheduled_total") >= total,
            60 + total / 500,
            f"{victim.name} to store {total:,} timers",
            0.5,
        )
        with TopicFollower(stack.settings, callbacks, _fire) as follower:
            wait_until(
                lambda: follower.poll(0.1) >= 0 and len(follower.items) >= WARM_SECONDS * len(held),
                TRICKLE_START + 30,
                "the victim to fire its trickle",
            )
            pending = victim.metric("kafka_timers_pending")
            killed_at = time.time()
            victim.process.kill()
            ctx.say(f"recovery: killed {victim.name} holding {pending:,.0f} pending")
            refired: dict[int, float] = {}
            deadline = killed_at + 120
            while len(refired) < len(held) and time.time() < deadline:
                follower.poll(0.1)
                for timer_id, stamp in follower.items:
                    p = int(timer_id.split("-")[1]) if timer_id.startswith("trickle-") else -1
                    if p in held and stamp / 1000 >= killed_at and p not in refired:
                        refired[p] = stamp / 1000 - killed_at
            if len(refired) < len(held):
                raise TimeoutError(f"partitions {set(held) - set(refired)} never fired again")
            # Every trickle timer due by now must have fired: nothing lost in the takeover.
            settle_until = time.time() + 3
            while time.time() < settle_until:
                follower.poll(0.2)
            fired_ids = Counter(t for t, _ in follower.items)
        noticed = _rebalance_noticed(survivor.process.log_text(), killed_at)
        due_by = int(time.time()) - 2
        expected = [t.id for t in trickle if t.due <= due_by]
        lost = [t for t in expected if t not in fired_ids]
    last = max(refired.values())
    detail = {
        "pending_at_kill": pending,
        "partitions": held,
        "session_timeout_seconds": cfg.session_timeout,
        "first_fire_seconds": min(refired.values()),
        "every_partition_fired_seconds": last,
        "fire_by_partition_seconds": refired,
        "rebalance_noticed_seconds": None if noticed is None else noticed - killed_at,
        "trickle_expected": len(expected),
        "trickle_lost": len(lost),
        "trickle_duplicates": sum(n - 1 for t, n in fired_ids.items() if t.startswith("trickle-")),
    }
    return ScenarioResult(
        figures=[
            Figure(
                "recovery",
                f"kill -9 with {pending:,.0f} pending: every partition fires again after",
                fmt_seconds(last),
                f"session timeout {fmt_seconds(cfg.session_timeout)}"
                + (
                    "" if noticed is None else f", noticed after {fmt_seconds(noticed - killed_at)}"
                ),
                f"≤ {TARGET_SECONDS:.0f} s",
                last <= TARGET_SECONDS and not lost,
                value=last,
                detail=detail,
            ),
            Figure(
                "recovery",
                "trickle timers lost in the takeover",
                f"{len(lost)} of {len(expected)}",
                target="0",
                met=not lost,
                value=len(lost),
            ),
        ],
        details=detail,
    )
