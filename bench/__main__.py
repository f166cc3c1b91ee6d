"""``python -m bench`` (``make bench``): run every scenario, print the table, write JSON.

The broker measured is the one ``KAFKA_BOOTSTRAP_SERVERS`` (or ``--bootstrap``) names,
else a fresh dev broker per scenario; the results name it and keep what it reports of
itself (:mod:`bench.broker`). Each scenario starts its own topics and processes and
stops them whatever happens; one that fails is reported as failed and the run goes on,
so a single problem never hides the other figures. Baselines run first, on the same
broker: the figures after them are printed beside them.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

from bench import readme
from bench.broker import broker_line, describe_broker, describe_dev_broker
from bench.config import FULL, QUICK, BenchConfig
from bench.context import RunContext, ScenarioResult
from bench.machine import describe, summary_line
from bench.report import Figure, render, render_markdown

__all__ = ["SCENARIOS", "main"]

#: Every scenario (name: module with a ``run(ctx)``) in the order it runs: baselines
#: first; scale-out right after ingest (its one-worker figure is also ingest's); the
#: burst after ingest (it sizes its lead time from this run's ingest rate). ``ingest``
#: also measures fire, ``steady`` the oscillator under that load, and ``capacity`` idle
#: CPU and memory.
SCENARIOS: dict[str, str] = {
    "baseline-raw": "bench.baseline_raw",
    "baseline-faust": "bench.baseline_faust",
    "ingest": "bench.ingest",  # and fire, on the bucket ingest stored
    "guards": "bench.guards",  # the per-record guards' cost, beside ingest's CPU per request
    "hop": "bench.hop",  # requests placed off their owner: what forwarding costs
    "belonging": "bench.belonging",  # fire-time checks and routing, beside fire and ingest CPU
    "scaleout": "bench.scaleout",
    "series": "bench.series",  # the same for recurring timers, set beside ingest's figures
    "steady": "bench.steady",
    "burst": "bench.burst",
    "spread": "bench.spread",  # the same second with spread 60s: callbacks per second
    "rate-limit": "bench.rate_limit",  # a limited topic's delivered rate, and the gates' cost
    "before": "bench.before",  # the request and fire paths against the trees before
    "capacity": "bench.capacity",  # and idle, and memory at 10,000,000 pending
    "state": "bench.state",
    "restarts": "bench.restarts",  # rolling restart and kill -9 (was: recovery)
    "redelivery": "bench.redelivery",  # messages acked one by one, beside a plain consumer
}


def _run_scenario(name: str, ctx: RunContext) -> ScenarioResult:
    result: ScenarioResult = importlib.import_module(SCENARIOS[name]).run(ctx)
    return result


RESULTS_DIR = Path(__file__).parent / "results"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="small sizes: a ~4-minute smoke run of every path"
    )
    parser.add_argument(
        "--only",
        help="comma-separated scenarios to run: " + ",".join(SCENARIOS),
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=Path(".kafka-timers/bench"),
        help="data dirs and process logs (wiped per scenario)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SIZE=N",
        help="override one size of the config, e.g. --set steady_seconds=30 (repeatable)",
    )
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or None,
        help="the broker to measure (default: KAFKA_BOOTSTRAP_SERVERS; unset: a fresh dev "
        "broker per scenario)",
    )
    parser.add_argument(
        "--compare-with",
        metavar="BOOTSTRAP",
        help="then run the same scenarios on this broker too (an Apache Kafka, say): one "
        "results file, both brokers side by side in the published tables",
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument(
        "--readme",
        action="store_true",
        help="publish the run: bench/published.json and the table in docs/performance.md "
        "(with --only, its scenarios' rows in place of the published run's)",
    )
    return parser.parse_args(argv)


def _size(item: str) -> tuple[str, object]:
    name, sep, raw = item.partition("=")
    if not sep:
        raise ValueError(f"{item!r} is not SIZE=N")
    if "," in raw:
        return name, tuple(int(x) for x in raw.split(","))
    return name, float(raw) if "." in raw else int(raw)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    names = list(SCENARIOS) if not args.only else [n.strip() for n in args.only.split(",")]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"unknown scenario(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    config = QUICK if args.quick else FULL
    try:
        config = config.with_sizes(**dict(_size(item) for item in args.set))
    except (TypeError, ValueError) as exc:
        print(f"bad --set: {exc}", file=sys.stderr)
        return 2
    machine = describe()
    passes: list[tuple[str | None, str]] = [(args.bootstrap, "named by KAFKA_BOOTSTRAP_SERVERS")]
    if args.compare_with:
        passes.append((args.compare_with, "named by --compare-with"))
    runs: list[dict[str, object]] = []
    started_at = datetime.now(timezone.utc)
    for bootstrap, named in passes:
        try:
            broker = describe_broker(bootstrap, named) if bootstrap else describe_dev_broker()
        except Exception as exc:
            print(
                f"cannot describe {bootstrap or 'the dev broker'}: {type(exc).__name__}: {exc}",
                file=sys.stderr,
            )
            return 2
        runs.append(_measure(args, config, names, machine, broker, bootstrap))
    first, *others = runs
    figures = first["figures"]
    assert isinstance(figures, list)
    path = _write_json(args.results_dir, started_at, config.name, machine, first, others)
    (args.results_dir / "latest.md").write_text(render_markdown(figures) + "\n")
    print(f"results: {path}")
    if args.readme:
        try:
            publish = readme.refresh if args.only else readme.publish
            changed_files = publish(path)
        except ValueError as exc:
            print(f"not published: {exc}", file=sys.stderr)
            return 2
        for changed in changed_files:
            print(f"updated {changed}")
    return 0


def _measure(
    args: argparse.Namespace,
    config: BenchConfig,
    names: list[str],
    machine: dict[str, object],
    broker: dict[str, object],
    bootstrap: str | None,
) -> dict[str, object]:
    """Run ``names`` on one broker and print its table: a run's part of the JSON."""
    ctx = RunContext(config=config, work_dir=args.work_dir.resolve(), bootstrap=bootstrap)
    ctx.work_dir.mkdir(parents=True, exist_ok=True)
    started_at = datetime.now(timezone.utc)
    ctx.say(f"{config.name} run: {', '.join(names)}")
    ctx.say(summary_line(machine))
    ctx.say(broker_line(broker))
    figures: list[Figure] = []
    scenarios: dict[str, object] = {}
    for name in names:
        ctx.say(f"--- {name}")
        began = time.monotonic()
        try:
            result = _run_scenario(name, ctx)
        except KeyboardInterrupt:
            ctx.say("interrupted")
            break
        except Exception as exc:
            traceback.print_exc()
            result = ScenarioResult(
                figures=[Figure(name, "scenario failed", f"{type(exc).__name__}: {exc}"[:120])],
                details={"error": repr(exc)},
            )
            result.details["failed"] = True
        seconds = time.monotonic() - began
        scenarios[name] = {"seconds": seconds, **result.details}
        figures.extend(result.figures)
        ctx.say(f"{name} took {seconds:.0f}s")
    total = time.monotonic() - ctx.started
    print()
    print(f"kafka-timers benchmark ({config.name}), {started_at:%Y-%m-%d %H:%M} UTC, {total:.0f} s")
    print(summary_line(machine))
    print(broker_line(broker))
    print()
    print(render(figures))
    missed = [f for f in figures if f.met is False]
    print()
    print(f"{sum(f.met is True for f in figures)} targets met, {len(missed)} missed")
    return {
        "started_at": started_at.isoformat(),
        "seconds": total,
        "broker": broker,
        "figures": figures,
        "scenarios": scenarios,
    }


def _write_json(
    results_dir: Path,
    started_at: datetime,
    config_name: str,
    machine: dict[str, object],
    first: dict[str, object],
    others: list[dict[str, object]],
) -> Path:
    """The run's JSON: the first broker's figures at the top level (what the published
    table reads), each broker measured after it in ``compared``, in the same sitting."""
    results_dir.mkdir(parents=True, exist_ok=True)

    def part(run: dict[str, object]) -> dict[str, object]:
        figures = run["figures"]
        assert isinstance(figures, list)
        return {**run, "figures": [f.as_dict() for f in figures]}

    document: dict[str, object] = {
        **part(first),
        "started_at": started_at.isoformat(),
        "config": config_name,
        "machine": machine,
    }
    if others:
        document["compared"] = [part(run) for run in others]
    path = results_dir / f"{started_at:%Y%m%dT%H%M%SZ}-{config_name}.json"
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")
    shutil.copyfile(path, results_dir / "latest.json")
    return path


if __name__ == "__main__":
    sys.exit(main())
