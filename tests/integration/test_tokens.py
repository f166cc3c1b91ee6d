"""A token means it for every change, on real processes: a request that names a pending
token-protected timer's id without its token (another token, or none) is refused
``wrong_token``, answered on the fired topic at its offset, dead-lettered, and the
original fires untouched; one carrying the token reschedules it."""

from __future__ import annotations

import json
import time
import uuid

from confluent_kafka import Producer

from app.core.fired import FiredRecord
from app.core.routing import owner_of
from app.kafka.config import confluent_common
from tests.integration.test_cancel_answers import firing_client
from tests.support.stack import Stack, fired_ids

#: Generous: 2 shared cores.
TIMEOUT = 60.0


def test_a_replace_without_the_token_is_refused_and_the_original_fires(stack: Stack) -> None:
    settings = stack.settings
    topic = stack.callback_topic("tokens-mine")
    elsewhere = stack.callback_topic("tokens-theirs")
    stack.oscillator()
    stack.worker()
    client = firing_client(stack, topic)
    tag = uuid.uuid4().hex[:8]
    due = int(time.time()) + 12
    victim = client.schedule(topic, b"mine", at=due, timer_id=f"order-{tag}", token="secret")
    moved = client.schedule(topic, b"old", at=due + 600, timer_id=f"moved-{tag}", token="m")
    client.flush()
    # The attacks: the same id, a business key, with another token (through the
    # client), and with none (a JSON request from a plain producer, librdkafka's own
    # partitioner: forwarded to the owner first, wherever it lands).
    client.schedule(elsewhere, b"hijack", at=due + 9 * 365 * 86400, timer_id=victim.id, token="x")
    plain = Producer(confluent_common(settings))
    tokenless = {"id": victim.id, "topic": elsewhere, "value": "hijack", "at": due - 8}
    plain.produce(settings.topics.requests, json.dumps(tokenless).encode(), victim.id.encode())
    assert plain.flush(10) == 0
    # Its owner reschedules the other timer with its token: that still works.
    client.schedule(topic, b"new", at=due, timer_id=moved.id, token="m")
    client.flush()
    assert settings.partitions is not None
    owner = owner_of(victim.id, settings.partitions)
    with stack.reader(settings.topics.fired) as fired:
        answers = fired.wait_for(
            lambda rs: len([r for r in rs if _refusal(r.value, victim.id)]) >= 2, TIMEOUT
        )
    refusals = [
        FiredRecord.from_json(r.value or b"") for r in answers if _refusal(r.value, victim.id)
    ]
    assert {(a.partition, a.outcome) for a in refusals} == {(owner, "wrong_token")}
    with stack.reader(settings.topics.dlq) as dlq:
        letters = dlq.wait_for(
            lambda rs: len([r for r in rs if r.header("dlq-reason") == b"wrong_token"]) >= 2,
            TIMEOUT,
        )
    assert all(
        r.header("dlq-reason") == b"wrong_token" and victim.id.encode() in (r.value or b"")
        for r in letters
        if r.header("dlq-reason") == b"wrong_token"
    )
    with stack.reader(topic) as reader:
        got = reader.wait_for(
            lambda rs: {victim.id, moved.id} <= set(fired_ids(rs)), due - time.time() + TIMEOUT
        )
    mine = {(r.header("timer-id") or b"").decode(): r for r in got}
    assert mine[victim.id].value == b"mine" and mine[victim.id].header("timer-token") == b"secret"
    assert int(mine[victim.id].header("timer-due") or 0) == due
    assert mine[moved.id].value == b"new"  # rescheduled by its owner, with its token
    assert fired_ids(got).count(victim.id) == 1
    with stack.reader(elsewhere) as theirs:
        assert victim.id not in fired_ids(theirs.read_to_end())
    client.close()


def _refusal(value: bytes | None, timer_id: str) -> bool:
    try:
        record = FiredRecord.from_json(value or b"")
    except ValueError:
        return False
    return record.event == "dropped" and record.id == timer_id
