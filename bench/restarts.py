"""Restarts: how long partitions stop firing when one of two workers is restarted or killed.

Two workers and an oscillator, at the service's default session timeout (6 s). Every
partition has a trickle: one timer due every second, so a fire on a partition shows the
moment it is served, and each such timer's lateness shows how long it waited. Beside
it, ``2 x recovery_pending`` timers due a day out, spread over the partitions: each
worker holds half of them, which a takeover must load. Fires are read from the audit
records on the fired topic, which name the partition and the worker
(``fired_at_ms``: the worker's clock when it fired).

1. **Rolling restart**: worker-1 gets SIGTERM (a graceful stop: it leaves the group) and,
   once it has exited, is started again on the same data directory, as a rolling
   deploy does. Figures: the time from the SIGTERM until every one of its partitions
   has fired again — by the other worker or by the new process, never by the stopping
   one — (the target), and the longest any timer waited over the whole restart, on any
   partition: the stop and the return each pause every partition (a rebalance revokes
   them all first), until the group is stable again with both workers serving.
2. **kill -9**: then worker-2 is killed (no goodbye: the broker notices after the session
   timeout). Figure: the time from the kill until every one of its partitions has fired
   again on the survivor (the target: the session timeout + 3 s). The survivor's log
   says when it noticed (its heartbeat answered "rebalancing").

Finally every trickle timer due by then must have fired, none early; duplicates are
counted (a kill -9 between a flush and the forgetting may fire a timer again, by design).
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Collection
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from confluent_kafka import Message

from bench.context import RunContext, ScenarioResult
from bench.load import RequestLoad, TimerSpec
from bench.report import Figure, fmt_count, fmt_ms, fmt_seconds
from bench.scan import TopicFollower
from bench.stack import Worker, wait_serving, wait_until
from bench.stats import summarize
from bench.targets import KILL_MARGIN_SECONDS, ROLLING_RESTART_SECONDS

__all__ = ["Fire", "refired_after", "run", "trickle_check", "waited_longest"]

#: The trickle starts this many seconds out and lasts this long (it must outlive both
#: phases, or a late recovery could not be seen).
TRICKLE_START = 5
TRICKLE_SECONDS = 240
#: Seconds of trickle fires to see before each fault (the workers are firing normally).
WARM_SECONDS = 3
#: Seconds to watch after the group is stable again (the end of the lateness window).
AFTER_SECONDS = 3
#: Longest a phase may take to recover before the scenario gives up, seconds.
GIVE_UP_SECONDS = 120


class Fire(NamedTuple):
    """One fire, from its audit record."""

    id: str
    partition: int
    worker: str
    fired_at: float  # epoch seconds, the firing worker's clock

    @property
    def due(self) -> int | None:
        """The trickle timer's due second (its id is ``trickle-<partition>-<second>``)."""
        parts = self.id.split("-")
        return int(parts[2]) if parts[0] == "trickle" and len(parts) == 3 else None


def _fire(msg: Message) -> Fire | None:
    record = json.loads(msg.value() or b"{}")
    if record.get("event") != "fired":
        return None
    return Fire(record["id"], record["partition"], record["worker"], record["fired_at_ms"] / 1000)


def refired_after(
    fires: list[Fire],
    partitions: Collection[int],
    since: float,
    stopped: str,
    new_from: float | None = None,
) -> dict[int, float]:
    """Per partition, seconds from ``since`` to its first fire after it by a worker other
    than the ``stopped`` one — or by a new process of the same name, which fires only
    from ``new_from`` on (the old one had exited by then)."""
    first: dict[int, float] = {}
    for f in fires:
        if f.partition not in partitions or f.fired_at < since:
            continue
        if f.worker == stopped and (new_from is None or f.fired_at < new_from):
            continue
        first[f.partition] = min(f.fired_at - since, first.get(f.partition, float("inf")))
    return first


def waited_longest(
    fires: list[Fire], first_due: int, last_due: int, partitions: Collection[int] | None = None
) -> float:
    """The longest lateness (fire time - due second) of a trickle timer due in
    ``first_due..last_due`` (on ``partitions``, or any), first fires only."""
    first: dict[str, float] = {}
    for f in fires:
        due = f.due
        if due is None or not first_due <= due <= last_due:
            continue
        if partitions is not None and f.partition not in partitions:
            continue
        first[f.id] = min(f.fired_at - due, first.get(f.id, float("inf")))
    return max(first.values(), default=0.0)


