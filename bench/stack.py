"""One scenario's world: its broker, topics and child processes, all stopped at the end.

On the broker a user names (``KAFKA_BOOTSTRAP_SERVERS``, :mod:`bench.broker`) every
scenario has topics and an app id of its own, all named with one tag, and deletes them
at the end. Without one, every scenario gets a fresh in-memory dev broker (Tansu starts
in milliseconds, and the next scenario then does not pay for the memory this one
filled). Either way it runs real ``kafka-timers`` processes started exactly as an
operator would start them. :meth:`BenchStack.close` stops them whatever happened, so a
failed scenario never leaves a worker behind to disturb the next one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import TracebackType

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from app.dev.broker import DevBroker, free_port
from app.dev.stack import ServiceProcess, start_oscillator, start_worker
from app.kafka.config import confluent_common, confluent_producer
from app.kafka.topics import ensure_topics
from app.settings import Settings, TopicNames
from bench.scan import QUIET

__all__ = [
    "BenchStack",
    "ModuleProcess",
    "Worker",
    "wait_serving",
    "wait_until",
]


def wait_until(
    probe: Callable[[], object], timeout: float, what: str, interval: float = 0.1
) -> None:
    """Call ``probe()`` until it is truthy; raise ``TimeoutError`` naming ``what``."""
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)  # polling interval of a condition, not a wait for a result


class Worker:
    """A worker process and the port its Prometheus metrics are served on."""

    def __init__(self, process: ServiceProcess, metrics_port: int, data_dir: Path) -> None:
        self.process = process
        self.metrics_port = metrics_port
        self.data_dir = data_dir

    @property
    def pid(self) -> int:
        return self.process.process.pid

    @property
    def name(self) -> str:
        return self.process.name

    def samples(self, timeout: float = 2.0) -> list[Sample]:
        """Every sample of the current ``/metrics``; empty if the worker is not serving."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                text = response.read().decode()
        except OSError:
            return []
        return [s for family in text_string_to_metric_families(text) for s in family.samples]

    def metric(self, name: str, default: float = 0.0, **labels: str) -> float:
        """The sum of sample ``name`` over the series whose labels include ``labels``;
        ``default`` if there is none (or the worker is not serving)."""
        values = [
            s.value for s in self.samples() if s.name == name and labels.items() <= s.labels.items()
        ]
        return sum(values) if values else default

    def last_ticks(self) -> dict[int, float]:
        """The newest tick second this worker processed, per partition it ever held."""
        return {
            int(s.labels["partition"]): s.value
            for s in self.samples()
            if s.name == "kafka_timers_last_tick_seconds"
        }

    def ticking_partitions(self, within: float = 2.5) -> set[int]:
        """Partitions this worker processed a tick for in the last ``within`` seconds.

        A revoked partition keeps its last gauge value, so freshness, not presence, is
        what says the worker serves it now.
        """
        now = time.time()
        return {p for p, second in self.last_ticks().items() if second >= now - within}


def wait_serving(workers: list[Worker], partitions: int, timeout: float = 90.0) -> None:
    """Wait until every partition is ticking on exactly one worker and every worker has one.

    This is "the stack is up": the group has settled, every partition's table is
    recovered and its ticks are being processed.
    """

    def settled() -> bool:
        served = [w.ticking_partitions() for w in workers]
        union = set().union(*served)
        return (
            union == set(range(partitions))
            and all(served)
            and sum(len(s) for s in served) == partitions
        )

    wait_until(settled, timeout, "every partition to be ticking on one worker", 0.25)


class ModuleProcess(ServiceProcess):
    """A child running ``python -m <module>`` (not the ``kafka-timers`` command).

    Same log file, environment handling and stop/kill semantics as the services.
    """

    def __init__(self, name: str, module: str, env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", module],
            env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )


