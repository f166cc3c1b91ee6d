"""Patches of Faust's table recovery: the catch-up first, where it ends, starting it over."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiokafka.errors
import faust
from faust.tables.recovery import RebalanceAgain, Recovery, ServiceStopped

__all__ = ["before_table_recovery", "recovery_start_offsets", "watch_recovery"]


log = logging.getLogger(__name__)


#: Told when Faust's recovery gives up a wait and is started over (see
#: :func:`_recovery_wait`): ``stalled((), reason, attempt, retry_in)``, ``resumed(())``
#: (an :class:`app.worker.health.RecoveryStalls`).
_RECOVERY_REPORT: list[Any] = []


#: Between two starts of a Faust recovery that gave up a wait: 1 s doubling to 30 s.
_RECOVERY_BACKOFF = (1.0, 30.0)


def watch_recovery(report: Any) -> None:
    """Tell ``report`` (an :class:`app.worker.health.RecoveryStalls`) whenever Faust's
    recovery gives up a wait and is started over, and when it then completes a wait;
    ``None`` stops it."""
    _RECOVERY_REPORT.clear()
    if report is not None:
        _RECOVERY_REPORT.append(report)


async def _recovery_wait(self: Any, coro: Any, timeout: Any = None) -> None:
    """Faust's ``Recovery._wait``, starting the recovery over instead of ending it.

    Faust bounds each broker request of its recovery (the changelog's end and start
    offsets, the seeks) with ``broker_request_timeout`` (90 s). A wait that runs out
    looks to it like the service stopping: the recovery task ends for good, and the
    worker stays alive, never ready, for ever, also after the broker is back. An aiokafka
    error (a refused connection) crashes the task instead, and the worker with it. Here
    either one, while the service is not stopping, starts the recovery over from the top
    after a backoff (1 s doubling to 30 s), the way Faust does for a new rebalance; the
    worker stays not ready meanwhile and the report says why.
    """
    signal = self.signal_recovery_start
    try:
        wait_result = await self.wait_first(coro, signal, timeout=timeout)
    except aiokafka.errors.KafkaError as exc:
        if self.should_stop:
            raise
        await _recover_again(self, f"{type(exc).__name__}: {exc}")
        raise AssertionError("unreachable") from None  # pragma: no cover
    if wait_result.stopped:
        if self.should_stop:
            raise ServiceStopped()
        await _recover_again(self, f"a broker request got no answer within {timeout} s")
    elif signal in wait_result.done:
        raise RebalanceAgain()
    # A broker request answered (the waits with a timeout): the stall is over. The
    # recovery's own pause before it starts (no timeout) proves nothing.
    attempt = getattr(self, "_kafka_timers_attempt", 0)
    if attempt and timeout is not None:
        self._kafka_timers_attempt = 0
        for report in _RECOVERY_REPORT:
            report.resumed(())


async def _recover_again(self: Any, reason: str) -> None:
    attempt = getattr(self, "_kafka_timers_attempt", 0) + 1
    self._kafka_timers_attempt = attempt
    initial, maximum = _RECOVERY_BACKOFF
    delay = min(maximum, initial * 2 ** min(attempt - 1, 16))
    log.warning(
        "Faust's table recovery did not complete (%s): starting it over in %.0f s "
        "(attempt %d); the worker stays up and not ready",
        reason,
        delay,
        attempt,
    )
    for report in _RECOVERY_REPORT:
        report.stalled((), reason, attempt, delay)
    await asyncio.sleep(delay)
    self.signal_recovery_start.set()
    raise RebalanceAgain()


#: The original ``Recovery._build_highwaters`` (taken at import, before any patch).
_FAUST_BUILD_HIGHWATERS = Recovery._build_highwaters


async def _recovery_targets(
    self: Any, consumer: Any, tps: Any, destination: Any, title: str
) -> None:
    """Faust's ``Recovery._build_highwaters``, with the worker's own catch-up as the target
    of every changelog partition it recovers itself.

    Faust takes "high watermark - 1" as the offset its recovery must see an event at
    before a table partition is ready. On a log written by transactions the last
    offsets are commit or abort markers, control records no consumer ever receives: the
    event never comes and the worker waits, never ready, for ever (every takeover and
    restart in exactly-once mode on Apache Kafka). An aborted transaction, or one still
    open (whose end is the last stable offset under read_committed), does the same.
    The worker's catch-up (:func:`before_table_recovery`) has read those partitions to
    the position a consumer reaches at the end, markers included, and left that
    position less one as the store's persisted offset: that offset is the target here,
    so Faust has nothing left to replay. What a zombie producer appends after the
    catch-up is read by the next catch-up when the worker opens the partition's store.
    """
    await _FAUST_BUILD_HIGHWATERS(self, consumer, tps, destination, title)
    own = getattr(self, "_kafka_timers_own_recovery", None)
    if not own:
        return
    for tp in tps:
        if tp.topic not in own:
            continue
        table = self.tp_to_table.get(tp)
        persisted = None if table is None else table.persisted_offset(tp)
        target = -1 if persisted is None else persisted
        if destination.get(tp) != target:
            log.info(
                "recovery of %s[%d]: the worker's catch-up reached offset %d; Faust's "
                "end (high watermark - 1) is %s, past control records or records "
                "written since: recovery ends at the catch-up",
                tp.topic,
                tp.partition,
                target,
                destination.get(tp),
            )
        destination[tp] = target


def recovery_start_offsets(app: faust.App) -> dict[Any, int] | None:
    """Where Faust's table recovery will start reading each changelog partition.

    The mapping is live: changing an entry moves recovery's start. ``None`` if this
    Faust keeps it elsewhere (recovery then replays what the worker already applied:
    slower, not wrong).
    """
    tables: Any = app.tables
    starts: dict[Any, int] | None = getattr(tables.recovery, "active_offsets", None)
    return starts


def before_table_recovery(
    app: faust.App,
    hook: Callable[[set[Any]], Awaitable[None]],
    caught_up_topics: frozenset[str],
) -> None:
    """Run ``hook(assigned)`` on every assignment before Faust's table recovery is told of it.

    ``hook`` brings the changelog partitions of ``caught_up_topics`` to their end itself:
    Faust's recovery of them then ends where the hook ended (:func:`_recovery_targets`),
    never waiting for an offset that only a control record holds.

    Faust's ``TableManager.on_rebalance`` hands the assignment to its recovery, which
    reads each store's persisted offset there and signals its recovery task to start;
    the task runs as soon as the event loop gets a turn. The worker's own changelog
    catch-up must come first (the recovery would otherwise replay the changelog into
    the stores at the same time, from older offsets, and could leave a key at an older
    value), and must not hold the event loop while it runs (``/livez``, ``/readyz`` and
    the metrics answer on it). Awaited here, before the original, it is both: the
    recovery task stays asleep until the hook returns, and then starts from the offsets
    the catch-up reached.
    """
    tables: Any = app.tables
    original = tables.on_rebalance

    async def on_rebalance(
        assigned: set[Any], revoked: set[Any], newly_assigned: set[Any], generation_id: int = 0
    ) -> None:
        await hook(assigned)
        # Faust's recovery of these topics ends where the hook's catch-up ended
        # (_recovery_targets): the hook, not Faust, decides what "caught up" means.
        tables.recovery._kafka_timers_own_recovery = caught_up_topics
        await original(assigned, revoked, newly_assigned, generation_id)

    tables.on_rebalance = on_rebalance
