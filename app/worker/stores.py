"""What :class:`~app.worker.service.TimerService` needs of a partition's store, and who opens one.

The service never builds a store itself: it asks a :class:`StoreFactory` for partition
``p`` and gets a :class:`PartitionStore` that is already up to date with its changelog.
The worker's factory is :class:`app.worker.partition_store.RocksDBStores` (RocksDB from
Faust's table, mirrored to the changelog through the output producer); unit tests use
an in-memory one, so the orchestration above runs without RocksDB or a broker.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

__all__ = ["PartitionStore", "StoreFactory"]


class PartitionStore(Protocol):
    """One partition's ordered store; every write also goes to its changelog.

    Satisfies :class:`app.core.wheel.OrderedKV`, so a wheel runs on it directly.
    """

    def get(self, key: bytes) -> bytes | None: ...

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """Each key's value, as :meth:`get` would read it, in one call."""
        ...

    def put(self, key: bytes, value: bytes) -> None: ...

    def delete(self, key: bytes) -> None: ...

    def scan(self, low: bytes, high: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Items with ``low <= key < high`` in key order."""
        ...

    def put_changelog(self, key: bytes, value: bytes) -> None:
        """Write the changelog only: the local write follows once it is durable
        (:meth:`put_local`)."""
        ...

    def put_local(self, key: bytes, value: bytes) -> None:
        """Write only the local store: for a value whose changelog record is already out."""
        ...

    def defer_local_writes(self) -> None:
        """Hold local writes back (reads see them) until :meth:`apply_deferred`."""
        ...

    def apply_deferred(self) -> None:
        """Write the held-back changes locally, at once."""
        ...

    def discard_deferred(self) -> None:
        """Drop the held-back changes (their transaction was aborted)."""
        ...

    def mark_unconfirmed(self) -> None:
        """The local writes from now on are ahead of the changelog until the next
        :meth:`record_persisted`: a store stopped in between is rebuilt, not resumed."""
        ...

    def record_persisted(self, offset: int, acked: int | None = None) -> None:
        """The changelog is durable up to ``offset``: recovery may start after it, if
        every record since the store was opened is this worker's (``acked``: how many
        of its records were acknowledged past the offset the store was opened at; None:
        not checked)."""
        ...

    def mark_caught_up(self) -> None:
        """Record, locally, that the store holds everything its changelog holds, now."""
        ...


class StoreFactory(Protocol):
    """Opens partition stores for the service."""

    def open(self, partition: int) -> PartitionStore:
        """The store of ``partition``, caught up with its changelog. Blocking: the
        service calls it off the event loop."""
        ...
