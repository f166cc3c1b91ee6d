"""Text from records, shown safely: control characters escaped, never written raw.

Anything a producer, an oscillator or an operator's control record carries (an id, a
topic, an oscillator name, a control key, a header) may hold a newline, which forges a
whole log line, or an ESC, which drives the terminal of whoever reads the log.
:func:`printable` is the one place that turns such text into what a log or an error
line may show: every control character (C0, DEL, C1) and every Unicode line or
paragraph separator is written as a Python-style escape (``\\n``, ``\\x1b``,
``\\u2028``). Printable text, non-ASCII letters included, is left as it is.

:class:`EscapingFilter` applies it to every log record's message on the handlers it is
installed on (:func:`app.worker.log_limits.install_log_filters`), so a call site that
forgets the helper still writes nothing raw.
"""

from __future__ import annotations

import contextlib
import logging
import re
import traceback

__all__ = ["EscapingFilter", "printable"]

#: C0 controls, DEL, C1 controls, and the Unicode line and paragraph separators (which
#: some terminals and log viewers break lines on).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    short = _SHORT.get(char)
    if short is not None:
        return short
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object, limit: int | None = None) -> str:
    """``text`` (``str(text)`` if it is not one; bytes decoded as UTF-8, bad bytes as
    ``\\x..``) with every control character escaped, cut to ``limit`` characters of
    the input first when given (the cut marked with ``...``)."""
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode("utf-8", "backslashreplace")
    elif not isinstance(text, str):
        text = str(text)
    cut = limit is not None and len(text) > limit
    if cut:
        text = text[:limit]
    if _UNSAFE.search(text) is not None:
        text = _UNSAFE.sub(_escape, text)
    return text + "..." if cut else text


def _exception_text(exc_info: tuple[type[BaseException], BaseException, object]) -> str:
    """A traceback whose lines are the traceback's own: each exception's message (which
    may quote a record) shown with :func:`printable`, the stack lines as they are."""
    lines: list[str] = []
    exc: BaseException | None = exc_info[1]
    chain: list[tuple[BaseException, str | None]] = []
    seen: set[int] = set()
    note: str | None = None
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        chain.append((exc, note))
        if exc.__cause__ is not None:
            note = traceback._cause_message  # type: ignore[attr-defined]
            exc = exc.__cause__
        elif exc.__context__ is not None and not exc.__suppress_context__:
            note = traceback._context_message  # type: ignore[attr-defined]
            exc = exc.__context__
        else:
            exc = None
    for exc, note in reversed(chain):
        if exc.__traceback__ is not None:
            lines.append("Traceback (most recent call last):\n")
            lines.extend(printable(line.rstrip("\n")) + "\n" for line in _stack(exc))
        message = "".join(traceback.format_exception_only(type(exc), exc)).rstrip("\n")
        lines.append(printable(message) + "\n")
        if note is not None:
            lines.append(note)
    return "".join(lines).rstrip("\n")


def _stack(exc: BaseException) -> list[str]:
    # Each frame's text is a "  File ..." line and its source line: split into lines so
    # that a file name or source line with a control character cannot add one.
    out: list[str] = []
    for entry in traceback.format_tb(exc.__traceback__):
        out.extend(entry.rstrip("\n").split("\n"))
    return out


class EscapingFilter(logging.Filter):
    """Escapes control characters (:func:`printable`) in every record's message, and in
    its exception's messages, before any handler formats it: one record, one line (plus
    its traceback's own lines)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "kafka_timers_escaped", False):  # another handler's filter did
            return True
        record.kafka_timers_escaped = True
        try:
            text = record.getMessage()
        except Exception:  # a bad format string: logging reports it, as it would
            return True
        safe = printable(text)
        if safe != text or record.args:
            record.msg, record.args = safe, ()
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            with contextlib.suppress(Exception):  # never lose the record for its traceback
                record.exc_text = _exception_text(record.exc_info)  # type: ignore[arg-type]
        if record.stack_info:
            record.stack_info = "\n".join(printable(s) for s in record.stack_info.split("\n"))
        return True
