"""The request that recreates a pending timer on a deployment: what import and migrate send.

Each pending timer becomes one request in the format that carries it exactly:

- a timer an **etf1** producer scheduled (no token, and the three provenance headers
  the worker adds: ``scheduler-timestamp``, ``scheduler-key``, ``scheduler-topic``)
  goes back as an etf1 record, stamped with its original ``scheduler-timestamp``: the
  worker stores the same timer, provenance included, and a tombstone still cancels it;
- a timer whose callback key is not UTF-8 (only a JSON request with ``key_b64`` makes
  one) goes as **JSON**, which carries binary keys;
- every other timer goes as **protobuf**, which carries binary values and repeated
  headers.

A one-shot timer keeps its id, token, due second, callback, headers, late policy and
spread: the target stores the very same version, firing at the same second. A
**series** is sent as a series that starts at its pending occurrence (``start`` = that
occurrence's due second, ``count`` less the occurrences already delivered, the same
``end``, cron and zone or interval, token, late policy and spread), stamped no later
than that occurrence, so the worker anchors it there: the same callbacks at the same
seconds, and a cancel with the same token stops it. No request format can say
"occurrence *n*", so the target numbers the remaining occurrences from 1 again
(``timer-seq``), and the version's identity becomes (token, that occurrence's due
second); as its occurrences are numbered anew, each of a spread series may land on
another second of its window.

A **debounced** timer is sent as a request that restores it whole (its due second, its
debounce and max-wait, its first request's time and merged count: protobuf fields 24-25,
JSON ``debounce_first_ms`` and ``debounce_merged``): the target stores the very same
timer, which fires at the same second with the same ``timer-debounced`` header unless
more requests merge into it there, and the max-wait still runs from its first request.
It replaces a pending version of its id (under the token rule) rather than merging into
it, so importing it twice leaves it as it was.

Every request is keyed by the timer id and sent to the id's owner partition for the
target's partition count (:func:`app.core.routing.owner_of`).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, replace

from app.core.raw_record import RawRecord
from app.core.request_etf1 import ETF1_EPOCH, ETF1_TARGET_KEY, ETF1_TARGET_TOPIC
from app.core.request_format import parse_request
from app.core.timer import Header, Timer
from app.ops.jsonl import LineError, calendar_fields, debounce_fields
from kafka_timers_client import protowire
from kafka_timers_client.errors import RejectedRequest

__all__ = ["ETF1_PROVENANCE", "RequestRecord", "as_request", "checked_request", "continued"]

#: The headers the worker puts first on an etf1 timer, in this order.
ETF1_PROVENANCE = ("scheduler-timestamp", "scheduler-key", "scheduler-topic")


@dataclass(frozen=True)
class RequestRecord:
    """One record for the request topic."""

    key: bytes
    value: bytes
    headers: tuple[Header, ...]
    #: The record's timestamp (CreateTime), epoch ms.
    timestamp_ms: int

    def read_from(self, topic: str, offset: int = 0) -> RawRecord:
        """This record as a worker reads it from partition 0 of ``topic`` at ``offset``."""
        return RawRecord(
            topic=topic,
            partition=0,
            offset=offset,
            timestamp_ms=self.timestamp_ms,
            key=self.key,
            value=self.value,
            headers=self.headers,
        )


def _is_etf1(timer: Timer) -> bool:
    names = tuple(name for name, _ in timer.headers[:3])
    return (
        timer.token == ""
        and names == ETF1_PROVENANCE
        and timer.recurrence is None
        and timer.late is None
        and not timer.spread
        and timer.debounce is None
        and timer.headers[1][1] == timer.id.encode()
    )


def continued(timer: Timer) -> Timer:
    """The timer the target stores for ``timer``: itself for a one-shot timer (a
    debounced one as restored whole, its last request's offset unknown until the target
    reads it); for a series, the series from its pending occurrence on, numbered from 1."""
    rec = timer.recurrence
    if rec is None:
        if timer.debounce is not None:
            restored = replace(timer.debounce, last_offset=-1, restored=True)
            return replace(timer, debounce=restored)
        return timer
    remaining = None if rec.count is None else rec.count - (timer.seq - 1)
    return replace(
        timer,
        recurrence=replace(rec, start=timer.due, count=remaining),
        seq=1,
        fired_before=0,
    )


def as_request(timer: Timer, now_ms: int) -> RequestRecord:
    """The request that makes a deployment store ``timer`` (see the module's doc)."""
    key = timer.id.encode()
    if _is_etf1(timer):
        stamp = timer.headers[0][1]
        try:
            timestamp_ms = int(stamp) * 1000
        except ValueError:
            timestamp_ms = now_ms
        headers: list[Header] = [
            (ETF1_EPOCH, b"%d" % timer.due),
            (ETF1_TARGET_TOPIC, timer.topic.encode()),
        ]
        if timer.key is not None:
            headers.append((ETF1_TARGET_KEY, timer.key))
        headers.extend(timer.headers[3:])
        return RequestRecord(key, timer.value or b"", tuple(headers), max(timestamp_ms, 0))
    target = continued(timer)
    rec = target.recurrence
    # A series is stamped no later than its pending occurrence: the worker anchors a
    # series at the later of its start and its timestamp, and must anchor it there.
    timestamp_ms = now_ms if rec is None else min(now_ms, target.due * 1000)
    try:
        callback_key = None if target.key is None else target.key.decode()
    except UnicodeDecodeError:
        return RequestRecord(key, _as_json(target), (), timestamp_ms)
    future = protowire.Future(
        callback_topic=target.topic,
        callback_key=callback_key,
        callback=target.value if target.value is not None else b"",
        id=target.id,
        token=target.token,
        headers=list(target.headers),
        late=target.late.text() if target.late is not None else None,
        spread=target.spread or None,
    )
    if rec is None:
        future.due = target.due
        debounce = target.debounce
        if debounce is not None:
            future.debounce, future.max_wait = debounce.seconds, debounce.max_wait
            future.debounce_first_ms = debounce.first_ms
            future.debounce_merged = debounce.merged
    else:
        future.cron, future.every = rec.cron, rec.every
        future.tz = rec.tz if rec.cron is not None or rec.calendar is not None else None
        future.start, future.end, future.count = rec.start, rec.end, rec.count
        if rec.calendar is not None:
            future.skip_holidays = rec.calendar.holidays
            future.skip_dates = [day.isoformat() for day in rec.calendar.dates]
            future.skip_policy = rec.calendar.policy.value
    return RequestRecord(key, protowire.encode(future), (), timestamp_ms)


def checked_request(timer: Timer, now_ms: int) -> RequestRecord:
    """:func:`as_request`, read back as the worker will read it: :class:`LineError`
    unless the worker takes it as exactly :func:`continued` ``(timer)``.

    An export line is outside input once it is a file: a line the worker would refuse
    is refused here with the worker's reason, not dead-lettered after the import said
    it sent it, and a number no request carries is refused rather than sent wrapped (a
    due of 2**64 went out as a protobuf varint that reads back as second 0, due at
    once). Read without the worker's clock, as the audit reads: a series anchors at
    the request's timestamp, which :func:`as_request` sets to its pending occurrence.
    """
    request = as_request(timer, now_ms)
    # An etf1 timer's provenance names the request topic it was read from: read back as
    # from that topic (a target with another request topic names its own, as it would
    # for any etf1 record; nothing else of the timer changes).
    topic = timer.headers[2][1].decode(errors="replace") if _is_etf1(timer) else ""
    try:
        back = parse_request(request.read_from(topic))
    except RejectedRequest as refused:
        raise LineError(f"the worker would refuse its request: {refused}") from None
    if isinstance(back, Timer) and back.debounce is not None:  # its offset is the target's
        back = replace(back, debounce=replace(back.debounce, last_offset=-1))
    if back != continued(timer):
        raise LineError("no request recreates it exactly: a number past what a request holds?")
    return request


def _as_json(timer: Timer) -> bytes:
    """A JSON request for a timer with a binary callback key."""
    doc: dict[str, object] = {"id": timer.id, "token": timer.token, "topic": timer.topic}
    assert timer.key is not None
    doc["key_b64"] = base64.b64encode(timer.key).decode()
    doc["value_b64"] = base64.b64encode(timer.value or b"").decode()
    names = [name for name, _ in timer.headers]
    if len(set(names)) != len(names):
        raise LineError(
            f"timer {timer.id!r} has a binary callback key and repeated headers: "
            "no request format carries both"
        )
    headers: dict[str, str] = {}
    for name, value in timer.headers:
        try:
            headers[name] = value.decode()
        except UnicodeDecodeError:
            raise LineError(
                f"timer {timer.id!r} has a binary callback key and a binary header value: "
                "no request format carries both"
            ) from None
    if headers:
        doc["headers"] = headers
    if timer.late is not None:
        doc["late"] = timer.late.text()
    if timer.spread:
        doc["spread"] = timer.spread
    rec = timer.recurrence
    if rec is None:
        doc["at"] = timer.due
        if timer.debounce is not None:
            doc.update(debounce_fields(timer.debounce))
    else:
        if rec.cron is not None:
            doc["cron"], doc["tz"] = rec.cron, rec.tz
        else:
            doc["every"] = f"{rec.every}s"
        doc["start"] = rec.start
        if rec.end is not None:
            doc["end"] = rec.end
        if rec.count is not None:
            doc["count"] = rec.count
        if rec.calendar is not None:
            doc.update(calendar_fields(rec.tz, rec.calendar))
    return json.dumps(doc, separators=(",", ":")).encode()
