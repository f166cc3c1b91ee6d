"""One Apache Kafka node (KRaft, broker and controller in one JVM) that the nemesis can
``kill -9`` and start again on the same data: Kafka keeps its log on disk, so topics,
records, committed offsets, groups and transactions survive the restart, as on a real
cluster. The dev broker needs its ``s3://`` engine for that
(:class:`~tests.support.persistent_broker.PersistentBroker`), and fetches on that engine
stall after several minutes, so an hour-long nemesis runs on this one.

``kafka_home`` is an Apache Kafka distribution (its ``libs/`` directory of jars is all
this uses); ``java`` must be on ``PATH``. The interface is the persistent broker's:
:meth:`start`, :meth:`kill`, :meth:`start_broker`, :meth:`close`, ``port`` and
``advertised_port`` (the address clients are told, a proxy's in the nemesis).
"""

from __future__ import annotations

import base64
import contextlib
import signal
import subprocess
import uuid
from pathlib import Path
from typing import IO

from app.dev.broker import accepts_connections, free_port
from tests.support.waiting import wait_until

__all__ = ["ApacheKafkaBroker"]

#: A KRaft node starts in a few seconds; after a ``kill -9`` it recovers its log first.
START_TIMEOUT = 120.0


class ApacheKafkaBroker:
    """One Kafka node in ``log_dir`` (data in ``log_dir/data``, output in ``kafka.log``)."""

    def __init__(self, log_dir: Path, kafka_home: Path) -> None:
        libs = kafka_home / "libs"
        if not any(libs.glob("kafka_*.jar")):
            raise RuntimeError(f"{kafka_home}: no libs/kafka_*.jar, not an Apache Kafka build")
        self.log_dir = log_dir
        self.kafka_home = kafka_home
        self.port = free_port()
        self.controller_port = free_port()
        #: The port the broker advertises: its own unless a proxy stands in front of it.
        self.advertised_port = self.port
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.broker: subprocess.Popen[bytes] | None = None
        self._logs: list[IO[bytes]] = []
        self._formatted = False

    @property
    def _data(self) -> Path:
        return self.log_dir / "data"

    def _log(self) -> IO[bytes]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = (self.log_dir / "kafka.log").open("ab")
        self._logs.append(log)
        return log

    def _java(self, main: str, *args: str, log4j: str = "log4j.properties") -> list[str]:
        config = self.kafka_home / "config" / log4j
        options = [f"-Dlog4j.configuration=file:{config}"] if config.exists() else []
        return ["java", *options, "-cp", f"{self.kafka_home / 'libs'}/*", main, *args]

    def _properties(self) -> Path:
        """Written before every start: the advertised port may have changed."""
        self._data.mkdir(parents=True, exist_ok=True)
        path = self.log_dir / "server.properties"
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.advertised_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self._data / "logs"),
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        return path

    def start(self) -> ApacheKafkaBroker:
        """Format the storage (once) and start the node."""
        self.start_broker()
        return self

    def start_broker(self, timeout: float = START_TIMEOUT) -> None:
        """Start the node (again) on the same data and ports; return once it listens."""
        properties = self._properties()
        log = self._log()
        if not self._formatted:
            subprocess.run(
                self._java(
                    "kafka.tools.StorageTool",
                    *("format", "--ignore-formatted", "-t", _cluster_id()),
                    *("-c", str(properties)),
                    log4j="tools-log4j.properties",
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
                check=True,
            )
            self._formatted = True
        self.broker = subprocess.Popen(
            self._java("kafka.Kafka", str(properties)),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        process = self.broker

        def listening() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"Apache Kafka exited ({process.returncode}) before listening")
            return accepts_connections(self.port)

        wait_until(listening, timeout, f"Apache Kafka listening on {self.port}", interval=0.1)

    def kill(self) -> None:
        """``kill -9`` the node: no goodbye; its log stays on disk."""
        if self.broker is not None and self.broker.poll() is None:
            self.broker.kill()
            self.broker.wait()

    def close(self) -> None:
        """Stop the node (SIGTERM, then SIGKILL after 30 s) and close its log."""
        if self.broker is not None and self.broker.poll() is None:
            self.broker.send_signal(signal.SIGTERM)
            try:
                self.broker.wait(30)
            except subprocess.TimeoutExpired:
                self.broker.kill()
                self.broker.wait()
        for log in self._logs:
            with contextlib.suppress(OSError):
                log.close()


def _cluster_id() -> str:
    """A new KRaft cluster id: 16 random bytes in URL-safe base64, unpadded (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
