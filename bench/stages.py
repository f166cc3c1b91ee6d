"""Attribute py-spy samples of a worker to the stages of a request or of a fired timer.

``python -m bench.stages DIR`` reads ``DIR/ingest.txt`` and ``DIR/fire.txt`` (py-spy's
``--format raw`` collapsed stacks, as :mod:`bench.profile_stages` records them) and
prints, per stage, its share of the samples. Each sample goes to the stage of its
innermost frame that names one (a changelog produce inside a store write counts as
changelog, not store); a sample no rule names is "other".
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

__all__ = ["FIRE", "INGEST", "attribute", "main"]

#: (stage, frame substrings): the innermost frame that any names wins, and of the stages
#: naming it the first listed.
INGEST: list[tuple[str, tuple[str, ...]]] = [
    ("read: consume, to_record", ("request_reader.py", "app/kafka/records.py")),
    ("parse", ("app/core/request_", "app/core/timer.py", "app/core/bounds.py")),
    (
        "forward: sign, check, copy",
        ("hop_value", "split_hop", "_keyed", "check_forwardable", "_with ", "forward "),
    ),
    ("policy, size, placement", ("policy.py", "budget.py", "routing.py", "partitioner.py")),
    (
        "store: wheel, RocksDB, WriteBatch",
        ("wheel.py", "partition_store.py", "stored.py", "keys.py", "forecast.py", "unit_of_work"),
    ),
    ("changelog produce", ("OutputProducer.changelog", "OutputProducer._produce")),
    ("flush: wait for acks", ("OutputProducer.flush", "_wait_blocking", "Commits.flush")),
    ("metrics scrape (HTTP)", ("telemetry.py", "prometheus_client", "socketserver", "http/server")),
    ("service loop (batching, counters)", ("service.py",)),
    ("event loop, Faust", ("asyncio", "selectors.py", "faust/", "mode/", "aiokafka")),
]
FIRE: list[tuple[str, tuple[str, ...]]] = [
    ("tick: gates, begin", ("begin_tick", "handle_ticks", "tick_")),
    ("scan: due keys, unpack", ("ChangeloggedKV.scan", "get_many", "unpack_timer", "_pending")),
    ("callback produce", ("OutputProducer.callback", "OutputProducer._produce ")),
    ("audit record", ("_produce_audits", "fired_jsons", "fired.py")),
    ("forget: deletes, index, expiry", ("_forget", "expiry_batch", "ChangeloggedKV.delete")),
    ("local WriteBatch", ("apply_deferred", "local_batch")),
    ("changelog produce", ("OutputProducer.changelog",)),
    ("flush: wait for acks", ("OutputProducer.flush", "_wait_blocking", "Commits.flush")),
    ("metrics scrape (HTTP)", ("telemetry.py", "prometheus_client", "socketserver", "http/server")),
    ("service loop (batching, counters)", ("service.py", "heap.py")),
    ("followers (demand, control)", ("demand.py", "control.py")),
    ("event loop, Faust", ("asyncio", "selectors.py", "faust/", "mode/", "aiokafka")),
]


def attribute(path: Path, rules: list[tuple[str, tuple[str, ...]]]) -> tuple[Counter[str], int]:
    """Samples per stage, and the total."""
    stages: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        stage = "other"
        for frame in reversed(stack.split(";")):
            hit = next((name for name, parts in rules if any(p in frame for p in parts)), None)
            if hit is not None:
                stage = hit
                break
        stages[stage] += n
    return stages, total


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0])
    us = [float(x) for x in args[1:3]] if len(args) >= 3 else [0.0, 0.0]
    for (name, rules), per_unit in zip((("ingest", INGEST), ("fire", FIRE)), us, strict=True):
        stages, total = attribute(folder / f"{name}.txt", rules)
        print(
            f"\n{name}: {total} samples"
            + (f", {per_unit:.1f} µs Python CPU each" if per_unit else "")
        )
        print("| stage | share | µs |\n|---|---:|---:|")
        for stage, n in stages.most_common():
            share = n / total
            print(f"| {stage} | {100 * share:.1f}% | {share * per_unit:.1f} |")


if __name__ == "__main__":
    main()
