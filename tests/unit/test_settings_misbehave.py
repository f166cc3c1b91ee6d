"""Settings for the listening addresses and the tick tolerance: read, written back, checked."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.settings import Settings
from kafka_timers_client.errors import ConfigurationError


def test_bind_addresses_and_tick_tolerance_come_from_the_environment() -> None:
    settings = Settings.from_env(
        {
            "KAFKA_TIMERS_WEB_BIND": "127.0.0.1",
            "KAFKA_TIMERS_METRICS_BIND": "10.0.0.5",
            "KAFKA_TIMERS_TICK_TOLERANCE_SECONDS": "0.05",
        }
    )
    assert (settings.web_bind, settings.metrics_bind) == ("127.0.0.1", "10.0.0.5")
    assert settings.tick_tolerance_seconds == 0.05
    defaults = Settings.from_env({})
    assert (defaults.web_bind, defaults.metrics_bind) == ("0.0.0.0", "0.0.0.0")
    assert defaults.tick_tolerance_seconds == 0.0


def test_they_survive_the_trip_to_a_child_process() -> None:
    settings = replace(
        Settings(), web_bind="127.0.0.1", metrics_bind="::1", tick_tolerance_seconds=0.25
    )
    again = Settings.from_env(settings.to_env())
    assert (again.web_bind, again.metrics_bind, again.tick_tolerance_seconds) == (
        "127.0.0.1",
        "::1",
        0.25,
    )


@pytest.mark.parametrize("value", ["-1", "60", "ahead"])
def test_a_tolerance_that_would_let_ticks_from_far_ahead_through_is_refused(value: str) -> None:
    with pytest.raises(ConfigurationError, match="TICK_TOLERANCE_SECONDS"):
        Settings.from_env({"KAFKA_TIMERS_TICK_TOLERANCE_SECONDS": value})
