"""Whether the worker traces, and the two calls it makes when it does: schedule and fire.

Tracing is on only when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set
(:attr:`app.settings.Settings.otlp_endpoint`). Off, :func:`tracing_for` returns ``None``
and the worker's hot paths test one attribute against ``None`` per request and per
callback: no span objects, and OpenTelemetry is never imported (it is an optional
dependency, ``kafka-timers[tracing]``). On, :mod:`app.worker.otel_spans` records:

* a **schedule** span (kind ``CONSUMER``) when the worker reads a valid timer request, a
  child of the request's W3C trace context (its ``traceparent`` record header, or one in
  the request's own headers); the record header's ``traceparent`` is then stored with the
  timer, among the headers its callback will carry;
* a **fire** span (kind ``PRODUCER``) when the callback is produced: the root of a trace
  of its own, *linked* to the request's trace context (a timer may fire years after its
  request: the request's trace is long closed, as OpenTelemetry's messaging conventions
  say of deferred processing), and the callback's ``traceparent`` is the fire span's,
  replacing the request's, so the receiver's spans continue the fire's trace.

This module imports nothing of OpenTelemetry; only :func:`tracing_for` does, when on.
"""

from __future__ import annotations

from typing import Any, Protocol

from app.core.raw_record import RawRecord
from app.core.timer import Timer
from app.settings import Settings
from kafka_timers_client.errors import ConfigurationError

__all__ = ["Tracing", "tracing_for"]


class Tracing(Protocol):
    """What the worker calls when tracing is on (:class:`app.worker.otel_spans.OtelTracing`)."""

    def scheduled(self, record: RawRecord, timer: Timer) -> Timer:
        """Record the schedule span of ``timer``, read from ``record``; return the timer
        to store: with the record's ``traceparent`` among its headers."""
        ...

    def fired(self, timer: Timer, headers: list[tuple[str, Any]], partition: int) -> None:
        """Record the fire span of ``timer``, whose callback is about to be produced
        with ``headers``: its ``traceparent`` becomes the fire span's (in place)."""
        ...


def tracing_for(settings: Settings) -> Tracing | None:
    """The worker's tracing: ``None`` (off) unless an OTLP endpoint is configured.

    Raises :class:`ConfigurationError` if it is and OpenTelemetry is not installed.
    """
    if settings.otlp_endpoint is None:
        return None
    try:
        from app.worker.otel_spans import otlp_tracing  # optional: imported only when on
    except ImportError as exc:
        raise ConfigurationError(
            f"OTEL_EXPORTER_OTLP_ENDPOINT is set but OpenTelemetry is not installed ({exc}): "
            "pip install 'kafka-timers[tracing]', or unset it"
        ) from exc
    return otlp_tracing(settings.otlp_endpoint, settings.worker_id)
