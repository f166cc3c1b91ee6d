"""``/livez`` and ``/readyz`` on the worker's web port, beside the status page.

Both answer JSON: HTTP 200 when healthy or ready, 503 with a ``reason`` otherwise. The
rules are in :class:`app.worker.health.WorkerHealth`; this module only asks the service
for the one figure liveness needs, the oldest pending due second of each partition held
(one seek per partition: cheap enough for a probe every few seconds).

Both are answered by the worker's event loop, so a loop that is blocked (a stuck
callback, or the changelog catch-up, which blocks it on purpose while a partition is
taken over) answers neither: a probe's timeout counts as a failure, as it should.
"""

from __future__ import annotations

from typing import Any

from app.worker.health import WorkerHealth
from app.worker.service import TimerService

__all__ = ["oldest_due_by_partition", "register_health_views"]


def oldest_due_by_partition(service: TimerService) -> dict[int, int]:
    """The due second of the oldest pending timer of every loaded partition that has one."""
    oldest = {}
    for partition, wheel in service.wheels().items():
        first = next(wheel.iter_due(0), None)
        if first is not None:
            oldest[partition] = first[0]
    return oldest


def register_health_views(app: Any, health: WorkerHealth, service: TimerService) -> None:
    """Add ``/livez`` and ``/readyz`` to the worker's Faust web server."""

    async def livez(view: Any, request: Any) -> Any:
        report = health.liveness(oldest_due_by_partition(service))
        return view.json(report.body, status=200 if report.ok else 503)

    async def readyz(view: Any, request: Any) -> Any:
        report = health.readiness()
        return view.json(report.body, status=200 if report.ok else 503)

    app.page("/livez", name="kafka_timers_livez")(livez)
    app.page("/readyz", name="kafka_timers_readyz")(readyz)
