"""A worker process exports its spans over OTLP/HTTP: the fire is linked to the request.

A tiny OTLP/HTTP receiver in the test (a thread serving ``POST /v1/traces``, decoding
each ``ExportTraceServiceRequest``) stands in for a collector; the worker is started
with ``OTEL_EXPORTER_OTLP_ENDPOINT`` naming it. A request produced with a W3C
``traceparent`` header fires; the receiver gets a schedule span in the request's trace
and a fire span linked to it, and the callback's ``traceparent`` is the fire span's.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from kafka_timers_client import protowire
from kafka_timers_client.partitioner import partition_for
from tests.support.stack import Stack, fired_ids
from tests.support.waiting import wait_until

FIRE_TIMEOUT = 60.0
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"


class Receiver:
    """Collects the spans posted to it (as protobuf ``Span`` messages)."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self._lock = threading.Lock()

    def add(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        with self._lock:
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    self.spans.extend(scope.spans)

    def named(self, name: str) -> list[Any]:
        with self._lock:
            return [s for s in self.spans if s.name == name]


def _attribute(span: Any, key: str) -> Any:
    for kv in span.attributes:
        if kv.key == key:
            return kv.value.string_value or kv.value.int_value
    return None


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    collected = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            ok = self.path == "/v1/traces"
            if ok:
                collected.add(body)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200 if ok else 404)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield collected, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_fire_span_is_exported_linked_to_the_scheduling_requests_trace(
    stack: Stack, receiver: tuple[Receiver, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    collected, endpoint = receiver
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")  # the SDK's batch interval, ms
    topic = stack.callback_topic("traced-callbacks")
    stack.oscillator()
    stack.worker(otlp_endpoint=endpoint)
    due = int(time.time()) + 2
    timer_id = "traced-1"
    value = protowire.encode(
        protowire.Future(callback_topic=topic, callback=b"payload", id=timer_id, due=due)
    )
    producer = stack.producer()
    producer.produce(
        stack.settings.topics.requests,
        value,
        timer_id.encode(),
        partition=partition_for(timer_id.encode(), stack.settings.partition_count),
        headers=[("traceparent", f"00-{TRACE_ID}-{SPAN_ID}-01".encode())],
    )
    producer.flush(10)

    with stack.reader(topic) as reader:
        (callback,) = reader.wait_for(lambda rs: fired_ids(rs) == [timer_id], FIRE_TIMEOUT)
    assert callback.value == b"payload"
    traceparent = (callback.header("traceparent") or b"").decode()
    version, trace_id, span_id, _flags = traceparent.split("-")
    assert version == "00" and trace_id != TRACE_ID, "the fire span's, not the request's"

    (fire,) = wait_until(
        lambda: collected.named("kafka-timers fire"), 20, "the fire span exported", interval=0.1
    )
    assert (fire.trace_id.hex(), fire.span_id.hex()) == (trace_id, span_id)
    assert [(link.trace_id.hex(), link.span_id.hex()) for link in fire.links] == [
        (TRACE_ID, SPAN_ID)
    ], "linked to the scheduling request's trace context"
    assert _attribute(fire, "kafka_timers.timer.id") == timer_id
    (schedule,) = wait_until(
        lambda: collected.named("kafka-timers schedule"), 20, "the schedule span", interval=0.1
    )
    assert schedule.trace_id.hex() == TRACE_ID and schedule.parent_span_id.hex() == SPAN_ID
