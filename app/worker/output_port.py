"""The port the service writes through: every record a unit of work produces.

:class:`~app.worker.output.OutputProducer` is the one implementation on Kafka; unit
tests use an in-memory fake (``tests/support/memstores.py``). The service, its unit of
work and the control path depend on this interface only, not on the producer.
"""

from __future__ import annotations

from typing import Protocol

from app.core.fired import SkipReason
from app.core.raw_record import RawRecord
from app.core.timer import Timer
from kafka_timers_client.errors import RejectReason

__all__ = ["Output"]


class Output(Protocol):
    """What the service writes through: :class:`~app.worker.output.OutputProducer`, or a
    fake in unit tests."""

    #: Whether every unit of work is one Kafka transaction (exactly-once mode).
    transactional: bool
    #: Highest changelog offset acknowledged, per changelog partition.
    changelog_acked: dict[int, int]
    #: Per changelog partition whose store counts them: the offset it was caught up to,
    #: and how many records were acknowledged past it since.
    changelog_counted: dict[int, list[int]]
    #: The largest record this output can write (the producer's ``message.max.bytes``).
    max_record_bytes: int
    #: Per partition, the newest request applied there when the service last fired on
    #: it (the fired records' ``request_offset``); the service sets it before a round.
    fire_offsets: dict[int, int]

    def callback(
        self, timer: Timer, *, partition: int, fired_at_ms: int, coalesced: int = 0
    ) -> None: ...

    def skipped(
        self, timer: Timer, reason: SkipReason, *, partition: int, coalesced: int = 0
    ) -> None: ...

    def cancel_outcome(
        self,
        timer_id: str,
        token: str,
        outcome: str,
        partition: int,
        request_offset: int | None = None,
    ) -> None: ...

    def pause_outcome(
        self,
        timer_id: str,
        token: str,
        action: str,
        outcome: str,
        partition: int,
        request_offset: int | None = None,
    ) -> None: ...

    def dropped(
        self, timer: Timer, outcome: str, partition: int, request_offset: int | None = None
    ) -> None: ...

    def dead_letter(self, record: RawRecord, reason: RejectReason, detail: str) -> None: ...

    def dead_letter_timer(self, timer: Timer, reason: RejectReason, detail: str) -> None: ...

    def forward(self, record: RawRecord, partition: int, hop: bytes) -> None: ...

    def changelog(self, topic: str, partition: int, key: bytes, value: bytes | None) -> None: ...

    def begin(self) -> None: ...

    async def commit(self, timeout: float = 60.0) -> None: ...

    async def flush(self, timeout: float = 60.0) -> None: ...

    def take_failures(self) -> list[tuple[Timer, str]]: ...
