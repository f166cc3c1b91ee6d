"""Settings with every optional field set, so that ``to_env`` writes every variable."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from app.settings import SecuritySettings, Settings

__all__ = ["full_settings"]


def full_settings(**changes: Any) -> Settings:
    """The defaults with the partition count, metrics port and every SASL/TLS field set;
    ``changes`` set more."""
    return replace(
        Settings(),
        partitions=8,
        metrics_port=9100,
        security=SecuritySettings(
            protocol="SASL_SSL",
            sasl_mechanism="PLAIN",
            sasl_username="u",
            sasl_password="p",
            ssl_cafile="ca",
            ssl_certfile="cert",
            ssl_keyfile="key",
        ),
        **changes,
    )
