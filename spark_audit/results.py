"""Writing the results: summary.json and report.html on the driver, tables by Spark.

Layout of the output directory::

    summary.json     counts, lateness tables, histogram, fires per minute, violations
    report.html      the same with charts, self-contained
    timers/          Parquet, one row per timer (status, final version, fires, violations)
    violations/      Parquet, one row per violation
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spark_audit.errors import AuditError
from spark_audit.report import html_report
from spark_audit.summary import AuditSummary

__all__ = ["write_summary", "write_tables"]


def write_tables(tables_uri: str, timers: Any, violations: Any) -> None:
    """Parquet tables (overwritten each run), written by the executors."""
    base = tables_uri.rstrip("/")
    timers.write.mode("overwrite").parquet(f"{base}/timers")
    violations.write.mode("overwrite").parquet(f"{base}/violations")


def write_summary(output_dir: str, summary: AuditSummary) -> None:
    """summary.json and report.html in ``output_dir`` (created if needed)."""
    out = Path(output_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps(summary.to_json(), indent=2) + "\n")
        (out / "report.html").write_text(html_report(summary))
    except OSError as exc:
        raise AuditError(f"cannot write the audit results to {out}: {exc}") from exc
