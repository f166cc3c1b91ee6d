"""Exit statuses of the audit: 0 clean, 1 violations (or too much set aside), 2 could not run."""

from __future__ import annotations

import pytest

from spark_audit import main as audit_main_module
from spark_audit.errors import (
    EXIT_CLEAN,
    EXIT_COULD_NOT_RUN,
    EXIT_VIOLATIONS,
    AuditError,
    failure_line,
    is_out_of_memory,
)
from spark_audit.summary import AuditSummary, ReadCounts
from tests.support.audit_summary import audit_summary


def summary(violations: int = 0, unreadable: int = 0, max_set_aside: int = 100) -> AuditSummary:
    return audit_summary(
        {"early": violations} if violations else {},
        reads=ReadCounts(10, 0, 10 + unreadable, unreadable),
        max_set_aside=max_set_aside,
    )


def test_a_summary_exits_0_or_1_by_its_violations_and_what_was_set_aside() -> None:
    assert summary().exit_code == EXIT_CLEAN
    assert summary(violations=1).exit_code == EXIT_VIOLATIONS
    assert summary(unreadable=100).exit_code == EXIT_CLEAN  # at the limit
    assert summary(unreadable=101).exit_code == EXIT_VIOLATIONS
    assert summary(unreadable=1, max_set_aside=0).exit_code == EXIT_VIOLATIONS


class Py4JJavaError(Exception):
    """Stands for py4j's, by module and name."""


Py4JJavaError.__module__ = "py4j.protocol"


@pytest.mark.parametrize(
    "exc",
    [
        MemoryError(),
        Py4JJavaError(
            "An error occurred while calling o97.count.\n: java.lang.OutOfMemoryError: "
            "Java heap space\n\tat java.base/..."
        ),
    ],
)
def test_out_of_memory_is_named_as_such(exc: BaseException) -> None:
    assert is_out_of_memory(exc)
    line = failure_line(exc)
    assert line.startswith("out of memory") and "spark.driver.memory" in line
    assert "\n" not in line


def test_a_python_worker_out_of_memory_is_named_as_such() -> None:
    exc = Py4JJavaError(
        "An error occurred while calling o61.parquet.\n: org.apache.spark.SparkException: "
        "Job aborted\norg.apache.spark.api.python.PythonException: Traceback (most recent "
        'call last):\n  File "worker.py", line 1\nImportError: libarrow.so.2600: failed '
        "to map segment from shared object\n\tat org.apache.spark.api.python.Runner.read"
    )
    assert failure_line(exc).startswith("out of memory (Spark's JVM or a Python worker)")


def test_the_line_is_the_exception_not_a_stack_frame() -> None:
    exc = Py4JJavaError(
        "An error occurred while calling o70.parquet.\n: org.apache.spark.SparkException: "
        "Job aborted due to stage failure: Total size of serialized results of 1 tasks "
        "(3.6 KiB) is bigger than spark.driver.maxResultSize (1024.0 B)\n\tat "
        "org.apache.spark.sql.execution.QueryExecution$.withInternalError(QueryExecution.scala:927)"
    )
    line = failure_line(exc)
    assert "maxResultSize" in line and "withInternalError" not in line


def test_a_spark_error_is_its_cause_in_one_line() -> None:
    exc = Py4JJavaError(
        "An error occurred while calling o1.load.\n: org.apache.spark.SparkException: Job "
        "aborted\n\tat org.apache...\nCaused by: java.lang.ArithmeticException: long overflow\n"
        "\tat java.base/java.lang.Math.multiplyExact"
    )
    line = failure_line(exc)
    assert "ArithmeticException: long overflow" in line and "\n" not in line


def test_run_turns_every_failure_into_one_line_and_status_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for exc in (AuditError("topic 'x' does not exist"), MemoryError(), RuntimeError("bug\nmore")):

        def failing(argv: list[str], exc: BaseException = exc) -> int:
            raise exc

        monkeypatch.setattr(audit_main_module, "main", failing)
        assert audit_main_module.run([]) == EXIT_COULD_NOT_RUN
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("kafka-timers audit: error: ")


def test_a_bad_flag_is_status_2() -> None:
    assert audit_main_module.run(["--since", "not a time"]) == EXIT_COULD_NOT_RUN
    with pytest.raises(SystemExit) as bad:
        audit_main_module.run(["--no-such-flag"])
    assert bad.value.code == EXIT_COULD_NOT_RUN
