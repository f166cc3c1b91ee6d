"""Errors of the audit job, and the one line each failure is reported as (exit status 2)."""

from __future__ import annotations

import re

from kafka_timers_client.errors import KafkaTimersError

__all__ = [
    "EXIT_CLEAN",
    "EXIT_COULD_NOT_RUN",
    "EXIT_VIOLATIONS",
    "AuditError",
    "AuditOutOfMemory",
    "AuditSetupError",
    "failure_line",
    "is_out_of_memory",
]

#: No violation found (duplicates excused by ``--allow-duplicates`` included).
EXIT_CLEAN = 0
#: Violations found, or more records set aside than ``--max-set-aside`` allows.
EXIT_VIOLATIONS = 1
#: The audit could not run to the end: a bad flag, no broker, a missing topic, Spark or
#: its JVM failed, out of memory. Nothing was judged; never "violations found".
EXIT_COULD_NOT_RUN = 2

#: Texts by which the JVM (through Py4J) says it, or a Python worker, ran out of memory
#: (``java.lang.OutOfMemoryError``, Python's ``MemoryError`` in a worker's traceback).
_OOM_MARKERS = (
    "MemoryError",
    "Java heap space",
    "GC overhead limit exceeded",
    "Cannot allocate memory",
    "failed to map segment",  # a library could not be loaded: no address space left
)


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


class AuditOutOfMemory(AuditError):
    """Spark (the driver's JVM or Python) ran out of memory.

    The audit keeps nothing whole in memory; what runs out is a fixed buffer that is too
    small for the machine's defaults. Give the driver more (``--conf
    spark.driver.memory=4g``, or ``spark-submit --driver-memory 4g``) and run it again.
    """


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


#: A line that names an exception: ``org.apache.spark.SparkException: Job aborted ...``,
#: ``Caused by: java.lang.ArithmeticException: long overflow``, ``ImportError: ...``.
_EXCEPTION_LINE = re.compile(r"^(?:Caused by: )?[\w.$]+(?:Exception|Error)(?::\s|$)")


def _first_line(text: str) -> str:
    """The line of a Spark, Py4J or Python-worker message that says what went wrong: the
    deepest line naming an exception (a cause, or a worker's Python exception), never a
    stack frame; else the first line."""
    lines = [line.strip().removeprefix(": ").strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith(("at ", "File ", "..."))]
    causes = [line for line in lines if _EXCEPTION_LINE.match(line)]
    return (causes[-1] if causes else lines[0] if lines else "")[:300]


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says Python or the JVM ran out of memory."""
    for link in _chain(exc):
        if isinstance(link, MemoryError):
            return True
        if any(marker in str(link) for marker in _OOM_MARKERS):
            return True
    return False


def failure_line(exc: BaseException) -> str:
    """One line saying why the audit could not run: never a traceback.

    The audit's own errors carry their message; Spark and Py4J errors are reduced to the
    line that names the cause (their messages hold whole JVM stack traces); anything else
    is named by its class, since it is a bug of the audit.
    """
    if isinstance(exc, AuditOutOfMemory) or is_out_of_memory(exc):
        return (
            "out of memory (Spark's JVM or a Python worker): give it more (--conf "
            "spark.driver.memory=4g, or spark-submit --driver-memory 4g; on a cluster "
            "spark.executor.memory, spark.executor.pyspark.memory) and run the audit again"
        )
    if isinstance(exc, KafkaTimersError):
        return " ".join(str(exc).splitlines())
    name = type(exc).__name__
    module = type(exc).__module__ or ""
    if module.startswith(("py4j", "pyspark")):
        if name == "Py4JNetworkError" or "Answer from Java side is empty" in str(exc):
            return (
                "Spark's JVM stopped answering (it may have run out of memory or been "
                "killed): see its log, give the driver more memory and run the audit again"
            )
        return f"the audit's Spark job failed: {_first_line(str(exc)) or name}"
    detail = _first_line(str(exc))
    return f"the audit failed: {name}" + (f": {detail}" if detail else "")
