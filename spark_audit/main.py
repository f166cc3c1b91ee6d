"""Entry point: ``kafka-timers audit ARGS``, or ``spark-submit spark_audit/main.py ARGS``.

Exit status: 0 when no violation was found, 1 when one was (so it can gate a deploy),
2 when the audit could not run (one line on stderr saying why).
"""

from __future__ import annotations

import sys

from app.core.errors import KafkaTimersError
from app.settings import Settings
from spark_audit.job import audit_settings, check_topics, run_audit
from spark_audit.options import parse_options
from spark_audit.report import console_summary, verdict_line
from spark_audit.session import audit_session

__all__ = ["main"]


def main(argv: list[str]) -> int:
    """Run the audit with command-line ``argv``; return the exit status."""
    options = parse_options(list(argv))
    settings = audit_settings(Settings.from_env(), options)
    check_topics(settings, (settings.topics.requests, settings.topics.fired))
    with audit_session(options.master, options.spark_conf) as spark:
        summary = run_audit(spark, settings, options)
    print(verdict_line(summary) if options.quiet else console_summary(summary), flush=True)
    return summary.exit_code


def _submitted() -> int:
    """``spark-submit`` runs this file as a script: same errors, same exit statuses."""
    try:
        return main(sys.argv[1:])
    except KafkaTimersError as exc:
        print(f"kafka-timers audit: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(_submitted())
