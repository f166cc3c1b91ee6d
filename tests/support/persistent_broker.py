"""A dev broker that survives its own restart: Tansu on its ``s3://`` storage engine,
behind the in-memory endpoint of :mod:`tests.support.s3_endpoint` in a process of its own.

The session's broker (``tests/support/broker.py``) keeps everything in memory, so a
restart would lose every topic; this one keeps topics, records, committed offsets and
groups in the endpoint, which stays up while the broker is killed (``kill -9``) or
stopped (SIGTERM) and started again on the same port, bucket and cluster id.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from app.dev.broker import accepts_connections, broker_binary, free_port
from tests.support.waiting import wait_until

__all__ = ["PersistentBroker"]

REPO_ROOT = Path(__file__).resolve().parents[2]
BUCKET = "tansu"


def _wait_listening(port: int, process: subprocess.Popen[bytes], what: str, timeout: float) -> None:
    """Poll until ``port`` accepts a connection; fail at once if ``process`` exits."""

    def listening() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited ({process.returncode}) before listening on {port}")
        return accepts_connections(port)

    # both start in milliseconds: poll the port until it listens
    wait_until(listening, timeout, f"{what} listening on {port}", interval=0.01)


class PersistentBroker:
    """The endpoint and the broker; :meth:`kill` / :meth:`terminate` and :meth:`start_broker`
    restart the broker alone. Logs go to ``log_dir`` (``tansu.log`` holds every run)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.s3_port = free_port()
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.endpoint: subprocess.Popen[bytes] | None = None
        self.broker: subprocess.Popen[bytes] | None = None
        self._logs: list[IO[bytes]] = []

    def _log(self, name: str) -> IO[bytes]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = (self.log_dir / name).open("ab")
        self._logs.append(log)
        return log

    def _endpoint_args(self) -> list[str]:
        return ["--port", str(self.s3_port), "--bucket", BUCKET]

    def _broker_args(self) -> list[str]:
        """Same port, cluster id and bucket every time: what makes it the same broker."""
        url = f"tcp://127.0.0.1:{self.port}"
        return [
            *("--listener-url", url, "--advertised-listener-url", url),
            *("--cluster-id", "kafka-timers-tests", "--storage-engine", f"s3://{BUCKET}/"),
        ]

    def start(self) -> PersistentBroker:
        log = self._log("s3-endpoint.log")
        self.endpoint = subprocess.Popen(
            [sys.executable, "-m", "tests.support.s3_endpoint", *self._endpoint_args()],
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        _wait_listening(self.s3_port, self.endpoint, "the S3 endpoint", 20.0)
        self.start_broker()
        return self

    def start_broker(self, timeout: float = 10.0) -> None:
        """Start Tansu (again) on the same port, bucket and cluster id; return once it listens."""
        env = {
            **os.environ,
            "AWS_ENDPOINT": f"http://127.0.0.1:{self.s3_port}",
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": "tansu",
            "AWS_SECRET_ACCESS_KEY": "tansu-secret",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        log = self._log("tansu.log")
        self.broker = subprocess.Popen(
            [broker_binary(), "broker", *self._broker_args()],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        _wait_listening(self.port, self.broker, "tansu", timeout)

    def kill(self) -> None:
        """``kill -9`` the broker: no goodbye; the endpoint keeps what it stored."""
        if self.broker is not None and self.broker.poll() is None:
            self.broker.kill()
            self.broker.wait()

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM, and wait for the broker to exit (it serves open connections ~5 s first)."""
        assert self.broker is not None
        self.broker.send_signal(signal.SIGTERM)
        try:
            return self.broker.wait(timeout)
        except subprocess.TimeoutExpired:
            self.broker.kill()
            self.broker.wait()
            raise

    def endpoint_stats(self) -> dict[str, Any]:
        """Per-operation counts and mean handling time of the endpoint (``/_stats``)."""
        url = f"http://127.0.0.1:{self.s3_port}/_stats"
        with urllib.request.urlopen(url, timeout=5) as response:
            stats: dict[str, Any] = json.load(response)
        return stats

    def close(self) -> None:
        """Stop the broker (SIGINT: at once) and the endpoint, and close their logs."""
        for process in (self.broker, self.endpoint):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(5)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        for log in self._logs:
            log.close()

    def __enter__(self) -> PersistentBroker:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
