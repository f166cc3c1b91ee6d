"""What operators and producers write cannot cancel everything or forge a worker's log.

An empty prefix is no filter: ``cancel-bulk --id-prefix ''`` (an unset shell variable)
is refused by the command in one line, and a control record that asks for it anyway is
answered ``refused`` by the workers, with the reason, and cancels nothing. Text read from
records (an oscillator's name in a tick, a bulk cancel's id in a control key) reaches the
worker's log with its control characters escaped: no forged line, no ESC.
"""

from __future__ import annotations

import json
import re
import time

from confluent_kafka import Producer

from app.core.control import CANCEL_BULK
from app.core.timer_filter import TimerFilter
from app.kafka.config import confluent_producer
from app.kafka.control import bulk_cancel, send_control
from app.kafka.topics import ensure_control_topic
from tests.integration.test_cancel_answers import firing_client, get, probed_and_firing
from tests.support.cli import run_cli
from tests.support.stack import Stack
from tests.support.waiting import wait_until

#: Any control character but the newline that ends each log line.
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")
FORGED = "2026-12-06 12:00:00,000 CRITICAL app.worker: forged line"


def test_an_empty_prefix_cancels_nothing(stack: Stack) -> None:
    settings = stack.settings
    topic, worker, client = probed_and_firing(stack, f"keep-{settings.app_id}", "refusing-worker")
    ids = [f"keep-{i}" for i in range(20)]
    for timer_id in ids:
        client.schedule(topic, b"stays", delay=600, timer_id=timer_id, token="tok")
    client.flush()
    wait_until(
        lambda: get(settings, ids[-1], worker.web)[1].get("state") == "pending", 30, "stored"
    )

    for flag in ("--id-prefix", "--key-prefix"):
        out = run_cli(settings, "cancel-bulk", flag, "")
        assert out.returncode == 2 and out.stdout == "", out
        assert len(out.stderr.strip().splitlines()) == 1 and "is empty" in out.stderr, out

    # The same request written straight to the control topic: the workers refuse it.
    ensure_control_topic(settings, timeout=30)
    for flt in (TimerFilter(id_prefix=""), TimerFilter(key_prefix=b"")):
        result = bulk_cancel(settings, flt, dry_run=False, wait=30, by="test", timeout=30)
        assert result["refused"] and "empty" in result["refused"], result
        assert (result["matched"], result["cancelled"]) == (0, 0), result
        assert result["partitions_missing"] == [], result
    for timer_id in ids:
        assert get(settings, timer_id, worker.web)[1].get("state") == "pending", timer_id
    client.close()


def test_record_text_reaches_the_log_escaped(stack: Stack) -> None:
    settings = stack.settings
    stack.oscillator()
    worker = stack.worker("escaping-worker", clock_skew_warn_seconds=5.0)
    topic = stack.callback_topic(f"esc-{settings.app_id}")
    client = firing_client(stack, topic)
    client.close()
    hostile = f"osc\n{FORGED}\x1b]0;owned\x07\x1b[2J"
    producer = Producer(confluent_producer(settings))
    now = time.time()
    tick = {"oscillator": hostile, "sent_ms": int((now + 3600) * 1000)}  # 1 h ahead: warned
    producer.produce(
        settings.topics.ticks, json.dumps(tick).encode(), b"%d" % int(now), partition=0
    )
    assert producer.flush(10) == 0
    ensure_control_topic(settings, timeout=30)
    bulk_key = f"{CANCEL_BULK}{hostile}".encode()
    send_control(settings, bulk_key, json.dumps({"filter": {"id_prefix": "none-"}}).encode(), 30)

    def logged() -> bool:
        text = worker.log_text()
        return "clock skew" in text and "bulk cancel osc" in text

    wait_until(logged, 60, "the worker to log the tick's source and the bulk cancel's id")
    send_control(settings, bulk_key, None, 30)
    text = worker.log_text()
    assert RAW_CONTROL.findall(text) == [], "a raw control character in the worker's log"
    assert not any(line.startswith(FORGED) for line in text.splitlines()), "a forged line"
    assert "osc\\n2026-12-06" in text and "\\x1b[2J" in text  # shown, escaped
