"""Whatever arrives on the tick topic, a worker stays on time, small and up (real processes).

A careless tool writing to the tick topic: 100,000 ticks for a past second on one
partition in one burst, 10,000 ticks each naming another oscillator, and records no
oscillator sends (a key that is no number, the year 9999, ``1e700000``, deep JSON, a send
time of 10^400 ms, no key at all). Then, right after, timers due on every partition:

- each fires at most :data:`ADDED_LATENESS_MS` later than the same timers fired before
  the flood (the clock checks cost amortised O(1) per tick: 40,000 such ticks made timers
  32.6 s late when they scanned their window per tick). Not met yet: Faust's per-event
  stream path still makes them 9-50 s late, so the test reports that as an expected
  failure after checking everything else (CI's ``--refuse-skips`` counts it as failed);
- ``/metrics`` stays under 1 MB and the worker's memory within 20 MB of before (sources
  are bounded, the rest counted as ``other``);
- the garbage is counted by reason, nothing raises: the worker never restarts its tick
  agent (no "Restarting" and no traceback in its log) and never exits.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.dev.broker import free_port
from tests.support.faults import FireWatch, Planned, schedule_spread
from tests.support.stack import Stack

#: Runs alone, in ``make test``'s serial part: it gates the lateness a flood adds (at most 1 s),
#: which another test's load beside it would move.
pytestmark = pytest.mark.serial

STARTUP_TIMEOUT = 90.0
BURST = 100_000
SOURCES = 10_000
#: What the flood may add to a timer's lateness (the issue's acceptance: 1 s).
ADDED_LATENESS_MS = 1000
METRICS_LIMIT_BYTES = 1_000_000
RSS_GROWTH_LIMIT = 20 * 1024 * 1024

GARBAGE: list[tuple[bytes | None, bytes | None]] = [
    (b"not a second", b"1"),
    (b"253402300799", b'{"oscillator": "forged", "sent_ms": 253402300799000}'),
    (b"1e700000", b"1"),
    (b"-5", b"1"),
    (None, b"1"),
    (b"NaN", None),
    (b"SECOND", b"[" * 100_000 + b"]" * 100_000),
    (b"SECOND", b'{"oscillator": "deep", "x": ' + b"[" * 1500 + b"]" * 1500 + b"}"),
    (b"SECOND", b'{"oscillator": "huge-sent", "sent_ms": 1' + b"0" * 400 + b"}"),
    (b"SECOND", b'{"oscillator": {"not": "text"}, "sent_ms": -1}'),
    (b"SECOND", b"\xff\xfe not utf-8"),
    (b"SECOND", b'{"oscillator": "' + b"n" * 3000 + b'"}'),
]


def metrics_text(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def samples(text: str, name: str) -> dict[str, float]:
    return {
        ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def fire_and_measure(stack: Stack, watch: FireWatch, topic: str, prefix: str) -> list[int]:
    """Timers on every partition due two seconds on; their lateness (ms, the worker's
    fire time minus the due second) once all fired."""
    due = int(time.time()) + 2
    plan: dict[str, Planned] = schedule_spread(
        stack.settings, topic, 4 * stack.settings.partitions, due, due, prefix
    )
    watch.wait(lambda w: w.fired_ids() >= plan.keys(), 60, f"the {prefix} timers to fire")
    watch.wait(
        lambda w: {f.id for f in w.fires()} >= plan.keys(), 30, f"the {prefix} audit records"
    )
    return [f.fired_at_ms - f.due * 1000 for f in watch.fires() if f.id in plan]


def test_a_flood_of_ticks_and_garbage_leaves_the_worker_on_time_small_and_up(
    stack: Stack,
) -> None:
    settings = stack.settings
    topic = stack.callback_topic("tick-flood-callbacks")
    stack.oscillator("osc-1")
    port = free_port()
    worker = stack.worker("w-flood", metrics_port=port, loglevel="info")
    pid = worker.process.pid
    with FireWatch(settings, topic) as watch:
        now = int(time.time())
        warm = schedule_spread(settings, topic, settings.partitions, now, now, "warm-")
        watch.wait(lambda w: w.fired_ids() >= warm.keys(), STARTUP_TIMEOUT, "the worker to fire")
        before_late = fire_and_measure(stack, watch, topic, "before-")
        before_metrics = len(metrics_text(port).encode())
        before_rss = rss_bytes(pid)

        producer = stack.producer()
        past = str(int(time.time()) - 60).encode()
        started = time.monotonic()
        for i in range(BURST):
            value = json.dumps({"oscillator": "osc-burst", "sent_ms": 1000 * (now - 60)})
            producer.produce(settings.topics.ticks, value.encode(), past, partition=0)
            if i % 10_000 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0
        produced_s = time.monotonic() - started
        after_late = fire_and_measure(stack, watch, topic, "after-")

        # Distinct sources, in rounds the worker reads before the next (a partition far
        # behind skips its backlog, and these must be read to test the bound on sources).
        def other_total() -> float:
            return samples(metrics_text(port), "kafka_timers_tick_sources_other_total").get("", 0.0)

        per_round = 50 * settings.partitions
        for first in range(0, SOURCES, per_round):
            for i in range(first, min(SOURCES, first + per_round)):
                name = f"careless-tool-{i:05d}-" + "x" * 100
                value = json.dumps({"oscillator": name, "sent_ms": int(time.time() * 1000)})
                producer.produce(
                    settings.topics.ticks, value.encode(), past, partition=i % settings.partitions
                )
            assert producer.flush(30) == 0
            expected = min(SOURCES, first + per_round) - 2 * settings.tick_max_sources
            deadline = time.monotonic() + 60
            while other_total() < expected and time.monotonic() < deadline:
                watch.audit.poll(0.2)
            assert other_total() >= expected, "the worker did not read the sources"
        for key, value in GARBAGE:
            key = str(int(time.time())).encode() if key == b"SECOND" else key
            producer.produce(settings.topics.ticks, value, key, partition=0)
        assert producer.flush(60) == 0

        def counted() -> dict[str, float]:
            return samples(metrics_text(port), "kafka_timers_ticks_ignored_total")

        deadline = time.monotonic() + 60
        while counted().get("reason=bad_field", 0) < 3 and time.monotonic() < deadline:
            watch.audit.poll(0.2)
        text = metrics_text(port)
        after_metrics = len(text.encode())
        after_rss = rss_bytes(pid)
    skipped = samples(text, "kafka_timers_ticks_skipped_total")
    ignored = samples(text, "kafka_timers_ticks_ignored_total")
    sources = samples(text, "kafka_timers_tick_sources")
    other = samples(text, "kafka_timers_tick_sources_other_total")
    log = worker.log_text()
    report = (
        f"produced {BURST} + {SOURCES} + {len(GARBAGE)} tick records in {produced_s:.1f} s; "
        f"lateness before {min(before_late)}..{max(before_late)} ms, after "
        f"{min(after_late)}..{max(after_late)} ms; /metrics {before_metrics} -> "
        f"{after_metrics} bytes; RSS {before_rss / 2**20:.1f} -> {after_rss / 2**20:.1f} MiB; "
        f"ignored {ignored}; sources {sources}; other {other}; skipped {skipped}"
    )
    print(report)
    assert worker.alive, report
    assert "Restarting" not in log and "Traceback" not in log, log[-5000:]
    assert min(after_late) >= 0, report
    assert after_metrics < METRICS_LIMIT_BYTES, report
    assert after_rss - before_rss < RSS_GROWTH_LIMIT, report
    assert ignored["reason=no_second"] >= 3 and ignored["reason=out_of_range"] >= 2, report
    assert ignored["reason=too_far_ahead"] >= 1 and ignored["reason=bad_value"] >= 2, report
    assert ignored["reason=bad_field"] >= 3, report
    assert other[""] > 0 and sources[""] <= settings.tick_max_sources + 1, report
    assert pid == worker.process.pid
    assert skipped[""] >= BURST * 0.9, report  # the burst was skipped, not read
    assert max(after_late) <= max(before_late) + ADDED_LATENESS_MS, report
