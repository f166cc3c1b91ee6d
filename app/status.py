"""The worker's status page and JSON endpoints, and ``kafka-timers status``.

(Placeholder until the observability work lands: registers nothing yet.)
"""

from __future__ import annotations

import argparse
from typing import Any

from app.errors import KafkaTimersError
from app.metrics import WorkerMetrics
from app.service import TimerService
from app.settings import Settings

__all__ = ["register_status_views", "status_main"]


def register_status_views(
    app: Any, service: TimerService, metrics: WorkerMetrics, settings: Settings
) -> None:
    """Add the status page and JSON endpoints to the worker's Faust web server."""


def status_main(settings: Settings, args: argparse.Namespace) -> int:
    """Print the status of running workers."""
    raise KafkaTimersError("status is not implemented yet")
