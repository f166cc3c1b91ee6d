"""Entry point of the audit job (placeholder until the audit work lands)."""

from __future__ import annotations

from app.errors import KafkaTimersError


def main(argv: list[str]) -> int:
    raise KafkaTimersError("the audit is not implemented yet")
