"""The JavaScript client's ``RedeliveringConsumer`` on real processes: ``node`` runs
``clients/js/test/redelivery.ts`` against a real worker and oscillator. It acks 90% of
the messages, ignores the first copy of the rest, and never acks three that keep
failing: every message is acked, each ignored one comes back (through the retry topic)
with ``delivery-count`` 2 and is acked, no acked message comes back, and the three
failing ones are handed out exactly 3 times and then reach the dead-letter topic.
Node is required (``make js-client`` builds the script): a missing ``node`` fails.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer

from app.dev.stack import wait_until_firing
from app.kafka.config import confluent_common, confluent_producer
from app.settings import Settings
from kafka_timers_client import TimerClient
from tests.support.stack import Stack
from tests.support.waiting import wait_until

JS_DIR = Path(__file__).resolve().parents[2] / "clients" / "js"
SCRIPT = JS_DIR / "dist" / "test" / "redelivery.js"
MESSAGES = 200
FAILING = 3


def test_the_js_client_acks_redelivers_and_dead_letters(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    node = shutil.which("node")
    assert node is not None, "node (v18+) is needed: install nodejs"
    assert SCRIPT.exists(), f"{SCRIPT} is missing: run `make js-client`"
    tag = uuid.uuid4().hex[:8]
    stack.worker()
    stack.oscillator()
    queue = stack.callback_topic(f"jsq-{tag}")
    retry = stack.callback_topic(f"jsq-{tag}-retry")
    dlt = stack.callback_topic(f"jsq-{tag}-dlt")
    with TimerClient(settings.client_config()) as client:
        wait_until_firing(settings, client, stack.callback_topic(f"probes-{tag}"))
    producer = Producer(confluent_producer(settings))
    for number in range(MESSAGES):
        producer.produce(queue, str(number).encode(), f"k{number}".encode())
    for number in range(FAILING):
        producer.produce(queue, f"fail-{number}".encode(), f"f{number}".encode())
    assert producer.flush(30) == 0
    out_path = tmp_path / "js.out"
    group = f"js-{tag}"
    args = [node, str(SCRIPT), settings.bootstrap_servers, settings.topics.requests]
    with out_path.open("wb") as out:
        process = subprocess.Popen(
            [*args, queue, dlt, retry, group], cwd=JS_DIR, stdout=out, stderr=subprocess.STDOUT
        )
    reader = Consumer(
        {**confluent_common(settings), "group.id": f"dlt-{tag}", "auto.offset.reset": "earliest"}
    )
    reader.subscribe([dlt])
    dead: list[tuple[bytes, dict[str, Any]]] = []

    def lines() -> list[list[str]]:
        return [
            line.split() for line in out_path.read_text().splitlines() if line[:2] in {"A ", "I "}
        ]

    def finished() -> bool:
        for msg in reader.consume(100, 0.2):
            if msg.error() is None:
                raw: Any = msg.headers() or []
                dead.append((msg.value() or b"", dict(raw)))
        acked = {fields[1] for fields in lines() if fields[0] == "A"}
        return len(dead) >= FAILING and len(acked) >= MESSAGES

    try:
        wait_until(finished, 120, lambda: out_path.read_text()[-3000:])
    finally:
        reader.close()
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    seen: dict[str, list[list[str]]] = defaultdict(list)
    for fields in lines():
        seen[fields[1]].append(fields)
    ignored = [str(n) for n in range(0, MESSAGES, 10)]
    for number in range(MESSAGES):
        kinds = [(f[0], f[2]) for f in seen[str(number)]]
        if str(number) in ignored:
            assert kinds == [("I", "1"), ("A", "2")], (number, kinds)
            assert seen[str(number)][1][3] == retry
        else:
            assert kinds == [("A", "1")], (number, kinds)
    for number in range(FAILING):
        copies = seen[f"fail-{number}"]
        assert [(f[0], f[2]) for f in copies] == [("I", "1"), ("I", "2"), ("I", "3")]
    assert sorted(value for value, _ in dead) == [f"fail-{n}".encode() for n in range(FAILING)]
    for _, headers in dead:
        assert headers["delivery-count"] == b"3"
        assert headers["delivery-origin"].startswith(f"{queue}/".encode())
