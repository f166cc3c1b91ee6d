"""Requests framed by Confluent's own serializers fire: a real worker on a real broker.

A ``Future`` written by confluent-kafka's ``ProtobufSerializer`` and a JSON request
written by its ``JSONSerializer`` (each registered in a mock registry: the worker calls
none) are produced to the request topic as any producer using Schema Registry would;
both callbacks arrive with the requester's payload bytes unchanged, and the fired
records name the schema ids the frames carried.
"""

from __future__ import annotations

import json
import time

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from app.core import proto
from app.kafka.records import TopicReader
from tests.support.stack import Stack, fired_ids
from tests.support.waiting import wait_until

FIRE_TIMEOUT = 60.0
JSON_SCHEMA = json.dumps(
    {
        "type": "object",
        "properties": {"topic": {"type": "string"}, "id": {"type": "string"}},
        "required": ["topic"],
    }
)


def test_requests_framed_by_confluents_serializers_fire(stack: Stack) -> None:
    topic = stack.callback_topic("sr-callbacks")
    stack.oscillator()
    stack.worker()
    registry = SchemaRegistryClient.new_client({"url": "mock://kafka-timers-it"})
    context = SerializationContext(stack.settings.topics.requests, MessageField.VALUE)
    due = int(time.time()) + 2
    payload = b"\x00\x01 payload \xff"  # framed-looking bytes too: passed through unchanged
    as_protobuf = ProtobufSerializer(proto.Future, registry, {"use.deprecated.format": False})(
        proto.Future(callBackTopic=topic, callBack=payload, id="sr-proto", due=due), context
    )
    # A JSON schema registered under the same subject is a second version, another id.
    as_json = JSONSerializer(JSON_SCHEMA, registry)(
        {"topic": topic, "id": "sr-json", "value": "json payload", "at": due}, context
    )
    assert as_protobuf is not None and as_json is not None
    ids = {"sr-proto": as_protobuf[1:5], "sr-json": as_json[1:5]}
    assert ids["sr-proto"] != ids["sr-json"]

    producer = stack.producer()
    producer.produce(stack.settings.topics.requests, as_protobuf, b"sr-proto")
    producer.produce(stack.settings.topics.requests, as_json, b"sr-json")
    producer.flush(10)

    with stack.reader(topic) as reader:
        records = reader.wait_for(
            lambda rs: set(fired_ids(rs)) >= {"sr-proto", "sr-json"}, FIRE_TIMEOUT
        )
    values = {(r.header("timer-id") or b"").decode(): r.value for r in records}
    assert values == {"sr-proto": payload, "sr-json": b"json payload"}
    assert all(r.timestamp_ms >= due * 1000 for r in records), "fired before its second"

    def fired_schema_ids() -> dict[str, int] | None:
        with TopicReader(stack.settings, stack.settings.topics.fired) as audit:
            docs = [json.loads(r.value or b"{}") for r in audit.read_to_end()]
        got = {d["id"]: d.get("schema_id") for d in docs if d["event"] == "fired"}
        return got if len(got) == 2 else None

    reported = wait_until(
        fired_schema_ids,
        20,
        "a fired record for each request",
        interval=0.2,
    )
    assert reported == {name: int.from_bytes(raw, "big") for name, raw in ids.items()}
