"""``/livez`` and ``/readyz`` on the worker's web port, beside the status page.

Both answer JSON: HTTP 200 when healthy or ready, 503 with a ``reason`` otherwise. The
rules are in :class:`app.worker.health.WorkerHealth`; this module only asks the service
for the one figure liveness needs, the oldest pending due second of each partition held
(one seek per partition: cheap enough for a probe every few seconds).

Both are answered by the worker's event loop, so a loop that is blocked (a stuck
callback) answers neither: a probe's timeout counts as a failure, as it should. The
changelog catch-up of a takeover runs in a thread and does not hold the loop: while it
runs, and while it is stalled and retried (a broker that does not let it reach the
end), ``/readyz`` answers 503 with the reason and ``/livez`` 200.
The same two are served on the metrics port too (:func:`probes_on_loop`), outside the
web port's connection cap: that is where the deployment's probes point.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import Any

from app.telemetry import HealthCheck, HealthReport
from app.worker.health import WorkerHealth
from app.worker.service import TimerService

__all__ = ["oldest_due_by_partition", "probes_on_loop", "register_health_views"]


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


#: Seconds a probe on the metrics port waits for the event loop to answer.
LOOP_ANSWER_SECONDS = 2.0


def probes_on_loop(
    loop: asyncio.AbstractEventLoop, health: WorkerHealth, service: TimerService
) -> dict[str, HealthCheck]:
    """``/livez`` and ``/readyz`` for the metrics port, answered by the event loop.

    The metrics port is served by a thread of its own, outside the web port's connection
    cap: a flood of connections to the web port refuses what is over its cap, probes
    included, and a probe refused is a failed probe (Kubernetes restarts a worker whose
    liveness probe fails). These ask the loop for the same answer the web port gives,
    and a loop that does not answer within :data:`LOOP_ANSWER_SECONDS` (blocked, or
    starved) fails the probe with that reason: a probe that cannot be starved, and that
    still sees a stuck loop.
    """

    def on_loop(compute: Callable[[], HealthReport]) -> HealthCheck:
        async def answer() -> HealthReport:
            return compute()

        def check() -> HealthReport:
            future = asyncio.run_coroutine_threadsafe(answer(), loop)
            try:
                return future.result(timeout=LOOP_ANSWER_SECONDS)
            except concurrent.futures.TimeoutError:
                future.cancel()
                return HealthReport(
                    False,
                    {"reason": f"the event loop did not answer within {LOOP_ANSWER_SECONDS:g} s"},
                )

        return check

    return {
        "/livez": on_loop(lambda: health.liveness(oldest_due_by_partition(service))),
        "/readyz": on_loop(lambda: health.readiness()),
    }
