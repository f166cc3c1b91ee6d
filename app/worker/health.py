"""Whether a worker is ready for its partitions and alive: what ``/readyz`` and ``/livez`` say.

Kubernetes (or any orchestrator) asks two different questions:

- **ready** — may this worker be counted on for its partitions now? Only once it is in
  the consumer group, has recovered every assigned partition (our changelog catch-up,
  then Faust's recovery) and has applied the requests already waiting on them (the
  request reader's drain at assignment). A rebalance makes it not ready again until
  the same three steps are done for the new assignment.
- **alive** — should it be restarted? When it holds partitions with timers due more
  than :attr:`WorkerHealth.liveness_timeout` seconds ago and has not processed a tick
  for that long: its event loop or tick stream is stuck, or no tick reaches it. A
  worker that is still recovering or applying a backlog is making progress and is not
  judged (restarting it would only start that work over).

A recovery step that cannot finish (a changelog catch-up that never reaches the end of
its partitions: a broker that is away, or too slow for the fetch's wait) keeps the
worker in both answers' "not judged, not ready" state for as long as it lasts: it is
*stalled*, retried with backoff (:func:`app.worker.catch_up.catch_up_until_done`),
and ``/readyz`` gives the stall's reason. It stays alive through it: a restart would
find the same broker and start the same step over. :class:`RecoveryStalls` reports a
stall to this state and to the metrics (``kafka_timers_recovery_stalled``, the alert
``KafkaTimersRecoveryStalled``).

Every wait on the broker that could end a worker, and what happens to it :

- the changelog catch-up of a takeover, and of a store opened later: retried with
  backoff, as above (:mod:`app.worker.partition_store`);
- the start-up checks (partition count, topics described and created, metadata showing
  them) and, in exactly-once mode, the transactional producer's initialisation:
  retried with backoff, the worker alive and not ready on its metrics port
  (:mod:`app.worker.startup`, ``OutputProducer._init_transactions``); what the broker
  *refuses* there (a changelog not compacted, partition counts that differ, a fenced
  producer) stops it with one line: that needs an operator, and a restart loop would
  not help;
- the callback-topic lookup, the request group's lag and the request reader's
  committed offset: already retried at their next turn, never fatal;
- a flush or a commit that times out, a changelog record the broker refused
  (:class:`~app.worker.output.DeliveryFailure`): the worker stops, exit 70, on purpose.
  Its records may be half written, and only a restart that reads again what was not
  acknowledged is sure to leave nothing claimed done that is not; librdkafka itself
  keeps retrying each record until then (no local timeout in at-least-once mode:
  :func:`app.kafka.config.worker_output_producer`; in exactly-once mode 15 s, the
  transaction's);
- the read_committed switch in exactly-once mode: not a timeout (a Faust that keeps its
  fetcher elsewhere); it stops the worker, since reading uncommitted ticks is wrong;
- Faust's own recovery after the catch-up (its offset lookups and seeks, each bounded
  by ``broker_request_timeout``, 90 s): a wait that ran out ended it for good (the
  worker alive and never ready again, measured) and an aiokafka error crashed it; it is
  now started over with backoff (step ``faust_recovery``,
  :func:`app.worker.faust_internals.recovery._recovery_wait`);
- anything else that keeps a worker from being ready (the group join itself): not
  retried by the worker beyond what aiokafka does; ``kafka_timers_not_ready_seconds``
  and the alert ``KafkaTimersWorkerNotReady`` (5 minutes) say so.

The state is fed from the Faust hooks in :mod:`app.worker.faust_app` and the tick
agent; it knows nothing of Faust itself, so the rules are unit-tested with a fake clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import Enum
from typing import Any

from app.telemetry import HealthReport
from app.worker.metrics import WorkerMetrics

__all__ = ["CATCH_UP_STEP", "FAUST_RECOVERY_STEP", "Phase", "RecoveryStalls", "WorkerHealth"]

#: The ``step`` label of a stalled changelog catch-up.
CATCH_UP_STEP = "changelog_catch_up"
#: The ``step`` label of Faust's table recovery started over (app.worker.faust_internals.recovery).
FAUST_RECOVERY_STEP = "faust_recovery"


class Phase(str, Enum):
    """Where a worker is between joining the group and serving its partitions."""

    #: Not in the group yet, or a rebalance is under way (partitions revoked).
    JOINING = "joining"
    #: Partitions assigned; their tables are being brought up to the changelog's end.
    RECOVERING = "recovering"
    #: Tables recovered; the requests already waiting on new partitions are being applied.
    APPLYING = "applying"
    #: Every assigned partition recovered and caught up with its requests.
    READY = "ready"


class WorkerHealth:
    """Readiness phase and tick progress of one worker, with the rules that judge them."""

    def __init__(
        self,
        liveness_timeout: float,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        #: Seconds a due timer may wait with no tick processed before the worker is dead.
        self.liveness_timeout = liveness_timeout
        self._clock = clock
        self._monotonic = monotonic
        self._phase = Phase.JOINING
        self._partitions: tuple[int, ...] = ()
        self._phase_since = monotonic()
        #: Bumped on every phase change, so a slow step that finishes after a newer
        #: rebalance began cannot mark the worker ready for an assignment it lost.
        self._generation = 0
        self._last_tick: float | None = None
        self._ready_since: float | None = None
        #: When the worker was last ready (monotonic), or started: for ``not_ready_for``.
        self._last_ready = monotonic()
        #: Recovery steps stalled now, by step: their reason (see :meth:`stalled`).
        self._stalls: dict[str, str] = {}

    # -- fed by the Faust hooks ----------------------------------------------------

    def _enter(self, phase: Phase, partitions: Iterable[int] = ()) -> int:
        self._leaving_ready()
        self._phase = phase
        self._partitions = tuple(sorted(set(partitions)))
        self._phase_since = self._monotonic()
        self._generation += 1
        return self._generation

    def rebalancing(self) -> None:
        """Partitions revoked: a rebalance began, whatever was ready no longer is."""
        self._enter(Phase.JOINING)

    def recovering(self, partitions: Iterable[int]) -> None:
        """``partitions`` assigned; their tables are being recovered."""
        self._enter(Phase.RECOVERING, partitions)

    def applying(self, partitions: Iterable[int]) -> int:
        """Tables recovered; waiting requests of ``partitions`` being applied.

        Returns a token for :meth:`ready`.
        """
        return self._enter(Phase.APPLYING, partitions)

    def ready(self, token: int, partitions: Iterable[int]) -> None:
        """The step begun with ``token`` finished: ready, unless a rebalance came since."""
        if token != self._generation:
            return
        self._enter(Phase.READY, partitions)
        self._ready_since = self._monotonic()

    def ticked(self) -> None:
        """A batch of ticks was processed (whether or not anything was due)."""
        self._last_tick = self._monotonic()

    def stalled(self, step: str, reason: str) -> None:
        """Recovery step ``step`` could not finish and is being retried: not ready, with
        ``reason``, until :meth:`resumed`. May be called from another thread."""
        self._leaving_ready()
        self._stalls = {**self._stalls, step: reason}

    def resumed(self, step: str) -> None:
        """Step ``step`` is no longer stalled (it completed, or gave up as the worker stops)."""
        self._stalls = {k: v for k, v in self._stalls.items() if k != step}

    @property
    def is_ready(self) -> bool:
        return self._phase is Phase.READY and not self._stalls

    def not_ready_for(self) -> float:
        """Seconds since the worker was last ready (since it started, if never); 0 if ready.

        Read by the metrics thread (``kafka_timers_not_ready_seconds``).
        """
        if self.is_ready:
            return 0.0
        return max(0.0, self._monotonic() - self._last_ready)

    def _leaving_ready(self) -> None:
        if self.is_ready:
            self._last_ready = self._monotonic()

    # -- judged by the endpoints ---------------------------------------------------

    @property
    def phase(self) -> Phase:
        return self._phase

    def readiness(self) -> HealthReport:
        """``/readyz``: ready only in :attr:`Phase.READY`; otherwise the reason."""
        held = list(self._partitions)
        stalls = self._stalls
        ready = self._phase is Phase.READY and not stalls
        body: dict[str, Any] = {
            "ready": ready,
            "phase": self._phase.value,
            "partitions": held,
            "for_seconds": round(self._monotonic() - self._phase_since, 3),
        }
        if self._phase is Phase.RECOVERING:
            body["reason"] = f"recovering partitions {held}"
        elif self._phase is Phase.APPLYING:
            body["reason"] = f"applying waiting requests of partitions {held}"
        elif self._phase is Phase.JOINING:
            body["reason"] = "joining the consumer group"
        if stalls:
            body["stalled"] = dict(stalls)
            why = "; ".join(f"{step} stalled: {reason}" for step, reason in stalls.items())
            body["reason"] = f"{body['reason']}: {why}" if "reason" in body else why
        return HealthReport(ready, body)

    def liveness(self, oldest_due: Mapping[int, int]) -> HealthReport:
        """``/livez`` given the oldest pending due second of each held partition.

        Unhealthy only when both hold: a timer has been due for more than the timeout,
        and no tick was processed for more than the timeout (counted from when the
        worker last became ready, so a fresh assignment gets the full timeout to hear
        its first tick).
        """
        now, mono = self._clock(), self._monotonic()
        since = max(
            (t for t in (self._last_tick, self._ready_since) if t is not None), default=None
        )
        quiet = None if since is None else mono - since
        body: dict[str, Any] = {
            "alive": True,
            "phase": self._phase.value,
            "seconds_since_tick": None
            if self._last_tick is None
            else round(mono - self._last_tick, 3),
            "timeout_seconds": self.liveness_timeout,
        }
        if self._phase is not Phase.READY:
            body["note"] = f"{self._phase.value}: making progress, liveness not judged"
            return HealthReport(True, body)
        if self._stalls:
            # Retrying with backoff is the worker doing what it can: a restart would
            # find the same broker and start the same step over.
            body["note"] = f"stalled {sorted(self._stalls)}, retrying: liveness not judged"
            return HealthReport(True, body)
        overdue = {p: due for p, due in oldest_due.items() if now - due > self.liveness_timeout}
        if overdue:
            body["oldest_overdue_seconds"] = round(now - min(overdue.values()), 3)
        if overdue and quiet is not None and quiet > self.liveness_timeout:
            body["alive"] = False
            body["reason"] = (
                f"no tick processed for {quiet:.0f} s while timers due over "
                f"{self.liveness_timeout:g} s ago wait on partitions {sorted(overdue)}"
            )
            return HealthReport(False, body)
        return HealthReport(True, body)


class RecoveryStalls:
    """A stalled catch-up, told to readiness and to the metrics
    (a :class:`~app.worker.catch_up.CatchUpReport`; called from its thread).

    ``kafka_timers_recovery_stalled{step}`` is 1 from the first failed attempt until the
    step completes; ``kafka_timers_recovery_retries_total{step}`` counts the attempts
    that failed. Several catch-ups may stall at once (the assignment's, and a store
    opened meanwhile): the step stays stalled until the last of them completes.
    """

    def __init__(self, health: WorkerHealth, metrics: WorkerMetrics, step: str = CATCH_UP_STEP):
        self._health = health
        self._metrics = metrics
        self._step = step
        self._stalled: dict[tuple[int, ...], str] = {}

    def stalled(
        self, partitions: Sequence[int], reason: str, attempt: int, retry_in: float
    ) -> None:
        self._stalled = {
            **self._stalled,
            tuple(partitions): (
                (f"partitions {list(partitions)}, " if partitions else "")
                + f"attempt {attempt}: {reason}; retrying in {retry_in:.1f} s"
            ),
        }
        self._metrics.recovery_retries.labels(step=self._step).inc()
        self._publish()

    def resumed(self, partitions: Sequence[int]) -> None:
        self._stalled = {k: v for k, v in self._stalled.items() if k != tuple(partitions)}
        self._publish()

    def _publish(self) -> None:
        stalled = self._stalled
        self._metrics.recovery_stalled.labels(step=self._step).set(1 if stalled else 0)
        if stalled:
            self._health.stalled(self._step, "; ".join(stalled.values()))
        else:
            self._health.resumed(self._step)
