"""RepeatFilter: one line per shape per window, and a count of the rest when it returns."""

from __future__ import annotations

import logging

from app.worker.log_limits import MAX_SHAPES, RepeatFilter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def record(msg: str, *args: object, name: str = "librdkafka") -> logging.LogRecord:
    return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, args, None)


def test_repeats_differing_only_in_numbers_pass_once_per_window_then_are_counted() -> None:
    clock = Clock()
    repeat = RepeatFilter(window=60, clock=clock)
    passed = []
    for i in range(6000):  # 100 a second for a minute
        clock.now = i / 100
        r = record("Connect to ipv4#127.0.0.1:%d failed (after %dms)", 9092, i)
        if repeat.filter(r):
            passed.append(r.getMessage())
    clock.now = 61
    last = record("Connect to ipv4#127.0.0.1:%d failed (after %dms)", 9092, 7)
    assert repeat.filter(last)
    assert len(passed) == 1  # a minute of one failure a hundred times a second: one line
    assert "(5999 more like it in the last 61 s)" in last.getMessage()
    assert not repeat.filter(record("Connect to ipv4#127.0.0.1:%d failed (after %dms)", 1, 2))


def test_different_messages_and_loggers_are_not_merged() -> None:
    repeat = RepeatFilter(window=60, clock=Clock())
    assert repeat.filter(record("broker down"))
    assert repeat.filter(record("metadata refresh failed"))
    assert repeat.filter(record("broker down", name="aiokafka"))
    assert not repeat.filter(record("broker down"))


def test_shapes_are_bounded() -> None:
    repeat = RepeatFilter(window=60, clock=Clock())
    for i in range(MAX_SHAPES + 50):
        assert repeat.filter(record(f"distinct message {chr(65 + i % 26)}{'x' * (i // 26)}"))
    assert len(repeat._seen) <= MAX_SHAPES
