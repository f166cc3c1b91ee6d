"""Shares of every rate limit that follow demand, wherever a topic's timers sit.

Every :data:`~app.kafka.demand.REPORT_SECONDS` while any topic is limited, each worker
reports the timers its partitions hold back per limited topic on the demand topic
(:mod:`app.kafka.demand`), reads every worker's reports, and sets the rate of each of
its partitions' buckets to that partition's share of the limit
(:func:`app.core.rate_shares.partition_rates`, applied by
:meth:`app.worker.topic_gates.TopicGates.share`).

Why shares that follow demand, rather than leases of tokens: a worker needs nothing from
the others before it delivers (a lease is a round trip per grant, and a lost grant a
stall); every worker computes from the same table, so the shares add up to the limit
without a leader; and a worker that dies simply stops reporting: its reports stop
counting after :data:`~app.kafka.demand.STALE_SECONDS`, and its share goes to the
partitions that still have a backlog. The price is a quarter second or so before a new
backlog gets its share (meanwhile its partition delivers at the static split or the
floor), and a moment of overshoot if a worker's view of the table lags the others'; the
bucket's one-second window (:mod:`app.worker.topic_gates`) bounds both.

A worker whose own last report has not come back within the stale time (the broker is
slow, the worker was frozen) goes back to the static split, limit / N per partition,
which can never exceed the limit whatever the others do.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from app.core.rate_shares import partition_rates
from app.kafka.demand import REPORT_SECONDS, DemandPublisher, DemandTable
from app.worker.service import TimerService

__all__ = ["DemandExchange"]

log = logging.getLogger(__name__)


class DemandExchange:
    """Reports this worker's backlogs and retunes its buckets, every quarter second."""

    def __init__(
        self,
        service: TimerService,
        publisher: DemandPublisher,
        table: DemandTable,
        partitions: int,
        *,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._service = service
        self._publisher = publisher
        self._table = table
        self._partitions = partitions
        self._wall = wall

    def exchange(self) -> None:
        """One report and one retuning (on the event loop: the gates are not thread-safe).

        With pending-timer quotas set (:mod:`app.core.quotas`), the report carries each
        partition's counts per quota key and this worker's claims of shares
        (:mod:`app.core.quota_leases`); the others' newest counts are taken into the
        service's quota book, and the shares its reports read back won into its leases
        (a request waiting for one is told)."""
        gates = self._service.gates
        limits = gates.limits()
        quotas = self._service.quotas
        if not limits and quotas is None:
            return
        held = self._service.held_by_partition(limits) if limits else {}
        current = self._table.current()
        if quotas is None:
            self._publisher.publish(held, self._wall())
        else:
            mine = quotas.held
            if quotas.leases.verdicts(self._table.take_verdicts(), mine):
                self._service.quota_shares_grew()
            counts, elsewhere, wanted = self._table.quota_view(mine)
            quotas.set_elsewhere(counts)
            reported = quotas.by_partition()
            lease = quotas.leases.report(reported, elsewhere, wanted)
            self._publisher.publish(held, self._wall(), reported, (self._table.run, lease))
        if not limits:
            return
        if not current:
            for topic in gates.shared():
                gates.share(topic, None)
            return
        # Only topics with a backlog somewhere get shares (the others run at limit / N):
        # the work is bounded by what is held, not by how many topics are limited.
        backlogs = self._table.backlogs()
        for topic in gates.shared() - backlogs.keys():
            gates.share(topic, None)
        for topic, by_partition in backlogs.items():
            limit = limits.get(topic)
            if limit is not None:
                gates.share(topic, partition_rates(limit, self._partitions, by_partition, held))

    async def run(self, sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        """Exchange every :data:`REPORT_SECONDS`, for ever (the table's thread runs meanwhile)."""
        self._table.start()
        try:
            while True:
                try:
                    self.exchange()
                except Exception:  # a report is worth less than the loop: log, go on
                    log.exception("demand exchange failed; the next one follows")
                await sleep(REPORT_SECONDS)
        finally:
            self._table.stop()
            self._publisher.close()
