"""Schedule and fire spans, on an in-memory exporter: the worker's own code paths.

The service (memory stores) reads a request that carries a W3C ``traceparent`` record
header and stores it; a tick fires it; the timer it fires is produced through the real
:class:`OutputProducer` (its librdkafka producer replaced by a recorder). The schedule
span is a child of the request's trace, the fire span a root linked to it, and the
callback carries the fire span's ``traceparent`` instead of the request's. Off, the
worker does not import OpenTelemetry at all.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanKind, get_current_span, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from app.core.raw_record import RawRecord
from app.core.timer import Timer
from app.settings import Settings
from app.worker.otel_spans import (
    FIRE_SPAN,
    SCHEDULE_SPAN,
    TRACEPARENT,
    OtelTracing,
    _span_context,
)
from app.worker.output import OutputProducer
from app.worker.tracing import tracing_for
from kafka_timers_client import protowire
from kafka_timers_client.errors import ConfigurationError
from tests.support.cli import run_python
from tests.support.recording_producer import HeaderRecorder
from tests.unit.test_service import NOW, Harness

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
SPAN_ID = 0x00F067AA0BA902B7
REQUEST_TRACEPARENT = f"00-{TRACE_ID:032x}-{SPAN_ID:016x}-01".encode()


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracing(spans: InMemorySpanExporter) -> OtelTracing:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    return OtelTracing(provider.get_tracer("test"))


def traced_output(tracing: OtelTracing | None) -> tuple[OutputProducer, HeaderRecorder]:
    out = OutputProducer(
        {"bootstrap.servers": "127.0.0.1:1"},
        worker_id="w-1",
        fired_topic="fired",
        dlq_topic="dlq",
        tracing=tracing,
    )
    recorder = HeaderRecorder()
    out._producer = recorder  # type: ignore[assignment]
    return out, recorder


def traced_request(
    h: Harness, record_headers: tuple[tuple[str, bytes], ...], **fields: Any
) -> RawRecord:
    future = protowire.Future(callback_topic="cb", callback=b"v", id="t-1", due=NOW + 5, **fields)
    plain = h.record(protowire.encode(future))
    return RawRecord(
        plain.topic,
        plain.partition,
        plain.offset,
        plain.timestamp_ms,
        plain.key,
        plain.value,
        record_headers,
    )


def test_the_schedule_and_the_fire_are_spans_linked_to_the_requests_trace(
    tracing: OtelTracing, spans: InMemorySpanExporter
) -> None:
    h = Harness(tracing=tracing)
    # Record headers of a protobuf or JSON request are not its callback's (only etf1's
    # are): its own ``headers`` field is. The traceparent is kept from the record's.
    h.requests(
        traced_request(h, ((TRACEPARENT, REQUEST_TRACEPARENT), ("y", b"2")), headers=[("x", b"1")])
    )
    (schedule,) = spans.get_finished_spans()
    assert schedule.name == SCHEDULE_SPAN and schedule.kind is SpanKind.CONSUMER
    assert schedule.context.trace_id == TRACE_ID, "a child of the request's trace"
    assert schedule.parent is not None and schedule.parent.span_id == SPAN_ID
    assert schedule.attributes is not None
    assert schedule.attributes["kafka_timers.timer.id"] == "t-1"

    h.tick(NOW + 5)
    ((fired, _),) = h.output.durable.callbacks
    assert fired.headers == (("x", b"1"), (TRACEPARENT, REQUEST_TRACEPARENT)), (
        "the request's traceparent is stored with the timer"
    )
    out, recorder = traced_output(tracing)
    out.callback(fired, partition=0, fired_at_ms=(NOW + 5) * 1000)
    fire = spans.get_finished_spans()[-1]
    assert fire.name == FIRE_SPAN and fire.kind is SpanKind.PRODUCER
    assert fire.parent is None, "a trace of its own"
    assert fire.context.trace_id != TRACE_ID
    assert [(link.context.trace_id, link.context.span_id) for link in fire.links] == [
        (TRACE_ID, SPAN_ID)
    ]
    (headers,) = recorder.headers
    carried = [v for k, v in headers if k == TRACEPARENT]
    ids = f"{fire.context.trace_id:032x}-{fire.context.span_id:016x}"
    assert carried == [f"00-{ids}-{int(fire.context.trace_flags):02x}".encode()]
    assert fire.context.trace_flags.sampled
    assert ("x", b"1") in headers, "the requester's other headers are passed through"


def test_a_traceparent_in_the_requests_own_headers_is_its_context(
    tracing: OtelTracing, spans: InMemorySpanExporter
) -> None:
    h = Harness(tracing=tracing)
    h.requests(traced_request(h, (), headers=[(TRACEPARENT, REQUEST_TRACEPARENT)]))
    (schedule,) = spans.get_finished_spans()
    assert schedule.context.trace_id == TRACE_ID
    h.tick(NOW + 5)
    ((fired, _),) = h.output.durable.callbacks
    out, _ = traced_output(tracing)
    out.callback(fired, partition=0, fired_at_ms=(NOW + 5) * 1000)
    assert spans.get_finished_spans()[-1].links[0].context.trace_id == TRACE_ID


@pytest.mark.parametrize("traceparent", [b"", b"00-xyz", b"\xff\xfe", b"00-" + b"0" * 52])
def test_a_request_without_a_valid_context_still_gets_unlinked_spans(
    tracing: OtelTracing, spans: InMemorySpanExporter, traceparent: bytes
) -> None:
    h = Harness(tracing=tracing)
    h.requests(traced_request(h, ((TRACEPARENT, traceparent),)))
    (schedule,) = spans.get_finished_spans()
    assert schedule.parent is None
    h.tick(NOW + 5)
    ((fired, _),) = h.output.durable.callbacks
    assert fired.headers == (), "an invalid traceparent is not stored"
    out, recorder = traced_output(tracing)
    out.callback(fired, partition=0, fired_at_ms=(NOW + 5) * 1000)
    assert list(spans.get_finished_spans()[-1].links) == []
    assert [k for k, _ in recorder.headers[0]].count(TRACEPARENT) == 1


def test_off_the_callback_keeps_the_requests_headers_and_no_span_is_made(
    spans: InMemorySpanExporter,
) -> None:
    timer = Timer("t-1", NOW, "cb", None, b"v", headers=((TRACEPARENT, REQUEST_TRACEPARENT),))
    out, recorder = traced_output(None)
    out.callback(timer, partition=0, fired_at_ms=NOW * 1000)
    assert (TRACEPARENT, REQUEST_TRACEPARENT) in recorder.headers[0]
    assert spans.get_finished_spans() == ()


def test_tracing_is_off_without_an_endpoint_and_opentelemetry_is_never_imported() -> None:
    assert tracing_for(Settings()) is None
    script = (
        "import sys\n"
        "from app.settings import Settings\n"
        "import app.worker.faust_app, app.worker.service, app.worker.output\n"
        "from app.worker.tracing import tracing_for\n"
        "assert tracing_for(Settings.from_env({})) is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    assert run_python(script).strip() == "[]"


def test_the_endpoint_comes_from_otel_exporter_otlp_endpoint() -> None:
    settings = Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"})
    assert settings.otlp_endpoint == "http://collector:4318"
    assert Settings.from_env(settings.to_env()).otlp_endpoint == "http://collector:4318"
    assert isinstance(tracing_for(settings), OtelTracing)
    with pytest.raises(ConfigurationError, match="OTEL_EXPORTER_OTLP_ENDPOINT"):
        Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"})


_HEX = "0123456789abcdef"


@settings(max_examples=500, deadline=None)
@given(
    value=st.one_of(
        st.builds(
            lambda v, t, s, f, rest: f"{v}-{t}-{s}-{f}{rest}",
            st.sampled_from(["00", "01", "cc", "ff", "0g", "0"]),
            st.one_of(st.text(_HEX, min_size=32, max_size=32), st.just("0" * 32)),
            st.one_of(st.text(_HEX, min_size=16, max_size=16), st.just("0" * 16)),
            st.one_of(st.text(_HEX, min_size=2, max_size=2), st.just("0")),
            st.sampled_from(["", "-", "-x", "x", " "]),
        ),
        st.text(max_size=80),
    )
)
def test_a_traceparent_is_read_as_the_sdks_propagator_reads_it(value: str) -> None:
    ours = _span_context(value.encode("utf-8", "surrogatepass"))
    theirs = get_current_span(TraceContextTextMapPropagator().extract({TRACEPARENT: value}))
    sdk = theirs.get_span_context()
    if not sdk.is_valid:
        assert ours is None
    else:
        assert ours is not None
        assert (ours.trace_id, ours.span_id, ours.trace_flags) == (
            sdk.trace_id,
            sdk.span_id,
            sdk.trace_flags,
        )


def test_the_callbacks_traceparent_is_the_one_the_sdks_propagator_writes(
    tracing: OtelTracing, spans: InMemorySpanExporter
) -> None:
    timer = Timer("t-1", NOW, "cb", None, b"v", headers=((TRACEPARENT, REQUEST_TRACEPARENT),))
    out, recorder = traced_output(tracing)
    out.callback(timer, partition=0, fired_at_ms=NOW * 1000)
    (fire,) = spans.get_finished_spans()
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(
        carrier, set_span_in_context(NonRecordingSpan(fire.context))
    )
    assert dict(recorder.headers[0])[TRACEPARENT] == carrier[TRACEPARENT].encode()
