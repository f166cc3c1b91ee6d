"""docs/protocol.md's kcat example, run as written against a real worker.

The commands are read from the page itself (its "A worked example with kcat" section),
with only the topic names swapped for this test's and ``$KAFKA_BOOTSTRAP_SERVERS`` set
to the broker: schedule a timer an hour out, reschedule it to five seconds, read its
callback; schedule another, cancel it, read the answer on the fired topic. A producer in
any language that does what the page says gets what it promises.

The broker: the session's when kcat can talk to it (an Apache Kafka from
``KAFKA_BOOTSTRAP_SERVERS`` or testcontainers). Debian's kcat 1.7.1 cannot talk to the
dev broker (Tansu) directly: its librdkafka 2.0.2 misreads the optional tagged fields
that end Tansu's ApiVersions answer. There the test starts a Tansu of its own behind
:mod:`tests.support.kcat_relay`, which passes every byte through but drops those fields,
and runs the worker and the oscillator through the same relay.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from app.dev.broker import accepts_connections, broker_binary, free_port
from app.dev.stack import wait_until_firing
from app.kafka.records import TopicReader
from app.kafka.topics import ensure_topics
from app.settings import Settings
from kafka_timers_client.client import TimerClient
from tests.conftest import fresh_settings
from tests.support.broker import BrokerInfo
from tests.support.kcat_relay import relay
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

DOCS = Path(__file__).resolve().parents[2] / "docs"
CALLBACK_TOPIC = "payments-retry"
FIRE_TIMEOUT = 60.0


def kcat_section() -> list[str]:
    """The shell commands of the page's kcat example, in order (comments left out)."""
    text = (DOCS / "protocol.md").read_text()
    section = text.split("## A worked example with kcat", 1)[1].split("\n## ", 1)[0]
    commands: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        commands += [line for line in block.splitlines() if line and not line.startswith("#")]
    return commands


@contextlib.contextmanager
def kcat_broker(broker: BrokerInfo) -> Iterator[str]:
    """An address kcat can talk to, where a worker can run too."""
    if broker.kind != "tansu":
        yield broker.bootstrap
        return
    port, relay_port = free_port(), free_port()
    process = subprocess.Popen(
        [
            broker_binary(),
            "broker",
            "--listener-url",
            f"tcp://127.0.0.1:{port}",
            "--advertised-listener-url",  # every client comes back through the relay
            f"tcp://127.0.0.1:{relay_port}",
            "--storage-engine",
            "memory://tansu/",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: accepts_connections(port), 30, "the kcat test's broker listens")
        with relay(relay_port, ("127.0.0.1", port)):
            yield f"127.0.0.1:{relay_port}"
    finally:
        process.send_signal(2)
        process.wait(10)


@pytest.fixture
def kcat() -> str:
    path = shutil.which("kcat")
    if path is None:
        pytest.skip("kcat not installed: install the Debian/Ubuntu package 'kcat'")
    return path


def run(command: str, settings: Settings, workdir: Path) -> str:
    """One command of the page, as a user's shell runs it, on this test's topics."""
    swapped = (
        command.replace("timer-request", settings.topics.requests)
        .replace("timer-fired", settings.topics.fired)
        .replace(CALLBACK_TOPIC, f"{CALLBACK_TOPIC}-{settings.app_id}")
    )
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers}
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", f'KCAT="$(cat kcat-var)"\n{swapped}'],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode in (0, 1), f"{swapped}\n{done.stderr}"  # 1: grep found nothing
    return done.stdout


def test_the_kcat_example_schedules_reschedules_and_cancels(
    broker: BrokerInfo, kcat: str, tmp_path: Path
) -> None:
    commands = kcat_section()
    assert commands[0].startswith("export KAFKA_BOOTSTRAP_SERVERS=")
    kcat_line = commands[1]
    assert kcat_line.startswith('KCAT="kcat ') and "murmur2_random" in kcat_line
    schedule, reschedule, read_callback, schedule_2, cancel_2, read_answer = commands[2:]
    with kcat_broker(broker) as bootstrap:
        settings = fresh_settings(bootstrap)
        ensure_topics(settings)
        callback_topic = f"{CALLBACK_TOPIC}-{settings.app_id}"
        ensure_topics(settings, [callback_topic])
        # $KCAT as the page defines it, expanded by bash with this broker's address.
        definition = (
            kcat_line.split("=", 1)[1].strip('"').replace("$KAFKA_BOOTSTRAP_SERVERS", bootstrap)
        )
        (tmp_path / "kcat-var").write_text(definition)
        with running_stack(settings, tmp_path) as stack:
            stack.oscillator()
            stack.worker()
            client = TimerClient(settings)
            wait_until_firing(settings, client, callback_topic)
            client.close()

            run(schedule, settings, tmp_path)
            sent_at = time.time()
            run(reschedule, settings, tmp_path)

            def callback() -> str | None:
                lines = run(read_callback, settings, tmp_path).splitlines()
                mine = [line for line in lines if "timer-id=kcat-1" in line]
                return "\n".join(mine) or None

            line = wait_until(callback, FIRE_TIMEOUT, "the rescheduled timer's callback", 0.5)
            assert line.count("\n") == 0, f"fired once, not twice: {line}"
            key, value, headers = line.split(" ", 2)
            assert (key, value) == ("order-7", "retry")
            fields = dict(h.split("=", 1) for h in headers.split(","))
            assert fields["timer-id"] == "kcat-1" and fields["timer-token"] == "s3cret"
            # The reschedule's 5 s, not the first request's hour.
            assert sent_at + 4 <= int(fields["timer-due"]) <= sent_at + 7, fields

            run(schedule_2, settings, tmp_path)
            run(cancel_2, settings, tmp_path)

            def answer() -> str | None:
                return run(read_answer, settings, tmp_path).strip() or None

            answered = wait_until(
                answer, FIRE_TIMEOUT, "the cancel's answer on the fired topic", 0.5
            )
            key, value = answered.splitlines()[-1].split("\t", 1)
            record = json.loads(value)
            assert key == "kcat-2"
            assert (record["event"], record["outcome"]) == ("cancel", "cancelled"), record

        # Every record the worker wrote to the fired topic is what the schema says.
        schema = json.loads((DOCS / "timer-fired.schema.json").read_text())
        with TopicReader(settings, settings.topics.fired) as reader:
            records = reader.read_to_end(30)
        assert records
        for r in records:
            jsonschema.validate(json.loads(r.value or b""), schema)
        with TopicReader(settings, callback_topic) as reader:
            fired = {(r.header("timer-id") or b"").decode() for r in reader.read_to_end(30)}
        assert "kcat-2" not in fired and "kcat-1" in fired
