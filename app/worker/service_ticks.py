"""Ticks: fire, on each partition, everything due up to a tick's second.

A tick whose second this worker's clock has not reached yet is held
(:class:`~app.core.tick_gate.TickGate`) and released as the clock reaches it
(:meth:`TickJob.run_tick_release`). A partition fires nothing while the group may have
given it away (:mod:`app.worker.group_lease`) or while it re-reads the requests it
applied before a crash (:attr:`app.worker.service_state.LoadedPartition.rereading`). The
round itself is :mod:`app.worker.service_firing`'s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from app.core.timer import Timer
from app.worker.service_firing import FAIR_TURN, FiringJob
from app.worker.service_state import LoadedPartition

__all__ = ["RELEASE_SLACK", "TickJob"]

log = logging.getLogger(__name__)

#: Added to each sleep of the release loop, so it wakes just past the second boundary.
RELEASE_SLACK = 0.001


class TickJob(FiringJob):
    """Admit ticks, hold those from ahead of this worker's clock, fire the rest."""

    async def handle_ticks(self, ticks: Sequence[tuple[int, int, float | None, str]]) -> int:
        """Fire everything due up to each tick's second on its partition; return how many.

        ``ticks`` are ``(partition, second, sent, source)``; ``sent`` (the oscillator's
        clock when it sent the tick, epoch s: the record timestamp for ticks that do not
        say) and ``source`` (the oscillator) feed the clock checks. A tick whose second
        this worker's clock has not reached yet is held
        (:class:`~app.core.tick_gate.TickGate`): only the seconds both clocks agree on
        fire now, and :meth:`run_tick_release` fires the rest as this worker's clock
        reaches them. Partitions are independent, so their callbacks can share a flush:
        with one flush per partition, a worker's fourth partition waited for three round
        trips before its own began (measured: ~25 ms each, so its callbacks left ~110 ms
        after the second). Only the newest tick per partition counts: it covers every
        second before it. In exactly-once mode each
        tick is its own transaction instead.
        """
        arrived = self._clock()
        for _, second, stamp, source in ticks:
            if stamp:
                self._skew.observe(source, stamp)
            self._lead.observe(source, second, arrived)
        async with self._tick_lock:
            now = self._clock()
            accepted = []
            for partition, second, _, source in ticks:
                admitted, held = self._gate.admit(partition, second, now)
                if held:
                    self._metrics.ticks_held.labels(source=source).inc()
                accepted.append((partition, admitted))
            if self._gate.holding:
                self._holding.set()
            return await self._fire_accepted(accepted)

    async def release_held_ticks(self) -> int:
        """Fire, on every partition holding a tick, up to what this worker's clock allows."""
        async with self._tick_lock:
            released = self._gate.release(self._clock())
            return await self._fire_accepted(list(released.items())) if released else 0

    async def run_tick_release(
        self, sleep: Callable[[float], Awaitable[object]] = asyncio.sleep
    ) -> None:
        """Release held ticks at each of this worker's second boundaries; run forever.

        Sleeps on an event while nothing is held. The boundary is read from this worker's
        wall clock on every round, so a clock that is stepped (NTP) is followed; waking a
        little early only costs a round that releases nothing.
        """
        while True:
            if not self._gate.holding:
                self._holding.clear()
                await self._holding.wait()
                continue
            await sleep(self._gate.seconds_to_next_release(self._clock()) + RELEASE_SLACK)
            await self.release_held_ticks()

    def held_ticks(self) -> dict[int, int]:
        """The held tick second of each partition that has one (for status)."""
        return self._gate.held()

    def oscillator_leads(self) -> dict[str, float]:
        """How far each oscillator heard from recently runs ahead of this worker's clock."""
        return self._lead.leads()

    async def _fire_accepted(self, accepted: Sequence[tuple[int, int]]) -> int:
        """Fire ``(partition, second)`` pairs this worker's clock has accepted, unless the
        group may have given its partitions away (:mod:`app.worker.group_lease`)."""
        if self._lease is not None and not self._lease.held():
            self._metrics.ticks_unowned.inc(len(accepted))
            log.warning(
                "no heartbeat answered for %.0f s past the session timeout: not firing "
                "until the broker confirms this worker still owns its partitions",
                self._lease.lapsed_for(),
            )
            return 0
        if self._output.transactional:
            fired = 0
            for partition, second in accepted:
                fired += await self._tick_in_transaction(partition, second)
            return fired
        newest: dict[int, int] = {}
        for partition, second in accepted:
            newest[partition] = max(second, newest.get(partition, second))
        return await self._fire_at_least_once(newest)

    async def _fire_at_least_once(self, newest: dict[int, int]) -> int:
        """Deliver the callbacks of every partition's tick with one flush, then forget the
        timers: a crash in between fires them again."""
        due: list[tuple[int, LoadedPartition, int, list[Timer]]] = []
        gated = self.gates.gated
        for partition, second in newest.items():
            part = await self._partition(partition)
            if part.rereading:
                continue  # a later tick fires it all (LoadedPartition.rereading)
            # A burst is decoded as it is produced (_fire_partitions): its first turn now.
            timers = part.wheel.begin_tick(
                second, hold=gated, since=self._clock(), decode_first=FAIR_TURN
            )
            if timers is not None:
                if gated or part.wheel.holding:  # one check per round without limits
                    timers = self._through_gates(partition, part.wheel, timers)
                due.append((partition, part, second, timers))
        await self._look_up_topics(
            (timer for _, _, _, timers in due for timer in timers),
            (topic for _, part, _, _ in due for topic in part.wheel.undecoded_topics),
        )
        due = [(p, part, second, part.wheel.still_due(timers)) for p, part, second, timers in due]
        fired = self._fire_partitions(
            [(p, second, timers, part.wheel) for p, part, second, timers in due]
        )
        began = [
            (partition, part, second, timers, into)
            for (partition, part, second, timers), into in zip(due, fired, strict=True)
        ]
        count = await self._deliver_then_forget(began)
        if gated or self._backlog_topics:
            self._export_backlog()
        return count

    async def _tick_in_transaction(self, partition: int, second: int) -> int:
        """One tick as one transaction; 0 if aborted (the next tick retries it)."""
        async with self._unit_lock:
            part = await self._partition(partition)
            timers = part.wheel.begin_tick(second, hold=self.gates.gated, since=self._clock())
            if timers is None:
                return 0
            if self.gates.gated or part.wheel.holding:
                timers = self._through_gates(partition, part.wheel, timers)
            await self._look_up_topics(timers)
            timers = part.wheel.still_due(timers)
            fired = await self._fire_in_transaction(partition, part, second, timers)
            if fired is None:
                return 0
        self._ticked(partition, part, second, timers, fired)
        if timers:
            self._commits.record_persisted()
        return len(fired.delivered)
