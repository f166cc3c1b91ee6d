"""The fired topic's record, as the worker writes it: the format is
:mod:`kafka_timers_client.fired` (clients read answers with it); what only the worker
and the audit need lives here: the fast JSON of a fire and the Spark schema.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from typing import Any

from app.core.timer import Timer
from kafka_timers_client.extra_fires import BACKFILL_HEADER, TRIGGER_HEADER, extra_kind
from kafka_timers_client.fired import (
    TOKEN_DIGEST_PREFIX,
    FiredKind,
    FiredRecord,
    SkipReason,
    defines_state,
    token_digest,
)

__all__ = [
    "FIRED_RECORD_DDL",
    "TOKEN_DIGEST_PREFIX",
    "Audit",
    "FiredKind",
    "FiredRecord",
    "SkipReason",
    "defines_state",
    "extra_json",
    "fired_json",
    "fired_jsons",
    "json_string",
    "token_digest",
]


#: JSON-escapes a string exactly as ``json.dumps`` does (``ensure_ascii``).
json_string = json.encoder.encode_basestring_ascii


def _sha256_constructor() -> Callable[[bytes], Any]:
    """The SHA-256 constructor :func:`token_digest` uses (CPython's own, ``_sha2`` from
    3.12, ``_sha256`` before, else hashlib's), for :func:`fired_jsons` to digest each
    token without the function's frame: the same digests."""
    for name in ("_sha2", "_sha256"):
        try:
            constructor: Callable[[bytes], Any] = importlib.import_module(name).sha256
        except (ImportError, AttributeError):
            continue
        return constructor
    return hashlib.sha256


_sha256 = _sha256_constructor()


def fired_json(
    timer: Timer,
    *,
    partition: int,
    worker_json: str,
    fired_at_ms: int,
    coalesced: int = 0,
    request_offset: int | None = None,
) -> bytes:
    """``FiredRecord.fired(timer, ...).to_json()``, byte for byte, without the record:
    one audit of :func:`fired_jsons`. ``worker_json`` is the worker id already escaped
    with :data:`json_string`. A unit test pins the equality (escapes, unicode, series
    fields, extra fires)."""
    extra = extra_json(timer.headers)
    offsets = {} if request_offset is None else {partition: request_offset}
    return fired_jsons([(timer, partition, fired_at_ms, extra or coalesced)], worker_json, offsets)[
        0
    ]


#: One callback's audit, as :class:`~app.worker.output.OutputProducer` keeps it until the
#: unit's flush: ``(timer, partition, fired_at_ms, coalesced)``, where a trigger's or a
#: backfill's fire (a one-shot: never coalesced) has its :func:`extra_json` instead of
#: ``coalesced``, so that an ordinary fire's audit pays no test for it.
Audit = tuple[Timer, int, int, int | str]


def extra_json(headers: Sequence[tuple[str, bytes]]) -> str:
    """What a fire's audit JSON adds for a trigger's or a backfill's marker among a timer's
    ``headers`` (the ``extra`` field, :func:`~kafka_timers_client.extra_fires.extra_kind`),
    ``""`` for any other fire. The worker looks only when a timer has headers, where it
    copies them onto the callback."""
    return _EXTRA_TEXT.get(headers[0][0], "") if headers else ""


def fired_jsons(
    audits: Sequence[Audit], worker_json: str, request_offsets: Mapping[int, int] | None = None
) -> list[bytes]:
    """:func:`fired_json` of each of ``audits``, byte for byte, for a unit's callbacks at
    once.

    A worker builds one for every callback, where building the record and ``json.dumps``
    would cost about 5 µs. The keys are in :class:`FiredRecord`'s order. A tick's or a
    release round's callbacks share their partition, due second, fire time and topic in
    long runs, so the text after the token (partition, worker, due second) and after
    that (fire time, topic, and the closing brace of a fire with no more fields) is
    formatted once a run, and the token's digest is :func:`token_digest`'s computed
    inline (the same constructor, no call of the function): counted by callgrind (4,000
    audits of one round), 16,888 instructions an audit built one call each, 9,878 so. A
    generated test pins the bytes to the record's over runs that change. A trigger's
    or a backfill's fire adds its ``extra``, found by :func:`extra_json` where the
    callback's headers are built and carried in the place of ``coalesced`` (which such
    a fire never has): any test here would cost every fire (a timer attribute read,
    ~180 instructions counted; a local, ~80).
    ``request_offsets`` gives each partition's ``request_offset`` (the newest request
    applied there when it fired), formatted once a run with the fire time and topic.
    """
    out: list[bytes] = []
    append = out.append
    offsets = request_offsets or {}
    sha256 = _sha256
    last_partition, last_fired_at, last_topic = -1, -1, None
    last_due: int | None = None
    middle = head = tail = closed = offset = ""
    for timer, partition, fired_at_ms, coalesced in audits:
        if partition != last_partition:
            middle = f'", "partition": {partition}, "worker": {worker_json}, "due": '
            applied = offsets.get(partition)
            offset = "" if applied is None else f', "request_offset": {applied}'
            last_partition, last_due, last_fired_at = partition, None, -1
        due = timer.due
        if due != last_due:
            head = f"{middle}{due}"
            last_due = due
        topic = timer.topic
        if fired_at_ms != last_fired_at or topic != last_topic:
            tail = f', "fired_at_ms": {fired_at_ms}, "topic": {json_string(topic)}{offset}'
            closed = tail + "}"
            last_fired_at, last_topic = fired_at_ms, topic
        # token_digest inline: its prefix, then the first 24 hex digits of the SHA-256.
        token = timer.token
        if token:
            prefix, digest = TOKEN_DIGEST_PREFIX, sha256(token.encode()).hexdigest()[:24]
        else:
            prefix = digest = ""
        if not (timer.seq or coalesced) and timer.schema_id is None:  # nearly every fire
            append(
                f'{{"event": "fired", "id": {json_string(timer.id)}, '
                f'"token": "{prefix}{digest}{head}{closed}'.encode()
            )
            continue
        text = (
            f'{{"event": "fired", "id": {json_string(timer.id)}, '
            f'"token": "{prefix}{digest}{head}{tail}'
        )
        if timer.seq:
            text += f', "seq": {timer.seq}'
        if coalesced:  # or an extra fire's "extra": the field after "coalesced"
            text += coalesced if coalesced.__class__ is str else f', "coalesced": {coalesced}'
        if timer.schema_id is not None:
            text += f', "schema_id": {timer.schema_id}'
        append((text + "}").encode())
    return out


#: The ``extra`` field's JSON text after a marker header's name (``extra_kind``'s).
_EXTRA_TEXT = {
    name: f', "extra": {json_string(kind)}'
    for name in (TRIGGER_HEADER, BACKFILL_HEADER)
    if (kind := extra_kind(((name, b""),))) is not None
}


#: Spark SQL type of each field type (``partition`` is an int, every other number a bigint).
_SPARK_TYPES = {"str": "string", "int": "bigint", "FiredKind": "string"}

#: The record as a Spark DDL schema (for ``from_json``): same fields, same names.
FIRED_RECORD_DDL = ", ".join(
    f"{f.name} "
    + ("int" if f.name == "partition" else _SPARK_TYPES[str(f.type).removesuffix(" | None")])
    for f in fields(FiredRecord)
)
