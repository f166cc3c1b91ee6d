"""Pause and resume a callback topic through the control topic (issue 24, point 3).

One worker, 8 partitions. ``kafka-timers pause --topic P``; timers due to P do not fire
while it is paused, also after the worker is stopped (SIGTERM) and started again on its
disk while still paused; ``kafka-timers resume --topic P`` then fires them all, each
once, none before its second, under its late-fire policy (the ``skip-after 5s`` ones,
held longer than that, are skipped and reported, not delivered); timers of another
topic due in the same second fire on time throughout. ``kafka-timers rate`` then sets
and clears a limit the same way.

Alongside, a series' owner pauses it with its token (``kafka-timers pause --id --token
--wait``, answered ``paused``): no occurrence fires while paused, across the same
restart; ``resume --id`` fires the missed ones as one coalesced occurrence, then on
schedule. A hostile control record (a rate past any float) sent before the pause is
ignored, by the running worker and by the restarted one that reads it again.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from app.core.fired import FiredKind
from app.dev.broker import free_port
from app.dev.stack import wait_until_firing
from app.kafka.control import send_control
from app.kafka.records import TopicReader
from kafka_timers_client.client import TimerClient
from tests.support.cli import run_cli
from tests.support.probes import get_json, metric_total
from tests.support.stack import Stack, fired_ids, fired_records
from tests.support.waiting import keep_reading, wait_until

PAUSED_FIRE = 120
PAUSED_SKIP = 40
FREE = 100
WEB_PORT = 6381
#: How long held timers must stay held to show the pause holds (past their second).
HOLD_SECONDS = 4.0
#: A rate past any float: reading it once raised OverflowError, so a worker that read
#: the control topic from its start at a restart stopped, every time.
HUGE_RATE = b'{"per_second": 1' + b"0" * 400 + b"}"


def seq_of(record: Any) -> int:
    return int(record.header("timer-seq") or b"0")


def gate_of(topic: str) -> dict[str, Any] | None:
    status, data = get_json(f"http://127.0.0.1:{WEB_PORT}/status/data")
    if status != 200:
        return None
    gate: dict[str, Any] | None = data["rate_limits"].get(topic)
    return gate


def ignored_count(metrics_port: int) -> float:
    return metric_total(f"http://127.0.0.1:{metrics_port}", "kafka_timers_control_records_ignored")


def test_a_paused_topic_holds_across_a_restart_and_resume_fires_it(stack: Stack) -> None:
    settings = stack.settings
    app_id = settings.app_id
    paused = stack.callback_topic(f"paused-{app_id}")
    free = stack.callback_topic(f"free-{app_id}")
    owned = stack.callback_topic(f"owned-{app_id}")
    stack.oscillator()
    data_dir = stack.base_dir / "w-1"
    metrics_port = free_port()
    worker = stack.worker("w-1", web_port=WEB_PORT, metrics_port=metrics_port, data_dir=data_dir)
    client = TimerClient(settings)
    callbacks = TopicReader(settings, paused)
    audit = TopicReader(settings, settings.topics.fired)
    free_reader = TopicReader(settings, free)
    series_reader = TopicReader(settings, owned)
    try:
        wait_until_firing(settings, client, free, timeout=90)
        series = client.schedule(owned, b"tick", "owner", every="1s")
        client.flush()
        wait_until(
            lambda: len(series_reader.records) >= 2,
            30,
            "the owner's series to fire",
            between=lambda: series_reader.poll(0.2),
        )
        out = run_cli(settings, "pause", "--id", series.id, "--token", series.token, "--wait", "20")
        assert out.returncode == 0, out.stderr
        assert '"outcome": "paused"' in out.stdout, out.stdout
        paused_at_ms = int(time.time() * 1000) + 1000  # an occurrence on its way may land
        # A hostile control record before the pause, read by the running worker and again
        # from the topic's start by the restarted one: ignored with a reason both times.
        send_control(settings, b"rate/" + paused.encode(), HUGE_RATE, timeout=10)
        wait_until(
            lambda: ignored_count(metrics_port) >= 1, 20, "the worker to count the record ignored"
        )
        out = run_cli(settings, "pause", "--topic", paused)
        assert out.returncode == 0, out.stderr
        wait_until(
            lambda: (gate_of(paused) or {}).get("paused"), 20, "the worker to apply the pause"
        )

        due = int(time.time()) + 3
        to_fire = {client.schedule(paused, b"p", f"k{i}", at=due).id for i in range(PAUSED_FIRE)}
        to_skip = {
            client.schedule(paused, b"s", f"s{i}", at=due, late="skip-after 5s").id
            for i in range(PAUSED_SKIP)
        }
        to_free = {client.schedule(free, b"f", f"f{i}", at=due).id for i in range(FREE)}
        client.flush()

        # The other topic fires on time; the paused one not at all, its timers held.
        wait_until(
            lambda: to_free <= set(fired_ids(free_reader.records)),
            due - time.time() + 20,
            "the unpaused topic to fire",
            between=lambda: free_reader.poll(0.2),
        )
        free_late = max(
            r.timestamp_ms
            for r in free_reader.records
            if (r.header("timer-id") or b"").decode() in to_free
        ) - (due * 1000)
        wait_until(
            lambda: (gate_of(paused) or {}).get("backlog") == PAUSED_FIRE + PAUSED_SKIP,
            20,
            "the paused topic's timers to be held",
        )
        # held past their second: watched all along, so a fire while paused shows
        keep_reading(callbacks.poll, max(0.0, due + HOLD_SECONDS - time.time()) + 0.5)
        assert callbacks.records == [], "a paused topic's timer fired"
        series_reader.poll(0.5)
        while_paused = [r for r in series_reader.records if r.timestamp_ms > paused_at_ms]
        assert while_paused == [], "a paused series fired"
        fired_before_pause = len(series_reader.records)
        last_seq = seq_of(series_reader.records[-1])

        # Stopped and started again on its disk while paused: still held.
        assert worker.stop() == 0
        restarted_at = time.time()
        stack.worker(
            "w-1",
            web_port=WEB_PORT,
            metrics_port=metrics_port,
            data_dir=data_dir,
            log_name="w-1-again",
        )
        wait_until_firing(settings, client, free, timeout=90)
        held_again = (PAUSED_FIRE + PAUSED_SKIP, True)
        wait_until(  # one reading of both (a second request could time out on a busy host)
            lambda: (
                held_again == tuple((gate_of(paused) or {}).get(k) for k in ("backlog", "paused"))
            ),
            20,
            "the restarted worker to hold the paused topic's timers again, still paused",
        )
        # It read the hostile record again from the topic's start, and went on.
        assert ignored_count(metrics_port) >= 1
        callbacks.poll(1.0)
        assert callbacks.records == [], "a paused topic's timer fired after the restart"
        series_reader.poll(0.5)
        assert len(series_reader.records) == fired_before_pause, "a paused series fired"

        out = run_cli(
            settings, "resume", "--id", series.id, "--token", series.token, "--wait", "20"
        )
        assert out.returncode == 0, out.stderr
        assert '"outcome": "resumed"' in out.stdout, out.stdout
        wait_until(
            lambda: len(series_reader.records) >= fired_before_pause + 3,
            30,
            "the resumed series to fire again",
            between=lambda: series_reader.poll(0.2),
        )
        seqs = [seq_of(r) for r in series_reader.records[fired_before_pause:]]
        # The occurrences missed while paused went out as one (coalesce, the default),
        # then the series went on second by second.
        assert seqs[0] > last_seq + 1, (last_seq, seqs)
        assert seqs[1:] == list(range(seqs[0] + 1, seqs[0] + len(seqs))), seqs

        resumed_at = time.time()
        out = run_cli(settings, "resume", "--topic", paused)
        assert out.returncode == 0, out.stderr
        wait_until(
            lambda: to_fire <= set(fired_ids(callbacks.records)),
            30,
            "every held timer to fire after resume",
            between=lambda: callbacks.poll(0.2),
        )
        wait_until(
            lambda: to_skip <= skipped_ids(audit.records),
            15,
            "the skip-after timers to be reported skipped",
            between=lambda: audit.poll(0.2),
        )
        callbacks.poll(1.0)  # a duplicate on its way would arrive now
        gate = gate_of(paused)

        # A limit set and cleared at run time, the same way.
        out = run_cli(settings, "rate", "--topic", free, "--limit", "120/m")
        assert out.returncode == 0, out.stderr
        wait_until(
            lambda: (gate_of(free) or {}).get("limit_per_second") == 2.0,
            20,
            "the worker to apply the limit",
        )
        out = run_cli(settings, "rate", "--topic", free, "--clear")
        assert out.returncode == 0, out.stderr
        wait_until(lambda: gate_of(free) is None, 20, "the worker to lift the limit")
    finally:
        callbacks.close()
        audit.close()
        free_reader.close()
        series_reader.close()
        client.close()

    counts = Counter(fired_ids(callbacks.records))
    assert set(counts) == to_fire, "a held timer lost, or a skip-after one delivered"
    assert max(counts.values()) == 1, "a held timer fired twice"
    stamps = [r.timestamp_ms for r in callbacks.records]
    assert min(stamps) >= resumed_at * 1000 - 50, "a paused timer fired before resume"
    assert min(stamps) >= due * 1000
    assert free_late < 2000, f"the unpaused topic was held back ({free_late} ms)"
    assert gate is None or (gate["backlog"] == 0 and not gate["paused"])
    print(
        f"paused: {PAUSED_FIRE + PAUSED_SKIP} held {resumed_at - due:.1f} s (restart at "
        f"+{restarted_at - due:.1f} s); after resume: {PAUSED_FIRE} fired once each in "
        f"{(max(stamps) / 1000 - resumed_at):.2f} s, {PAUSED_SKIP} skipped (skip-after 5s); "
        f"unpaused: {FREE} out {free_late} ms after due"
    )


def skipped_ids(records: list[Any]) -> set[str]:
    return {
        f.id for f in fired_records(records) if f.event is FiredKind.SKIPPED and f.reason == "late"
    }
