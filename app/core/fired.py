"""The record the worker writes to the fired topic: the one definition of that format.

One JSON record per delivered callback (``event: fired``) and per cancel request
(``event: cancel``, with what the cancel did), keyed by timer id. The audit reconciles
these against the requests; clients read a cancel's outcome back from them. Fields a
kind does not use are left out of the JSON.

Every record goes to the fired topic's partition numbered like the request partition
that holds the timer (``partition``; all service topics have one partition count), so
whoever knows a timer's request partition reads one partition of the fired topic. A
cancel record also names the offset of the cancel request it answers
(``request_offset``): a client that sent a cancel matches its answer exactly, never
"the first record for this id", which could answer an earlier cancel.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from enum import Enum
from typing import Any

from app.core.timer import Timer

__all__ = ["FIRED_RECORD_DDL", "FiredKind", "FiredRecord"]


class FiredKind(str, Enum):
    """What a record on the fired topic reports."""

    #: A callback was delivered.
    FIRED = "fired"
    #: A cancel request was applied; ``outcome`` says what it did.
    CANCEL = "cancel"


@dataclass(frozen=True)
class FiredRecord:
    """One record of the fired topic."""

    #: What happened.
    event: FiredKind
    #: The timer's id (also the record key).
    id: str
    #: The fired version's token, or the token the cancel presented ("" for none).
    token: str
    #: Partition of the request topic (and table) that holds the timer.
    partition: int
    #: ``KAFKA_TIMERS_WORKER_ID`` of the worker that wrote it.
    worker: str
    #: Due second of the fired timer (fired only).
    due: int | None = None
    #: The worker's clock when it produced the callback, epoch ms (fired only).
    fired_at_ms: int | None = None
    #: The callback topic (fired only).
    topic: str | None = None
    #: A :class:`app.core.wheel.CancelOutcome` value (cancel only).
    outcome: str | None = None
    #: The worker's clock when it applied the cancel, epoch ms (cancel only).
    at_ms: int | None = None
    #: Offset of the cancel request, on ``partition`` of the request topic (cancel only;
    #: absent in records written before it existed).
    request_offset: int | None = None

    @classmethod
    def fired(cls, timer: Timer, *, partition: int, worker: str, fired_at_ms: int) -> FiredRecord:
        """The record of ``timer``'s callback, produced at ``fired_at_ms``."""
        return cls(
            FiredKind.FIRED,
            timer.id,
            timer.token,
            partition,
            worker,
            due=timer.due,
            fired_at_ms=fired_at_ms,
            topic=timer.topic,
        )

    @classmethod
    def cancel(
        cls,
        timer_id: str,
        token: str,
        outcome: str,
        *,
        partition: int,
        worker: str,
        at_ms: int,
        request_offset: int | None = None,
    ) -> FiredRecord:
        """The record of a cancel of ``timer_id`` that did ``outcome``.

        ``request_offset`` is the cancel request's offset on ``partition``.
        """
        return cls(
            FiredKind.CANCEL,
            timer_id,
            token,
            partition,
            worker,
            outcome=outcome,
            at_ms=at_ms,
            request_offset=request_offset,
        )

    def answers(self, timer_id: str, partition: int, request_offset: int) -> bool:
        """Whether this is the answer to the cancel of ``timer_id`` at that request offset.

        Several records can share an id (earlier cancels, fires, a redelivered request's
        second answer comes after the first): only the request's position identifies
        the one that answers it.
        """
        return (
            self.event is FiredKind.CANCEL
            and self.id == timer_id
            and self.partition == partition
            and self.request_offset == request_offset
        )

    def to_json(self) -> bytes:
        """The record's value: JSON, without the fields its kind does not use."""
        doc = {k: v for k, v in asdict(self).items() if v is not None}
        doc["event"] = self.event.value
        return json.dumps(doc).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> FiredRecord:
        """Parse a record's value; raise ``ValueError`` if it is not one."""
        try:
            doc: dict[str, Any] = json.loads(data)
            known = {f.name for f in fields(cls)}
            values = {k: v for k, v in doc.items() if k in known}
            values["event"] = FiredKind(doc["event"])
            return cls(**values)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a fired-topic record: {exc}") from exc


#: Spark SQL type of each field type (``partition`` is an int, every other number a bigint).
_SPARK_TYPES = {"str": "string", "int": "bigint", "FiredKind": "string"}

#: The record as a Spark DDL schema (for ``from_json``): same fields, same names.
FIRED_RECORD_DDL = ", ".join(
    f"{f.name} "
    + ("int" if f.name == "partition" else _SPARK_TYPES[str(f.type).removesuffix(" | None")])
    for f in fields(FiredRecord)
)
