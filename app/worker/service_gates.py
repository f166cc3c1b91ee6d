"""Gates: rate limits and pauses per callback topic, the release rounds between ticks,
and the forgetting of what those rounds delivered.

Timers of a gated topic are held in their wheel (pending, in the store) and go out as
the partition's bucket allows (:mod:`app.worker.topic_gates`): in the tick rounds
(:meth:`GateJob._through_gates`) and in the release rounds between ticks
(:meth:`GateJob.run_gated_release`). Held timers delivered in at-least-once mode are
forgotten in the spare time between rounds (:meth:`GateJob.forget_behind`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from app.core.timer import Timer
from app.core.wheel import PartitionWheel
from app.worker.metrics import WorkerMetrics, observe_many
from app.worker.service_firing import FiringJob
from app.worker.service_state import LoadedPartition
from app.worker.topic_gates import RELEASE_INTERVAL

__all__ = ["CATCH_UP_ROUNDS", "FORGET_MARGIN", "FORGET_SECONDS", "FORGET_SLICE", "GateJob"]
#: Delivered held timers one partition forgets at a time (PartitionWheel.forget_behind):
#: a millisecond or two of work, so the next release round or tick waits little (the
#: clock is looked at after every slice).
#: Each slice is one local write batch and one expiry batch (up to 256 ids): slices of
#: 64 wrote four times the batches, and their overhead, for the same timers.
FORGET_SLICE = 256
#: Work a turn of the release loop spends forgetting once nothing is held, seconds,
#: before it lets the event loop run.
FORGET_SECONDS = 0.02
#: Spare time between two release rounds left unspent by forgetting, seconds.
FORGET_MARGIN = 0.005
#: Release rounds the loop may be behind its cadence and still catch up on, one right
#: after the other (:meth:`GateJob.run_gated_release`): a few, so a stall of the event
#: loop is made up for, but a worker that cannot keep up is not handed a second's
#: worth of rounds in a row.
CATCH_UP_ROUNDS = 4


def _delay_summary(metrics: WorkerMetrics, label: str) -> dict[str, Any]:
    """p50 and p99 (bucket upper bounds) and count of the gate's delay for ``label``."""
    cumulative: list[tuple[float, float]] = []
    for family in metrics.rate_limit_delay.collect():
        for sample in family.samples:
            if sample.name.endswith("_bucket") and sample.labels.get("callback_topic") == label:
                cumulative.append((float(sample.labels["le"]), sample.value))
    cumulative.sort()
    total = cumulative[-1][1] if cumulative else 0.0

    def quantile(q: float) -> float | None:
        for bound, n in cumulative:
            if total and n >= q * total:
                return bound
        return None

    return {"delay_p50": quantile(0.5), "delay_p99": quantile(0.99), "delayed": int(total)}


