"""Turning a raw record on the request topic into a :class:`Timer` or a :class:`Cancel`.

Three formats share the topic; they are told apart like this, in order:

1. **etf1** — the record has a ``scheduler-epoch`` header (or is a tombstone: null value).
   Key = schedule id, value = payload, target in ``scheduler-target-topic`` /
   ``scheduler-target-key``. A tombstone cancels the schedule with that key.
2. **JSON** — the value's first non-blank byte is ``{``. Protobuf can never start
   with ``{`` itself (it would be field 15 as a deprecated group), but it can start
   with a whitespace byte followed by ``{``: a 123-byte callback topic is encoded as
   ``\n{``. So a value that is not literally ``{...`` and is not valid JSON is tried
   as protobuf before it is refused.
3. **protobuf** — anything else: the ``Future`` message of
   ``app/core/proto/kafka_timers/v1/future.proto``, decoded by the protobuf runtime
   (:mod:`app.core.proto`). A record holding only fields 1-3 and keyed by its expiry
   second, exactly what the original article's producers send, is a valid timer.

A JSON or protobuf request may come **framed** in Confluent Schema Registry's wire
format (the value starts with byte ``0``, which neither format can start with): the
frame is unwrapped by :mod:`app.core.sr_framing`, the message inside read as JSON or
protobuf as above, and the frame's schema id kept with the timer
(:attr:`app.core.timer.Timer.schema_id`).

A JSON or protobuf request may be **recurring**: a cron expression (with a time zone)
or an interval instead of a due time, with an optional start, end and count. Its first
occurrence is fixed here, from the start and the record's timestamp, but never more
than :data:`kafka_timers_client.recurrence.ANCHOR_SLACK_SECONDS` before the worker's clock (see
:meth:`kafka_timers_client.recurrence.Recurrence.anchored` and :func:`parse_request`). A request
may also carry its own late-fire policy (:mod:`kafka_timers_client.late`), and a spread
(:mod:`kafka_timers_client.spread`): seconds past its due second over which it may fire.
"""

from __future__ import annotations

import re
from dataclasses import replace

from app.core.raw_record import RawRecord
from app.core.request_etf1 import ETF1_EPOCH, etf1_schedule, etf1_tombstone
from app.core.request_json import from_json
from app.core.request_protobuf import from_protobuf
from app.core.sr_framing import unframe
from app.core.timer import Cancel, Timer
from kafka_timers_client.bounds import (
    MAX_HEADER_NAME_CHARS,
    MAX_HEADERS,
    MAX_ID_CHARS,
    MAX_TOKEN_CHARS,
    checked_text,
)
from kafka_timers_client.errors import RejectedRequest, RejectReason

__all__ = ["parse_request"]

#: ``value.lstrip()[:1] == b"{"`` without copying the value: every protobuf request
#: starts with a whitespace byte (field 1's tag, ``\n``), and its callback's bytes
#: were copied for each (a tenth of a millisecond for 100 KB).
_json_after_space = re.compile(rb"[ \t\n\r\x0b\x0c]*\{").match


def parse_request(record: RawRecord, now: float | None = None) -> Timer | Cancel:
    """Interpret ``record``; raise :class:`RejectedRequest` with a reason if it is not valid.

    ``now`` is the reader's clock (epoch seconds), the worker's when it applies the
    request: a series starts at the later of the record's timestamp and ``now`` less
    :data:`~kafka_timers_client.recurrence.ANCHOR_SLACK_SECONDS`, so a producer whose clock is far
    behind (a timestamp of 1970) does not replay decades of occurrences. Without
    ``now`` (the audit) a series starts at the record's timestamp: the earliest the
    worker can have anchored it.

    Total over what Kafka can deliver, with bounded work: every number is bounded while
    it is still text and every text is valid UTF-8 of bounded length
    (:mod:`kafka_timers_client.bounds`); what still escapes is a bug that
    :mod:`app.worker.isolation` dead-letters.
    """
    # Which format (the module's docstring), here rather than in a function of its own:
    # every request read passes, and a Python call is a few hundred instructions.
    if record.defect is not None:
        raise RejectedRequest(RejectReason.MALFORMED, record.defect)
    value = record.value
    if value is None:
        return _bounded(etf1_tombstone(record))
    if record.headers:  # most requests have none: no dict for them
        headers = dict(record.headers)
        if ETF1_EPOCH in headers:
            return _bounded(etf1_schedule(record, headers))
    first = value[:1]
    if first == b"{":
        request = from_json(record, now)
    elif first == b"\x00":  # Schema Registry's magic byte (sr_framing.is_framed, inline)
        request = _from_framed(record, now)
    elif first.isspace() and _json_after_space(value):
        # JSON after leading whitespace, or protobuf whose first tag is a whitespace byte:
        # field 1 (the callback topic) is tag "\n", and a 123-byte topic's length is "{".
        try:
            request = from_json(record, now)
        except RejectedRequest as not_json:
            if not_json.reason is not RejectReason.MALFORMED:
                raise
            request = from_protobuf(record, now)
    else:
        request = from_protobuf(record, now)
    # The common case of the bounds, in a few C calls (a function call each cost 5%): a
    # short ASCII id and token, and no headers; anything else is checked by _bounded.
    timer_id, token = request.id, request.token
    if (
        len(timer_id) <= MAX_ID_CHARS
        and len(token) <= MAX_TOKEN_CHARS
        and timer_id.isascii()
        and token.isascii()
        and not (isinstance(request, Timer) and request.headers)
    ):
        return request
    return _bounded(request)


def _bounded(request: Timer | Cancel) -> Timer | Cancel:
    """``request`` if its id, token and header names are within the client's bounds
    (:mod:`kafka_timers_client.bounds`)."""
    timer_id, token = request.id, request.token
    if not (
        len(timer_id) <= MAX_ID_CHARS
        and len(token) <= MAX_TOKEN_CHARS
        and timer_id.isascii()
        and token.isascii()
    ):
        checked_text(timer_id, "the id", MAX_ID_CHARS)
        checked_text(token, "the token", MAX_TOKEN_CHARS)
    if isinstance(request, Timer) and request.headers:
        if len(request.headers) > MAX_HEADERS:
            raise RejectedRequest(
                RejectReason.OUT_OF_BOUNDS,
                f"{len(request.headers)} headers, at most {MAX_HEADERS}",
            )
        for name, _ in request.headers:
            checked_text(name, "a header name", MAX_HEADER_NAME_CHARS)
    return request


def _from_framed(record: RawRecord, now: float | None) -> Timer | Cancel:
    """A request in Schema Registry's wire format: its message read as JSON (no message
    indexes; after whitespace, tried as protobuf too, as unframed values are) or as a
    protobuf ``Future``; a timer keeps the frame's schema id."""
    assert record.value is not None
    body = record.value[5:]
    if body.lstrip()[:1] == b"{":
        framed = unframe(record.value, json=True)
        try:
            request = from_json(replace(record, value=framed.message), now)
        except RejectedRequest as not_json:
            if not_json.reason is not RejectReason.MALFORMED or body[:1] == b"{":
                raise
            framed = unframe(record.value, json=False)
            request = from_protobuf(replace(record, value=framed.message), now)
    else:
        framed = unframe(record.value, json=False)
        request = from_protobuf(replace(record, value=framed.message), now)
    if isinstance(request, Timer):
        return replace(request, schema_id=framed.schema_id)
    return request
