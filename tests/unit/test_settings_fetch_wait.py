"""The tick fetch wait: read from the environment, written back, and bounded."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.settings import Settings
from kafka_timers_client.errors import ConfigurationError


def test_the_tick_fetch_wait_is_500_ms_unless_set_and_survives_the_trip_to_a_child() -> None:
    assert Settings.from_env({}).tick_fetch_wait_ms == 500
    assert Settings.from_env({"KAFKA_TIMERS_TICK_FETCH_WAIT_MS": "50"}).tick_fetch_wait_ms == 50
    settings = replace(Settings(), tick_fetch_wait_ms=750)
    assert Settings.from_env(settings.to_env()).tick_fetch_wait_ms == 750


@pytest.mark.parametrize("value", ["0", "10001", "-5", "soon"])
def test_a_wait_outside_1_ms_to_10_s_is_refused_with_its_name(value: str) -> None:
    with pytest.raises(ConfigurationError, match="TICK_FETCH_WAIT_MS"):
        Settings.from_env({"KAFKA_TIMERS_TICK_FETCH_WAIT_MS": value})
