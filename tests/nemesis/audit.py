"""The PySpark audit's verdict on a nemesis run, beside the checker's.

The checker judges the callbacks against what the load was promised; the audit
(:mod:`spark_audit`) judges the fired topic against the request topic, as an operator
would run it. Two judges from different evidence must find the same: a finding one of
them misses is a defect of that judge (or of the evidence the service writes). After
the checker, the run audits its topics (``--since all``, duplicates allowed: at least
once) and compares the counts kind by kind.

One difference is the evidence's, not a judge's: the audit reads each worker's clock as
it stamped its records, the checker real time. The nemesis moves workers' clocks, so an
audit finding about a timer fired or answered by a worker whose clock the nemesis had
moved (early, after a cancel, after its reschedule) is set apart, counted as
``clock``, not compared.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from app.settings import Settings
from tests.nemesis.checker import Verdict
from tests.nemesis.history import History, Observed

__all__ = ["AUDIT_TIMEOUT", "Agreement", "compare", "run_audit", "skewed_ids"]

#: How long the audit may take, seconds (an hour's topics: about two minutes here).
AUDIT_TIMEOUT = 900

#: The audit's violation kind for each of the checker's findings.
PAIRS = (
    ("lost", "missing"),
    ("early", "early"),
    ("after_cancel", "fire_after_cancel"),
    ("undone", "superseded_fire"),
    ("unknown", "unrequested_fire"),
)
#: Audit kinds judged by comparing a worker's clock with another time.
CLOCK_KINDS = frozenset({"early", "fire_after_cancel", "superseded_fire"})
#: Listed violations asked of the audit: all of them, so each can be looked at.
MAX_LISTED = 1_000_000


def skewed_ids(history: History, observed: Observed) -> set[str]:
    """Ids fired, or whose cancel was answered, by a worker the nemesis ran with a moved
    clock (an incarnation with an offset)."""
    moved = {i.worker for i in history.incarnations if i.offset_s}
    return {f.id for f in observed.fires if f.worker in moved} | {
        a.id for a in observed.answers if a.worker in moved
    }


@dataclass(frozen=True)
class Agreement:
    """The two judges' counts, kind by kind: ``(finding, checker, audit)``."""

    counts: tuple[tuple[str, int, int], ...]
    #: The audit's own last line (PASS or FAIL, with its counts).
    audit_line: str
    #: Audit findings set apart: about timers a moved worker clock stamped.
    clock: int = 0

    @property
    def agrees(self) -> bool:
        return all(checker == audit for _, checker, audit in self.counts)

    def line(self) -> str:
        parts = ", ".join(f"{name} {checker}/{audit}" for name, checker, audit in self.counts)
        verb = "agrees" if self.agrees else "DISAGREES"
        return (
            f"audit {verb} with the checker (checker/audit): {parts}; {self.clock} audit "
            f"findings on moved worker clocks set apart; {self.audit_line}"
        )


def compare(
    verdict: Verdict,
    summary: dict[str, object],
    audit_line: str = "",
    skewed: set[str] | frozenset[str] = frozenset(),
) -> Agreement:
    """The checker's ``verdict`` against the audit's ``summary.json``; audit findings of
    :data:`CLOCK_KINDS` about ``skewed`` ids are set apart (see the module docstring)."""
    counts = dict(summary.get("violation_counts") or {})  # type: ignore[call-overload]
    listed = summary.get("violations") or []
    assert isinstance(listed, list)
    clock = 0
    for violation in listed:
        if violation.get("kind") in CLOCK_KINDS and violation.get("id") in skewed:
            counts[violation["kind"]] = counts.get(violation["kind"], 0) - 1
            clock += 1
    return Agreement(
        tuple(
            (finding, len(getattr(verdict, finding)), int(counts.get(kind, 0)))
            for finding, kind in PAIRS
        ),
        audit_line,
        clock,
    )


def run_audit(settings: Settings, out: Path, as_of: float) -> tuple[dict[str, object], str]:
    """Audit the run's topics into ``out``; its summary and its last line."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "spark_audit.main",
            "--bootstrap-server",
            settings.bootstrap_servers,
            "--request-topic",
            settings.topics.requests,
            "--fired-topic",
            settings.topics.fired,
            "--output",
            str(out),
            "--since",
            "all",
            "--as-of",
            f"{as_of:.3f}",
            "--allow-duplicates",
            "--max-listed",
            str(MAX_LISTED),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=AUDIT_TIMEOUT,
        check=False,
    )
    (out.parent / "audit.stderr").write_text(done.stderr)
    summary_path = out / "summary.json"
    if not summary_path.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"the audit exited {done.returncode} without a summary: {tail[0]}")
    lines = done.stdout.strip().splitlines()
    return json.loads(summary_path.read_text()), lines[-1] if lines else ""
