"""Records of the fired topic to what they report, a column batch at a time: total.

The worker writes these records (:class:`app.core.fired.FiredRecord`), so the audit reads
them with its one definition, :meth:`FiredRecord.from_json`, and then checks what the
audit relies on: the fields each kind needs, integers (never floats or booleans) within
the ranges the worker can write, texts that are valid UTF-8 of bounded length. A record
that fails is *set aside* with its reason, never an exception: anyone who can produce to
the topic can write anything there, and one bad record must not stop the gate.

A fire a trigger or a backfill asked for (``extra``) under a series' derived id
(``<id>@trigger:<offset>``, ``<id>@backfill:<second>``) also gets the series id
(``extra_of``) and the number (``extra_n``), so the audit judges it with its series.

Records written before token digests carry the token itself: it is digested here, the
way :func:`app.core.fired.token_digest` does, so versions compare digest to digest.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from app.core.fired import TOKEN_DIGEST_PREFIX, FiredKind, FiredRecord, token_digest
from kafka_timers_client.bounds import MAX_ID_CHARS, MAX_SECONDS, MAX_SERIES_COUNT, MAX_TOKEN_CHARS
from kafka_timers_client.extra_fires import BACKFILL, TRIGGER, parse_extra_id
from spark_audit.parsing import internal_error, safe_text

__all__ = [
    "FIRED_FIELDS",
    "PARSED_FIRED_DDL",
    "PARSED_FIRED_TYPE",
    "FiredUnreadable",
    "parse_fired_arrays",
    "read_fired",
]

#: Longest worker id, callback topic, outcome or reason the audit takes.
MAX_NAME_CHARS = 1024
#: Latest time a fired record may carry, ms: the last second a timer can be due.
MAX_MS = MAX_SECONDS * 1000
_MAX_PARTITION = 2**31 - 1
_MAX_OFFSET = 2**63 - 1

#: The columns of a parsed fired record: ``set_aside`` (a reason) and ``detail`` are set,
#: and the rest null, for a record the audit cannot use.
PARSED_FIRED_TYPE = pa.struct(
    [
        ("set_aside", pa.string()),
        ("detail", pa.string()),
        ("event", pa.string()),
        ("id", pa.string()),
        ("token", pa.string()),
        ("partition", pa.int32()),
        ("worker", pa.string()),
        ("due", pa.int64()),
        ("fired_at_ms", pa.int64()),
        ("topic", pa.string()),
        ("outcome", pa.string()),
        ("at_ms", pa.int64()),
        ("request_offset", pa.int64()),
        ("seq", pa.int64()),
        ("coalesced", pa.int64()),
        ("reason", pa.string()),
        ("extra", pa.string()),
        ("extra_of", pa.string()),
        ("extra_n", pa.int64()),
    ]
)
#: The same type in Spark's DDL.
PARSED_FIRED_DDL = (
    "struct<"
    + ",".join(
        f"{f.name}:{ {pa.string(): 'string', pa.int32(): 'int', pa.int64(): 'bigint'}[f.type] }"
        for f in PARSED_FIRED_TYPE
    )
    + ">"
)
#: The record's fields, in the struct's order after ``set_aside`` and ``detail``.
FIRED_FIELDS = tuple(f.name for f in PARSED_FIRED_TYPE)[2:]


class FiredUnreadable(ValueError):
    """A fired-topic record the audit cannot use; the message is the reason's detail."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def _int(value: Any, name: str, low: int, high: int, *, required: bool) -> int | None:
    if value is None:
        if required:
            raise FiredUnreadable("missing_field", f"{name} is missing")
        return None
    if type(value) is not int:  # a float, NaN, a boolean, a string: not what workers write
        raise FiredUnreadable("bad_number", f"{name} is not an integer")
    if not low <= value <= high:
        raise FiredUnreadable("out_of_range", f"{name} is out of range ({low}..{high})")
    return value


def _text(value: Any, name: str, limit: int, *, required: bool) -> str | None:
    if value is None:
        if required:
            raise FiredUnreadable("missing_field", f"{name} is missing")
        return None
    if not isinstance(value, str):
        raise FiredUnreadable("bad_text", f"{name} is not a string")
    if len(value) > limit:
        raise FiredUnreadable(
            "out_of_range", f"{name} has {len(value)} characters, at most {limit}"
        )
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            raise FiredUnreadable(
                "bad_text", f"{name} is not valid UTF-8 (a lone surrogate)"
            ) from None
    return value


