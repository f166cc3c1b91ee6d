"""``kafka-timers list`` and ``cancel-bulk`` across two workers (issue 24, points 4-5).

4,000 timers pending on two workers (8 partitions), 1,000 of them keyed ``cust-42/...``:
``list --key-prefix cust-42/`` over both workers' URLs prints exactly those 1,000, once
each, without tokens or payloads, and says how many; ``--count`` with a topic filter
counts; without the operator's credential the command is refused. ``cancel-bulk
--key-prefix cust-42/ --dry-run`` counts 1,000 and cancels nothing; without ``--dry-run``
it cancels exactly those 1,000 (each answered ``cancelled`` on the fired topic, every
partition's count summed), and ``list`` then finds none of them and all 3,000 others.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import replace

from app.core.fired import FiredKind, FiredRecord
from app.kafka.records import TopicReader
from app.settings import Settings
from kafka_timers_client.client import TimerClient
from tests.support.cli import run_cli
from tests.support.probes import get_json
from tests.support.stack import Stack
from tests.support.waiting import wait_until

WEB_PORTS = (6391, 6392)
#: Timers pending in all; a quarter match. The issue's acceptance (100,000) by hand:
#: KAFKA_TIMERS_TEST_LIST_PENDING=100000 (figures in the README).
PENDING = int(os.environ.get("KAFKA_TIMERS_TEST_LIST_PENDING", "4000"))
MATCHING = PENDING // 4
OTHERS = PENDING - MATCHING
#: Longest one command may take.
CLI_TIMEOUT = 90 + PENDING / 500


def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(settings, *args, timeout=CLI_TIMEOUT)


def pending_total() -> int:
    total = 0
    for port in WEB_PORTS:
        status, data = get_json(f"http://127.0.0.1:{port}/status/data")
        if status != 200:
            return -1
        total += data["totals"]["pending"]
    return total


def test_list_finds_exactly_the_matching_timers_on_every_worker(stack: Stack) -> None:
    settings = stack.settings
    topic_a = stack.callback_topic("list-a")
    topic_b = stack.callback_topic("list-b")
    stack.oscillator()
    for name, port in zip(("w-1", "w-2"), WEB_PORTS, strict=True):
        stack.worker(name, web_port=port)
    client = TimerClient(settings)
    try:
        due = int(time.time()) + 3600
        matching = {
            client.schedule(topic_a, b"secret", f"cust-42/{i}", at=due + i % 60).id
            for i in range(MATCHING)
        }
        for i in range(OTHERS):
            key = f"cust-{43 + i % 5}/{i}" if i % 2 else f"cust-4/{i}"
            client.schedule(topic_b if i % 3 else topic_a, b"secret", key, at=due + i % 60)
        client.flush()
    finally:
        client.close()
    wait_until(
        lambda: pending_total() == MATCHING + OTHERS,
        90 + PENDING / 1000,
        lambda: f"every timer stored on the two workers ({pending_total()} pending)",
        interval=0.5,
    )
    urls = [arg for port in WEB_PORTS for arg in ("--url", f"http://127.0.0.1:{port}")]

    started = time.monotonic()
    out = cli(settings, "list", *urls, "--key-prefix", "cust-42/")
    took = time.monotonic() - started
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    ids = [doc["id"] for doc in lines]
    assert len(ids) == len(set(ids)) == MATCHING and set(ids) == matching
    assert all(doc["key"].startswith("cust-42/") for doc in lines)
    assert not any("token" in doc or "value" in doc for doc in lines), "a token or payload shown"
    assert {doc["worker"] for doc in lines} == {"w-1", "w-2"}
    assert json.loads(out.stderr.splitlines()[-1]) == {
        "matched": MATCHING,
        "workers": 2,
        "failed": 0,
    }

    out = cli(settings, "list", *urls, "--topic", topic_a, "--count")
    assert out.returncode == 0, out.stderr
    expected_a = MATCHING + sum(1 for i in range(OTHERS) if not i % 3)
    assert json.loads(out.stdout)["matched"] == expected_a

    out = cli(settings, "list", *urls, "--count", "--due-from", str(due), "--due-to", str(due))
    assert out.returncode == 0, out.stderr
    in_first_second = sum(1 for i in range(MATCHING) if not i % 60) + sum(
        1 for i in range(OTHERS) if not i % 60
    )
    assert json.loads(out.stdout)["matched"] == in_first_second

    out = cli(replace(settings, operator_token=None), "list", *urls, "--count")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    print(f"list: {MATCHING} of {MATCHING + OTHERS} by key prefix over 2 workers in {took:.2f} s")

    # Bulk cancel: a dry run counts, then the cancel cancels exactly those.
    out = cli(settings, "cancel-bulk", "--key-prefix", "cust-42/", "--dry-run")
    assert out.returncode == 0, out.stderr
    dry = json.loads(out.stdout)
    assert (dry["matched"], dry["cancelled"], dry["partitions_missing"]) == (MATCHING, 0, [])
    assert pending_total() == MATCHING + OTHERS
    started = time.monotonic()
    out = cli(settings, "cancel-bulk", "--key-prefix", "cust-42/")
    took = time.monotonic() - started
    assert out.returncode == 0, out.stderr
    done = json.loads(out.stdout)
    assert (done["matched"], done["cancelled"]) == (MATCHING, MATCHING), done
    assert done["partitions_answered"] == settings.partition_count
    out = cli(settings, "list", *urls, "--key-prefix", "cust-42/", "--count")
    assert json.loads(out.stdout)["matched"] == 0
    out = cli(settings, "list", *urls, "--count")
    assert json.loads(out.stdout)["matched"] == OTHERS
    with TopicReader(settings, settings.topics.fired) as audit:
        records = [FiredRecord.from_json(r.value or b"") for r in audit.read_to_end()]
    cancelled = [r.id for r in records if r.event is FiredKind.CANCEL]
    assert sorted(cancelled) == sorted(matching), "each cancelled timer answered once"
    answers = [r for r in records if r.event is FiredKind.BULK_CANCEL]
    assert {r.partition for r in answers} == set(range(settings.partition_count))
    print(f"cancel-bulk: {MATCHING} of {MATCHING + OTHERS} by key prefix in {took:.2f} s")
