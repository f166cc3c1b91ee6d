"""Raw request records to what they ask for, a column batch at a time (pyarrow only).

The audit must read requests exactly as the worker does, so it calls the worker's own
:func:`app.core.request_format.parse_request` and :class:`app.core.policy.RequestPolicy` on every
record rather than re-implementing the formats. Records either refuses are skipped:
the worker dead-lettered them, so they never became timers. Requests are parsed without
the worker's clock, so a series is anchored at its record's timestamp, the earliest the
worker can have anchored it; :mod:`spark_audit.series` finds where it really did.

These functions take and return Arrow arrays, so Spark hands them thousands of records
per call (an Arrow UDF) instead of one Python call per row.
"""

from __future__ import annotations

import dataclasses
import json
import traceback
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from app.core.budget import DEFAULT_MAX_RECORD_BYTES, check_fits
from app.core.debounce import Debounce
from app.core.fired import token_digest
from app.core.policy import RequestPolicy
from app.core.raw_record import RawRecord
from app.core.request_format import parse_request
from app.core.routing import Origin
from app.core.timer import Cancel, TokenAction
from app.settings import Settings
from kafka_timers_client.errors import RejectedRequest, RejectReason
from kafka_timers_client.recurrence import Recurrence
from spark_audit.routing import owner, split_copy

__all__ = [
    "CANCEL",
    "PARSED_REQUEST_DDL",
    "PARSED_REQUEST_TYPE",
    "RECONCILED_KINDS",
    "SCHEDULE",
    "ParsedColumns",
    "debounce_json",
    "internal_error",
    "judge_request",
    "parse_request_arrays",
    "policy_for",
    "safe_text",
    "schedule_from_json",
    "series_from_json",
    "series_json",
]

#: Most characters of a reason's detail the audit keeps (and shows).
MAX_DETAIL_CHARS = 200
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

#: ``kind`` of a request that schedules (or reschedules) a timer.
SCHEDULE = "schedule"
#: ``kind`` of a request that cancels one.
CANCEL = "cancel"
#: The kinds the audit reconciles; ``pause`` and ``resume`` (a timer's owner holding
#: it back) are accepted requests it judges nothing by.
RECONCILED_KINDS = (SCHEDULE, CANCEL)

#: What one request record means; ``reject`` is set (and the rest null) when refused.
PARSED_REQUEST_TYPE = pa.struct(
    [
        ("reject", pa.string()),
        ("detail", pa.string()),
        ("kind", pa.string()),
        ("id", pa.string()),
        ("token", pa.string()),
        ("due", pa.int64()),
        ("check_token", pa.bool_()),
        ("callback_topic", pa.string()),
        ("series", pa.string()),
        ("spread", pa.int64()),
        # Routing (spark_audit.routing): the id's owner partition (accepted requests), and
        # for a forwarded copy the partition and offset its hop names (refused ones too).
        ("owner", pa.int32()),
        ("origin_partition", pa.int32()),
        ("origin_offset", pa.int64()),
    ]
)
#: The same type in Spark's DDL.
PARSED_REQUEST_DDL = (
    "struct<reject:string,detail:string,kind:string,id:string,token:string,due:bigint,"
    "check_token:boolean,callback_topic:string,series:string,spread:bigint,"
    "owner:int,origin_partition:int,origin_offset:bigint>"
)


def series_json(recurrence: Recurrence) -> str:
    """A recurrence as the JSON the audit carries through Spark (see :func:`series_from_json`)."""
    return json.dumps(dataclasses.asdict(recurrence), separators=(",", ":"))


def series_from_json(text: str) -> Recurrence:
    """Inverse of :func:`series_json`."""
    return Recurrence(**json.loads(text))


#: How a debounce's JSON begins in the ``series`` column (a recurrence's never does).
_DEBOUNCE_PREFIX = '{"debounce":'


def debounce_json(debounce: Debounce) -> str:
    """A debounced request's window (and, restored whole by an import, the first request's
    time and merged count it brings) as the JSON the audit carries through Spark in the
    ``series`` column: a debounced request has no recurrence, and one column of text
    carries either without another column in every schema the requests pass through."""
    fields = [debounce.seconds, debounce.max_wait, debounce.first_ms, debounce.merged]
    return json.dumps({"debounce": [*fields, debounce.restored]}, separators=(",", ":"))


