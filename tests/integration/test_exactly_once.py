"""Exactly-once mode: every unit of work is one Kafka transaction (confluent-kafka)."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from app.client import TimerClient
from app.kafka.records import TopicReader
from app.settings import Settings
from tests.support.stack import fired_ids, running_stack


def test_timers_fire_once_through_transactions(settings: Settings, tmp_path: Path) -> None:
    eos = replace(settings, exactly_once=True)
    with running_stack(eos, tmp_path) as stack:
        topic = stack.callback_topic("eos-callbacks")
        stack.oscillator()
        worker = stack.worker()
        client = TimerClient(eos)
        ids = {client.schedule(topic, b"x", at=time.time() + 2 + i % 5).id for i in range(60)}
        late = client.schedule(topic, b"late", at=time.time() - 60)
        client.flush()
        with stack.reader(topic) as reader:  # librdkafka reads read_committed by default
            reader.wait_for(lambda rs: set(fired_ids(rs)) >= ids | {late.id}, 60)
            reader.poll(1.0)
            assert Counter(fired_ids(reader.records)) == Counter(dict.fromkeys(ids | {late.id}, 1))
        with TopicReader(eos, eos.topics.fired) as audit:
            fired = [json.loads(r.value or b"{}") for r in audit.read_to_end()]
        assert len(fired) == len(ids) + 1
        assert worker.alive
        assert "aborted" not in worker.log_text()