class GateJob(FiringJob):
    """Hold and release the timers of gated topics; forget what releases delivered."""

    def _through_gates(
        self, partition: int, wheel: PartitionWheel, timers: list[Timer]
    ) -> list[Timer]:
        """What of a round's due ``timers`` (and of the timers held before) ``partition``
        delivers now: those of topics no gate holds, and per gated topic as many as its
        bucket allows, oldest first. The rest is held in the wheel (pending, in the
        store) for a later round.

        A tick's scan holds the timers of gated topics itself
        (:meth:`PartitionWheel.begin_tick`'s ``hold``); one of a topic gated since is
        held here."""
        gated = self.gates.gated
        now = self._clock()
        if gated:
            free: list[Timer] = []
            held: list[Timer] = []
            for timer in timers:
                (held if timer.topic in gated else free).append(timer)
            if held:
                wheel.hold(held, now)
        else:
            free = timers
        if wheel.holding:
            self._release_wanted.set()
        if self._stopping:  # held timers wait for the next owner (begin_stopping)
            return free
        for topic in wheel.held_topics():
            budget = self.gates.budget(partition, topic)
            if budget == 0:
                continue
            taken, runs = wheel.take_held_runs(topic, budget)
            if not taken:
                continue
            if budget is not None:
                self.gates.spend(partition, topic, len(taken), waiting=wheel.held_count(topic))
            delay = self._metrics.rate_limit_delay.labels(callback_topic=self._topic_label(topic))
            for since, run in runs:  # held together, delayed alike: one observation per run
                observe_many(delay, max(0.0, now - since), run)
            free.extend(taken)
        return free

    async def release_gated(self) -> int:
        """Deliver, on every partition holding timers, what its buckets allow now (the
        rounds between ticks); return how many callbacks went out."""
        async with self._tick_lock:
            if self._stopping:
                return 0  # the next owner delivers them
            if self._lease is not None and not self._lease.held():
                return 0  # the next tick (or the new owner) delivers them
            ready = [
                (p, part)
                for p, part in self._partitions.items()
                if part.wheel.holding
                and part.wheel.fired_through is not None
                and not part.rereading
            ]
            if not ready:
                return 0
            if self._output.transactional:
                count = 0
                for p, part in ready:
                    count += await self._release_in_transaction(p, part)
            else:
                count = await self._release_at_least_once(ready)
            self._export_backlog()
            return count

    async def _release_at_least_once(self, ready: list[tuple[int, LoadedPartition]]) -> int:
        began = []
        for p, part in ready:
            wheel = part.wheel
            through = wheel.fired_through
            assert through is not None
            timers = self._through_gates(p, wheel, [])
            if timers:
                await self._look_up_topics(timers)
                timers = wheel.still_due(timers)
                began.append((p, part, through, timers, self._fire_all(p, through, timers)))
        return await self._deliver_then_forget(began)

    async def forget_behind(self, seconds: float) -> int:
        """Forget delivered held timers left behind by at-least-once rounds
        (:meth:`PartitionWheel.forget_behind`), for about ``seconds`` of work in slices
        of :data:`FORGET_SLICE` a partition; return how many. Once none is left, flush:
        the forgetting is then durable, not only on its way with the next round's."""
        async with self._tick_lock:
            if self._stopping:
                return 0  # the next owner forgets them (their records say so)
            if self._output.transactional:
                return 0  # only inside a transaction: a tick's (PartitionWheel.finish_tick)
            deadline = time.perf_counter() + seconds
            done = 0
            left = [(p, part) for p, part in self._partitions.items() if part.wheel.behind]
            touched = list(left)
            # A slice of each partition in turn, the clock looked at after every slice:
            # a whole turn of 8 partitions is some 20 ms, and it made the next release
            # round that much late. Each call starts one partition further on, so none
            # waits for the others to be forgotten first.
            if left:
                turn = self._forget_turn % len(left)
                left = left[turn:] + left[:turn]
                self._forget_turn += 1
            while left:
                for _, part in left:
                    done += self._forget_slice(part, FORGET_SLICE)
                    if time.perf_counter() >= deadline:
                        break
                left = [(p, part) for p, part in left if part.wheel.behind]
                if time.perf_counter() >= deadline:
                    break
            for p, part in touched:
                self._export_keys(p, part)
            self._export_behind()
            if done and not left:
                await self._commits.flush()
            return done

    def _forget_slice(self, part: LoadedPartition, n: int) -> int:
        """Forget up to ``n`` timers left behind on ``part``, its local writes as one."""
        with self._commits.local_batch(part.kv):
            return part.wheel.forget_behind(n)

    async def _release_in_transaction(self, p: int, part: LoadedPartition) -> int:
        async with self._unit_lock:
            if self._partitions.get(p) is not part:
                return 0  # reloaded meanwhile (an aborted transaction): the tick rescans
            through = part.wheel.fired_through
            assert through is not None
            timers = self._through_gates(p, part.wheel, [])
            if not timers:
                return 0
            await self._look_up_topics(timers)
            timers = part.wheel.still_due(timers)
            fired = await self._fire_in_transaction(p, part, through, timers)
            if fired is None:
                return 0
        self._ticked(p, part, through, timers, fired)
        self._commits.record_persisted()
        return len(fired.delivered)

    async def run_gated_release(
        self,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """Deliver held timers every :data:`RELEASE_INTERVAL` seconds while any partition
        holds some, so a limited topic receives an even stream rather than its share at
        each second boundary; asleep on an event otherwise. Runs forever.

        The time between two rounds forgets delivered timers that rounds left behind
        (:meth:`forget_behind`), and once nothing is held the rest is forgotten.

        Rounds keep a fixed cadence: each is due one interval after the one before was
        *due*, not after it ended, so a round that starts late (the sleep overran, a
        tick or a batch of requests held the loop, the forgetting took its slice) is
        followed sooner, and a late round's round trip is not added to every interval.
        A round takes at most one interval of its bucket's rate
        (:meth:`app.worker.topic_gates.TokenBucket.round_most`), so rounds spaced a
        little more than the interval apart would give the limit that much less (a
        limit spread over 8 partitions lost a tenth to it). Behind the cadence by more than
        :data:`CATCH_UP_ROUNDS` intervals (the worker cannot keep up), the rounds follow
        each other at once and the cadence starts again from now. ``sleep`` and
        ``monotonic`` (the cadence's clock, never the wall's: a clock set back would
        put the next round off by as much) are a test's to replace.
        """
        due = monotonic()
        while True:
            if self._stopping:  # an orderly stop: no new round, nothing more forgotten
                await sleep(RELEASE_INTERVAL)
                continue
            parts = self._partitions.values()
            # Exactly-once mode leaves nothing behind; what a reload found recorded
            # there (a switch from at-least-once) goes in a tick's transaction.
            forgetting = not self._output.transactional
            if not any(part.wheel.holding for part in parts):
                if forgetting and any(part.wheel.behind for part in parts):
                    # Delivered, left to forget: forget them, a slice at a time.
                    await self.forget_behind(FORGET_SECONDS)
                    await sleep(0)
                    due = monotonic()
                    continue
                self._export_behind()  # 0, also where requests forgot the last of them
                self._release_wanted.clear()
                await self._release_wanted.wait()
                due = monotonic()  # held timers again: a round at once
                continue
            spare = due - monotonic()
            if spare > FORGET_MARGIN and forgetting and any(part.wheel.behind for part in parts):
                # The spare time until the next round forgets what earlier rounds left.
                await self.forget_behind(spare - FORGET_MARGIN)
                spare = due - monotonic()
            await sleep(max(0.0, spare))
            started = monotonic()
            await self.release_gated()
            # The next round is due an interval after this one was; never more than
            # CATCH_UP_ROUNDS behind the time this one started.
            due = max(due, started - CATCH_UP_ROUNDS * RELEASE_INTERVAL) + RELEASE_INTERVAL

    def held_by_partition(self, topics: Iterable[str]) -> dict[int, dict[str, int]]:
        """Every partition this worker holds, with the timers it holds back per topic in
        ``topics`` (the limited ones): what the demand exchange reports
        (:mod:`app.worker.demand`). A partition holding none is listed with ``{}``."""
        wanted = set(topics)
        out: dict[int, dict[str, int]] = {}
        for p, part in self._partitions.items():
            wheel = part.wheel
            held = out[p] = {}
            if wheel.holding:
                for topic in wheel.held_topics():
                    if topic in wanted:
                        held[topic] = wheel.held_count(topic)
        return out

    def rate_limits(self) -> dict[str, dict[str, Any]]:
        """Each gated or backlogged callback topic: its limit (callbacks/s across the
        service), whether paused, timers held here, and the delay the gate added (p50,
        p99 and the observations, since start) — for the status page."""
        limits = self.gates.limits()
        paused = self.gates.paused()
        held: dict[str, int] = {}
        for part in self._partitions.values():
            for topic in part.wheel.held_topics():
                held[topic] = held.get(topic, 0) + part.wheel.held_count(topic)
        out: dict[str, dict[str, Any]] = {}
        for topic in sorted(set(limits) | paused | set(held)):
            out[topic] = {
                "limit_per_second": limits.get(topic),
                "paused": topic in paused,
                "backlog": held.get(topic, 0),
                **_delay_summary(self._metrics, self._topic_label(topic)),
            }
        return out
