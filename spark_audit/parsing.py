"""Raw request records to what they ask for, a column batch at a time (pyarrow only).

The audit must read requests exactly as the worker does, so it calls the worker's own
:func:`app.core.request_format.parse_request` and :class:`app.core.policy.RequestPolicy` on every
record rather than re-implementing the formats. Records either refuses are skipped:
the worker dead-lettered them, so they never became timers. Requests are parsed without
the worker's clock, so a series is anchored at its record's timestamp, the earliest the
worker can have anchored it; :mod:`spark_audit.reconcile` finds where it really did.

These functions take and return Arrow arrays, so Spark hands them thousands of records
per call (an Arrow UDF) instead of one Python call per row.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from app.core.budget import DEFAULT_MAX_RECORD_BYTES, check_fits
from app.core.errors import RejectedRequest
from app.core.fired import token_digest
from app.core.policy import RequestPolicy
from app.core.recurrence import Recurrence
from app.core.request_format import RawRecord, parse_request
from app.core.timer import Cancel
from app.settings import Settings

__all__ = [
    "CANCEL",
    "PARSED_REQUEST_DDL",
    "PARSED_REQUEST_TYPE",
    "SCHEDULE",
    "ParsedColumns",
    "parse_request_arrays",
    "policy_for",
    "series_from_json",
    "series_json",
]

#: ``kind`` of a request that schedules (or reschedules) a timer.
SCHEDULE = "schedule"
#: ``kind`` of a request that cancels one.
CANCEL = "cancel"

#: What one request record means; ``reject`` is set (and the rest null) when refused.
PARSED_REQUEST_TYPE = pa.struct(
    [
        ("reject", pa.string()),
        ("kind", pa.string()),
        ("id", pa.string()),
        ("token", pa.string()),
        ("due", pa.int64()),
        ("check_token", pa.bool_()),
        ("callback_topic", pa.string()),
        ("series", pa.string()),
    ]
)
#: The same type in Spark's DDL.
PARSED_REQUEST_DDL = (
    "struct<reject:string,kind:string,id:string,token:string,due:bigint,"
    "check_token:boolean,callback_topic:string,series:string>"
)


def series_json(recurrence: Recurrence) -> str:
    """A recurrence as the JSON the audit carries through Spark (see :func:`series_from_json`)."""
    return json.dumps(dataclasses.asdict(recurrence), separators=(",", ":"))


def series_from_json(text: str) -> Recurrence:
    """Inverse of :func:`series_json`."""
    return Recurrence(**json.loads(text))


def policy_for(settings: Settings) -> RequestPolicy:
    """The policy the workers apply, built from the same settings they are."""
    return settings.request_policy()


@dataclass
class ParsedColumns:
    """Column lists being filled, one entry per input record."""

    reject: list[str | None]
    kind: list[str | None]
    id: list[str | None]
    token: list[str | None]
    due: list[int | None]
    check_token: list[bool | None]
    callback_topic: list[str | None]
    series: list[str | None]

    @classmethod
    def empty(cls) -> ParsedColumns:
        return cls([], [], [], [], [], [], [], [])

    def add(
        self,
        reject: str | None,
        kind: str | None = None,
        timer_id: str | None = None,
        token: str | None = None,
        due: int | None = None,
        check_token: bool | None = None,
        callback_topic: str | None = None,
        series: str | None = None,
    ) -> None:
        self.reject.append(reject)
        self.kind.append(kind)
        self.id.append(timer_id)
        self.token.append(token)
        self.due.append(due)
        self.check_token.append(check_token)
        self.callback_topic.append(callback_topic)
        self.series.append(series)

    def to_arrow(self) -> pa.StructArray:
        return pa.StructArray.from_arrays(
            [
                pa.array(self.reject, pa.string()),
                pa.array(self.kind, pa.string()),
                pa.array(self.id, pa.string()),
                pa.array(self.token, pa.string()),
                pa.array(self.due, pa.int64()),
                pa.array(self.check_token, pa.bool_()),
                pa.array(self.callback_topic, pa.string()),
                pa.array(self.series, pa.string()),
            ],
            fields=list(PARSED_REQUEST_TYPE),
        )


def _headers(raw: list[dict[str, Any]] | None) -> tuple[tuple[str, bytes], ...]:
    if not raw:
        return ()
    return tuple((h["key"] or "", h["value"] or b"") for h in raw)


def parse_request_arrays(
    topic: pa.Array,
    partition: pa.Array,
    offset: pa.Array,
    timestamp_ms: pa.Array,
    key: pa.Array,
    value: pa.Array,
    headers: pa.Array,
    policy: RequestPolicy,
) -> pa.StructArray:
    """Parse a batch of request records; one :data:`PARSED_REQUEST_TYPE` entry each."""
    out = ParsedColumns.empty()
    for t, p, o, ts, k, v, h in zip(
        topic.to_pylist(),
        partition.to_pylist(),
        offset.to_pylist(),
        timestamp_ms.to_pylist(),
        key.to_pylist(),
        value.to_pylist(),
        headers.to_pylist(),
        strict=True,
    ):
        record = RawRecord(t, p, o, ts, k, v, _headers(h))
        try:
            request = parse_request(record)
            if isinstance(request, Cancel):
                token = token_digest(request.token)
                out.add(None, CANCEL, request.id, token, None, request.check_token)
                continue
            # The worker checks against its clock when it reads the request; the record's
            # timestamp is that moment give or take the consumer lag.
            policy.check(request, ts / 1000)
            check_fits(request, DEFAULT_MAX_RECORD_BYTES)  # the worker's default budget
        except RejectedRequest as rejected:
            out.add(rejected.reason.value)
            continue
        series = None if request.recurrence is None else series_json(request.recurrence)
        token = token_digest(request.token)  # the fired topic carries digests, not tokens
        out.add(None, SCHEDULE, request.id, token, request.due, None, request.topic, series)
    return out.to_arrow()
