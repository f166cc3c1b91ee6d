"""Which Python the audit's executors run, for every master (issue 29: cluster path)."""

from __future__ import annotations

import sys

import pytest

from spark_audit.session import executor_python


def test_executors_run_this_interpreter_unless_the_user_chose_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert executor_python({}) == sys.executable  # local or spark://, yarn, k8s:// alike
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/env/bin/python")
    assert executor_python({}) == "/opt/env/bin/python"
    conf = {"spark.pyspark.python": "./environment/bin/python"}  # a packed env (--archives)
    assert executor_python(conf) == "./environment/bin/python"