def trickle_check(fires: list[Fire], expected: Collection[str]) -> dict[str, int]:
    """How many ``expected`` trickle timers never fired, fired early, or fired again."""
    seen: dict[str, int] = {}
    early = 0
    for f in fires:
        if f.id not in expected:
            continue
        seen[f.id] = seen.get(f.id, 0) + 1
        due = f.due
        if due is not None and f.fired_at < due:
            early += 1
    return {
        "expected": len(expected),
        "lost": sum(1 for t in expected if t not in seen),
        "early": early,
        "duplicates": sum(n - 1 for n in seen.values()),
    }


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


def _watch(follower: TopicFollower[Fire | None], until: float) -> None:
    while time.time() < until:
        follower.poll(0.1)


def _fires(follower: TopicFollower[Fire | None]) -> list[Fire]:
    return [f for f in follower.items if f is not None]


def _wait_refired(
    follower: TopicFollower[Fire | None],
    partitions: Collection[int],
    since: float,
    stopped: str,
    new_from: float | None = None,
) -> dict[int, float]:
    deadline = time.time() + GIVE_UP_SECONDS
    while True:
        follower.poll(0.1)
        refired = refired_after(_fires(follower), partitions, since, stopped, new_from)
        if len(refired) == len(partitions):
            return refired
        if time.time() > deadline:
            raise TimeoutError(f"partitions {set(partitions) - set(refired)} never fired again")


#: What :func:`storing_state` reads from each worker's metrics, by sample name.
STORING_METRICS = (
    "kafka_timers_scheduled_total",
    "kafka_timers_requests_forwarded_total",
    "kafka_timers_dropped_total",
    "kafka_timers_rejected_total",
    "kafka_timers_request_lag_records",
    "kafka_timers_pending",
)


def storing_state(workers: Collection[Worker], work_dir: Path) -> str:
    """What each worker had done with the requests when storing them did not finish: its
    counters (stored, forwarded, dropped, dead-lettered, its request lag, pending), with
    its whole log copied where the next run of the scenario does not wipe it.

    The full run's ``restarts`` twice waited 464 s for its timers to be stored with no
    error in the logs, and passed when run alone; both times the logs were gone by the
    time anyone looked (the rerun wiped its directory)."""
    kept = work_dir / "restarts-failed"
    kept.mkdir(parents=True, exist_ok=True)
    parts = []
    for worker in workers:
        samples = worker.samples()
        seen = {name: sum(s.value for s in samples if s.name == name) for name in STORING_METRICS}
        log = worker.process.log_path
        if log.exists():
            shutil.copy(log, kept / log.name)
        parts.append(
            f"{worker.name} (serving: {bool(samples)}): "
            + ", ".join(
                f"{name.removeprefix('kafka_timers_')} {value:,.0f}" for name, value in seen.items()
            )
        )
    return "; ".join(parts) + f"; logs kept in {kept}"


