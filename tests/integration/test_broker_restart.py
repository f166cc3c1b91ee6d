"""Broker restarts (issue 23): the broker itself dies or stops while timers fire.

Runs on its own persistent dev broker (Tansu on its ``s3://`` engine behind an
in-memory S3 endpoint, :mod:`tests.support.persistent_broker`): topics, records,
committed offsets and the group survive the broker's restart, as they would on a real
cluster. Two oscillators and two workers fire timers due across the restart; the
broker is killed (``kill -9``) or stopped (SIGTERM: Tansu serves its open connections
5 s more, then exits) a fifth of the way in, stays away 4 s (or 12 s, past the session
timeout, so that the group rebalances), and comes back on the same port and storage.
In the last test the broker dies while a third worker, on an empty data directory,
rebuilds its partitions from the changelog (killed the moment its ``/readyz`` says
``recovering``; a ballast of timers due in an hour makes that catch-up longer).
The checks are those of the other fault tests: nothing lost, nothing early, nothing
made up, duplicates only inside the at-least-once window; the time from the broker's
return to the first fire on every partition is printed (``pytest -s``) and is in the
README's fault table.
"""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
)

from app.kafka.records import Record
from app.kafka.topics import ensure_topics
from app.worker.health import Phase
from tests.conftest import fresh_settings
from tests.integration.test_faults import (
    AT_LEAST_ONCE_WINDOW_MS,
    STARTUP_TIMEOUT,
    now_ms,
    settle,
    wait_until_fraction_fired,
)
from tests.support.faults import (
    FaultScene,
    Fire,
    deliberate_fault_window,
    owners,
    schedule_spread,
    unexplained_duplicates,
)
from tests.support.persistent_broker import BUCKET, PersistentBroker
from tests.support.probes import Probed, get_json, metric_total, start_probed
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.fault,
    pytest.mark.own_broker("kills and restarts the broker; keeps its data in an endpoint"),
]

#: Timers due from 3 s to LAST_DUE_IN s after scheduling: about 18 a second, so every
#: one of the 8 partitions has some due while the broker is away. The start (both workers
#: sharing every partition) took 7-12 s of that span here.
TIMERS = 500
LAST_DUE_IN = 30
#: How long the broker stays away after it died (kill -9) or exited (SIGTERM): shorter
#: than the 6 s session timeout (the group outlives the outage), or longer (every member
#: is expired, the group rebalances and the workers catch their changelogs up again).
SHORT_AWAY, LONG_AWAY = 4.0, 12.0
CATCH_UP = re.compile(r"changelog catch-up \S+: applied")


@pytest.fixture
def persistent_broker(tmp_path: Path) -> Iterator[PersistentBroker]:
    with PersistentBroker(tmp_path / "broker") as broker:
        yield broker


