"""The Spark session the audit runs in: reuse the caller's, or start (and later stop) one.

Under ``spark-submit`` the master and resources come from its flags; run as
``kafka-timers audit`` Spark defaults to ``local[*]`` unless ``--master`` says otherwise.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from spark_audit.errors import AuditSetupError

__all__ = ["audit_session"]

#: Settings every audit session gets unless the caller overrides them.
_DEFAULTS = {
    # Hours in the report are UTC, whatever the machine's zone.
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
}


def _starts_local_jvm(master: str | None) -> bool:
    """Whether this process is about to start Spark itself, with workers on this machine.

    Under ``spark-submit`` the JVM already runs (and says so in the environment), and the
    executors' Python is the submitter's business: ``--conf spark.pyspark.python=...``.
    """
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        return False
    return master is None or master.startswith("local")


@contextmanager
def audit_session(
    master: str | None = None, conf: Mapping[str, str] | None = None
) -> Iterator[Any]:
    """Yield a SparkSession; stop it at the end only if it was started here."""
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise AuditSetupError(
            "the audit needs PySpark and pyarrow: pip install 'kafka-timers[audit]'"
        ) from exc
    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    if _starts_local_jvm(master):
        # Spark starts its Python workers with $PYSPARK_PYTHON, else whatever "python3" is
        # on PATH, which may lack pyarrow and this package; this interpreter has both. Spark
        # reads only the environment for this (spark.pyspark.python is ignored here).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("kafka-timers-audit")
    if master:
        builder = builder.master(master)
    for key, value in {**_DEFAULTS, **dict(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if not spark.sparkContext.getConf().contains("spark.sql.shuffle.partitions"):
        # Spark's default of 200 shuffle partitions costs more than the audit itself on a
        # small machine (measured: 14 s instead of 2 s to judge 20 timers on 2 cores).
        spark.conf.set(
            "spark.sql.shuffle.partitions", str(2 * spark.sparkContext.defaultParallelism)
        )
    try:
        yield spark
    finally:
        spark.stop()
