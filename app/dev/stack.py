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
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from app.dev.broker import free_port
from app.dev.lifetime import die_with_parent as _die_with_parent
from app.kafka.records import TopicReader
from app.settings import Settings
from kafka_timers_client.client import TimerClient

__all__ = [
    "ServiceProcess",
    "child_env",
    "start_oscillator",
    "start_worker",
    "wait_until_firing",
]


class ServiceProcess:
    """One ``kafka-timers`` subcommand running as a child process, logging to a file.

    ``env`` is added to this process's environment; ``python_path`` directories go before
    the child's own ``PYTHONPATH`` entries (tests put a ``sitecustomize`` there that
    moves the child's clock, see ``tests/support/clock.py``). With ``die_with_parent``
    the kernel kills it when this process ends, even by ``kill -9`` (Linux, from the
    main thread: :func:`app.dev.lifetime.die_with_parent`); the demo asks for it, tests
    that stop and kill children themselves need not.
    """

    #: The settings it was started with (its ports, data directory, id), where known.
    settings: Settings | None = None
    #: Whether SIGTERM was sent (:meth:`terminate`): a second one is never sent.
    _terminated = False

    def __init__(
        self,
        name: str,
        args: list[str],
        env: Mapping[str, str],
        log_path: Path,
        *,
        python_path: Sequence[str] = (),
        settings: Settings | None = None,
        die_with_parent: bool = False,
    ) -> None:
        self.name = name
        self.settings = settings
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log: IO[bytes] = log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app", *args],
            env=child_env(env, python_path),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C reaches the parent, which stops us in order
            preexec_fn=_die_with_parent() if die_with_parent else None,
        )

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def terminate(self) -> None:
        """Ask for a graceful stop (SIGTERM) without waiting for it: :meth:`stop` then
        waits. Several processes asked first stop together rather than one by one."""
        if self.alive and not self._terminated:
            self.process.send_signal(signal.SIGTERM)
            self._terminated = True

    def stop(self, timeout: float = 20.0) -> int:
        """Graceful stop (SIGTERM): finish in-flight work and leave the group; kill if stuck."""
        if self.alive:
            self.terminate()
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


def child_env(env: Mapping[str, str], python_path: Sequence[str] = ()) -> dict[str, str]:
    """This process's environment plus ``env``, with ``python_path`` before the child's
    own ``PYTHONPATH`` entries (those of ``env``, else inherited), never instead of them."""
    merged = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
    if python_path:
        own = [p for p in merged.get("PYTHONPATH", "").split(os.pathsep) if p]
        merged["PYTHONPATH"] = os.pathsep.join([*python_path, *own])
    return merged


def start_worker(
    settings: Settings,
    name: str,
    base_dir: Path,
    *,
    loglevel: str = "warning",
    data_dir: Path | None = None,
    web_port: int | None = None,
    metrics_port: int | None = None,
    log_name: str | None = None,
    env: Mapping[str, str] | None = None,
    python_path: Sequence[str] = (),
    die_with_parent: bool = False,
    **changes: Any,
) -> ServiceProcess:
    """A worker named ``name`` (its ``worker_id``): the one way a worker is started here.

    Args:
        settings: the stack's settings; ``changes`` are applied on top
            (``dataclasses.replace``), e.g. ``exactly_once=True``.
        base_dir: where its log and, by default, its data directory go.
        loglevel: Faust's log level; ``info`` logs recovery and catch-up.
        data_dir: its RocksDB directory, ``base_dir / name`` by default. Pass the same one
            to a restarted worker to reuse (or, after a deliberate wipe, rebuild) it.
        web_port: its web server (status page); a free port by default.
        metrics_port: serve Prometheus ``/metrics`` there; off by default.
        log_name: the process's name and log file, ``name`` by default: a restarted
            worker keeps its ``worker_id`` but not its predecessor's log.
        env, python_path, die_with_parent: see :class:`ServiceProcess`.
    """
    worker_settings = replace(
        settings,
        worker_id=name,
        data_dir=str(data_dir or base_dir / name),
        web_port=web_port or free_port(),
        metrics_port=metrics_port,
        **changes,
    )
    log_name = log_name or name
    return _service(
        log_name,
        ["worker", "--loglevel", loglevel],
        worker_settings,
        base_dir,
        env,
        python_path=python_path,
        die_with_parent=die_with_parent,
    )


def start_oscillator(
    settings: Settings,
    name: str,
    base_dir: Path,
    *,
    metrics_port: int | None = None,
    env: Mapping[str, str] | None = None,
    python_path: Sequence[str] = (),
    die_with_parent: bool = False,
    **changes: Any,
) -> ServiceProcess:
    """An oscillator named ``name``; the options mean what they do for :func:`start_worker`."""
    osc_settings = replace(settings, worker_id=name, metrics_port=metrics_port, **changes)
    return _service(
        name,
        ["oscillator"],
        osc_settings,
        base_dir,
        env,
        python_path=python_path,
        die_with_parent=die_with_parent,
    )


def _service(
    name: str,
    args: list[str],
    settings: Settings,
    base_dir: Path,
    env: Mapping[str, str] | None,
    *,
    python_path: Sequence[str],
    die_with_parent: bool,
) -> ServiceProcess:
    """``kafka-timers <args>`` as ``name``, configured by ``settings`` (``env`` over
    them), logging to ``base_dir/<name>.log``."""
    return ServiceProcess(
        name,
        args,
        {**settings.to_env(), **(env or {})},
        base_dir / f"{name}.log",
        python_path=python_path,
        settings=settings,
        die_with_parent=die_with_parent,
    )


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
