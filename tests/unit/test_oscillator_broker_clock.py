"""The oscillator compares its clock with the broker's from its first ticks' delivery reports."""

from __future__ import annotations

import logging

import pytest

from oscillator.broker_clock import BrokerClockCheck

SENT = 1_767_225_600_000


def test_a_clock_an_hour_ahead_of_the_broker_is_warned_at_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    check = BrokerClockCheck("ticks", threshold=2.0, probes=3)
    with caplog.at_level(logging.INFO):
        for delay_ms in (40, 3, 15):  # the smallest delay is the best estimate
            check.delivered(SENT - 3_600_000 + delay_ms, SENT)
        check.delivered(SENT, SENT)  # after the verdict: ignored
    assert check.verdict is not None and check.verdict.offset == pytest.approx(3599.997)
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "3599.997s ahead of the broker's" in caplog.text


def test_a_clock_behind_the_broker_is_warned_too(caplog: pytest.LogCaptureFixture) -> None:
    check = BrokerClockCheck("ticks", threshold=2.0, probes=1)
    with caplog.at_level(logging.WARNING):
        check.delivered(SENT + 5_010, SENT)
    assert check.verdict is not None and check.verdict.offset == pytest.approx(-5.01)
    assert "behind the broker's" in caplog.text


def test_a_clock_that_agrees_is_reported_at_info(caplog: pytest.LogCaptureFixture) -> None:
    check = BrokerClockCheck("ticks", threshold=2.0, probes=2)
    with caplog.at_level(logging.INFO):
        check.delivered(SENT + 4, SENT)
        check.delivered(SENT + 2, SENT)
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    assert "within 2.000s of the broker's" in caplog.text
    assert "LogAppendTime" in caplog.text


def test_the_broker_clock_may_come_from_list_offsets(caplog: pytest.LogCaptureFixture) -> None:
    check = BrokerClockCheck("ticks", threshold=2.0, probes=3)
    with caplog.at_level(logging.WARNING):
        check.delivered(None, SENT)  # another oscillator's tick came in between
        check.delivered(SENT - 3_599_990, SENT, "ListOffsets append time")
        check.delivered(SENT - 3_599_980, SENT, "ListOffsets append time")
    assert check.verdict is not None and check.verdict.offset == pytest.approx(3599.99)
    assert "ahead of the broker's (ListOffsets append time on ticks)" in caplog.text


def test_a_topic_without_broker_timestamps_says_it_cannot_compare(
    caplog: pytest.LogCaptureFixture,
) -> None:
    check = BrokerClockCheck("ticks", threshold=2.0, probes=2)
    with caplog.at_level(logging.INFO):
        check.delivered(None, SENT)
        assert not check.done
        check.delivered(None, SENT)
    assert check.verdict is not None and not check.verdict.measured
    assert "cannot compare its clock with the broker's" in caplog.text
    assert "LogAppendTime" in caplog.text
