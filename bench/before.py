"""What the redesign and the features past the anchors cost work that uses none of them.

Two acceptance points set a bound on the code as it is now against a commit before it:
the redesign (settings declared once, the request reader split by format, the unit of
work, the service, wheel and CLI split by job) was to leave ingest and fire within 5%
of the tree before its first step, and the features past the anchors (calendars and
preview, trigger and backfill, fair firing, debounce, quotas) were to cost at most 2%
of ingest and of fire for timers that use none of them. Each is judged here by
**instructions**, counted by callgrind (:mod:`bench.callgrind`) in the same two
in-process probes on both trees: the request path (``bench/request_path_probe.py``:
4,000 protobuf requests read and stored on their owner partition, RocksDB stores, a
fake output) and the fire path (``bench/fire_path_probe.py``: 4,000 timers due in one
second fired from memory stores), neither using a feature of those. The counts repeat
to about 0.05% from run to run; CPU time on this shared machine moves by a third.
Instructions are not time (cache misses are not in them), but they weigh two code paths
doing the same work.

Each tree before is ``git archive``d (``app``, ``tests/support`` and its own
``clients/python``, which the service imports), byte-compiled, and counted in its own
process; now is this checkout. The broker is not involved. Skipped, with a line that says so, where
there is no valgrind or no git history.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

from bench.callgrind import (
    COUNTED_TIMERS,
    FIRE_PATH_PROBE,
    REPO,
    REQUEST_PATH_PROBE,
    counted_instructions,
)
from bench.context import RunContext, ScenarioResult
from bench.report import Figure

__all__ = ["BEFORE", "PATHS", "Before", "counts", "figures", "run", "verdict"]


class Before(NamedTuple):
    """A commit to count against, and the bound on what came after it."""

    #: The figures' scenario label.
    label: str
    #: The commit (main's, just before the first change it stands before).
    commit: str
    #: What it is before, in the table's words.
    what: str
    #: The most the count may grow, a share of it.
    bound: float


#: ``2bee044`` is main just before the redesign's first merge (the settings declared
#: once); its other steps (the unit of work, the request reader split by format,
#: Faust's internals, the wheel, service and CLI splits) merged after it.
#: ``d36ddd2`` is main just before the first feature past the anchors landed
#: (calendars and preview); trigger and backfill, fair firing, debounce and quotas came
#: after it. Both include what the other changed meanwhile: the bound is on the tree.
BEFORE = (
    Before("redesign", "2bee044", "before the redesign", 0.05),
    Before("anchors", "d36ddd2", "before calendars, trigger, debounce and quotas", 0.02),
)

#: The paths counted: name, probe, its arguments, and what a count is per.
PATHS = (
    ("request", REQUEST_PATH_PROBE, [str(COUNTED_TIMERS), "0"], "request stored"),
    ("fire", FIRE_PATH_PROBE, [str(COUNTED_TIMERS), "0"], "timer fired"),
)


def _extract(commit: str, into: Path) -> bool:
    """``commit``'s ``app``, ``tests/support`` and ``clients/python`` under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", commit, "app", "tests/support", "clients/python"],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        return False
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    (into / "tests" / "__init__.py").touch()
    return True


def _compile(tree: Path) -> None:
    """Byte-compile ``tree``'s packages before it is counted: a process that compiles
    what it imports counted about 1.6% more in the request path (the compiler's garbage
    moves when the collector's full passes come), and whether a tree had been imported
    before would otherwise decide its figure."""
    packages = [tree / "app", tree / "tests" / "support", tree / "clients" / "python"]
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", *map(str, packages)],
        capture_output=True,
        check=True,
    )


def counts() -> dict[str, dict[str, float]] | None:
    """Instructions per request and per timer (``request``, ``fire``) for this tree
    (``now``) and each commit of :data:`BEFORE`; None without valgrind or history."""
    if shutil.which("valgrind") is None:
        return None
    trees: dict[str, Path] = {"now": REPO}
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-before-") as tmp:
        for before in BEFORE:
            tree = Path(tmp) / before.commit
            if not _extract(before.commit, tree):
                return None
            trees[before.commit] = tree
        for name, tree in trees.items():
            _compile(tree)
            out[name] = {}
            for path, probe, args, _ in PATHS:
                counted = counted_instructions(probe, args, tree, [tree / "clients" / "python"])
                if counted is None:
                    return None
                out[name][path] = counted / COUNTED_TIMERS
    return out


def verdict(now: float, before: float, bound: float) -> tuple[float, bool]:
    """The growth from ``before`` to ``now`` (a share) and whether it is within
    ``bound``."""
    share = now / before - 1
    return share, share <= bound


def figures(counted: dict[str, dict[str, float]]) -> list[Figure]:
    """The table's rows: each path against each commit of :data:`BEFORE`."""
    rows = []
    for before in BEFORE:
        for path, _, _, per in PATHS:
            now, then = counted["now"][path], counted[before.commit][path]
            share, met = verdict(now, then, before.bound)
            rows.append(
                Figure(
                    before.label,
                    f"{path} path instructions per {per}, using none of the features since "
                    f"(in-process, callgrind, {COUNTED_TIMERS:,} at once)",
                    f"{now:,.0f}",
                    f"{before.what} ({before.commit}) {then:,.0f} ({share:+.2%})",
                    f"≤ +{before.bound:.0%}",
                    met,
                    value=now,
                    detail={"now": now, "before": then, "commit": before.commit},
                )
            )
    return rows


def run(ctx: RunContext) -> ScenarioResult:
    ctx.say(
        "before: counting the request and fire paths on this tree and "
        + ", ".join(b.commit for b in BEFORE)
    )
    counted = counts()
    if counted is None:
        ctx.say("before: skipped (no valgrind, or no git history to extract the trees from)")
        return ScenarioResult(figures=[], details={"skipped": True})
    return ScenarioResult(figures=figures(counted), details={"instructions": counted})


if __name__ == "__main__":
    print(json.dumps(counts()))
