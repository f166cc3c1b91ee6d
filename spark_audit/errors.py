"""Errors of the audit job: one line each, printed by the CLI, exit status 2."""

from __future__ import annotations

from app.core.errors import KafkaTimersError

__all__ = ["AuditError", "AuditSetupError"]


class AuditError(KafkaTimersError):
    """The audit could not run to the end (a topic is missing, Spark failed, a bad flag).

    This is not a violation: a violation is a finding, reported with exit status 1.
    Fix what the message says and run the audit again; it reads the topics from the
    start every time, so nothing is left half done.
    """


class AuditSetupError(AuditError):
    """The machine cannot run the audit: PySpark, pyarrow or the Kafka connector is missing.

    Install the extra (``pip install 'kafka-timers[audit]'``), or use ``--source python``
    where the Spark Kafka connector jar is not on the classpath.
    """