def test_the_endpoint_refuses_conditional_writes_that_do_not_hold(
    persistent_broker: PersistentBroker,
) -> None:
    """Tansu's engine guards its metadata with ``If-None-Match: *`` (create) and
    ``If-Match: <etag>`` (update); an endpoint that accepts both regardless (the npm
    ``s3rver``) loses everything at the broker's next kill -9."""
    url = f"http://127.0.0.1:{persistent_broker.s3_port}/{BUCKET}/conditional-check"

    def put(body: bytes, **headers: str) -> tuple[int, str]:
        request = urllib.request.Request(url, data=body, method="PUT", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, response.headers["ETag"]
        except urllib.error.HTTPError as refused:
            return refused.code, ""

    status, first = put(b"one", **{"If-None-Match": "*"})
    assert status == 200
    assert put(b"two", **{"If-None-Match": "*"})[0] == 412
    assert put(b"two", **{"If-Match": '"not-its-etag"'})[0] == 412
    status, second = put(b"two", **{"If-Match": first})
    assert status == 200
    assert second != first
    assert put(b"three", **{"If-Match": first})[0] == 412
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.read() == b"two"


@pytest.mark.parametrize("how", ["kill -9", "SIGTERM"])
def test_the_persistent_broker_keeps_topics_records_and_offsets(
    how: str, persistent_broker: PersistentBroker
) -> None:
    """What the fault tests below rely on, checked alone: after the broker's death or
    stop, its topics (with their configuration), every acknowledged record and the
    committed offsets of a group are all there, read from the S3 endpoint."""
    broker = persistent_broker
    common: dict[str, str | int | float | bool] = {"bootstrap.servers": broker.bootstrap}
    admin = AdminClient(common)
    created = NewTopic("kept", 2, 1, config={"cleanup.policy": "compact"})
    admin.create_topics([created])["kept"].result(10)
    producer = Producer({**common, "linger.ms": 0})
    sent = {f"k{i}": f"v{i}" for i in range(200)}
    for key, value in sent.items():
        producer.produce("kept", value.encode(), key.encode(), partition=int(key[1:]) % 2)
        producer.poll(0)
    assert producer.flush(30) == 0
    committed = [TopicPartition("kept", 0, 37), TopicPartition("kept", 1, 41)]
    group = {**common, "group.id": "kept-group", "enable.partition.eof": True}
    first = Consumer(group)
    first.commit(offsets=committed, asynchronous=False)
    first.close()
    used = broker.endpoint_stats()
    for guarded in ("put_if_none_match", "put_if_match"):  # Tansu relies on both
        assert used.get(guarded, {}).get("calls", 0) > 0, used

    if how == "kill -9":
        broker.kill()
    else:
        assert broker.terminate() == 0
    broker.start_broker()

    config = admin.describe_configs([ConfigResource("topic", "kept")])
    entries = next(iter(config.values())).result(10)
    assert entries["cleanup.policy"].value == "compact"
    assert len(admin.list_topics("kept", timeout=10).topics["kept"].partitions) == 2
    consumer = Consumer({**group, "auto.offset.reset": "earliest"})
    try:
        found = consumer.committed([TopicPartition("kept", 0), TopicPartition("kept", 1)], 10)
        assert [(tp.partition, tp.offset) for tp in found] == [(0, 37), (1, 41)]
        consumer.assign([TopicPartition("kept", 0, 0), TopicPartition("kept", 1, 0)])
        read: dict[str, str] = {}
        at_end: set[int] = set()

        def read_on() -> bool:
            message = consumer.poll(0.2)
            if message is None:
                return False
            error, partition = message.error(), message.partition()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                assert partition is not None
                at_end.add(partition)
            else:
                read[(message.key() or b"").decode()] = (message.value() or b"").decode()
            return at_end == {0, 1}

        wait_until(read_on, 30, "both partitions read to their end", interval=0)
    finally:
        consumer.close()
    assert read == sent


def cut_off_by_the_broker(
    callbacks: list[Record], extra: Iterable[str], down_ms: int, back_ms: int
) -> set[str]:
    """Duplicates the broker's going away explains, in one of two ways, both
    at-least-once (this scene runs without transactions):

    - **redelivered**: every copy but the last was produced in the round in flight when
      the broker began to go (at most :data:`AT_LEAST_ONCE_WINDOW_MS` before its signal,
      or until it came back), the last after its return. That round had some callbacks
      written when the broker went, its flush failed and nothing of it was forgotten, so
      the worker delivered it again (the first copies' audit records, produced at the
      flush, may be missing). Seen in one CI run of several with kill -9: 4 timers of 500,
      one audit record each.
    - **resent by the producer**: every copy has the same timestamp (one ``produce``, so
      one audit record), in that round. The broker stored the batch but its answer was
      lost as it went, and librdkafka, not idempotent here, sent the batch again.

    After SIGTERM the broker serves its open connections 5 s more before it goes, so the
    round in flight may start up to 5 s before it is gone: the window opens at the
    signal, not at the exit. Seen in one CI run with SIGTERM: 4 timers of 500 (t00238 to
    t00243, due about 5 s after the signal), one audit record each, unexplained while
    the window opened 2 s before the exit.
    """
    stamps = callback_stamps(callbacks)
    explained = set()
    for timer_id in extra:
        *before, last = stamps.get(timer_id, [])
        in_the_round = all(down_ms - AT_LEAST_ONCE_WINDOW_MS <= t < back_ms for t in before)
        redelivered = last >= back_ms
        resent = all(t == last for t in before)
        if before and in_the_round and (redelivered or resent):
            explained.add(timer_id)
    return explained


def callback_stamps(callbacks: list[Record]) -> dict[str, list[int]]:
    """Each timer's callback record timestamps (ms), in order: one per copy."""
    stamps: dict[str, list[int]] = {}
    for record in callbacks:
        timer_id = (record.header("timer-id") or b"").decode()
        stamps.setdefault(timer_id, []).append(record.timestamp_ms)
    return {timer_id: sorted(copies) for timer_id, copies in stamps.items()}


def copies_after(
    callbacks: list[Record], timer_ids: set[str], origin_ms: int
) -> dict[str, list[int]]:
    """Each named timer's callback timestamps, ms after ``origin_ms``: what a failure shows."""
    stamps = callback_stamps(callbacks)
    return {
        timer_id: [t - origin_ms for t in stamps[timer_id]]
        for timer_id in sorted(timer_ids)
        if timer_id in stamps
    }


def first_fire_per_partition(fires: list[Fire], after_ms: int) -> dict[int, int]:
    """Per partition, the first fire at or after ``after_ms`` (its worker's clock, ms)."""
    first: dict[int, int] = {}
    for fire in fires:
        if after_ms <= fire.fired_at_ms < first.get(fire.partition, 1 << 62):
            first[fire.partition] = fire.fired_at_ms
    return first


def catch_ups(scene: FaultScene) -> int:
    """Changelog catch-ups the scene's workers have logged so far (one per partition)."""
    return sum(len(CATCH_UP.findall(w.log_text())) for w in scene.workers.values())


@pytest.mark.parametrize(
    ("how", "away"),
    [("kill -9", SHORT_AWAY), ("SIGTERM", SHORT_AWAY), ("kill -9", LONG_AWAY)],
    ids=["kill-9", "sigterm", "kill-9-past-session-timeout"],
)
def test_a_broker_restart_mid_fire_loses_nothing_and_fires_nothing_early(
    how: str, away: float, persistent_broker: PersistentBroker, tmp_path: Path
) -> None:
    """0 lost, 0 early, nothing unknown, duplicates only as at-least-once allows, both
    workers alive after; prints the time from the broker's return to the first fire on
    each partition."""
    broker = persistent_broker
    settings = fresh_settings(broker.bootstrap)
    ensure_topics(settings)
    with running_stack(settings, tmp_path) as stack:
        scene = FaultScene.start(
            stack,
            "broker-restart",
            workers=["w-a", "w-b"],
            timers=TIMERS,
            last_due_in=LAST_DUE_IN,
            startup_timeout=STARTUP_TIMEOUT,
            oscillators=("osc-a", "osc-b"),
        )
        with scene.watch as watch:
            plan = scene.plan
            pending = wait_until_fraction_fired(watch, plan, 0.2)
            owners_before = owners(watch.fires())
            catch_ups_before = catch_ups(scene)
            down_ms = now_ms()
            if how == "kill -9":
                broker.kill()
                exit_code = -9
            else:
                exit_code = broker.terminate()
            gone_ms = now_ms()
            deliberate_fault_window(away)
            broker.start_broker()
            back_ms = now_ms()
            partitions = settings.partition_count
            watch.wait(
                lambda w: len(first_fire_per_partition(w.fires(), back_ms)) == partitions,
                STARTUP_TIMEOUT,
                f"every one of the {partitions} partitions to fire after the broker's return",
            )
            first = first_fire_per_partition(watch.fires(), back_ms)
            verdict = settle(watch, plan)
            cut_off = cut_off_by_the_broker(verdict.callbacks, verdict.extra, down_ms, back_ms)
            bad_duplicates = unexplained_duplicates(
                watch.fires(), set(verdict.extra) - cut_off, AT_LEAST_ONCE_WINDOW_MS
            )
            workers_alive = {name: w.alive for name, w in scene.workers.items()}
            stats = broker.endpoint_stats()
            report = (
                f"[broker {how} mid-fire] {verdict.summary()}; pending at the fault: "
                f"{pending}; broker gone {gone_ms - down_ms} ms after the signal "
                f"(exit {exit_code}), away {(back_ms - gone_ms) / 1000:.1f} s; "
                f"return -> first fire on a partition {min(first.values()) - back_ms} ms, "
                f"on every partition {max(first.values()) - back_ms} ms; "
                f"owners before {dict(sorted(owners_before.items()))}, after "
                f"{dict(sorted(owners(watch.fires()).items()))}; changelog catch-ups after "
                f"the fault {catch_ups(scene) - catch_ups_before}; workers alive "
                f"{workers_alive}; duplicates of the round the broker cut off {len(cut_off)}; "
                f"S3 endpoint {stats}"
            )
            print(report)
            verdict.assert_none_lost_early_or_unknown(report)
            assert not bad_duplicates, (
                f"{report}; {bad_duplicates[:5]}; copies (callback timestamps, ms after the "
                f"signal; gone at {gone_ms - down_ms}, back at {back_ms - down_ms}): "
                f"{copies_after(verdict.callbacks, set(verdict.extra) - cut_off, down_ms)}"
            )
            assert all(workers_alive.values()), report
            assert pending >= len(plan) // 3, f"the fault landed too late to mean much: {report}"


#: The recovery scene: timers due over a longer span (a third worker joins first), and a
#: ballast of timers due an hour later that never fire here but make the changelog a
#: newcomer rebuilds longer. Without a fault, a newcomer was ``recovering`` for 0.7 s with
#: the 3,000 alone, 1.2 s with 12,000 more, and 10 s with 20,000 more on a machine at
#: load 18: the broker is killed the moment it says so, whatever the length.
RECOVERY_TIMERS = 3000
RECOVERY_LAST_DUE_IN = 60
BALLAST = 20_000
BALLAST_DUE_IN = 3600
#: Past the 6 s session timeout (the group rebalances once the broker is back) but under
#: 10 s, the timeout of the oscillators' metadata refresh (every 30 s,
#: ``oscillator/ticker.py``). A refresh that times out no longer ends an oscillator (it
#: did with 12 s here: both exited, 1,448 of 3,000 unfired); the outage stays shorter so
#: that this test measures the worker's recovery, not that.
PAST_SESSION_AWAY = 8.0


#: What aiokafka logs when the broker no longer knows a member: its heartbeat's answer,
#: or (when an offset commit comes first, as in stop 33's CI run) its commit's.
EXPIRED = ("member_id was not recognized", "UnknownMemberIdError")


def expired_and_rejoined(log: str) -> bool:
    """Whether a worker's log shows the broker had expired it (it then rejoins)."""
    return any(sign in log for sign in EXPIRED)


def newcomer_phase(newcomer: Probed) -> tuple[int | None, str]:
    """``/readyz`` of the newcomer: its status and phase (or why nothing answered)."""
    status, body = get_json(newcomer.metrics + "/readyz", timeout=2)
    return status, body.get("phase", "") if isinstance(body, dict) else str(body)


@pytest.mark.parametrize(
    "away", [SHORT_AWAY, PAST_SESSION_AWAY], ids=["4s", "past-session-timeout"]
)
def test_a_broker_restart_while_a_worker_recovers_loses_nothing(
    away: float, persistent_broker: PersistentBroker, tmp_path: Path
) -> None:
    """The broker dies (``kill -9``) while a worker rebuilds its partitions from the
    changelog: a third worker, on an empty data directory, joins two that fire timers,
    and the broker is killed as soon as its ``/readyz`` says ``recovering`` (its
    changelog catch-up has begun). It comes back after ``away`` seconds. Every worker
    must still be there, the newcomer must finish its recovery and fire, and every
    timer must fire: 0 lost, 0 early, duplicates only inside the at-least-once window.
    Prints the time from the broker's return to every partition firing again."""
    broker = persistent_broker
    settings = fresh_settings(broker.bootstrap)
    ensure_topics(settings)
    with running_stack(settings, tmp_path) as stack:
        # Waiting before the workers start: each applies its share at its first assignment.
        now = int(time.time())
        ballast_topic = stack.callback_topic(f"cb-ballast-{settings.app_id}")
        schedule_spread(
            settings, ballast_topic, BALLAST, now + BALLAST_DUE_IN, now + BALLAST_DUE_IN + 100, "b"
        )
        scene = FaultScene.start(
            stack,
            "broker-recovery",
            workers=["w-a", "w-b"],
            timers=RECOVERY_TIMERS,
            last_due_in=RECOVERY_LAST_DUE_IN,
            startup_timeout=STARTUP_TIMEOUT,
            oscillators=("osc-a", "osc-b"),
        )
        with scene.watch as watch:
            plan = scene.plan
            assert not (tmp_path / "w-new").exists()  # its data directory: it starts empty
            joined_ms = now_ms()
            newcomer = start_probed(stack, "worker", "w-new", loglevel="info")
            seen: list[tuple[float, int | None, str]] = []

            def recovering() -> bool:
                assert newcomer.process.alive, f"w-new exited: {newcomer.process.log_text()}"
                status, phase = newcomer_phase(newcomer)
                if not seen or seen[-1][1:] != (status, phase[:60]):
                    seen.append(((now_ms() - joined_ms) / 1000, status, phase[:60]))
                return phase == Phase.RECOVERING.value

            # Polled fast: the catch-up of its partitions takes a second or two.
            wait_until(recovering, STARTUP_TIMEOUT, lambda: f"w-new recovering: {seen}", 0.02)
            down_ms = now_ms()
            broker.kill()
            gone_ms = now_ms()
            # Nothing can finish the recovery now: still recovering means the fault landed in it.
            status_at_kill, phase_at_kill = newcomer_phase(newcomer)
            deliberate_fault_window(away)
            phase_before_return = newcomer_phase(newcomer)
            broker.start_broker()
            back_ms = now_ms()
            partitions = settings.partition_count
            watch.wait(
                lambda w: len(first_fire_per_partition(w.fires(), back_ms)) == partitions,
                STARTUP_TIMEOUT,
                f"every one of the {partitions} partitions to fire after the broker's return",
            )
            first = first_fire_per_partition(watch.fires(), back_ms)
            watch.wait(
                lambda w: any(f.worker == newcomer.process.name for f in w.fires()),
                STARTUP_TIMEOUT,
                "w-new to fire on the partitions it recovered",
            )
            newcomer_first_ms = min(
                f.fired_at_ms for f in watch.fires() if f.worker == newcomer.process.name
            )
            verdict = settle(watch, plan)
            fires = watch.fires()
            bad_duplicates = unexplained_duplicates(fires, verdict.extra, AT_LEAST_ONCE_WINDOW_MS)
            fired_before_kill = {f.id for f in fires if f.fired_at_ms < down_ms} & plan.keys()
            pending = len(plan) - len(fired_before_kill)
            workers = {**scene.workers, newcomer.process.name: newcomer.process}
            workers_alive = {name: w.alive for name, w in workers.items()}
            oscillators_alive = {o.name: o.alive for o in scene.oscillators}
            rejoined = {name: expired_and_rejoined(w.log_text()) for name, w in workers.items()}
            held = metric_total(newcomer.metrics, "kafka_timers_pending")
            retries = metric_total(newcomer.metrics, "kafka_timers_recovery_retries")
            report = (
                f"[broker kill -9 while w-new recovers, away {away:g} s] {verdict.summary()}; "
                f"pending at the kill: {pending} (+{BALLAST} ballast due in an hour); w-new "
                f"/readyz until the kill {seen}, just after it {status_at_kill} "
                f"{phase_at_kill!r}, before the return {phase_before_return}; broker gone "
                f"{gone_ms - down_ms} ms after the signal, away {(back_ms - gone_ms) / 1000:.1f}"
                f" s; return -> first fire on a partition {min(first.values()) - back_ms} ms, "
                f"on every partition {max(first.values()) - back_ms} ms, w-new's first fire "
                f"{newcomer_first_ms - back_ms} ms; w-new holds {held:.0f} pending timers, "
                f"recovery retries {retries:.0f}; owners after "
                f"{dict(sorted(owners(fires).items()))}; workers alive {workers_alive}, "
                f"expired by the broker and rejoined {rejoined}; oscillators alive "
                f"{oscillators_alive}"
            )
            print(report)
            assert phase_at_kill == Phase.RECOVERING.value, f"not recovering at the kill: {report}"
            verdict.assert_none_lost_early_or_unknown(report)
            assert not bad_duplicates, f"{report}; {bad_duplicates[:5]}"
            assert all(workers_alive.values()), report
            assert all(oscillators_alive.values()), report
            if away > settings.session_timeout:  # the broker expired members: a rebalance
                assert any(rejoined.values()), f"the group outlived the outage: {report}"
            assert pending >= len(plan) // 4, f"the fault landed too late to mean much: {report}"
