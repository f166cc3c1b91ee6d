"""``kafka-timers import``: JSON lines of pending timers, sent as requests to a deployment.

Each line becomes the request that recreates its timer (:mod:`app.ops.requests`), on
the owner partition of its id for the target's partition count. Idempotent: a request
for a version the target already holds pending replaces it with itself; one for a
version that already fired (a one-shot timer, or a series past its first occurrence)
is dropped as a duplicate; one whose version was cancelled is dropped as cancelled
earlier (``kafka_timers_dropped_total{reason}``, and a ``dropped`` record on the fired
topic). Importing the same file twice leaves each timer once.

A line is checked as the worker will read the request it becomes (the due second from 0
to 10^12, the bounds and rules of the request formats, the exact timer back), and the
request against the producer's ``message.max.bytes``
(``KAFKA_TIMERS_PRODUCER_MESSAGE_MAX_BYTES``): what the worker or the producer would
refuse is refused here, with its reason. What the target's own policy says (allowed
topics, payload size, its horizon) is the target's: a timer it refuses is dead-lettered
there with a reason, as any request's.

The input is streamed, one line at a time, in memory bounded by the longest line
(:data:`max_line_chars`), whatever its length. A file is read twice: first every line
is checked, and a bad line sends nothing; then the lines are sent. Standard input is
read once, each line checked and sent in turn. Should a line be refused there, or the
broker refuse a record, the import stops with one line (:class:`ImportStopped`) saying
which line stopped it and how many records were sent and acknowledged before: importing
the same input again is safe.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TextIO

from app.core.budget import record_bytes
from app.core.timer import Timer
from app.ops.jsonl import LineError, decode_line
from app.ops.requests import RequestRecord, as_request, checked_request
from app.ops.sending import RequestSender
from app.settings import Settings
from kafka_timers_client.errors import KafkaTimersError

__all__ = [
    "ImportReport",
    "ImportStopped",
    "check_lines",
    "import_timers",
    "max_line_chars",
    "read_lines",
    "requests_of",
]


@dataclass(frozen=True)
class ImportReport:
    """What an import sent."""

    #: Timers sent (one request each), all acknowledged by the broker.
    timers: int
    #: Of which series.
    series: int
    #: The target's partition count.
    partitions: int
    #: The target's request topic.
    topic: str


class ImportStopped(KafkaTimersError):
    """An import that stopped part way: the message names the line and how many records
    were sent and acknowledged before it."""


def max_line_chars(limit: int) -> int:
    """The longest line read, in characters, for a producer limit of ``limit`` bytes: a
    line for the largest request that fits, its bytes in base64 or escaped as JSON
    text (``\\u00e9`` is six characters for two bytes), and room for the rest."""
    return 6 * limit + 64 * 1024


def _lines(source: Iterable[str] | TextIO, longest: int) -> Iterator[tuple[int, str]]:
    """``(number, line)`` of every line, blank ones included (the caller skips them); a
    line over ``longest`` characters is refused without being read whole."""
    if hasattr(source, "readline"):
        readline = source.readline
        number = 0
        while True:
            number += 1
            try:
                line = readline(longest + 1)
            except UnicodeDecodeError:
                raise LineError(f"line {number}: not UTF-8 text") from None
            if not line:
                return
            if len(line) > longest and not line.endswith("\n"):
                raise LineError(f"line {number}: longer than {longest} characters")
            yield number, line
        return
    for number, line in enumerate(source, 1):
        if len(line) > longest:
            raise LineError(f"line {number}: longer than {longest} characters")
        yield number, line


def _timer(number: int, line: str) -> Timer:
    try:
        return decode_line(line)
    except LineError as exc:
        raise LineError(f"line {number}: {exc}") from None


def _request(number: int, timer: Timer, now_ms: int, limit: int, *, check: bool) -> RequestRecord:
    """The request for line ``number``'s ``timer``, checked as the worker reads it when
    ``check``, and against the producer's ``limit`` always."""
    try:
        request = checked_request(timer, now_ms) if check else as_request(timer, now_ms)
    except LineError as exc:
        raise LineError(f"line {number}: timer {timer.id[:80]!r}: {exc}") from None
    size = record_bytes(request.key, request.value, request.headers)
    if size > limit:
        raise LineError(
            f"line {number}: timer {timer.id[:80]!r}: its request is {size} bytes, more than "
            f"the producer sends ({limit}: KAFKA_TIMERS_PRODUCER_MESSAGE_MAX_BYTES)"
        )
    return request


