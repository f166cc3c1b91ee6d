"""In-memory partition stores and output, so :class:`TimerService` runs in a unit test.

:class:`MemoryStores` is a :class:`~app.worker.stores.StoreFactory` over
:class:`tests.support.memkv.MemoryKV`; every write is mirrored to the output's
changelog exactly as the RocksDB store does. :class:`FakeOutput` records what the
service produced and can be told to fail the way a broker fails: a flush that times
out, a callback the broker refuses, a transaction that must be aborted.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from app.core.budget import DEFAULT_MAX_RECORD_BYTES
from app.core.fired import SkipReason
from app.core.raw_record import RawRecord
from app.core.timer import Timer
from app.worker.output import DeliveryFailure, TransactionAborted
from kafka_timers_client.errors import RejectReason
from tests.support.memkv import MemoryKV

CHANGELOG = "changelog"


@dataclass
class Produced:
    """Everything the service produced, in order, by kind."""

    callbacks: list[tuple[Timer, int]] = field(default_factory=list)
    #: Skipped fires: (timer, reason, coalesced).
    skipped: list[tuple[Timer, SkipReason, int]] = field(default_factory=list)
    #: ``coalesced`` of each callback, by (id, seq), when not 0.
    coalesced: dict[tuple[str, int], int] = field(default_factory=dict)
    cancels: list[tuple[str, str, str, int]] = field(default_factory=list)
    #: ``(id, partition, request offset)`` of each cancel answered, in the same order.
    cancel_requests: list[tuple[str, int, int | None]] = field(default_factory=list)
    #: Pauses and resumes answered: (id, action, outcome, partition, request offset).
    pauses: list[tuple[str, str, str, int, int | None]] = field(default_factory=list)
    dead_letters: list[tuple[bytes | None, RejectReason, str]] = field(default_factory=list)
    dead_timers: list[tuple[str, RejectReason]] = field(default_factory=list)
    changelog: list[tuple[int, bytes, bytes | None]] = field(default_factory=list)
    #: Requests answered as not stored: (id, outcome, partition, request offset).
    dropped: list[tuple[str, str, int, int | None]] = field(default_factory=list)
    #: Requests forwarded to their owner partition: (record, owner partition).
    forwarded: list[tuple[RawRecord, int]] = field(default_factory=list)
    #: The ``timer-hop`` value of each forwarded copy, in the same order.
    hops: list[bytes] = field(default_factory=list)


class FakeOutput:
    """An :class:`~app.worker.output_port.Output` that keeps what it is given.

    Records become "durable" at :meth:`flush`/:meth:`commit`: only then are they moved
    from :attr:`pending` to :attr:`durable`; a failed flush drops them. Set
    :attr:`fail_flush` to make the next flush fail, :attr:`refuse_topics` to have the
    broker refuse callbacks to those topics, :attr:`abort_next_commit` to abort the next
    transaction.
    """

    def __init__(self, *, transactional: bool = False) -> None:
        self.transactional = transactional
        self.changelog_acked: dict[int, int] = {}
        self.changelog_counted: dict[int, list[int]] = {}
        self.max_record_bytes = DEFAULT_MAX_RECORD_BYTES
        self.fire_offsets: dict[int, int] = {}
        self.pending = Produced()
        self.durable = Produced()
        self.fail_flush = False
        self.abort_next_commit = False
        self.refuse_topics: set[str] = set()
        self.in_transaction = False
        self._failed: list[tuple[Timer, str]] = []
        self._offsets: dict[int, int] = {}

    def callback(
        self, timer: Timer, *, partition: int, fired_at_ms: int, coalesced: int = 0
    ) -> None:
        self.pending.callbacks.append((timer, fired_at_ms))
        if coalesced:
            self.pending.coalesced[(timer.id, timer.seq)] = coalesced
        if timer.topic in self.refuse_topics:
            self._failed.append((timer, f"topic {timer.topic} refused"))

    def skipped(
        self, timer: Timer, reason: SkipReason, *, partition: int, coalesced: int = 0
    ) -> None:
        self.pending.skipped.append((timer, reason, coalesced))

    def cancel_outcome(
        self,
        timer_id: str,
        token: str,
        outcome: str,
        partition: int,
        request_offset: int | None = None,
    ) -> None:
        self.pending.cancels.append((timer_id, token, outcome, partition))
        self.pending.cancel_requests.append((timer_id, partition, request_offset))

    def pause_outcome(
        self,
        timer_id: str,
        token: str,
        action: str,
        outcome: str,
        partition: int,
        request_offset: int | None = None,
    ) -> None:
        self.pending.pauses.append((timer_id, action, outcome, partition, request_offset))

    def dead_letter(self, record: RawRecord, reason: RejectReason, detail: str) -> None:
        self.pending.dead_letters.append((record.value, reason, detail))

    def dead_letter_timer(self, timer: Timer, reason: RejectReason, detail: str) -> None:
        self.pending.dead_timers.append((timer.id, reason))

    def dropped(
        self, timer: Timer, outcome: str, partition: int, request_offset: int | None = None
    ) -> None:
        self.pending.dropped.append((timer.id, outcome, partition, request_offset))

    def forward(self, record: RawRecord, partition: int, hop: bytes) -> None:
        self.pending.forwarded.append((record, partition))
        self.pending.hops.append(hop)

    def changelog(self, topic: str, partition: int, key: bytes, value: bytes | None) -> None:
        assert topic == CHANGELOG
        self.pending.changelog.append((partition, key, value))

    def begin(self) -> None:
        if self.transactional:
            assert not self.in_transaction, "transactions must not overlap"
            self.in_transaction = True

    def _make_durable(self) -> None:
        for name in (
            "callbacks",
            "skipped",
            "cancels",
            "cancel_requests",
            "pauses",
            "dead_letters",
            "dead_timers",
            "changelog",
            "forwarded",
            "hops",
            "dropped",
        ):
            getattr(self.durable, name).extend(getattr(self.pending, name))
        self.durable.coalesced.update(self.pending.coalesced)
        for p, _, _ in self.pending.changelog:
            self._offsets[p] = self._offsets.get(p, -1) + 1
            self.changelog_acked[p] = self._offsets[p]
        self.pending = Produced()

    async def flush(self, timeout: float = 60.0) -> None:
        if self.fail_flush:  # what was produced is lost (or, in Kafka, maybe not)
            self.fail_flush = False
            self.pending = Produced()
            raise DeliveryFailure("flush failed (test)")
        self._make_durable()

    async def commit(self, timeout: float = 60.0) -> None:
        if not self.transactional:
            await self.flush(timeout)
            return
        self.in_transaction = False
        if self.abort_next_commit:
            self.abort_next_commit = False
            self.pending = Produced()
            self._failed.clear()
            raise TransactionAborted("aborted (test)")
        self._make_durable()

    def take_failures(self) -> list[tuple[Timer, str]]:
        failed, self._failed = self._failed, []
        return failed


class MemoryStore(MemoryKV):
    """A :class:`~app.worker.stores.PartitionStore` in memory, mirrored to a fake changelog."""

    def __init__(self, partition: int, output: FakeOutput) -> None:
        super().__init__()
        self._partition = partition
        self._output = output
        self._deferred: dict[bytes, bytes | None] | None = None
        self.persisted_offset: int | None = None
        self.caught_up_marks = 0
        self.unconfirmed = False

    def get(self, key: bytes) -> bytes | None:
        if self._deferred is not None and key in self._deferred:
            return self._deferred[key]
        return super().get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self._local(key, value)
        self._output.changelog(CHANGELOG, self._partition, key, value)

    def delete(self, key: bytes) -> None:
        self._local(key, None)
        self._output.changelog(CHANGELOG, self._partition, key, None)

    def scan(self, low: bytes, high: bytes) -> Iterator[tuple[bytes, bytes]]:
        return super().scan(low, high)

    def put_changelog(self, key: bytes, value: bytes) -> None:
        self._output.changelog(CHANGELOG, self._partition, key, value)

    def put_local(self, key: bytes, value: bytes) -> None:
        self._local(key, value)

    def _local(self, key: bytes, value: bytes | None) -> None:
        if self._deferred is not None:
            self._deferred[key] = value
        elif value is None:
            MemoryKV.delete(self, key)
        else:
            MemoryKV.put(self, key, value)

    def defer_local_writes(self) -> None:
        self._deferred = {}

    def apply_deferred(self) -> None:
        deferred, self._deferred = self._deferred or {}, None
        for key, value in deferred.items():
            self._local(key, value)

    def discard_deferred(self) -> None:
        self._deferred = None

    def mark_unconfirmed(self) -> None:
        self.unconfirmed = True

    def record_persisted(self, offset: int, acked: int | None = None) -> None:
        self.persisted_offset = offset
        self.unconfirmed = False

    def mark_caught_up(self) -> None:
        self.caught_up_marks += 1


class MemoryStores:
    """A :class:`~app.worker.stores.StoreFactory` whose stores outlive being forgotten,
    like RocksDB directories do: opening a partition again returns the same data."""

    def __init__(self, output: FakeOutput) -> None:
        self._output = output
        self.stores: dict[int, MemoryStore] = {}
        self.opened: list[int] = []

    def open(self, partition: int) -> MemoryStore:
        self.opened.append(partition)
        return self.stores.setdefault(partition, MemoryStore(partition, self._output))
