"""The schedule and fire spans, on the OpenTelemetry SDK (imported only when tracing is on).

See :mod:`app.worker.tracing` for when each span is recorded and why the fire span is
linked to, not a child of, the request's trace. Spans are ended as soon as they are
started: the worker's work on one request or one callback is microseconds, and what a
trace viewer needs is where it sits between the producer's and the receiver's spans.
Export is batched (the SDK's ``BatchSpanProcessor``, tuned by its own ``OTEL_BSP_*``
variables) and happens off the event loop, in the SDK's thread.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    TraceFlags,
    Tracer,
)

from app.core.raw_record import RawRecord
from app.core.timer import Header, Timer

__all__ = ["FIRE_SPAN", "SCHEDULE_SPAN", "TRACEPARENT", "OtelTracing", "otlp_tracing"]

#: The W3C trace context header (the same name on Kafka records as over HTTP).
TRACEPARENT = "traceparent"

SCHEDULE_SPAN = "kafka-timers schedule"
FIRE_SPAN = "kafka-timers fire"
_TRACEPARENT_FORMAT = re.compile(
    rb"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?", re.DOTALL
)


def _carried(headers: tuple[Header, ...]) -> bytes | None:
    return next((value for name, value in headers if name == TRACEPARENT), None)


def _span_context(traceparent: bytes | None) -> SpanContext | None:
    """The remote span ``traceparent`` names, or None if it is absent or not valid.

    Read by hand, with the rules of the SDK's ``TraceContextTextMapPropagator`` (version
    ``ff`` and all-zero ids refused, version 00 exactly four fields, a later version may
    add fields): the propagator's extract, and the context it builds, were a third of a
    fire span's cost.
    """
    if not traceparent:
        return None
    match = _TRACEPARENT_FORMAT.fullmatch(traceparent.strip(b" \t"))
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == b"ff" or (version == b"00" and rest):
        return None
    trace_int, span_int = int(trace_id, 16), int(span_id, 16)
    if not trace_int or not span_int:
        return None
    return SpanContext(trace_int, span_int, is_remote=True, trace_flags=TraceFlags(int(flags, 16)))


def _context(traceparent: bytes | None) -> Context | None:
    span = _span_context(traceparent)
    return None if span is None else trace.set_span_in_context(NonRecordingSpan(span))


class OtelTracing:
    """Records the worker's spans through ``tracer`` (see :class:`app.worker.tracing.Tracing`)."""

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer

    def scheduled(self, record: RawRecord, timer: Timer) -> Timer:
        """The schedule span, a child of the request's trace; the timer with the record's
        ``traceparent`` header kept among its headers (replacing one the request's own
        headers named: the record's is the producer's context)."""
        on_record = record.header(TRACEPARENT)
        valid_on_record = _context(on_record)
        parent = valid_on_record or _context(_carried(timer.headers))
        span = self._tracer.start_span(
            SCHEDULE_SPAN,
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": "kafka",
                "messaging.operation.type": "process",
                "messaging.destination.name": record.topic,
                "messaging.destination.partition.id": str(record.partition),
                "messaging.kafka.offset": record.offset,
                "kafka_timers.timer.id": timer.id,
                "kafka_timers.timer.due": timer.due,
                "kafka_timers.callback.topic": timer.topic,
            },
        )
        span.end()
        if valid_on_record is None or on_record is None:
            return timer
        kept = tuple(h for h in timer.headers if h[0] != TRACEPARENT)
        return replace(timer, headers=(*kept, (TRACEPARENT, on_record)))

    def fired(self, timer: Timer, headers: list[tuple[str, Any]], partition: int) -> None:
        """The fire span, linked to the request's trace; the callback's ``traceparent``
        (in ``headers``, in place) becomes the fire span's."""
        request = _span_context(_carried(timer.headers))
        attributes: dict[str, Any] = {
            "messaging.system": "kafka",
            "messaging.operation.type": "send",
            "messaging.destination.name": timer.topic,
            "kafka_timers.timer.id": timer.id,
            "kafka_timers.timer.due": timer.due,
            "kafka_timers.request.partition": partition,
        }
        if timer.seq:
            attributes["kafka_timers.timer.seq"] = timer.seq
        span = self._tracer.start_span(
            FIRE_SPAN,
            context=Context(),  # a root: never a child of whatever is current
            kind=SpanKind.PRODUCER,
            links=[Link(request)] if request is not None else None,
            attributes=attributes,
        )
        ctx = span.get_span_context()
        value = b"00-%032x-%016x-%02x" % (ctx.trace_id, ctx.span_id, ctx.trace_flags)
        headers[:] = [h for h in headers if h[0] != TRACEPARENT]
        headers.append((TRACEPARENT, value))
        span.end()


def otlp_tracing(endpoint: str, worker_id: str) -> OtelTracing:
    """Tracing that exports over OTLP/HTTP to ``<endpoint>/v1/traces`` in batches.

    The provider shuts down (exporting what is left) when the process exits.
    """
    resource = Resource.create(
        {"service.name": "kafka-timers-worker", "service.instance.id": worker_id}
    )
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces"))
    )
    return OtelTracing(provider.get_tracer("kafka-timers"))
