"""A unit of work over partition stores: stage their changes, then commit them with the output.

The worker's writes go two ways: to RocksDB (through each partition's
:class:`~app.worker.stores.PartitionStore`) and to the broker (callbacks, forwarded
copies and the stores' changelogs, through the :class:`~app.worker.output_port.Output`).
Which of them goes first decides what a crash leaves behind, so the pairing lives
here, once: :class:`Commits` opens a :class:`Unit` (the output's transaction begun, the
stores' local writes held back), the unit stages values that must only become local once
the broker holds the unit, and :meth:`Unit.commit` ends it in the one right order.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping

from app.core.keys import REQUEST_OFFSET
from app.worker.output import TransactionAborted
from app.worker.output_port import Output
from app.worker.stores import PartitionStore

__all__ = ["Commits", "Unit"]


class Unit:
    """One unit of work in progress over some partitions' stores.

    Local writes are held back from its start (reads see them); :meth:`apply_local`
    writes them, :meth:`commit` commits the output's transaction (or flushes it) and
    then makes local what was staged to follow the broker.
    """

    def __init__(self, commits: Commits, stores: Iterable[PartitionStore]) -> None:
        self._commits = commits
        self._stores = list(stores)
        #: ``(store, key, value)`` whose changelog record is out with the unit; written
        #: locally once the unit is durable.
        self._after: list[tuple[PartitionStore, bytes, bytes]] = []
        #: Resume offsets of an at-least-once unit: to the changelog and the store only
        #: once the unit is durable.
        self._resume: list[tuple[PartitionStore, bytes]] = []
        for store in self._stores:
            store.defer_local_writes()

    def ahead_of_changelog(self) -> None:
        """This unit writes locally before its output is durable (a unit of requests:
        :meth:`apply_local` runs at its pauses and end, before :meth:`commit`): mark its
        stores so that one stopped in between is rebuilt, not resumed
        (:meth:`~app.worker.stores.PartitionStore.mark_unconfirmed`)."""
        for store in self._stores:
            store.mark_unconfirmed()

    def apply_local(self) -> None:
        """Write the unit's held-back local writes now (one batch a store)."""
        for store in self._stores:
            store.apply_deferred()

    async def pause(self) -> None:
        """Let the event loop run in the middle of the unit, its local writes applied
        first: a tick that runs meanwhile scans them, and reads of the unit's own writes
        are the same before and after."""
        self.apply_local()
        await asyncio.sleep(0)
        for store in self._stores:
            store.defer_local_writes()

    def put_resume_offset(self, store: PartitionStore, value: bytes) -> None:
        """Where the next owner of ``store``'s partition resumes reading requests.

        In exactly-once mode in the unit's transaction. In at-least-once mode only once
        the unit is durable: produced with the unit, it could reach the broker before
        some of the unit's forwarded copies or callbacks, and a crash in between lost
        them, the batch never read again. Locally, in both, only once the unit is
        durable."""
        if self._commits.output.transactional:
            self.put_after_commit(store, REQUEST_OFFSET, value)
        else:
            self._resume.append((store, value))

    def put_after_commit(self, store: PartitionStore, key: bytes, value: bytes) -> None:
        """``key`` to the changelog with the unit, and locally once the unit is durable."""
        store.put_changelog(key, value)
        self._after.append((store, key, value))

    async def commit(self, *, record: bool = True) -> None:
        """Commit the output's transaction (at least once: flush it), then write locally
        what followed it, and, with ``record``, note the changelog offsets now durable.

        Raises :class:`~app.worker.output.TransactionAborted` if the transaction was
        aborted: the local writes held back are then dropped, nothing staged is written.
        """
        try:
            await self._commits.output.commit()
        except TransactionAborted:
            for store in self._stores:
                store.discard_deferred()
            raise
        self.apply_local()
        for store, value in self._resume:
            store.put_changelog(REQUEST_OFFSET, value)
            store.put_local(REQUEST_OFFSET, value)
        for store, key, value in self._after:
            store.put_local(key, value)
        if record:
            self._commits.record_persisted()


class Commits:
    """Opens units of work and makes the output durable, for the service's stores."""

    def __init__(self, output: Output, loaded: Callable[[], Mapping[int, PartitionStore]]) -> None:
        """Args:
        output: where callbacks and changelog records go.
        loaded: the stores of the partitions held now, by partition.
        """
        self.output = output
        self._loaded = loaded

    def begin(self, stores: Iterable[PartitionStore]) -> Unit:
        """Begin a unit of work over ``stores`` (the output's transaction begun)."""
        self.output.begin()
        return Unit(self, stores)

    @staticmethod
    @contextlib.contextmanager
    def local_batch(store: PartitionStore) -> Iterator[None]:
        """``store``'s local writes inside the block as one write, on leaving it."""
        store.defer_local_writes()
        try:
            yield
        finally:
            store.apply_deferred()

    async def flush(self, *, record: bool = True) -> None:
        """Wait until everything produced is acknowledged; with ``record``, note the
        changelog offsets now durable (:meth:`record_persisted`)."""
        await self.output.flush()
        if record:
            self.record_persisted()

    def record_persisted(self) -> None:
        """Tell each held store how far its changelog is durable: recovery starts there."""
        loaded = self._loaded()
        counted = self.output.changelog_counted
        for p, offset in list(self.output.changelog_acked.items()):
            store = loaded.get(p)
            if store is not None:
                count = counted.get(p)
                store.record_persisted(offset, None if count is None else count[1])
