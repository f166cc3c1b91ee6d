"""What a scenario gets to run with, and what it hands back."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.config import BenchConfig
from bench.report import Figure
from bench.stack import BenchStack

__all__ = ["Baselines", "RunContext", "ScenarioResult"]


@dataclass
class Baselines:
    """Same-run reference rates, filled by the baseline scenarios, read by the others."""

    #: Raw confluent-kafka produce and consume rates at the request record size (records/s).
    raw_produce: float | None = None
    raw_consume: float | None = None
    #: A plain Faust agent forwarding each event with ``await topic.send`` (events/s).
    faust_passthrough: float | None = None
    #: Requests per second one worker stored in this run (sizes lead times).
    ingest: float | None = None
    #: Worker CPU per request stored in this run, µs (the guards' cost is set beside it).
    ingest_cpu_us: float | None = None
    #: Worker CPU per timer fired in this run's ingest scenario (delivered and forgotten),
    #: µs (the fire-time checks' cost is set beside it).
    fire_cpu_us: float | None = None
    #: Worker CPU per *forwarded* request stored in this run's hop scenario, µs: its
    #: CPU less the requests that landed on their owner at ingest's cost, over the
    #: forwarded ones (the signed hop's cost is set beside it).
    forwarded_cpu_us: float | None = None
    #: Requests per second two workers stored together in this run (the scale-out
    #: scenario; sizes the burst's lead time).
    ingest_two_workers: float | None = None


@dataclass
class RunContext:
    """Configuration, scratch space and the baselines of this run."""

    config: BenchConfig
    #: Scratch directory: data dirs and process logs of every scenario.
    work_dir: Path
    #: The broker every scenario runs on (``KAFKA_BOOTSTRAP_SERVERS``); ``None``: a fresh
    #: dev broker per scenario.
    bootstrap: str | None = None
    baselines: Baselines = field(default_factory=Baselines)
    started: float = field(default_factory=time.monotonic)

    def stack(self, name: str) -> BenchStack:
        """Fresh topics and processes for scenario ``name`` (on a fresh dev broker unless
        the run names one), sized by the config."""
        return BenchStack(
            name,
            self.work_dir,
            partitions=self.config.partitions,
            session_timeout=self.config.session_timeout,
            bootstrap=self.bootstrap,
        )

    def say(self, text: str) -> None:
        """Progress on stderr-like output, prefixed by the elapsed time of the run."""
        print(f"[{time.monotonic() - self.started:6.1f}s] {text}", flush=True)


@dataclass
class ScenarioResult:
    """Figures for the table and raw details for the JSON."""

    figures: list[Figure] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
