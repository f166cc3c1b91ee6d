"""The record the worker writes to the fired topic: the one definition of that format.

One JSON record per delivered callback (``event: fired``), per fire the late-fire policy
did not deliver (``event: skipped``, with why) and per cancel request (``event:
cancel``, with what the cancel did), keyed by timer id. A series' records carry the
occurrence's ``seq``; ``coalesced`` counts the earlier occurrences a record also stands
for (``seq - coalesced`` to ``seq - 1``), folded into it by the ``coalesce`` policy.
The audit reconciles these against the requests; clients read a cancel's outcome back
from them. Fields a kind does not use are left out of the JSON.

Every record goes to the fired topic's partition numbered like the request partition
that holds the timer (``partition``; all service topics have one partition count), so
whoever knows a timer's request partition reads one partition of the fired topic. A
cancel record also names the offset of the cancel request it answers
(``request_offset``): a client that sent a cancel matches its answer exactly, never
"the first record for this id", which could answer an earlier cancel.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass, fields
from enum import Enum
from typing import Protocol

from kafka_timers_client.extra_fires import extra_kind

__all__ = [
    "TOKEN_DIGEST_PREFIX",
    "FiredKind",
    "FiredRecord",
    "SkipReason",
    "TimerLike",
    "defines_state",
    "token_digest",
]


class TimerLike(Protocol):
    """What a fired record is built from: the service's ``Timer`` is one. A protocol, so
    this module (which clients import to read answers) needs nothing of the service."""

    @property
    def id(self) -> str: ...
    @property
    def token(self) -> str: ...
    @property
    def due(self) -> int: ...
    @property
    def topic(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def schema_id(self) -> int | None: ...
    @property
    def headers(self) -> tuple[tuple[str, bytes], ...]: ...


class FiredKind(str, Enum):
    """What a record on the fired topic reports."""

    #: A callback was delivered.
    FIRED = "fired"
    #: A cancel request was applied; ``outcome`` says what it did.
    CANCEL = "cancel"
    #: A fire the late-fire policy did not deliver; ``reason`` says why.
    SKIPPED = "skipped"
    #: A request accepted but not stored, answered like a cancel: ``outcome`` is
    #: ``duplicate`` (that version already fired), ``cancelled_earlier`` (a cancel with
    #: its token came first) or ``wrong_token`` (the id's pending timer is protected by
    #: another token: refused, also dead-lettered). The audit reads it and judges
    #: nothing by it.
    DROPPED = "dropped"
    #: A partition's answer to an operator's bulk cancel (``kafka-timers cancel-bulk``):
    #: ``id`` is ``cancel-bulk/<request id>``, ``outcome`` ``cancelled``, ``dry_run`` or
    #: ``refused`` (its filter could not be read, as an empty prefix: nothing cancelled,
    #: ``reason`` says why), and the JSON adds ``request``, ``matched`` and
    #: ``cancelled`` (each cancelled timer also has its own ``cancel`` record). The audit
    #: judges nothing by it.
    BULK_CANCEL = "bulk_cancel"
    #: A timer's owner paused it (``outcome``: ``paused``, ``wrong_token``,
    #: ``already_fired`` or ``not_found``); answered at the request's offset like a
    #: cancel. The audit judges nothing by it.
    PAUSE = "pause"
    #: A timer's owner resumed it (``outcome``: ``resumed`` or as for a pause).
    RESUME = "resume"
    #: A timer's owner applied a trigger (``outcome``: ``triggered`` or as for a pause):
    #: what it fires has its own ``fired`` records. The audit judges nothing by it.
    TRIGGER = "trigger"
    #: A timer's owner applied a backfill (``outcome``: ``backfilled``, ``too_many``,
    #: ``not_a_series`` or as for a pause). The audit judges nothing by it.
    BACKFILL = "backfill"


class SkipReason(str, Enum):
    """Why a fire was not delivered (``reason`` of a skipped record)."""

    #: Later than the timer's ``skip-after``.
    LATE = "late"
    #: Folded by ``coalesce`` into a fire of a later occurrence (reported on its own only
    #: when catching up took more than one tick).
    COALESCED = "coalesced"
    #: Refused when it came due: its callback topic or size is no longer allowed (the
    #: allow-list or the payload limit narrowed since it was stored), or its topic does
    #: not exist. Dead-lettered (the dead letter's reason says which), and a series ends
    #: with it.
    NOT_ALLOWED = "not_allowed"


#: Marks a token digest on the fired topic (records before it carry the token itself).
TOKEN_DIGEST_PREFIX = "h1:"


class _Hash(Protocol):
    def hexdigest(self) -> str: ...


def _builtin_sha256() -> Callable[[bytes], _Hash]:
    """CPython's own SHA-256 constructor (``_sha2`` from 3.12, ``_sha256`` before), else
    hashlib's: the same digests, without the algorithm lookup OpenSSL makes on every
    call (a token's digest counted 7,187 instructions through hashlib, 5,597 so)."""
    for name in ("_sha2", "_sha256"):
        try:
            constructor: Callable[[bytes], _Hash] = importlib.import_module(name).sha256
        except (ImportError, AttributeError):
            continue
        return constructor
    return hashlib.sha256


#: The SHA-256 constructor of :func:`token_digest` (a worker digests every token it fires).
_sha256 = _builtin_sha256()


#: The events that answer a request naming a timer by id and token.
_ANSWERS = frozenset(
    {FiredKind.CANCEL, FiredKind.PAUSE, FiredKind.RESUME, FiredKind.TRIGGER, FiredKind.BACKFILL}
)


def token_digest(token: str) -> str:
    """What the fired topic says of a token: ``h1:`` and the first 24 hex digits of its
    SHA-256, or ``""`` for no token.

    The fired topic is the audit's, read by more people than should cancel timers: with
    the token itself there, anyone who reads it could cancel a running series. The audit
    needs only to tell versions apart, and compares digests with digests (Spark's
    ``sha2`` computes the same one, so records written before digests are compared too).
    """
    if not token:
        return ""
    return TOKEN_DIGEST_PREFIX + _sha256(token.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class FiredRecord:
    """One record of the fired topic."""

    #: What happened.
    event: FiredKind
    #: The timer's id (also the record key).
    id: str
    #: :func:`token_digest` of the fired version's token, or of the token the cancel
    #: presented ("" for none): never the token itself.
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
    #: A :class:`kafka_timers_client.outcome.CancelOutcome` value (cancel only).
    outcome: str | None = None
    #: The worker's clock when it applied the cancel or skipped the fire, epoch ms
    #: (cancel and skipped only).
    at_ms: int | None = None
    #: An offset on ``partition`` of the request topic: of the cancel request (cancel
    #: and dropped), or of the newest request the worker had applied to the partition
    #: when it fired (fired): a version whose request, or forwarded copy, sits at a
    #: higher offset had not reached the firing worker yet, so an older version firing
    #: then lost a race with its reschedule rather than undoing it. Absent in records
    #: written before it existed, and on a fire before the partition applied any request.
    request_offset: int | None = None
    #: The occurrence's number in its series, from 1 (series only).
    seq: int | None = None
    #: Earlier occurrences folded into this record by ``coalesce`` (series, when any).
    coalesced: int | None = None
    #: Why a fire came out of its schedule (fired only; absent for every scheduled fire):
    #: ``trigger``, asked for by a trigger (a one-shot timer's own fire, before its
    #: second, or a series' extra occurrence ``<id>@trigger:<request offset>``), or
    #: ``backfill``, an occurrence a backfill fired (``<id>@backfill:<second>``); see
    #: :mod:`kafka_timers_client.extra_fires`.
    extra: str | None = None
    #: A :class:`SkipReason` value (skipped only).
    reason: str | None = None
    #: The Schema Registry schema id the timer's request was framed with (fired and
    #: skipped, only for a framed request; ``app.core.sr_framing``).
    schema_id: int | None = None

    @classmethod
    def fired(
        cls,
        timer: TimerLike,
        *,
        partition: int,
        worker: str,
        fired_at_ms: int,
        coalesced: int = 0,
        request_offset: int | None = None,
    ) -> FiredRecord:
        """The record of ``timer``'s callback, produced at ``fired_at_ms`` with requests
        applied through ``request_offset``."""
        return cls(
            FiredKind.FIRED,
            timer.id,
            token_digest(timer.token),
            partition,
            worker,
            due=timer.due,
            fired_at_ms=fired_at_ms,
            topic=timer.topic,
            request_offset=request_offset,
            seq=timer.seq or None,
            coalesced=coalesced or None,
            schema_id=timer.schema_id,
            extra=extra_kind(timer.headers),
        )

    @classmethod
    def skipped(
        cls,
        timer: TimerLike,
        reason: SkipReason,
        *,
        partition: int,
        worker: str,
        at_ms: int,
        coalesced: int = 0,
    ) -> FiredRecord:
        """The record of a fire of ``timer`` that was not delivered, for ``reason``."""
        return cls(
            FiredKind.SKIPPED,
            timer.id,
            token_digest(timer.token),
            partition,
            worker,
            due=timer.due,
            topic=timer.topic,
            at_ms=at_ms,
            seq=timer.seq or None,
            coalesced=coalesced or None,
            reason=reason.value,
            schema_id=timer.schema_id,
        )

    @classmethod
    def dropped(
        cls,
        timer: TimerLike,
        outcome: str,
        *,
        partition: int,
        worker: str,
        at_ms: int,
        request_offset: int | None = None,
    ) -> FiredRecord:
        """The answer to a request for ``timer`` that was not stored, for ``outcome``
        (``request_offset`` is the request's offset on ``partition``)."""
        return cls(
            FiredKind.DROPPED,
            timer.id,
            token_digest(timer.token),
            partition,
            worker,
            due=timer.due,
            outcome=outcome,
            at_ms=at_ms,
            request_offset=request_offset,
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
        kind: FiredKind = FiredKind.CANCEL,
    ) -> FiredRecord:
        """The record of a cancel of ``timer_id`` that did ``outcome`` (or of a pause or
        resume: ``kind``).

        ``request_offset`` is the cancel request's offset on ``partition``.
        """
        return cls(
            kind,
            timer_id,
            token_digest(token),
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
            self.event in _ANSWERS
            and self.id == timer_id
            and self.partition == partition
            and self.request_offset == request_offset
        )

    def to_json(self) -> bytes:
        """The record's value: JSON, without the fields its kind does not use.

        Read field by field rather than with ``dataclasses.asdict``, which deep-copies
        every value: this runs once per callback, and asdict was most of its cost.
        """
        doc = {k: v for k in _FIELD_NAMES if (v := getattr(self, k)) is not None}
        doc["event"] = self.event.value
        return json.dumps(doc).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> FiredRecord:
        """Parse a record's value; raise ``ValueError`` if it is not one, and nothing
        else: anyone who may write the fired topic can write anything there, and a
        reader waiting for an answer (``TimerClient``'s ``--wait``) skips what is not
        one. JSON that is not an object raised ``AttributeError`` here, and JSON nested
        past the decoder's depth ``RecursionError``."""
        try:
            doc = json.loads(data)
        except RecursionError:
            raise ValueError("not a fired-topic record: JSON nested too deeply") from None
        if not isinstance(doc, dict):
            raise ValueError(f"not a fired-topic record: a JSON {type(doc).__name__}")
        try:
            known = {f.name for f in fields(cls)}
            values = {k: v for k, v in doc.items() if k in known}
            values["event"] = FiredKind(doc["event"])
            return cls(**values)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a fired-topic record: {exc}") from exc


#: The record's fields, in order (the JSON's keys).
_FIELD_NAMES = tuple(f.name for f in fields(FiredRecord))


def defines_state(record: FiredRecord) -> bool:
    """Whether ``record`` says what state its timer is in: a fire, a cancel that removed
    the timer, or one that waits for it. A refused or late cancel changes nothing."""
    return record.event is FiredKind.FIRED or record.outcome in (
        "cancelled",
        "cancelled_in_advance",
    )