def schedule_from_json(text: str | None) -> tuple[Recurrence | None, Debounce | None]:
    """The ``series`` column read back: a series' recurrence (:func:`series_json`), or a
    debounce (:func:`debounce_json`), or neither."""
    if not text:
        return None, None
    if text.startswith(_DEBOUNCE_PREFIX):
        seconds, max_wait, first_ms, merged, restored = json.loads(text)["debounce"]
        return None, Debounce(seconds, max_wait, first_ms, merged, restored=restored)
    return series_from_json(text), None


def policy_for(settings: Settings) -> RequestPolicy:
    """The policy the workers apply, built from the same settings they are."""
    return settings.request_policy()


@dataclass
class ParsedColumns:
    """Column lists being filled, one entry per input record."""

    reject: list[str | None]
    detail: list[str | None]
    kind: list[str | None]
    id: list[str | None]
    token: list[str | None]
    due: list[int | None]
    check_token: list[bool | None]
    callback_topic: list[str | None]
    series: list[str | None]
    spread: list[int | None]
    owner: list[int | None] = dataclasses.field(default_factory=list)
    origin_partition: list[int | None] = dataclasses.field(default_factory=list)
    origin_offset: list[int | None] = dataclasses.field(default_factory=list)

    @classmethod
    def empty(cls) -> ParsedColumns:
        return cls([], [], [], [], [], [], [], [], [], [])

    def route(self, owner: int | None, origin: Origin | None) -> None:
        """Append the routing columns of the record just added."""
        self.owner.append(owner)
        self.origin_partition.append(None if origin is None else origin.partition)
        self.origin_offset.append(None if origin is None else origin.offset)

    def add(
        self,
        reject: str | None,
        detail: str | None = None,
        kind: str | None = None,
        timer_id: str | None = None,
        token: str | None = None,
        due: int | None = None,
        check_token: bool | None = None,
        callback_topic: str | None = None,
        series: str | None = None,
        spread: int | None = None,
    ) -> None:
        self.reject.append(reject)
        self.detail.append(detail)
        self.kind.append(kind)
        self.id.append(timer_id)
        self.token.append(token)
        self.due.append(due)
        self.check_token.append(check_token)
        self.callback_topic.append(callback_topic)
        self.series.append(series)
        self.spread.append(spread)

    def to_arrow(self) -> pa.StructArray:
        return pa.StructArray.from_arrays(
            [
                pa.array(self.reject, pa.string()),
                pa.array(self.detail, pa.string()),
                pa.array(self.kind, pa.string()),
                pa.array(self.id, pa.string()),
                pa.array(self.token, pa.string()),
                pa.array(self.due, pa.int64()),
                pa.array(self.check_token, pa.bool_()),
                pa.array(self.callback_topic, pa.string()),
                pa.array(self.series, pa.string()),
                pa.array(self.spread, pa.int64()),
                pa.array(self.owner, pa.int32()),
                pa.array(self.origin_partition, pa.int32()),
                pa.array(self.origin_offset, pa.int64()),
            ],
            fields=list(PARSED_REQUEST_TYPE),
        )


def _headers(raw: list[dict[str, Any]] | None) -> tuple[tuple[str, bytes], ...]:
    if not raw:
        return ()
    return tuple((h["key"] or "", h["value"] or b"") for h in raw)


def safe_text(text: str, limit: int = MAX_DETAIL_CHARS) -> str:
    """``text`` cut to ``limit`` characters and made encodable (a lone surrogate escaped):
    what a reason's detail may quote of a hostile record must still be writable."""
    cut = text[:limit]
    try:
        cut.encode()
    except UnicodeEncodeError:
        cut = cut.encode("utf-8", "backslashreplace").decode()
    return cut


def _fits_int64(value: int | None) -> bool:
    return value is None or _INT64_MIN <= value <= _INT64_MAX


def _encodable(*texts: str | None) -> bool:
    try:
        for text in texts:
            if text is not None and not text.isascii():
                text.encode()
    except UnicodeEncodeError:
        return False
    return True


def internal_error(exc: Exception) -> tuple[str, str]:
    """The worker's dead-letter reason for a record its code raised on (not a rejection).

    The same as :func:`app.worker.isolation.rejection_for` (which the audit may not import:
    it reads Kafka, not the worker's internals): ``internal_error`` and the exception's
    class and line, never its message, which may quote the record.
    """
    frames = traceback.extract_tb(exc.__traceback__)
    at = f"{frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else "?"
    return RejectReason.INTERNAL_ERROR.value, f"{type(exc).__name__} at {at}"


