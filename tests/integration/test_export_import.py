"""Export and import on real processes: every kind of pending timer leaves one deployment
as JSON lines and is stored, once, by another with twice the partitions, even when the
file is imported twice, and again after it fired. A debounced timer keeps its window,
first request's time and merged count: it fires on the target with the source's
``timer-debounced``."""

from __future__ import annotations

import json
import time
from pathlib import Path

from app.core.fired import FiredKind, FiredRecord
from app.core.timer import Timer
from app.kafka.records import Record, TopicReader
from app.kafka.topics import ensure_topics
from app.ops.import_ import read_lines
from app.ops.requests import continued
from app.settings import Settings
from tests.conftest import fresh_settings
from tests.support.cli import run_cli
from tests.support.stack import Stack, running_stack
from tests.support.waiting import wait_until

STARTUP_TIMEOUT = 90.0
FIRE_TIMEOUT = 90.0
#: How long after they are scheduled the timers (and the debounced one's window) come
#: due: after the export, the source's stop, the imports, the target's start and its
#: export, which must find them all still pending (checked below). Measured: 15-17 s
#: on a loaded 2-core machine.
LEAD_SECONDS = 35


def export(settings: Settings, path: Path) -> list[Timer]:
    """``kafka-timers export -o path``: the timers it wrote."""
    done = run_cli(settings, "export", "--output", str(path))
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stderr.strip().splitlines()[-1])
    timers = read_lines(path.read_text().splitlines())
    assert summary["timers"] == len(timers)
    return timers


def export_holding(settings: Settings, path: Path, ids: set[str]) -> list[Timer] | None:
    """The export, once it holds every timer of ``ids``."""
    timers = export(settings, path)
    return timers if {t.id for t in timers} >= ids else None


def do_import(settings: Settings, path: Path) -> dict[str, object]:
    done = run_cli(settings, "import", "--input", str(path))
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def fires(records: list[Record]) -> list[tuple[str, int, int]]:
    """``(id, due, fired_at_ms)`` of every callback."""
    return [
        (
            (r.header("timer-id") or b"").decode(),
            int(r.header("timer-due") or 0),
            int(r.header("timer-fired-at") or 0),
        )
        for r in records
    ]


def comparable(timer: Timer) -> Timer:
    """What must match across deployments: all but etf1's provenance topic (the name
    of the request topic the timer was read from)."""
    headers = tuple((n, b"") if n == "scheduler-topic" else (n, v) for n, v in timer.headers)
    return continued(Timer(**{**timer.__dict__, "headers": headers}))


