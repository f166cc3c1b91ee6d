"""No deployment's callback, and no record without the control secret, controls another
deployment (real processes, two deployments on one broker).

Deployment B runs 30 timers: 10 on a topic a hostile pause names, 10 on a topic a hostile
rate (``1e-300`` per second) names, 10 under a key prefix a hostile bulk cancel names.
Deployment A (its own app id, topics, worker and oscillator; its allow-list ``.*``) is
asked, by three ordinary JSON requests on its request topic, for callbacks due at once
to B's control topic whose keys and values are those three control records. Alongside,
a producer writes the same three records to B's control topic itself: unsigned, and
signed with a secret that is not B's (as an older deployment's callback, or a writer
without the secret, would).

- A refuses the three requests (dead-lettered ``topic_not_allowed``: ``*-timer-control``
  is refused by every deployment) and writes nothing to B's control topic;
- B ignores and counts the six records it finds there (no valid signature);
- all 30 of B's timers fire, each once.

Without the refusal A stores and fires the three; without the signature B applies the
producer's records and holds or cancels its 30 timers.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from confluent_kafka import Producer

from app.core.control import SIGNATURE_HEADER, sign_control
from app.dev.broker import free_port
from app.dev.stack import wait_until_firing
from app.kafka.config import confluent_producer
from app.kafka.records import TopicReader
from app.kafka.topic_config import control_topic
from app.kafka.topics import ensure_topics
from app.settings import Settings
from kafka_timers_client.client import TimerClient
from tests.conftest import fresh_settings
from tests.support.probes import metric_total
from tests.support.stack import Stack, fired_ids, running_stack
from tests.support.waiting import keep_reading, wait_until

PER_KIND = 10
#: Seconds from scheduling B's timers to their due time: the hostile records are written
#: and read well before.
LEAD = 8


def hostile_records(paused: str, limited: str, prefix: str) -> list[tuple[bytes, bytes]]:
    """The three control records the issue found working: a bulk cancel, a pause and a
    rate of 1e-300 per second."""
    return [
        (b"cancel-bulk/hostile-1", json.dumps({"filter": {"key_prefix": prefix}}).encode()),
        (f"pause/{paused}".encode(), b'{"paused": true}'),
        (f"rate/{limited}".encode(), b'{"per_second": 1e-300}'),
    ]


def test_another_deployment_cannot_pause_throttle_or_cancel_this_ones_timers(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    b = settings
    b_control = control_topic(b)
    paused = stack.callback_topic(f"paused-{b.app_id}")
    limited = stack.callback_topic(f"limited-{b.app_id}")
    cancelled = stack.callback_topic(f"cancelled-{b.app_id}")
    prefix = f"victim-{b.app_id}/"
    b_metrics = free_port()
    stack.oscillator("b-osc")
    stack.worker("b-w", metrics_port=b_metrics)

    a = replace(fresh_settings(b.bootstrap_servers), callback_allow=(".*",))
    ensure_topics(a)
    a_probe = f"probe-{a.app_id}"
    ensure_topics(a, [a_probe])
    b_client = TimerClient(b)
    a_client = TimerClient(a)
    callbacks = {t: TopicReader(b, t) for t in (paused, limited, cancelled)}
    control_reader = TopicReader(b, b_control)
    a_dlq = TopicReader(a, a.topics.dlq)
    (tmp_path / "a").mkdir()
    with running_stack(a, tmp_path / "a") as a_stack:
        a_stack.oscillator("a-osc")
        a_stack.worker("a-w")
        try:
            wait_until_firing(b, b_client, paused, timeout=90)
            wait_until_firing(a, a_client, a_probe, timeout=90)
            for reader in callbacks.values():
                reader.read_to_end()
            ignored_before = metric_total(f"http://127.0.0.1:{b_metrics}", IGNORED)

            due = time.time() + LEAD
            ids: dict[str, set[str]] = {t: set() for t in callbacks}
            for topic in (paused, limited, cancelled):
                for i in range(PER_KIND):
                    timer = b_client.schedule(topic, b"x", f"{prefix}{topic}-{i}", at=due)
                    ids[topic].add(timer.id)
            b_client.flush()

            # A's three ordinary JSON requests: callbacks to B's control topic, due now.
            records = hostile_records(paused, limited, prefix)
            producer = Producer(confluent_producer(a))
            for n, (key, value) in enumerate(records):
                request = {
                    "id": f"hostile-{n}",
                    "topic": b_control,
                    "key": key.decode(),
                    "value": value.decode(),
                    "at": int(time.time()),
                }
                producer.produce(a.topics.requests, json.dumps(request).encode(), b"hostile")
            assert producer.flush(15) == 0
            # The same records written straight to B's control topic: unsigned, and
            # signed with a secret that is not B's.
            for key, value in records:
                producer.produce(b_control, value, key)
                wrong = sign_control("not-the-deployment-secret", b_control, key, value)
                producer.produce(b_control, value, key, headers=[(SIGNATURE_HEADER, wrong)])
            assert producer.flush(15) == 0

            wait_until(
                lambda: len(a_dlq.records) >= len(records),
                30,
                "A to dead-letter the three requests",
                between=a_dlq.poll,
            )
            reasons = sorted((r.header("dlq-reason") or b"").decode() for r in a_dlq.records)
            assert reasons == ["topic_not_allowed"] * 3, reasons

            def report() -> str:
                return ", ".join(
                    f"{t}: {len(ids[t] & set(fired_ids(r.records)))}/{PER_KIND}"
                    for t, r in callbacks.items()
                )

            def all_fired() -> bool:
                return all(
                    ids[topic] <= set(fired_ids(reader.records))
                    for topic, reader in callbacks.items()
                )

            wait_until(
                all_fired,
                LEAD + 30,
                lambda: f"B's 30 timers to fire: {report()}",
                between=lambda: [r.poll(0.1) for r in callbacks.values()],
            )
            print(f"B's timers fired: {report()}")
            wait_until(
                lambda: (
                    metric_total(f"http://127.0.0.1:{b_metrics}", IGNORED)
                    >= ignored_before + 2 * len(records)
                ),
                30,
                "B to ignore the six records without a valid signature",
            )

            keep_reading(lambda t: [r.poll(t / 3) for r in callbacks.values()], 1.0)
            for topic, reader in callbacks.items():
                got = [i for i in fired_ids(reader.records) if i in ids[topic]]
                assert sorted(got) == sorted(ids[topic]), (topic, report())
            # Nothing A was asked for reached B's control topic: only the six written here.
            control_reader.read_to_end()
            assert len(control_reader.records) == 2 * len(records)
        finally:
            b_client.close()
            a_client.close()
            for reader in (*callbacks.values(), control_reader, a_dlq):
                reader.close()


IGNORED = "kafka_timers_control_records_ignored"
