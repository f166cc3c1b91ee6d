"""The PySpark audit as the integration tests run it: one local Spark, and the audit's
command line over a test's request and fired topics."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.settings import Settings
from spark_audit.main import main as audit_main
from spark_audit.session import audit_session

__all__ = ["audit_args", "local_spark", "run_audit"]

#: A two-core local Spark with no UI, bound to the loopback address.
LOCAL_SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
}


@contextmanager
def local_spark() -> Iterator[Any]:
    """One local Spark session, for a fixture the audit tests share (the audit reuses it
    instead of starting its own)."""
    with audit_session("local[2]", LOCAL_SPARK_CONF) as session:
        yield session


def audit_args(settings: Settings, out: Path, *extra: str) -> list[str]:
    """The audit's arguments for ``settings``' topics, its reports written to ``out``,
    ``extra`` after them."""
    return [
        "--bootstrap",
        settings.bootstrap_servers,
        "--requests-topic",
        settings.topics.requests,
        "--fired-topic",
        settings.topics.fired,
        "--output",
        str(out),
        *extra,
    ]


def run_audit(settings: Settings, out: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    """Run the audit in this process: its exit code and its ``summary.json``."""
    code = audit_main(audit_args(settings, out, *extra))
    return code, json.loads((out / "summary.json").read_text())
