"""The processes a nemesis run hurts: a dev broker that survives its own restarts (Tansu on
its ``s3://`` engine, :mod:`tests.support.persistent_broker`), or with
``NEMESIS_KAFKA_HOME`` (an Apache Kafka distribution) one Apache Kafka node
(:mod:`tests.support.apache_kafka_broker`), reached only through the
:class:`~tests.nemesis.proxy.PartitionProxy`, three workers and two oscillators.

One worker (:data:`SMALL_DISK_WORKER`) keeps its RocksDB on a tmpfs of its own, so that
the nemesis can fill the disk under its state; one worker and one oscillator
(:data:`CLOCK_WORKER`, :data:`CLOCK_OSCILLATOR`) are restarted on moved clocks
(:mod:`tests.support.clock`: time-machine from a ``sitecustomize``, which needs a new
process for each new offset). Each incarnation of a worker on a moved clock has its own
worker id (``worker-3~p45``: 45 s ahead), so that its ``fired`` records say which clock
stamped them.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from dataclasses import replace
from pathlib import Path

from app.dev.stack import ServiceProcess, start_oscillator, start_worker
from app.kafka.topics import ensure_topics
from app.settings import Settings, TopicNames
from tests.nemesis.proxy import PartitionProxy
from tests.support.apache_kafka_broker import ApacheKafkaBroker
from tests.support.clock import moved_clock
from tests.support.persistent_broker import PersistentBroker

__all__ = [
    "CLOCK_OSCILLATOR",
    "CLOCK_WORKER",
    "LIMITED_TOPIC",
    "OSCILLATORS",
    "PARTITIONS",
    "PLAIN_TOPIC",
    "SMALL_DISK_WORKER",
    "SPREAD_TOPIC",
    "WORKERS",
    "NemesisStack",
]

WORKERS = ("worker-1", "worker-2", "worker-3")
OSCILLATORS = ("oscillator-1", "oscillator-2")
CLOCK_WORKER = "worker-3"
CLOCK_OSCILLATOR = "oscillator-2"
SMALL_DISK_WORKER = "worker-2"
#: The small disk: room for the run's state many times over, little enough to fill at once.
SMALL_DISK = "96m"
PLAIN_TOPIC = "nm-plain"
SPREAD_TOPIC = "nm-spread"
LIMITED_TOPIC = "nm-limited"
#: Callbacks a second to the limited topic, across the service.
LIMIT_PER_SECOND = 20.0
PARTITIONS = 8


class _ProxiedBroker(PersistentBroker):
    """The persistent broker, advertising the proxy's address: clients reach it only
    through the proxy, after bootstrap too."""

    proxy_port = 0

    def _broker_args(self) -> list[str]:
        args = super()._broker_args()
        at = args.index("--advertised-listener-url")
        args[at + 1] = f"tcp://127.0.0.1:{self.proxy_port}"
        return args


def _incarnation(name: str, offset: float) -> str:
    if not offset:
        return name
    return f"{name}~{'p' if offset > 0 else 'm'}{abs(round(offset))}"


class NemesisStack:
    """Starts, kills, freezes and restarts the run's processes; knows what runs now."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        base_dir.mkdir(parents=True, exist_ok=True)
        kafka_home = os.environ.get("NEMESIS_KAFKA_HOME")
        self.broker: _ProxiedBroker | ApacheKafkaBroker = (
            ApacheKafkaBroker(base_dir / "broker", Path(kafka_home))
            if kafka_home
            else _ProxiedBroker(base_dir / "broker")
        )
        self.proxy: PartitionProxy | None = None
        tag = uuid.uuid4().hex[:8]
        self.settings = replace(
            Settings(),
            partitions=PARTITIONS,
            topics=TopicNames.named(lambda kind: f"nm-{kind}-{tag}"),
            app_id=f"nemesis-{tag}",
            session_timeout=6.0,
            heartbeat_interval=1.0,
            topic_rate_limits=((LIMITED_TOPIC, LIMIT_PER_SECOND),),
        )
        self.processes: dict[str, ServiceProcess] = {}
        #: The clock offset each process runs (or will run again) on.
        self.offsets: dict[str, float] = {}
        self.small_disk = base_dir / "small-disk"
        self._mounted = False
        self._restarts: dict[str, int] = {}

    def start(self) -> None:
        if isinstance(self.broker, ApacheKafkaBroker):
            self.proxy = PartitionProxy(self.broker.port)
            self.broker.advertised_port = self.proxy.port
            self.broker.start()
        else:
            self.broker.start()  # binds the broker's port; the proxy forwards to it
            self.proxy = PartitionProxy(self.broker.port)
            self.broker.proxy_port = self.proxy.port
            self.broker.kill()
            self.broker.start_broker()  # now advertising the proxy
        self.settings = replace(self.settings, bootstrap_servers=f"127.0.0.1:{self.proxy.port}")
        ensure_topics(self.settings)
        ensure_topics(self.settings, [PLAIN_TOPIC, SPREAD_TOPIC, LIMITED_TOPIC])
        self.small_disk.mkdir(exist_ok=True)
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={SMALL_DISK}", "tmpfs", str(self.small_disk)],
            capture_output=True,
            text=True,
        )
        if mounted.returncode != 0:
            raise RuntimeError(
                f"mount -t tmpfs refused ({mounted.stderr.strip()}): the full-disk fault "
                "needs a small filesystem of its own under one worker's state"
            )
        self._mounted = True
        for name in OSCILLATORS:
            self.start_process(name)
        for name in WORKERS:
            self.start_process(name)

    def data_dir(self, name: str) -> Path:
        return self.small_disk / "state" if name == SMALL_DISK_WORKER else self.base_dir / name

    def worker_id(self, name: str) -> str:
        return _incarnation(name, self.offsets.get(name, 0.0))

    def start_process(self, name: str, offset: float | None = None) -> ServiceProcess:
        """Start ``name`` (again), on ``offset`` if given, else on the clock it last had."""
        if offset is not None:
            self.offsets[name] = offset
        clock = moved_clock(self.offsets.get(name, 0.0))
        n = self._restarts[name] = self._restarts.get(name, -1) + 1
        log_name = f"{name}.{n}"
        if name in OSCILLATORS:
            # one log per oscillator, appended to by each incarnation
            process = start_oscillator(
                self.settings,
                name,
                self.base_dir / "logs",
                env=clock.env,
                python_path=clock.python_path,
            )
        else:
            process = start_worker(
                self.settings,
                self.worker_id(name),
                self.base_dir / "logs",
                loglevel="info",
                data_dir=self.data_dir(name),
                log_name=log_name,
                env=clock.env,
                python_path=clock.python_path,
            )
        self.processes[name] = process
        return process

    def pid(self, name: str) -> int:
        return self.processes[name].process.pid

    def alive(self, name: str) -> bool:
        return self.processes[name].alive

    def close(self) -> None:
        for process in self.processes.values():  # all asked at once, then each waited for
            with contextlib.suppress(Exception):
                process.terminate()
        for process in self.processes.values():
            with contextlib.suppress(Exception):
                process.stop(timeout=15)
        if self.proxy is not None:
            self.proxy.close()
        self.broker.close()
        if self._mounted:
            subprocess.run(["umount", "-l", str(self.small_disk)], check=False)
            self._mounted = False
