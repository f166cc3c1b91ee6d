"""``kafka-timers import``: JSON lines of pending timers, sent as requests to a deployment.

Each line becomes the request that recreates its timer (:mod:`app.ops.requests`), on
the owner partition of its id for the target's partition count. Idempotent: a request
for a version the target already holds pending replaces it with itself; one for a
version that already fired (a one-shot timer, or a series past its first occurrence)
is dropped as a duplicate; one whose version was cancelled is dropped as cancelled
earlier (``kafka_timers_dropped_total{reason}``, and a ``dropped`` record on the fired
topic). Importing the same file twice leaves each timer once.

Every line is read and checked before anything is sent: a bad line sends nothing. A
line is checked as the worker will read the request it becomes (the due second from 0
to 10^12, the bounds and rules of the request formats, the exact timer back): what the
worker would refuse is refused here, with its reason. What the target's own policy says
(allowed topics, payload size, its horizon) is the target's: a timer it refuses is
dead-lettered there with a reason, as any request's.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from app.core.timer import Timer
from app.ops.jsonl import LineError, decode_line
from app.ops.requests import RequestRecord, checked_request
from app.ops.sending import RequestSender
from app.settings import Settings

__all__ = ["ImportReport", "import_timers", "read_lines", "requests_of"]


@dataclass(frozen=True)
class ImportReport:
    timers: int
    series: int
    partitions: int
    topic: str


def read_lines(lines: Iterable[str]) -> list[Timer]:
    """Every timer of an export, checked; :class:`LineError` names the first bad line."""
    timers = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            timers.append(decode_line(line))
        except LineError as exc:
            raise LineError(f"line {number}: {exc}") from None
    return timers


def requests_of(timers: Iterable[Timer], now_ms: int) -> list[tuple[Timer, RequestRecord]]:
    """The request that recreates each of ``timers``, each read back as the worker will
    read it (:func:`~app.ops.requests.checked_request`); :class:`LineError` names the
    first timer that none recreates exactly."""
    requests = []
    for timer in timers:
        try:
            requests.append((timer, checked_request(timer, now_ms)))
        except LineError as exc:
            raise LineError(f"timer {timer.id[:80]!r}: {exc}") from None
    return requests


def import_timers(settings: Settings, lines: Iterable[str], timeout: float = 30.0) -> ImportReport:
    """Send every timer of ``lines`` to ``settings``' request topic; return once the
    broker has acknowledged them all."""
    timers = read_lines(lines)
    requests = requests_of(timers, int(time.time() * 1000))
    sender = RequestSender(settings, timeout)
    for timer, request in requests:
        sender.send(
            sender.owner(timer.id),
            request.key,
            request.value,
            request.headers,
            request.timestamp_ms,
        )
    sender.flush(timeout)
    return ImportReport(
        timers=len(timers),
        series=sum(1 for t in timers if t.recurrence is not None),
        partitions=sender.partitions,
        topic=sender.topic,
    )
