"""The partitions' lifecycle: given away, an orderly stop, an operator's change, and
what the status page reads of them.

A partition is loaded on first use (:meth:`app.worker.service_state.ServiceState._partition`);
here it goes (revoked: what rounds delivered and left to forget is made durable
first), an orderly stop begins, and an operator's bulk change runs on one partition as
one unit of work.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable

from app.core.wheel import PartitionWheel
from app.worker.output import DeliveryFailure, TransactionAborted
from app.worker.output_port import Output
from app.worker.service_state import KEY_KINDS, ServiceState

__all__ = ["PartitionJob"]

log = logging.getLogger(__name__)


class PartitionJob(ServiceState):
    """Forget partitions, stop in order, change a partition; the partitions' status."""

    def forget_partitions(self, partitions: Iterable[int]) -> None:
        """Drop wheels of partitions revoked or reassigned: Faust reopens their stores.

        A tick held for one of them is dropped too: held ticks are never fired on a
        partition this worker may no longer own, and the next tick holds again.
        """
        partitions = list(partitions)
        self._gate.forget(partitions)
        self.gates.forget(partitions)  # a later owner starts their buckets empty
        for p in partitions:
            self._partitions.pop(p, None)
            if self.quotas is not None:
                self.quotas.detach(p)
            self._pending.pop(p, None)
            self._marked.pop(p, None)
            with contextlib.suppress(KeyError):  # a partition given away stops exporting it
                self._metrics.last_tick.remove(str(p))
            with contextlib.suppress(KeyError):
                self._metrics.cancels_in_advance.remove(str(p))
            for kind in KEY_KINDS:
                with contextlib.suppress(KeyError):
                    self._metrics.store_keys.remove(str(p), kind)
        self._metrics.pending.set(sum(self._pending.values()))
        self._export_paused()
        self._export_behind()
        if self._backlog_topics:
            self._export_backlog()

    def begin_stopping(self) -> None:
        """An orderly stop has begun (the first SIGTERM or SIGINT): deliver no more held
        timers (no release round, and ticks take none from the held ones) and forget
        nothing more left behind; :meth:`forget_all_behind` then makes what rounds left
        to forget durable for the next owner. Ticks go on firing the timers of topics
        with no limit until Faust stops them, each round forgotten with its own flush,
        as before. Without this, a worker in the middle of a limited backlog went on
        delivering held timers through Faust's whole stop sequence, ran out of its 10 s
        grace, and the rounds it delivered after the records were flushed went out
        again from the next owner. Held timers not delivered now are not lost: they
        are pending, below the watermark, and the next owner holds them again."""
        if not self._stopping:
            log.info("stopping: no held timer is delivered from now on")
        self._stopping = True

    async def revoke_partitions(self, partitions: Iterable[int]) -> None:
        """:meth:`forget_partitions` once no tick is being fired: a release of held ticks
        that is under way finishes before its partitions go (Faust waits for its agents
        before a revocation, but the release loop is not an agent). What rounds
        delivered and left to forget on them is made durable first (their records,
        :meth:`PartitionWheel._record_behind`), so that the next owner (this worker
        after a restart included) reads it back and forgets it, without delivering it
        again. It used to be forgotten here: about 20 µs a timer, so a rebalance in
        the middle of a limited million waited seconds for it, and a stop's 10 s grace
        ran out with half of 278,790 not forgotten (delivered twice by the next owner)."""
        partitions = set(partitions)
        async with self._tick_lock:
            await self._make_behind_durable(partitions)
            self.forget_partitions(partitions)

    async def forget_all_behind(self) -> None:
        """Make durable what rounds delivered and left to forget on every partition: an
        orderly stop calls this (Faust stops without revoking), so that the next owner
        reads it back instead of delivering those timers again."""
        async with self._tick_lock:
            await self._make_behind_durable(set(self._partitions))

    async def _make_behind_durable(self, partitions: set[int]) -> None:
        if not any(part.wheel.behind for p, part in self._partitions.items() if p in partitions):
            return
        try:
            await self._commits.flush()
        except DeliveryFailure as exc:  # the next owner delivers them again: at least once
            log.warning("timers delivered and left to forget not recorded durably: %s", exc)

    async def change_partition(
        self, partition: int, work: Callable[[PartitionWheel, Output], int]
    ) -> int | None:
        """Run ``work`` on ``partition``'s wheel as one unit of work, durable when this
        returns (its store writes and what it produced through the output): an
        operator's bulk cancel (app.worker.control). ``work`` is synchronous and returns
        how many pending timers it removed. ``None`` if the partition is not loaded here."""
        async with self._unit_lock:
            part = self._partitions.get(partition)
            if part is None:
                return None
            unit = self._commits.begin([part.kv])
            try:
                removed = work(part.wheel, self._output)
            finally:
                unit.apply_local()
            try:
                await unit.commit(record=False)
            except TransactionAborted as exc:
                raise DeliveryFailure(f"bulk change not committed: {exc}") from exc
        if removed:
            self._metrics.cancelled.inc(removed)
            self._adjust_pending(partition, -removed)
        self._commits.record_persisted()
        self._export_keys(partition, part)
        return removed

    def wheels(self) -> dict[int, PartitionWheel]:
        """The wheels of the partitions loaded so far, by partition (read-only use)."""
        return {p: part.wheel for p, part in self._partitions.items()}

    def pending_by_partition(self) -> dict[int, int]:
        """Pending timers per held partition (for status)."""
        return dict(self._pending)

    def store_keys_by_partition(self) -> dict[int, dict[str, int]]:
        """Store keys per held partition, by kind (for status): counted once when the
        partition loaded, then kept up to date by the wheel, never by a scan."""
        return {p: self._key_counts(part) for p, part in self._partitions.items()}
