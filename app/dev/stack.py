"""Run oscillators and workers as real child processes: for the demo, tests and benchmarks.

Each service is the ``kafka-timers`` command in its own process, configured only
through its environment — exactly as an operator would run it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import IO

from app.client import TimerClient
from app.dev.broker import free_port
from app.kafka.records import TopicReader
from app.settings import Settings

__all__ = ["ServiceProcess", "start_oscillator", "start_worker", "wait_until_firing"]


class ServiceProcess:
    """One ``kafka-timers`` subcommand running as a child process, logging to a file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log: IO[bytes] = log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app", *args],
            env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C reaches the parent, which stops us in order
        )

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 20.0) -> int:
        """Graceful stop (SIGTERM): finish in-flight work and leave the group; kill if stuck."""
        if self.alive:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode

    def kill(self) -> None:
        """``kill -9``: no goodbye, no group leave, no flush."""
        if self.alive:
            self.process.kill()
            self.process.wait()
        self._log.close()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_worker(
    settings: Settings, name: str, base_dir: Path, metrics_port: int | None = None
) -> ServiceProcess:
    """A worker with its own data directory and web port."""
    worker_settings = replace(
        settings,
        worker_id=name,
        data_dir=str(base_dir / name),
        web_port=free_port(),
        metrics_port=metrics_port,
    )
    return ServiceProcess(
        name,
        ["worker", "--loglevel", "warning"],
        worker_settings.to_env(),
        base_dir / f"{name}.log",
    )


def start_oscillator(
    settings: Settings, name: str, base_dir: Path, metrics_port: int | None = None
) -> ServiceProcess:
    """An oscillator named ``name``."""
    osc_settings = replace(settings, worker_id=name, metrics_port=metrics_port)
    return ServiceProcess(name, ["oscillator"], osc_settings.to_env(), base_dir / f"{name}.log")


def wait_until_firing(
    settings: Settings,
    client: TimerClient,
    topic: str,
    *,
    probes: int = 32,
    timeout: float = 90.0,
    stop: threading.Event | None = None,
) -> bool:
    """Schedule ``probes`` timers due now on ``topic`` and wait until all have fired.

    Probe ids are random, so they land on many partitions: when they have all fired,
    the workers have joined and are ticking. Returns False if ``stop`` was set first;
    raises ``TimeoutError`` at the deadline.
    """
    ids = {client.schedule(topic, b"", at=time.time()).id.encode() for _ in range(probes)}
    client.flush()
    with TopicReader(settings, topic) as reader:
        deadline = time.monotonic() + timeout
        while stop is None or not stop.is_set():
            if {r.header("timer-id") for r in reader.records} >= ids:
                return True
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the workers did not start firing within {timeout:g} s")
            reader.poll(0.5)
    return False
