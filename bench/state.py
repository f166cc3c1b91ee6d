"""State: what a worker keeps after many timers fired — O(pending), not O(history).

One worker (and one oscillator) is given ``state_fired`` timers (100,000 in the full
run) due within a minute or so, and ``state_pending`` due next week. Every fired id is
remembered for a window (here ``state_window`` seconds, 7 days in production) and then
forgotten: removed from RocksDB and tombstoned in the changelog. Measured:

- store keys by kind (the worker's ``kafka_timers_store_keys`` gauge) once everything
  fired, and once the window has passed;
- how long the sweep took to forget them all (at most 1,000 ids per partition per tick);
- after the worker stopped: the keys really in its RocksDB files, and the changelog's
  live keys (newest record per key, not a tombstone: what compaction keeps).
"""

from __future__ import annotations

import time
from dataclasses import replace

from bench.changelog import live_keys
from bench.context import RunContext, ScenarioResult
from bench.load import RequestLoad, TimerSpec, timer_ids
from bench.report import Figure, fmt_count, fmt_seconds
from bench.rocks import count_keys_by_kind
from bench.stack import Worker, wait_until

__all__ = ["run"]

#: Bookkeeping keys per partition: W, R, Faust's offset, the caught-up time.
BOOKKEEPING_PER_PARTITION = 4
#: Ingest rate assumed when this run has not measured one (requests/s).
FALLBACK_INGEST = 20_000.0


def _store_keys(worker: Worker) -> dict[str, float]:
    """The worker's store-keys gauge summed over its partitions, by kind."""
    kinds = {"pending": 0.0, "remembered": 0.0, "bookkeeping": 0.0}
    for sample in worker.samples():
        if sample.name == "kafka_timers_store_keys":
            kinds[sample.labels["kind"]] += sample.value
    return kinds


def run(ctx: RunContext) -> ScenarioResult:
    cfg = ctx.config
    fired_count, pending_count, window = cfg.state_fired, cfg.state_pending, cfg.state_window
    with ctx.stack("state") as stack:
        stack.settings = replace(stack.settings, remember_seconds=window)
        callbacks = stack.topic("state-callbacks")
        load = RequestLoad(stack, callbacks)
        # Due once the worker has had time to start and store them all (at this run's
        # ingest rate, with a margin), spread over 10 s or more: the fire path, not one
        # giant bucket.
        per_second = ctx.baselines.ingest or FALLBACK_INGEST
        first_due = int(time.time() + 15 + 1.5 * (fired_count + pending_count) / per_second)
        spread = max(10, fired_count // 20_000)
        load.send(
            TimerSpec(timer_id, first_due + i % spread)
            for i, timer_id in enumerate(timer_ids("fired", fired_count))
        )
        next_week = int(time.time()) + 7 * 86400
        load.send(
            TimerSpec(timer_id, next_week + i % 86400)
            for i, timer_id in enumerate(timer_ids("pending", pending_count))
        )
        load.flush()
        ctx.say(f"state: {fired_count:,} to fire and {pending_count:,} pending; starting")
        stack.oscillator("oscillator-1")
        worker = stack.worker("worker-1")
        wait_until(
            lambda: worker.metric("kafka_timers_fired_total") >= fired_count,
            120 + fired_count / 2000,
            f"{fired_count:,} timers to fire",
            0.5,
        )
        all_fired_at = time.monotonic()
        after_fire = _store_keys(worker)
        ctx.say(f"state: all fired; store keys {after_fire}; waiting out the {window} s window")
        wait_until(
            lambda: _store_keys(worker)["remembered"] == 0,
            window + 120 + fired_count / 2000,
            "every fired id to be forgotten",
            0.5,
        )
        forgotten_after = time.monotonic() - all_fired_at
        after_window = _store_keys(worker)
        worker.process.stop()
        in_rocksdb = count_keys_by_kind(worker.data_dir)
        changelog = live_keys(stack.settings, stack.changelog)
    partitions = cfg.partitions
    expected_keys = 2 * pending_count + BOOKKEEPING_PER_PARTITION * partitions
    rocks_total = sum(in_rocksdb.values())
    live = changelog.by_kind()
    met = (
        after_window["remembered"] == 0
        and in_rocksdb["remembered"] == 0
        and in_rocksdb["pending"] == 2 * pending_count
        and live["remembered"] == 0
    )
    detail = {
        "fired": fired_count,
        "pending": pending_count,
        "window_seconds": window,
        "gauge_after_fire": after_fire,
        "gauge_after_window": after_window,
        "rocksdb_after_window": in_rocksdb,
        "changelog_records": changelog.records,
        "changelog_live_keys": live,
        "forgotten_seconds_after_last_fire": forgotten_after,
    }
    return ScenarioResult(
        figures=[
            Figure(
                "state",
                f"store keys after {fmt_count(fired_count)} fired, window passed",
                f"{fmt_count(rocks_total)} RocksDB keys, {fmt_count(changelog.total)} "
                f"live in the changelog",
                f"{fmt_count(pending_count)} pending (2 keys each) + bookkeeping "
                f"= {fmt_count(expected_keys)}; right after the fires "
                f"{fmt_count(sum(after_fire.values()))}",
                "remembered ids: 0",
                met,
                value=rocks_total,
                detail=detail,
            ),
            Figure(
                "state",
                f"{fmt_count(fired_count)} fired ids forgotten, after the last fire",
                fmt_seconds(forgotten_after),
                f"window {window} s; sweep ≤ 1,000 ids per partition per tick",
                value=forgotten_after,
            ),
        ],
        details=detail,
    )
