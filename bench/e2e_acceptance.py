"""The end-to-end acceptance run: 2 oscillators, 2 workers, 8 partitions, 1,000 timers.

    .venv/bin/python -m bench.e2e_acceptance [--timers 1000] [--spread 10] [--json PATH]

Starts its own dev broker and real processes, schedules the timers due uniformly over
``--spread`` seconds (with fractions, which round up), reads the callback topic and
compares each record's timestamp with its due second. Exits non-zero unless every timer
fired exactly once, none before its second, and p99 lateness is under one second.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.dev.broker import DevBroker
from app.dev.stack import ServiceProcess, start_oscillator, start_worker, wait_until_firing
from app.kafka.records import TopicReader
from app.kafka.topics import ensure_topics
from app.settings import Settings
from bench.stats import percentile
from kafka_timers_client.client import TimerClient

__all__ = ["run_acceptance"]

CALLBACKS = "acceptance-callbacks"


def run_acceptance(
    timers: int = 1000,
    spread: float = 10.0,
    bootstrap: str | None = None,
    keep_dir: Path | None = None,
    audit_dir: Path | None = None,
) -> dict[str, Any]:
    """Run the scenario; return the measured figures."""
    base = keep_dir or Path(tempfile.mkdtemp(prefix="kt-acceptance-"))
    broker = None if bootstrap else DevBroker().start()
    services: list[ServiceProcess] = []
    try:
        settings = replace(
            Settings(),
            bootstrap_servers=bootstrap or broker.bootstrap,  # type: ignore[union-attr]
            partitions=8,
            session_timeout=6.0,
            app_id="kt-acceptance",
        )
        ensure_topics(settings)
        ensure_topics(settings, [CALLBACKS, CALLBACKS + "-probe"])
        for n in (1, 2):
            services.append(start_oscillator(settings, f"oscillator-{n}", base))
            services.append(start_worker(settings, f"worker-{n}", base))
        client = TimerClient(settings)
        wait_until_firing(settings, client, CALLBACKS + "-probe")
        with TopicReader(settings, CALLBACKS, from_end=True) as reader:
            reader.poll(0.5)
            start = time.time() + 2
            due: dict[str, int] = {}
            for i in range(timers):
                at = start + spread * i / timers
                timer = client.schedule(CALLBACKS, b"x" * 100, f"k{i}", at=at)
                due[timer.id] = timer.due
            client.flush()
            deadline = time.monotonic() + spread + 60
            while time.monotonic() < deadline:
                reader.poll(0.5)
                if {(r.header("timer-id") or b"").decode() for r in reader.records} >= set(due):
                    break
            reader.poll(1.5)  # a late duplicate would land here
            records = list(reader.records)
        counts = Counter((r.header("timer-id") or b"").decode() for r in records)
        lateness = sorted(
            r.timestamp_ms / 1000 - due[i]
            for r in records
            if (i := (r.header("timer-id") or b"").decode()) in due
        )
        result = {
            "timers": timers,
            "fired": sum(1 for t in due if counts[t] >= 1),
            "missing": sum(1 for t in due if counts[t] == 0),
            "duplicates": sum(n - 1 for t, n in counts.items() if t in due and n > 1),
            "early": sum(1 for x in lateness if x < 0),
            "lateness_p50_s": round(percentile(lateness, 50), 3) if lateness else None,
            "lateness_p99_s": round(percentile(lateness, 99), 3) if lateness else None,
            "lateness_max_s": round(lateness[-1], 3) if lateness else None,
            "bootstrap": settings.bootstrap_servers,
        }
        if audit_dir is not None:
            # The PySpark audit of this very run, on the same broker, before it stops.
            from spark_audit.main import main as audit_main

            result["audit_exit"] = audit_main(
                ["--bootstrap-server", settings.bootstrap_servers, "--output", str(audit_dir)]
            )
        result["ok"] = result.get("audit_exit", 0) == 0 and (
            result["missing"] == 0
            and result["duplicates"] == 0
            and result["early"] == 0
            and result["lateness_p99_s"] is not None
            and result["lateness_p99_s"] < 1.0
        )
        return result
    finally:
        for service in services:
            service.stop()
        if broker is not None:
            broker.stop()
        if keep_dir is None:
            shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--timers", type=int, default=1000)
    parser.add_argument("--spread", type=float, default=10.0)
    parser.add_argument("--bootstrap", help="use this broker instead of a fresh dev broker")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--audit",
        type=Path,
        metavar="DIR",
        help="also run the PySpark audit of the run, results in DIR",
    )
    args = parser.parse_args()
    result = run_acceptance(args.timers, args.spread, args.bootstrap, audit_dir=args.audit)
    width = max(len(k) for k in result)
    print("end-to-end acceptance (2 oscillators, 2 workers, 8 partitions)")
    for key, value in result.items():
        print(f"  {key:<{width}}  {value}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
