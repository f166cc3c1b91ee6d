"""A worker's start: what it asks the broker before Faust starts, retried until it answers.

Before it can build anything a worker asks the broker for its topics (how many
partitions, whether each exists and is configured as the service needs), creates the
missing ones, and waits for them to show in the metadata. Each is a request with a
timeout. A broker that does not answer in time (away, restarting, slow) used to stop the
worker with one line and exit status 2: under a supervisor that restarts with growing
delays (Kubernetes' CrashLoopBackOff waits up to 5 minutes), so a worker came back long
after its broker did, and every restart started over.

Now :func:`until_broker_answers` retries such a step with bounded exponential backoff
(1 s doubling to 30 s, jittered) for as long as the broker does not answer, and the
worker stays up and not ready meanwhile: :class:`StartupProbe` serves ``/livez`` (200),
``/readyz`` (503, with the step and the error) and ``/metrics``
(``kafka_timers_recovery_stalled{step="startup"}`` 1, ``kafka_timers_not_ready_seconds``)
on the metrics port until the worker's own server takes the port over. What the broker
*refuses* is not retried: a changelog that is not compacted, partition counts that
differ, a topic it will not create (:class:`~kafka_timers_client.errors.ConfigurationError`) stop
the worker with one line, as before; an operator must fix those, and a restart loop
would not.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge

from app.core.backoff import Backoff
from app.telemetry import HealthReport, MetricsServer, serve_metrics
from kafka_timers_client.errors import BrokerUnavailable

__all__ = ["STARTUP_BACKOFF", "STARTUP_STEP", "StartupProbe", "until_broker_answers"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The ``step`` label of a start-up that waits for the broker.
STARTUP_STEP = "startup"

#: Between two attempts of a start-up step: 1 s, doubling, at most 30 s, less up to a
#: fifth at random.
STARTUP_BACKOFF = Backoff(initial=1.0, maximum=30.0, factor=2.0, jitter=0.2)


class StartupProbe:
    """``/livez``, ``/readyz`` and ``/metrics`` on the metrics port while the worker starts.

    Without a metrics port it only keeps the state (nothing to serve). :meth:`close`
    frees the port for the worker's own server.
    """

    def __init__(
        self,
        port: int | None,
        addr: str = "0.0.0.0",
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._monotonic = monotonic
        self._since = monotonic()
        self._reason = "starting: asking the broker for the service's topics"
        self.registry = CollectorRegistry()
        self.stalled = Gauge(
            "kafka_timers_recovery_stalled",
            "1 while a recovery step of this worker could not finish and is being retried "
            "with backoff (step startup: the broker does not answer the worker's start-up "
            "checks); 0 otherwise.",
            ["step"],
            registry=self.registry,
        )
        self.retries = Counter(
            "kafka_timers_recovery_retries",
            "Attempts of a recovery step that did not complete and were retried, by step.",
            ["step"],
            registry=self.registry,
        )
        self.stalled.labels(step=STARTUP_STEP).set(0)
        self.retries.labels(step=STARTUP_STEP)
        not_ready = Gauge(
            "kafka_timers_not_ready_seconds",
            "Seconds since this worker was last ready (/readyz), since it started if never; "
            "0 while ready.",
            registry=self.registry,
        )
        not_ready.set_function(lambda: self._monotonic() - self._since)
        self._server: MetricsServer | None = serve_metrics(
            port,
            self.registry,
            checks={"/livez": self._livez, "/readyz": self._readyz},
            addr=addr,
        )

    def waiting(self, reason: str) -> None:
        """A step failed and will be retried: not ready, with ``reason``."""
        self._reason = reason
        self.stalled.labels(step=STARTUP_STEP).set(1)
        self.retries.labels(step=STARTUP_STEP).inc()

    def answered(self) -> None:
        """The broker answered the step: no longer stalled (still starting)."""
        self._reason = "starting: building the worker"
        self.stalled.labels(step=STARTUP_STEP).set(0)

    def _body(self) -> dict[str, Any]:
        return {
            "phase": "starting",
            "for_seconds": round(self._monotonic() - self._since, 3),
        }

    def _livez(self) -> HealthReport:
        return HealthReport(True, {"alive": True, **self._body(), "note": "starting"})

    def _readyz(self) -> HealthReport:
        return HealthReport(False, {"ready": False, **self._body(), "reason": self._reason})

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None


def until_broker_answers(
    what: str,
    step: Callable[[], T],
    probe: StartupProbe | None = None,
    *,
    backoff: Backoff = STARTUP_BACKOFF,
    sleep: Callable[[float], None] = time.sleep,
    rand: Callable[[], float] = random.random,
) -> T:
    """``step()``, tried again with ``backoff`` for as long as it raises
    :class:`BrokerUnavailable`; anything else it raises goes through.

    One log line per failed attempt: with the backoff at most two a minute.
    """
    attempt = 1
    while True:
        try:
            result = step()
        except BrokerUnavailable as exc:
            delay = backoff.delay(attempt, rand)
            error = " ".join(str(exc).split())
            log.warning(
                "%s: the broker did not answer (%s); the worker stays up and not ready, "
                "and tries again in %.1f s (attempt %d)",
                what,
                error,
                delay,
                attempt,
            )
            if probe is not None:
                probe.waiting(
                    f"starting: {what}: the broker did not answer ({error}); attempt "
                    f"{attempt}, retrying in {delay:.1f} s"
                )
            sleep(delay)
            attempt += 1
            continue
        if attempt > 1:
            log.warning("%s: the broker answered, after %d attempts", what, attempt)
        if probe is not None:
            probe.answered()
        return result
