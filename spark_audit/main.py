"""Entry point: ``kafka-timers audit ARGS``, or ``spark-submit spark_audit/main.py ARGS``.

Exit status (:mod:`spark_audit.errors`):

- 0: clean, no violation (duplicates excused by ``--allow-duplicates`` included);
- 1: violations found, or more records set aside than ``--max-set-aside`` allows, with
  the report written;
- 2: the audit could not run (a bad flag, no broker, a missing topic, Spark or its JVM
  failed, out of memory), with one line on stderr saying why and nothing judged.
"""

from __future__ import annotations

import logging
import os
import sys

#: Exit status when the audit cannot run (:data:`spark_audit.errors.EXIT_COULD_NOT_RUN`),
#: here too so that a Python without this project's packages still exits with it.
_COULD_NOT_RUN = 2

if __package__ in (None, ""):  # spark-submit runs this file as a script
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        import confluent_kafka  # noqa: F401
        import pyarrow  # noqa: F401

        import app  # noqa: F401
    except ImportError as missing:
        # spark-submit started a Python without the project (python3 from PATH): say how
        # to pick the project's, rather than exit 1 (violations found) with a traceback.
        print(
            f"kafka-timers audit: error: this Python ({sys.executable}) lacks {missing.name}: "
            "run spark-submit with --conf spark.pyspark.python=<the project's python> "
            "(or export PYSPARK_PYTHON), see docs/audit.md, Auditing on a cluster",
            file=sys.stderr,
        )
        sys.exit(_COULD_NOT_RUN)

from app.kafka.command_config import read_command_config  # noqa: E402 (after the check above)
from app.settings import Settings  # noqa: E402 (after the check above)
from spark_audit.errors import EXIT_COULD_NOT_RUN, failure_line  # noqa: E402 (after the check above)
from spark_audit.job import audit_settings, check_topics, run_audit  # noqa: E402 (after the check above)
from spark_audit.options import parse_options  # noqa: E402 (after the check above)
from spark_audit.report import console_summary, verdict_line  # noqa: E402 (after the check above)
from spark_audit.session import audit_session  # noqa: E402 (after the check above)

__all__ = ["main", "run"]

log = logging.getLogger(__name__)


def main(argv: list[str]) -> int:
    """Run the audit with command-line ``argv``; return 0 or 1, raise if it cannot run."""
    options = parse_options(list(argv))
    flags = read_command_config(options.command_config) if options.command_config else {}
    settings = audit_settings(Settings.from_env_and_flags(dict(flags)), options)
    check_topics(settings, (settings.topics.requests, settings.topics.fired))
    with audit_session(options.master, options.spark_conf, options.spark_log_level) as spark:
        summary = run_audit(spark, settings, options)
    print(verdict_line(summary) if options.quiet else console_summary(summary), flush=True)
    return summary.exit_code


def run(argv: list[str]) -> int:
    """:func:`main`, with every failure turned into one line on stderr and exit status 2.

    Violations are 1 and only 1: an exception (out of memory, a JVM that died, a bug of the
    audit) never exits with the status that means "violations found".
    """
    # Py4J logs every failed call to a dead JVM with its traceback: one line is enough.
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    try:
        return main(argv)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        log.debug("the audit could not run", exc_info=True)
        print(f"kafka-timers audit: error: {failure_line(exc)}", file=sys.stderr, flush=True)
        return EXIT_COULD_NOT_RUN


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
