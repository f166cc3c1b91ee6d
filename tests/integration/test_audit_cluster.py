"""The audit on a Spark standalone cluster, started from the installed pyspark.

Both ways the README gives, as written there: ``kafka-timers audit --master spark://...``
(the executors run the project's Python without anyone exporting ``PYSPARK_PYTHON``)
and ``spark-submit spark_audit/main.py`` with ``SPARK_HOME`` the pyspark package and
``--conf spark.pyspark.python``. Nothing is downloaded: the master and the worker are
``spark-class`` processes of the pip package, stopped at the end.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.settings import Settings
from tests.integration.test_audit import History
from tests.support.audit_run import audit_args
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

VENV_BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as answer:
            return int(json.load(answer).get("aliveworkers", 0))
    except OSError:
        return 0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A standalone master and one 1-core, 1 GiB worker on 127.0.0.1; their master URL."""
    home = spark_home()
    work = tmp_path_factory.mktemp("spark-standalone")
    env = {**os.environ, "SPARK_HOME": home, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("PYSPARK_PYTHON", None)
    port, ui = free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = os.path.join(home, "bin", "spark-class")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name, args in (
            (
                "master",
                [
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--webui-port",
                    str(ui),
                ],
            ),
            (
                "worker",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    url,
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--host",
                    "127.0.0.1",
                    "--webui-port",
                    str(free_port()),
                    "--work-dir",
                    str(work / "work"),
                ],
            ),
        ):
            log = open(work / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
            procs.append(
                subprocess.Popen(
                    [spark_class, *args], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work
                )
            )

        def joined() -> bool:
            assert all(p.poll() is None for p in procs), "master or worker exited"
            return alive_workers(ui) >= 1

        wait_until(joined, 90, "no worker joined the master within 90 s", interval=0.5)
        yield url
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in reversed(procs):
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def write_history(settings: Settings) -> None:
    """Four clean timers and one fired 300 ms early: exactly one violation."""
    h = History(settings)
    t0 = int(time.time()) - 3600
    for i in range(4):
        h.schedule(f"ok-{i}", f"k{i}", t0 + 600 + i, t0)
        h.fired(f"ok-{i}", f"k{i}", t0 + 600 + i, (t0 + 600 + i) * 1000 + 30)
    h.schedule("v-early", "e", t0 + 700, t0)
    h.fired("v-early", "e", t0 + 700, (t0 + 700) * 1000 - 300)


def whole_audit(settings: Settings, out: Path) -> list[str]:
    """The audit's arguments over the whole history, printing only its verdict."""
    return audit_args(settings, out, "--since", "all", "--quiet")


def clean_env() -> dict[str, str]:
    """The user's shell: no PYSPARK_PYTHON, no SPARK_HOME, python3 on PATH lacks pyarrow."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "SPARK_HOME")}
    env.pop("PYSPARK_GATEWAY_PORT", None)
    return env


def check(result: subprocess.CompletedProcess[str], out: Path) -> None:
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["violation_counts"] == {"early": 1}
    assert summary["statuses"] == {"fired": 5}


def test_kafka_timers_audit_runs_on_a_standalone_cluster(
    cluster: str, settings: Settings, tmp_path: Path
) -> None:
    write_history(settings)
    out = tmp_path / "cli"
    result = subprocess.run(
        [str(VENV_BIN / "kafka-timers"), "audit", "--master", cluster, *whole_audit(settings, out)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=420,
        cwd=REPO,
    )
    check(result, out)


def test_spark_submit_runs_the_audit_on_a_standalone_cluster(
    cluster: str, settings: Settings, tmp_path: Path
) -> None:
    write_history(settings)
    out = tmp_path / "submit"
    env = {**clean_env(), "SPARK_HOME": spark_home()}  # README: SPARK_HOME from pyspark
    result = subprocess.run(
        [
            str(VENV_BIN / "spark-submit"),
            "--master",
            cluster,
            "--conf",
            f"spark.pyspark.python={sys.executable}",
            "spark_audit/main.py",
            *whole_audit(settings, out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=420,
        cwd=REPO,
    )
    check(result, out)