def test_export_then_import_twice_into_more_partitions_fires_each_timer_once(
    stack: Stack, tmp_path: Path
) -> None:
    source = stack.settings
    topic = stack.callback_topic("exported-callbacks")
    client = stack.firing_client(topic, probes=8, timeout=STARTUP_TIMEOUT)

    start = int(time.time()) + LEAD_SECONDS  # after the export, the move, the target's export
    # Three debounced requests for one id, merged by the source: one timer, counting 3.
    for n in (1, 2, 3):
        debounced = client.schedule(
            topic, b"edit %d" % n, "kd", timer_id="debounced", debounce=LEAD_SECONDS, max_wait=600
        )
    ids = []
    for i in range(20):
        ids.append(
            client.schedule(
                topic, b"v%d" % i, f"k{i}", at=start + i % 5, headers={"h": b"\xff%d" % i}
            ).id
        )
    late = client.schedule(topic, b"late", at=start, late="skip-after 1h", timer_id="late")
    series = client.schedule(
        topic, b"s", every="3s", start=start, count=3, late="all", timer_id="series"
    )
    cron = client.schedule(topic, b"c", cron="*/5 * * * * *", start=start, count=2, timer_id="cron")
    client.flush()
    producer = stack.producer()
    producer.produce(  # etf1, with a binary target key
        source.topics.requests,
        b"etf1 payload",
        b"etf1-id",
        headers=[
            ("scheduler-epoch", str(start + 2).encode()),
            ("scheduler-target-topic", topic.encode()),
            ("scheduler-target-key", b"\x00\xfe"),
        ],
    )
    as_json = {"topic": topic, "key_b64": "/w==", "value": "j", "at": start + 3, "id": "json"}
    producer.produce(source.topics.requests, json.dumps(as_json).encode(), b"json")
    producer.flush(10)
    expected = {*ids, late.id, series.id, cron.id, "etf1-id", "json", debounced.id}

    def merged_3(timers: list[Timer] | None) -> list[Timer] | None:
        """The export, once the debounced timer in it has merged its three requests."""
        held = {t.id: t for t in timers or ()}.get(debounced.id)
        if held is None or held.debounce is None or held.debounce.merged < 3:
            return None
        return timers

    # Exported while the worker runs, once every timer is stored.
    path = tmp_path / "timers.jsonl"
    exported = wait_until(
        lambda: merged_3(export_holding(source, path, expected)),
        FIRE_TIMEOUT,
        "every timer in the export",
        interval=0.5,
    )
    assert exported is not None
    assert len(exported) == len(expected) == len({t.id for t in exported})
    by_id = {t.id: t for t in exported}
    assert by_id["series"].recurrence is not None and by_id["series"].recurrence.every == 3
    assert by_id["series"].late is not None and by_id["series"].late.text() == "all"
    assert by_id["late"].late is not None and by_id["late"].late.text() == "skip-after 3600s"
    assert by_id["etf1-id"].key == b"\x00\xfe" and by_id["json"].key == b"\xff"
    held = by_id[debounced.id].debounce
    assert held is not None and (held.seconds, held.max_wait, held.merged) == (LEAD_SECONDS, 600, 3)
    assert by_id[debounced.id].value == b"edit 3"
    for worker in stack.services:  # all asked at once, then each waited for
        worker.terminate()
    for worker in stack.services:
        worker.stop()  # the source fires nothing: every callback below is the target's

    target = fresh_settings(source.bootstrap_servers, partitions=2 * source.partition_count)
    ensure_topics(target)
    first = do_import(target, path)
    assert first == {
        "imported": len(expected),
        "series": 2,
        "topic": target.topics.requests,
        "partitions": target.partition_count,
    }
    do_import(target, path)  # again: idempotent
    with running_stack(target, tmp_path / "target") as new:
        new.oscillator()
        new.worker()
        again = tmp_path / "again.jsonl"
        moved = wait_until(
            lambda: export_holding(target, again, expected),
            STARTUP_TIMEOUT,
            "every timer stored by the target",
            interval=0.5,
        )
        assert moved is not None
        assert time.time() < start, f"the move took longer than {LEAD_SECONDS} s: raise it"
        assert sorted(map(comparable, moved), key=lambda t: t.id) == sorted(
            map(comparable, exported), key=lambda t: t.id
        ), "the target holds each timer once, as it was"

        # Every timer fires once, on the target, none early.
        wanted = len(expected) - 2 + 3 + 2  # the series' 3 and the cron's 2 occurrences
        with TopicReader(target, topic) as reader:
            reader.wait_for(
                lambda rs: len({(i, d) for i, d, _ in fires(rs) if i in expected}) >= wanted,
                FIRE_TIMEOUT,
            )
            got = [f for f in fires(reader.records) if f[0] in expected]
            assert len(got) == len({(i, d) for i, d, _ in got}) == wanted, "each fired once"
            assert all(at >= due * 1000 for _, due, at in got), "none early"
            assert {i for i, _, _ in got} == expected
            (merged,) = [r for r in reader.records if r.header("timer-id") == b"debounced"]
            # the source's count: imported twice, restored twice, never merged into itself
            assert merged.header("timer-debounced") == b"3"
            assert (merged.key, merged.value) == (b"kd", b"edit 3")
            assert int(merged.header("timer-due") or 0) == by_id[debounced.id].due

            # Imported once more after they fired: every one dropped, none fires again.
            do_import(target, path)

            def dropped() -> set[str]:
                with TopicReader(target, target.topics.fired) as fired:
                    events = [FiredRecord.from_json(r.value or b"{}") for r in fired.read_to_end()]
                return {
                    e.id
                    for e in events
                    if e.event is FiredKind.DROPPED and e.outcome == "duplicate"
                }

            wait_until(
                lambda: dropped() >= expected - {cron.id, series.id} and dropped(),
                FIRE_TIMEOUT,
                "the third import dropped as duplicates",
                interval=0.5,
            )
            reader.poll(1.0)
            assert len([f for f in fires(reader.records) if f[0] in expected]) == wanted
