"""The JavaScript client (clients/js, kafkajs) against real worker and oscillator
processes: ``node`` runs its compiled test script, which schedules a one-shot timer (text
and binary), cancels one and tombstones one waiting for the answers, schedules a
series and sends three debounced requests for one id; this side checks the callbacks
that arrive and that the JS client places ids on the partitions the Python client
computes.

``make test`` builds the client first (``npm ci`` and ``tsc``, the Makefile's
``js-client`` target). Node is required: a missing ``node`` fails, it never skips.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections import Counter
from pathlib import Path

from app.dev.stack import wait_until_firing
from kafka_timers_client.client import TimerClient
from kafka_timers_client.partitioner import partition_for
from tests.support.stack import Stack, fired_ids

JS_DIR = Path(__file__).resolve().parents[2] / "clients" / "js"
SCRIPT = JS_DIR / "dist" / "test" / "e2e.js"
FIRE_TIMEOUT = 60.0
#: Ids whose placement is compared: short, long, non-ASCII, with every tail length.
IDS = ["a", "ab", "abc", "abcd", "order-7", "remind-42", "žluťoučký kůň", "x" * 101, "0"]


def test_the_js_client_schedules_cancels_and_schedules_a_series(stack: Stack) -> None:
    node = shutil.which("node")
    assert node is not None, "node (v18+) is needed: install nodejs"
    assert SCRIPT.exists(), f"{SCRIPT} is missing: run `make js-client` (npm ci, tsc)"
    topic = stack.callback_topic(f"js-callbacks-{uuid.uuid4().hex[:6]}")
    stack.oscillator()
    stack.worker()
    s = stack.settings
    with TimerClient(s) as probe_client:  # every partition firing: the series starts on time
        wait_until_firing(s, probe_client, stack.callback_topic(f"{topic}-probe"), probes=8)
    partitions = s.partitions or 0
    ran = subprocess.run(
        [
            node,
            str(SCRIPT),
            s.bootstrap_servers,
            s.topics.requests,
            s.topics.fired,
            topic,
            str(partitions),
            *IDS,
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=JS_DIR,
    )
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout.strip().splitlines()[-1])

    # kafkajs' DefaultPartitioner places each id where the Python client (murmur2) does
    assert result["placed"] == {i: partition_for(i.encode(), partitions) for i in IDS}
    assert len(set(result["placed"].values())) > 1

    assert result["cancelled"] == "cancelled"
    assert result["refused"] == "wrong_token"
    # a tombstone carries no token: it cancels a timer scheduled without one, no other
    assert result["protectedOutcome"] == "wrong_token"
    assert result["tombstoned"] == "cancelled"

    once, binary, series = result["once"], result["binary"], result["series"]
    debounced = result["debounced"]
    assert len({d["id"] for d in debounced}) == 1
    assert [d["token"] for d in debounced] == ["", "", ""]  # token-less: each one merges
    expected = {once["id"]: 1, binary["id"]: 1, series["id"]: 3, debounced[0]["id"]: 1}
    with stack.reader(topic) as reader:
        reader.wait_for(lambda rs: Counter(fired_ids(rs)) >= Counter(expected), FIRE_TIMEOUT)
        reader.poll(1.5)  # a fourth occurrence, a duplicate or a cancelled timer would show here
        records = reader.records
    assert Counter(fired_ids(records)) == Counter(expected)
    by_id: dict[str, list] = {}
    for record in records:
        by_id.setdefault((record.header("timer-id") or b"").decode(), []).append(record)

    (first,) = by_id[once["id"]]
    assert (first.key, first.value) == (b"k-js", b"from js")
    assert first.header("trace") == b"js-1"
    assert first.header("timer-token") == once["token"].encode()
    assert first.timestamp_ms >= once["due"] * 1000, "fired before its second"
    (raw,) = by_id[binary["id"]]
    assert (raw.key, raw.value) == (b"k-bin", bytes([0, 1, 2, 255]))
    assert raw.timestamp_ms >= binary["due"] * 1000

    ticks = by_id[series["id"]]
    assert [r.header("timer-seq") for r in ticks] == [b"1", b"2", b"3"]  # one partition: in order
    dues = [int(r.header("timer-due") or 0) for r in ticks]
    # the first occurrence the JS client computed is the worker's
    assert dues == [series["due"], series["due"] + 1, series["due"] + 2]
    assert all(r.timestamp_ms >= d * 1000 for r, d in zip(ticks, dues, strict=True))

    # three debounced requests, one callback: the last request's, counting all three
    (merged,) = by_id[debounced[0]["id"]]
    assert (merged.key, merged.value) == (b"k-deb", b"edit 3")
    assert merged.header("timer-debounced") == b"3"
    assert int(merged.header("timer-due") or 0) == debounced[-1]["due"]
    assert merged.timestamp_ms >= debounced[-1]["due"] * 1000, "fired before the last request's due"
