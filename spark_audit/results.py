"""Writing the results: summary.json and report.html on the driver (tables: Spark).

Layout of the output directory (the Parquet tables under ``--tables-uri`` if given)::

    summary.json       counts, lateness tables, histogram, fires per minute, violations
                       and records set aside (the first N of each kind)
    report.html        the same with charts, self-contained
    parsed_requests/   Parquet, one row per request record (refused ones with reason)
    parsed_fired/      Parquet, one row per fired-topic record (unreadable ones too)
    set_aside/         Parquet, every record refused or set aside, with its coordinates
    timers/            Parquet, one row per timer (status, final version, fires, violations)
    violations/        Parquet, one row per violation
"""

from __future__ import annotations

import json
from pathlib import Path

from spark_audit.errors import AuditError
from spark_audit.report import html_report
from spark_audit.summary import AuditSummary

__all__ = ["write_summary"]


def write_summary(output_dir: str, summary: AuditSummary) -> None:
    """summary.json and report.html in ``output_dir`` (created if needed)."""
    out = Path(output_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps(summary.to_json(), indent=2) + "\n")
        (out / "report.html").write_text(html_report(summary))
    except OSError as exc:
        raise AuditError(f"cannot write the audit results to {out}: {exc}") from exc