def read_lines(lines: Iterable[str]) -> list[Timer]:
    """Every timer of an export, checked; :class:`LineError` names the first bad line
    (for tests and small inputs: :func:`import_timers` streams)."""
    return [_timer(n, line) for n, line in _lines(lines, 1 << 62) if line.strip()]


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


def check_lines(source: Iterable[str] | TextIO, limit: int) -> tuple[int, int]:
    """Check every line of ``source`` as :func:`import_timers` would send it, sending
    nothing: ``(timers, series)``, or :class:`LineError` naming the first bad line."""
    now_ms = int(time.time() * 1000)
    timers = series = 0
    for number, line in _lines(source, max_line_chars(limit)):
        if not line.strip():
            continue
        timer = _timer(number, line)
        _request(number, timer, now_ms, limit, check=True)
        timers += 1
        series += timer.recurrence is not None
    return timers, series


def import_timers(
    settings: Settings,
    source: Iterable[str] | TextIO,
    timeout: float = 30.0,
    *,
    checked: bool = False,
) -> ImportReport:
    """Send every timer of ``source`` to ``settings``' request topic, one line at a time;
    return once the broker has acknowledged them all.

    ``checked``: every line was checked by :func:`check_lines` already (a file read a
    second time), so each is only built, not read back again. Anything that stops the
    import part way raises :class:`ImportStopped`, one line.
    """
    limit = settings.record_budget_bytes
    sender = RequestSender(settings, timeout)
    now_ms = int(time.time() * 1000)
    timers = series = 0
    number = 0
    lines = _lines(source, max_line_chars(limit))
    reading = True  # what a failure interrupted: reading the next line, or sending one
    try:
        while True:
            reading = True
            try:
                number, line = next(lines)
            except StopIteration:
                break
            reading = False
            if not line.strip():
                continue
            timer = _timer(number, line)
            request = _request(number, timer, now_ms, limit, check=not checked)
            sender.send_request(timer.id, request)
            timers += 1
            series += timer.recurrence is not None
    except Exception as exc:  # any failure: one line, never a traceback
        at = number + 1 if reading else number
        raise _stopped(sender, exc, f"at line {at}", timeout) from None
    try:
        sender.flush(timeout)
    except Exception as exc:
        raise _stopped(sender, exc, "after the last line", timeout) from None
    return ImportReport(
        timers=timers, series=series, partitions=sender.partitions, topic=sender.topic
    )


def _stopped(sender: RequestSender, exc: Exception, where: str, timeout: float) -> ImportStopped:
    """The one line an import that stopped ``where`` ends with, once what was sent
    before has been acknowledged or not."""
    with contextlib.suppress(Exception):  # counted below: what was acknowledged counts
        sender.flush(min(timeout, 15.0))
    why = str(exc) if isinstance(exc, KafkaTimersError) else f"{type(exc).__name__}: {exc}"
    why = why.removeprefix(f"line {where.removeprefix('at line ')}: ")
    return ImportStopped(
        f"import stopped {where}: {' '.join(why.splitlines())[:500]}; "
        f"{sender.acknowledged} records sent and acknowledged before it"
        + (
            f", {sender.sent - sender.acknowledged} not"
            if sender.sent > sender.acknowledged
            else ""
        )
        + " (importing the same input again is safe: it stores each timer once)"
    )
