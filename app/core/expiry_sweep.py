"""Forgetting remembered ids when their window ends: the sweep of expiry keys and batches.

A fired or cancelled id is remembered for the window (``memory_seconds``) so that a
redelivered request or an early cancel is recognised; state then stays O(pending)
because something expires each terminal index entry, sorted by the tick second it
expires at: an expiry key (``X``) per cancelled id, and expiry batches (``V``,
:mod:`app.core.expiry_batch`) for the fired timers a round forgets together. Ticks
sweep both ranges as they advance, at most :data:`EXPIRY_SWEEP_PER_TICK` ids a tick (a
batch is taken whole), so a backlog (a million ids expiring in one second) never
stalls a tick. An index entry goes only if it still equals the expired one: a newer
version since then keeps its own. Every removal is a changelog tombstone, so
compaction drops the id from the changelog too.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice

from app.core import expiry_batch
from app.core.keys import (
    EXPIRY,
    EXPIRY_BATCH,
    EXPIRY_BATCH_END,
    IN_ADVANCE_PREFIX,
    INDEX,
    expiry_batch_key,
    expiry_batch_second,
    expiry_floor,
    index_key,
    parse_expiry_key,
)
from app.core.wheel_store import KeyCounts, OrderedKV

__all__ = ["EXPIRY_SWEEP_PER_TICK", "ExpirySweep"]

#: Most remembered ids one tick sweeps per partition (expiry keys, and the ids of whole
#: expiry batches: at most a batch more); the rest waits for the next tick. Measured cost
#: is a few microseconds per id plus its index entry's changelog tombstone.
EXPIRY_SWEEP_PER_TICK = 1000


class ExpirySweep:
    """Writes a partition's expiry batches and sweeps its expired ids, tick by tick."""

    def __init__(self, kv: OrderedKV, counts: KeyCounts, limit: int) -> None:
        self._kv = kv
        #: The wheel's key counts (the wheel sets a new one when it recounts).
        self.counts = counts
        self._limit = limit
        #: Expiry keys before this one are swept: later sweeps seek past their tombstones.
        self._sweep_from = EXPIRY
        #: Likewise for expiry batches.
        self._batch_sweep_from = EXPIRY_BATCH
        #: The expiry second of the first batch not swept; ``None``: there is none. An
        #: idle tick then does not scan for batches (0: not known yet, so the first
        #: tick's sweep looks).
        self._next_batch_expiry: int | None = 0
        #: The earliest expiry of the batches written since the last look: a unit's
        #: writes may be deferred (app.worker.partition_store), out of the scan's sight.
        self._batch_written: int | None = None

    def sweep(self, second: int) -> None:
        """Forget remembered ids whose expiry second is at or before ``second``: at most
        about the limit a tick (a batch is taken whole), the rest on the next."""
        budget = self._limit
        expired = list(islice(self._kv.scan(self._sweep_from, expiry_floor(second + 1)), budget))
        for key, _ in expired:
            self._kv.delete(key)
        self.counts.remembered -= len(expired)
        self._expire_index_entries(
            [(index_key(parse_expiry_key(key)[1]), value) for key, value in expired]
        )
        if expired:
            self._sweep_from = expired[-1][0] + b"\x00"
        budget -= len(expired)
        due = self._next_batch_expiry
        if budget > 0 and due is not None and due <= second:
            self._sweep_batches(second, budget)

    def remember(self, entries: Sequence[expiry_batch.Entry], expiry: int) -> int:
        """Remember ``entries`` (ids that end now, with their terminal index entries) until
        tick ``expiry``, in expiry batches; return how many batch keys were written.

        A batch is keyed by its first id, and a key that exists already (that id ended
        twice in one second) is never overwritten: the new batch's key gets a zero byte
        more, so the ids of neither are lost to the sweep."""
        kv = self._kv
        self._batch_due(expiry)
        if self._batch_written is None or expiry < self._batch_written:
            self._batch_written = expiry
        written = 0
        for batch in expiry_batch.chunks(entries):
            key = expiry_batch_key(expiry, batch[0][0])
            while kv.get(key) is not None:
                key += b"\x00"
            kv.put(key, expiry_batch.pack(batch))
            written += 1
        return written

    def _sweep_batches(self, second: int, budget: int) -> None:
        """The expiry batches' share of :meth:`sweep`: whole batches until ``budget`` ids
        are taken, their index entries expired as an expiry key's are."""
        kv = self._kv
        expired: list[tuple[bytes, list[expiry_batch.Entry]]] = []
        self._next_batch_expiry, self._batch_written = self._batch_written, None
        for key, value in kv.scan(self._batch_sweep_from, EXPIRY_BATCH_END):
            expiry = expiry_batch_second(key)
            if expiry > second or budget <= 0:  # the next sweep starts here
                self._batch_due(expiry)
                break
            self._batch_sweep_from = key + b"\x00"
            try:
                entries = expiry_batch.unpack(value)
            except ValueError:  # not this layout's: left for a release that reads it
                continue
            expired.append((key, entries))
            budget -= len(entries)
        for key, _ in expired:
            kv.delete(key)
        self.counts.remembered -= len(expired)
        self._expire_index_entries(
            [(INDEX + id_bytes, entry) for _, entries in expired for id_bytes, entry in entries]
        )

    def _expire_index_entries(self, expired: Sequence[tuple[bytes, bytes]]) -> None:
        """Remove each index entry named in ``expired`` (its key, the entry an expiry key or
        batch expires) that still equals that entry: a newer version since then keeps
        its own. One multi-get for all of them; an id named twice (two versions ended in
        one second, or the same entry remembered twice) goes once."""
        if not expired:
            return
        kv, counts = self._kv, self.counts
        removed: set[bytes] = set()
        currents = kv.get_many([index for index, _ in expired])
        for (index, entry), current in zip(expired, currents, strict=True):
            if current == entry and index not in removed:
                removed.add(index)
                kv.delete(index)
                counts.remembered -= 1
                counts.in_advance -= entry.startswith(IN_ADVANCE_PREFIX)

    def _batch_due(self, expiry: int) -> None:
        """A batch not swept expires at ``expiry``: the sweep looks for batches from then."""
        if self._next_batch_expiry is None or expiry < self._next_batch_expiry:
            self._next_batch_expiry = expiry
