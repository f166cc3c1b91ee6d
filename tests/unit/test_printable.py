"""Record text reaches a log or an error line with its control characters escaped."""

from __future__ import annotations

import io
import logging

from hypothesis import given
from hypothesis import strategies as st

from app.core.printable import EscapingFilter, printable
from app.worker.log_limits import install_repeat_filter


def _raw_controls(text: str) -> list[str]:
    return [c for c in text if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c in "\u2028\u2029"]


@given(st.text())
def test_printable_never_emits_a_control_character(text: str) -> None:
    assert _raw_controls(printable(text)) == []


def test_printable_escapes_as_python_does_and_keeps_letters() -> None:
    assert printable("a\nb\r\tc\x1b[2J\x00\x7f\x9b\u2028é") == (
        "a\\nb\\r\\tc\\x1b[2J\\x00\\x7f\\x9b\\u2028é"
    )
    assert printable(b"ok\xff\n") == "ok\\xff\\n"
    assert printable("x" * 10, 4) == "xxxx..."
    assert printable(42) == "42"


def _logged(logger_name: str, emit: object) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger(logger_name)
    root = logging.Logger("test-root")
    root.addHandler(handler)
    install_repeat_filter(root)
    logger.parent = root
    logger.propagate = True
    assert callable(emit)
    emit(logger)
    return stream.getvalue()


def test_a_hostile_value_cannot_forge_a_log_line_or_reach_the_terminal() -> None:
    hostile = "osc-1\n2026-12-06 12:00:00 WARNING forged line\x1b]0;owned\x07\x1b[2J"

    def emit(log: logging.Logger) -> None:
        log.warning("oscillator %s runs ahead", hostile)
        log.info("bulk cancel %s", hostile.encode())

    text = _logged("printable-test-a", emit)
    assert text.count("\n") == 2  # one line per record
    assert "\x1b" not in text and "\x07" not in text
    assert "forged line" in text  # shown, escaped: the operator still sees what came


def test_an_exception_message_cannot_forge_lines_either() -> None:
    def emit(log: logging.Logger) -> None:
        try:
            raise ValueError("id 'a\nCRITICAL forged\x1b[31m'")
        except ValueError:
            log.exception("handling %s", "x\ny")

    text = _logged("printable-test-b", emit)
    assert "\x1b" not in text
    assert not any(line.startswith("CRITICAL") for line in text.splitlines())
    assert "Traceback (most recent call last):" in text


def test_the_filter_escapes_once_whatever_the_number_of_handlers() -> None:
    record = logging.LogRecord("n", logging.INFO, __file__, 1, "a %s", ("b\nc",), None)
    first, second = EscapingFilter(), EscapingFilter()
    assert first.filter(record) and second.filter(record)
    assert record.getMessage() == "a b\\nc"