def run(ctx: RunContext) -> ScenarioResult:
    cfg = ctx.config
    p_count = cfg.partitions
    with ctx.stack("restarts") as stack:
        callbacks = stack.topic("restarts-callbacks")
        workers = stack.serving(2, oscillators=1)
        now = int(time.time())
        trickle = [
            TimerSpec(f"trickle-{p}-{s}", s, p)
            for s in range(now + TRICKLE_START, now + TRICKLE_START + TRICKLE_SECONDS)
            for p in range(p_count)
        ]
        bulk = 2 * cfg.recovery_pending
        load = RequestLoad(stack, callbacks)
        load.send(trickle)
        load.send(
            TimerSpec(f"pending-{i:09d}", now + 86400 + i % 3600, i % p_count) for i in range(bulk)
        )
        load.flush()
        total = len(trickle) + bulk
        try:
            wait_until(
                lambda: sum(w.metric("kafka_timers_scheduled_total") for w in workers) >= total,
                60 + total / 500,
                f"{total:,} timers stored",
                0.5,
            )
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; {storing_state(workers, ctx.work_dir)}") from exc
        with TopicFollower(stack.settings, stack.settings.topics.fired, _fire) as follower:
            _watch(follower, max(time.time(), now + TRICKLE_START) + WARM_SECONDS)
            # 1. Rolling restart of worker-1.
            victim, other = workers
            held = sorted(victim.ticking_partitions())
            ctx.say(f"restarts: SIGTERM to {victim.name} (partitions {held}), then start it again")
            signalled = time.time()
            victim.process.stop()
            exited = time.time()
            victim = stack.worker(victim.name)
            started = time.time()
            rolling = _wait_refired(follower, held, signalled, victim.name, new_from=started)
            wait_serving([victim, other], p_count, timeout=GIVE_UP_SECONDS)
            stable = time.time()
            _watch(follower, stable + AFTER_SECONDS)
            fires = _fires(follower)
            # The trickle's lateness while both workers were serving: fired before the signal.
            before = [f.fired_at - d for f in fires if (d := f.due) and f.fired_at < signalled]
            restart = {
                "partitions": held,
                "exit_seconds": exited - signalled,
                "restarted_after_seconds": started - signalled,
                "refired_seconds": rolling,
                "stable_after_seconds": stable - signalled,
                "waited_longest_seconds": waited_longest(fires, int(signalled), int(stable)),
                "waited_longest_own_seconds": waited_longest(
                    fires, int(signalled), int(stable), held
                ),
                "lateness_before": summarize(before).as_dict() if before else None,
            }
            # 2. kill -9 of worker-2.
            _watch(follower, time.time() + WARM_SECONDS)
            held = sorted(other.ticking_partitions())
            pending = other.metric("kafka_timers_pending")
            killed = time.time()
            other.process.kill()
            ctx.say(f"restarts: killed {other.name} holding {pending:,.0f} pending on {held}")
            refired = _wait_refired(follower, held, killed, other.name)
            _watch(follower, time.time() + AFTER_SECONDS)
            fires = _fires(follower)
        noticed = _rebalance_noticed(victim.process.log_text(), killed)
        due_by = int(time.time()) - 2
        checked = trickle_check(fires, {t.id for t in trickle if t.due <= due_by})
    kill = {
        "partitions": held,
        "pending_at_kill": pending,
        "session_timeout_seconds": cfg.session_timeout,
        "refired_seconds": refired,
        "rebalance_noticed_seconds": None if noticed is None else noticed - killed,
        "waited_longest_own_seconds": waited_longest(fires, int(killed), due_by, held),
    }
    return ScenarioResult(
        figures=_figures(restart, kill, checked),
        details={"rolling_restart": restart, "kill": kill, "trickle": checked},
    )


def _figures(
    restart: dict[str, Any], kill: dict[str, Any], checked: dict[str, int]
) -> list[Figure]:
    rolling = max(restart["refired_seconds"].values())
    waited = restart["waited_longest_seconds"]
    before = restart["lateness_before"]
    session = kill["session_timeout_seconds"]
    killed = max(kill["refired_seconds"].values())
    noticed = kill["rebalance_noticed_seconds"]
    return [
        Figure(
            "restarts",
            "rolling restart (SIGTERM, start again) of 1 of 2 workers: its partitions fire "
            "again after",
            fmt_seconds(rolling),
            f"it exited after {fmt_seconds(restart['exit_seconds'])}; group stable again "
            f"after {fmt_seconds(restart['stable_after_seconds'])}",
            f"≤ {fmt_seconds(ROLLING_RESTART_SECONDS)}",
            rolling <= ROLLING_RESTART_SECONDS,
            value=rolling,
            detail=restart,
        ),
        Figure(
            "restarts",
            "rolling restart: longest a timer waited, any partition (the stop and the return)",
            fmt_seconds(waited),
            "before it: p99 " + (fmt_ms(before["p99"]) if before else "—"),
            f"≤ {fmt_seconds(ROLLING_RESTART_SECONDS)}",
            waited <= ROLLING_RESTART_SECONDS,
            value=waited,
        ),
        Figure(
            "restarts",
            f"kill -9 of 1 of 2 workers ({fmt_count(kill['pending_at_kill'])} pending): every "
            "partition fires again after",
            fmt_seconds(killed),
            f"session timeout {fmt_seconds(session)}"
            + ("" if noticed is None else f", noticed after {fmt_seconds(noticed)}"),
            f"≤ {fmt_seconds(session + KILL_MARGIN_SECONDS)} (session + 3 s)",
            killed <= session + KILL_MARGIN_SECONDS,
            value=killed,
            detail=kill,
        ),
        Figure(
            "restarts",
            "trickle timers lost / early over both (duplicates)",
            f"{checked['lost']} / {checked['early']} of {fmt_count(checked['expected'])} "
            f"({checked['duplicates']} dup)",
            target="0 lost, 0 early",
            met=checked["lost"] == 0 and checked["early"] == 0,
            value=checked["lost"],
        ),
    ]
