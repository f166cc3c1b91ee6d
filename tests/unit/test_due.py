from decimal import Decimal

import pytest

from kafka_timers_client.due import due_second, parse_at, parse_duration
from kafka_timers_client.errors import InvalidTimeSpec


def test_fractions_round_up_never_down() -> None:
    assert due_second(Decimal("1700000000.001")) == 1700000001
    assert due_second(Decimal("1700000000.999")) == 1700000001


def test_whole_seconds_stay() -> None:
    assert due_second(Decimal("1700000000")) == 1700000000
    assert due_second(1700000000.0) == 1700000000


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("5m", 300),
        ("2h", 7200),
        ("3d", 259200),
        ("1w", 604800),
        ("250ms", 0.25),
        ("7", 7),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_bad_duration_is_a_clear_error() -> None:
    with pytest.raises(InvalidTimeSpec, match="30s"):
        parse_duration("soon")


def test_iso_without_zone_is_utc_and_keeps_fractions() -> None:
    assert parse_at("1970-01-02T00:00:00.5") == Decimal("86400.5")
    assert parse_at("2026-01-01T00:00:00Z") == Decimal(1767225600)
    assert parse_at("2026-01-01T01:00:00+01:00") == Decimal(1767225600)


def test_epoch_text() -> None:
    assert parse_at("1767225600.25") == Decimal("1767225600.25")


def test_bad_time_is_a_clear_error() -> None:
    with pytest.raises(InvalidTimeSpec, match="ISO 8601"):
        parse_at("tomorrow-ish")