class BenchStack:
    """A broker, unique topics and the processes of one scenario.

    ``bootstrap`` names the broker to use; ``None`` starts a fresh dev broker.
    """

    def __init__(
        self,
        name: str,
        base_dir: Path,
        *,
        partitions: int = 8,
        session_timeout: float = 6.0,
        bootstrap: str | None = None,
    ) -> None:
        self.name = name
        self.base_dir = base_dir / name
        self.partitions = partitions
        self.session_timeout = session_timeout
        self.bootstrap = bootstrap
        self.broker = DevBroker() if bootstrap is None else None
        self.tag = uuid.uuid4().hex[:8]
        self.services: list[ServiceProcess] = []
        self.settings = Settings()

    def __enter__(self) -> BenchStack:
        # A data dir left by an earlier run holds offsets of topics this broker never had.
        shutil.rmtree(self.base_dir, ignore_errors=True)
        self.base_dir.mkdir(parents=True)
        if self.broker is not None:
            self.broker.start()
        tag = self.tag
        self.settings = replace(
            Settings(),
            bootstrap_servers=self.bootstrap or self.broker.bootstrap,  # type: ignore[union-attr]
            partitions=self.partitions,
            topics=TopicNames.named(lambda kind: f"{kind}-{tag}"),
            app_id=f"bench-{self.name}-{tag}",
            session_timeout=self.session_timeout,
            heartbeat_interval=1.0,
            # Its own control secret: the rate-limit scenario sets limits at run time.
            control_secret=secrets.token_hex(24),
        )
        ensure_topics(self.settings)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def changelog(self) -> str:
        return self.settings.changelog_topic

    def topic(self, name: str) -> str:
        """Create ``name-<tag>`` with the service's partition count (never rely on
        auto-creation) and return its name: on a named broker, no earlier run's topic."""
        topic = f"{name}-{self.tag}"
        ensure_topics(self.settings, [topic])
        return topic

    def worker(self, name: str) -> Worker:
        """A worker as :func:`app.dev.stack.start_worker` starts one, with metrics served."""
        metrics_port = free_port()
        process = start_worker(self.settings, name, self.base_dir, metrics_port=metrics_port)
        self.services.append(process)
        return Worker(process, metrics_port, self.base_dir / name)

    def oscillator(self, name: str = "oscillator-1") -> ServiceProcess:
        process = start_oscillator(self.settings, name, self.base_dir)
        self.services.append(process)
        return process

    def serving(self, workers: int, oscillators: int = 2) -> list[Worker]:
        """Oscillators ``oscillator-1``.. and workers ``worker-1``.. started, returned once
        the workers serve every partition between them (:func:`wait_serving`)."""
        for n in range(1, oscillators + 1):
            self.oscillator(f"oscillator-{n}")
        started = [self.worker(f"worker-{n}") for n in range(1, workers + 1)]
        wait_serving(started, self.partitions)
        return started

    def spawn(self, name: str, module: str, settings: Settings, **env: str) -> ServiceProcess:
        """Run ``python -m module`` configured by ``settings`` (plus ``env``), stopped at close."""
        process = ModuleProcess(
            name, module, {**settings.to_env(), **env}, self.base_dir / f"{name}.log"
        )
        self.services.append(process)
        return process

    def producer(self, **extra: object) -> Producer:
        """A librdkafka producer that places keys where Faust expects them (murmur2)."""
        return Producer(confluent_producer(self.settings, **{**QUIET, **extra}))

    def close(self) -> None:
        """Stop every process (gracefully, then by force), then the broker.

        Every process gets its SIGTERM first and they stop together: one after the other,
        a scenario's four processes took seconds of the run for nothing.
        """
        try:
            for service in self.services:
                if service.alive:
                    with contextlib.suppress(OSError):  # it exited meanwhile
                        service.process.send_signal(signal.SIGTERM)
            for service in reversed(self.services):
                try:
                    service.process.wait(15)
                    service.stop()  # it has exited: this closes its log
                except Exception:  # keep stopping the others whatever one does
                    service.kill()
        finally:
            self.services.clear()
            if self.broker is not None:
                self.broker.stop()
            else:
                self._delete_topics()

    def _delete_topics(self) -> None:
        """Delete every topic of this scenario (all carry its tag) from the named broker:
        a run leaves nothing behind, and the next scenario does not share its disk with
        this one's records. Best effort: the broker deletes in the background."""
        admin = AdminClient({**confluent_common(self.settings), "log_level": 0})
        try:
            names = [n for n in admin.list_topics(timeout=10).topics if self.tag in n]
            if names:
                for future in admin.delete_topics(names, operation_timeout=30).values():
                    with contextlib.suppress(KafkaException):
                        future.result(60)
        except KafkaException as exc:
            print(f"could not delete the topics of {self.name}: {exc}", flush=True)
