"""The HTTP server every process runs for Prometheus: ``/metrics`` on ``METRICS_PORT``.

prometheus-client's own server answers every path with the metrics, so it cannot carry
a health endpoint. This one serves ``/metrics`` (and ``/``, as before) plus any health
checks the process registers, e.g. the oscillator's ``/livez``: each check answers
HTTP 200 or 503 with a JSON body that says why.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["HealthCheck", "HealthReport", "MetricsServer", "serve_metrics"]


class HealthReport(NamedTuple):
    """One health check's answer."""

    #: True: HTTP 200. False: HTTP 503.
    ok: bool
    #: The JSON body: what was checked, and when not ok, a ``reason``.
    body: dict[str, Any]


HealthCheck = Callable[[], HealthReport]


class MetricsServer:
    """``/metrics`` from ``registry`` and the ``checks`` by path, in a daemon thread."""

    def __init__(
        self,
        port: int,
        registry: CollectorRegistry,
        checks: Mapping[str, HealthCheck] | None = None,
        addr: str = "0.0.0.0",
    ) -> None:
        routes = dict(checks or {})

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path in ("/metrics", "/"):
                    self._send(200, CONTENT_TYPE_LATEST, generate_latest(registry))
                elif path in routes:
                    try:
                        report = routes[path]()
                    except Exception as exc:  # a check that fails is an answer, not a crash
                        report = HealthReport(False, {"reason": f"check failed: {exc!r}"})
                    body = json.dumps(report.body).encode()
                    self._send(200 if report.ok else 503, "application/json", body)
                else:
                    self._send(404, "text/plain", b"not found\n")

            def _send(self, status: int, kind: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # a probe every few seconds is not worth a log line

        self._server = ThreadingHTTPServer((addr, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-http", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def serve_metrics(
    port: int | None,
    registry: CollectorRegistry,
    checks: Mapping[str, HealthCheck] | None = None,
    addr: str = "0.0.0.0",
) -> MetricsServer | None:
    """Serve ``/metrics`` (and ``checks``) on ``port``; no-op when ``port`` is None."""
    if port is None:
        return None
    return MetricsServer(port, registry, checks, addr).start()
