"""Scenario sizes: the full run the issue specifies, and a quick smoke run.

Sizes are the only knobs: the method is the same in both, so a quick run exercises
every code path a full run does. ``--quick`` is for checking the harness (about three
minutes), not for publishing: its figures are noisier and some targets need the full
sizes to mean anything.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["FULL", "QUICK", "BenchConfig"]


@dataclass(frozen=True)
class BenchConfig:
    """How big each scenario is."""

    #: Name shown in the output (``full`` or ``quick``).
    name: str
    #: Partitions of every service topic (the service's default).
    partitions: int = 8
    #: Consumer-group session timeout of every worker, seconds: the service's default
    #: (6 s, the shortest a stock Apache Kafka broker accepts), which the issue's
    #: restart targets are stated at.
    session_timeout: float = 6.0
    #: Records for the raw confluent-kafka produce/consume baseline.
    raw_records: int = 200_000
    #: Events for the Faust passthrough baseline.
    faust_events: int = 20_000
    #: Requests preloaded for the ingest scenario; all due in one second, they are then
    #: the bucket the fire figure makes due. The scale-out scenario gives each of its two
    #: workers as many.
    ingest_requests: int = 200_000
    #: Requests of each of the series scenario's four rounds.
    series_requests: int = 50_000
    #: Timers due per second, and for how many seconds, in the steady scenario.
    steady_rate: int = 10_000
    steady_seconds: int = 60
    #: Timers due in one second in the burst scenario.
    burst_timers: int = 1_000_000
    #: Timers due in one second with a 60 s spread in the spread scenario (the
    #: million: see bench.spread).
    spread_timers: int = 1_000_000
    #: Timers due in one second to a topic limited to this many callbacks a second, in
    #: the rate-limit scenario (a million at 50,000/s: see bench.rate_limit).
    rate_limit_timers: int = 1_000_000
    rate_limit_per_second: int = 50_000
    #: Pending-timer levels at which the capacity scenario measures a live worker,
    #: filled through the request path; the last is where idle CPU is measured.
    capacity_levels: tuple[int, ...] = (0, 100_000, 1_000_000)
    #: Pending timers the capacity scenario's worker is restarted on (the timers past the
    #: request path's are written into its stores in bulk while it is stopped).
    memory_pending: int = 10_000_000
    #: Seconds of idle CPU samples (one per second; the median is the figure).
    idle_seconds: int = 10
    #: Pending timers held by the worker that the restart scenario kills.
    recovery_pending: int = 100_000
    #: Timers fired in the state scenario, timers left pending beside them, and how
    #: long fired ids are remembered there (seconds; 7 days in production).
    state_fired: int = 100_000
    state_pending: int = 10_000
    state_window: int = 10

    def with_sizes(self, **changes: object) -> BenchConfig:
        """A copy with some sizes changed; unknown names raise ``TypeError``."""
        sized = replace(self, **changes)  # type: ignore[arg-type]
        if changes:
            sized = replace(sized, name=f"{self.name}*")  # a modified run is not "full"
        return sized


FULL = BenchConfig(name="full")

QUICK = BenchConfig(
    name="quick",
    raw_records=50_000,
    faust_events=10_000,
    ingest_requests=20_000,
    series_requests=10_000,
    steady_rate=2_000,
    steady_seconds=10,
    burst_timers=40_000,
    spread_timers=20_000,
    rate_limit_timers=20_000,
    rate_limit_per_second=5_000,
    capacity_levels=(0, 20_000, 60_000),
    memory_pending=300_000,
    idle_seconds=5,
    recovery_pending=10_000,
    state_fired=50_000,
    state_pending=2_000,
    state_window=10,
)