def judge_request(
    record: RawRecord, policy: RequestPolicy, out: ParsedColumns, partitions: int | None = None
) -> None:
    """Append what the worker makes of ``record`` to ``out``: total, never raises.

    ``partitions``: the request topic's partition count, by which the worker routes
    (:mod:`spark_audit.routing`): a forwarded copy is read without its hop (a request
    without an id derives its id from the hop's origin, as on the worker), and the
    routing columns say where it came from and which partition owns the id. ``None``:
    nothing is routed, a hop is a header like any other.
    """
    record, origin = split_copy(record, partitions)
    timer_id = _judge_request(record, policy, out)
    out.route(owner(timer_id, partitions), origin)


def _judge_request(record: RawRecord, policy: RequestPolicy, out: ParsedColumns) -> str | None:
    """:func:`judge_request` without routing; the id of an accepted request.

    The worker's own steps in its order (:meth:`app.worker.service.TimerService`):
    :func:`parse_request`, :meth:`RequestPolicy.check` at the record's time, the size
    budget. A :class:`RejectedRequest` is the worker's dead-letter with its reason; any
    other exception the worker dead-letters as ``internal_error``, and so does the audit.
    Only running out of memory propagates: that is the audit failing, not the record.
    """
    try:
        request = parse_request(record)
        if isinstance(request, Cancel) and request.action is not TokenAction.CANCEL:
            # A pause or resume changes when a timer fires, not whether: accepted, and
            # left out of the events the audit reconciles (RECONCILED_KINDS).
            out.add(None, None, request.action.value, request.id, None, None, True)
            return request.id
        if isinstance(request, Cancel):
            token = token_digest(request.token)
            if not _encodable(request.id):
                raise RejectedRequest(RejectReason.OUT_OF_BOUNDS, "the id is not valid UTF-8")
            out.add(None, None, CANCEL, request.id, token, None, request.check_token)
            return request.id
        # The worker checks against its clock when it reads the request; the record's
        # timestamp is that moment give or take the consumer lag.
        policy.check(request, record.timestamp_ms / 1000)
        check_fits(request, DEFAULT_MAX_RECORD_BYTES)  # the worker's default budget
        series = None if request.recurrence is None else series_json(request.recurrence)
        if request.debounce is not None:
            series = debounce_json(request.debounce)
        if not _fits_int64(request.due):
            raise RejectedRequest(RejectReason.DUE_OUT_OF_RANGE, "the due second is out of range")
        if not _encodable(request.id, request.topic):
            raise RejectedRequest(RejectReason.OUT_OF_BOUNDS, "a text is not valid UTF-8")
    except RejectedRequest as rejected:
        out.add(rejected.reason.value, safe_text(rejected.detail))
        return None
    except MemoryError:
        raise
    except Exception as exc:  # the worker dead-letters these too (internal_error)
        out.add(*internal_error(exc))
        return None
    token = token_digest(request.token)  # the fired topic carries digests, not tokens
    spread = request.spread or None  # seconds the fire may come after due, on time
    out.add(
        None, None, SCHEDULE, request.id, token, request.due, None, request.topic, series, spread
    )
    return request.id


def parse_request_arrays(
    topic: pa.Array,
    partition: pa.Array,
    offset: pa.Array,
    timestamp_ms: pa.Array,
    key: pa.Array,
    value: pa.Array,
    headers: pa.Array,
    policy: RequestPolicy,
    defect: pa.Array | None = None,
    partitions: int | None = None,
) -> pa.StructArray:
    """Parse a batch of request records; one :data:`PARSED_REQUEST_TYPE` entry each.

    ``defect``: why the reader could not read a record as a record (a header name that
    is not UTF-8), as :attr:`RawRecord.defect`; the worker dead-letters those.
    ``partitions``: the request topic's partition count (see :func:`judge_request`).
    """
    out = ParsedColumns.empty()
    defects = defect.to_pylist() if defect is not None else [None] * len(offset)
    for t, p, o, ts, k, v, h, d in zip(
        topic.to_pylist(),
        partition.to_pylist(),
        offset.to_pylist(),
        timestamp_ms.to_pylist(),
        key.to_pylist(),
        value.to_pylist(),
        headers.to_pylist(),
        defects,
        strict=True,
    ):
        judge_request(RawRecord(t, p, o, ts or 0, k, v, _headers(h), d), policy, out, partitions)
    return out.to_arrow()
