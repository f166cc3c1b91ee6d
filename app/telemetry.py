"""The HTTP server every process runs for Prometheus: ``/metrics`` on ``METRICS_PORT``."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, start_http_server

__all__ = ["serve_metrics"]


def serve_metrics(port: int | None, registry: CollectorRegistry, addr: str = "0.0.0.0") -> None:
    """Serve ``/metrics`` on ``addr:port`` in a background thread (no-op when ``port`` is None)."""
    if port is not None:
        start_http_server(port, addr=addr, registry=registry)