def read_fired(value: bytes | None) -> tuple[Any, ...]:
    """The :data:`FIRED_FIELDS` of one record's value; raise :class:`FiredUnreadable`."""
    if value is None:
        raise FiredUnreadable("no_value", "the record has no value")
    try:
        record = FiredRecord.from_json(value)
    except RecursionError:
        raise FiredUnreadable("malformed", "JSON nested too deeply") from None
    except ValueError as exc:  # not JSON, not an object, an unknown event, a bad field
        raise FiredUnreadable(
            "malformed", f"not a fired-topic record ({type(exc).__name__})"
        ) from None
    except (TypeError, AttributeError) as exc:  # JSON, but not an object
        raise FiredUnreadable(
            "malformed", f"not a fired-topic record ({type(exc).__name__})"
        ) from None
    kind = record.event
    fired, cancel, skipped = (
        kind is FiredKind.FIRED,
        kind is FiredKind.CANCEL,
        kind is FiredKind.SKIPPED,
    )
    timer_id = _text(record.id, "id", MAX_ID_CHARS, required=True)
    token = _text(record.token, "token", MAX_TOKEN_CHARS, required=True)
    if token and not token.startswith(TOKEN_DIGEST_PREFIX):
        token = token_digest(token)  # written before tokens were digested
    partition = _int(record.partition, "partition", 0, _MAX_PARTITION, required=True)
    worker = _text(record.worker, "worker", MAX_NAME_CHARS, required=True)
    due = _int(record.due, "due", 0, MAX_SECONDS, required=fired or skipped)
    fired_at_ms = _int(record.fired_at_ms, "fired_at_ms", 0, MAX_MS, required=fired)
    topic = _text(record.topic, "topic", MAX_NAME_CHARS, required=False)
    outcome = _text(record.outcome, "outcome", MAX_NAME_CHARS, required=cancel)
    at_ms = _int(record.at_ms, "at_ms", 0, MAX_MS, required=cancel or skipped)
    request_offset = _int(record.request_offset, "request_offset", 0, _MAX_OFFSET, required=False)
    seq = _int(record.seq, "seq", 0, MAX_SERIES_COUNT, required=False)
    coalesced = _int(record.coalesced, "coalesced", 0, MAX_SERIES_COUNT, required=False)
    reason = _text(record.reason, "reason", MAX_NAME_CHARS, required=skipped)
    extra, extra_of, extra_n = _extra(record.extra, timer_id or "") if fired else (None,) * 3
    return (
        kind.value,
        timer_id,
        token,
        partition,
        worker,
        due,
        fired_at_ms,
        topic,
        outcome,
        at_ms,
        request_offset,
        seq,
        coalesced,
        reason,
        extra,
        extra_of,
        extra_n,
    )


def _extra(extra: Any, timer_id: str) -> tuple[str | None, str | None, int | None]:
    """A fire's ``extra``, and for a series' extra fire the series id and the number its
    id names (:func:`~kafka_timers_client.extra_fires.parse_extra_id`): a trigger's fire
    whose id names none is a one-shot's own fire; a backfill's always names one."""
    if extra is None:
        return None, None, None
    if extra not in (TRIGGER, BACKFILL):
        raise FiredUnreadable("malformed", "extra is neither trigger nor backfill")
    parsed = parse_extra_id(timer_id)
    if parsed is None or parsed[1] != extra:
        if extra == BACKFILL:
            raise FiredUnreadable("malformed", "a backfilled fire's id names no occurrence")
        return extra, None, None
    series_id, _, number = parsed
    return extra, series_id, number


def parse_fired_arrays(value: pa.Array) -> pa.StructArray:
    """Parse a batch of fired-topic values; one :data:`PARSED_FIRED_TYPE` entry each."""
    columns: list[list[Any]] = [[] for _ in PARSED_FIRED_TYPE]
    blank = (None,) * len(FIRED_FIELDS)
    for raw in value.to_pylist():
        try:
            row: tuple[Any, ...] = (None, None, *read_fired(raw))
        except FiredUnreadable as unreadable:
            row = (unreadable.reason, safe_text(unreadable.detail), *blank)
        except MemoryError:
            raise
        except Exception as exc:  # a bug of the audit: set the record aside, name the bug
            row = (*internal_error(exc), *blank)
        for column, item in zip(columns, row, strict=True):
            column.append(item)
    return pa.StructArray.from_arrays(
        [pa.array(c, f.type) for c, f in zip(columns, PARSED_FIRED_TYPE, strict=True)],
        fields=list(PARSED_FIRED_TYPE),
    )
