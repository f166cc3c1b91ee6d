"""Three minutes of the nemesis (docs/nemesis.md) in every ``make test``: random,
overlapping faults under a mixed load, judged from the topics alone.

Seed 4 is the run that found reschedules undone by a forwarding worker's replay (31 of
them in 20 minutes, on code before the fix): its draws (the plan of faults and the load,
with the burst pattern that provoked the replay) run again here. A seed fixes the draws,
not the machine's timing, so this is a regression test for the defect's conditions, not
a replay of one interleaving. The stack is the dev broker on its ``s3://`` engine, or the
Apache Kafka distribution that ``NEMESIS_KAFKA_HOME`` names.

It needs root (the full-disk fault mounts a small tmpfs) and the whole machine: serial.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.serial,
    pytest.mark.fault,
    pytest.mark.timeout(1500),
    # No longer an expected failure: the hour on Apache Kafka that lost 4 timers to a
    # stale owner's late changelog records (docs/nemesis.md) is fixed, the third hour lost
    # none, and this run passed on the dev broker four times in a row once the topics
    # were read as they come (nothing lost, early, after a cancel, undone or unknown).
]

REPO_ROOT = Path(__file__).resolve().parents[2]
#: The seed of the run that found the replayed-forward lost update.
REGRESSION_SEED = 4
MINUTES = 3
#: The run's own bounds: 3 minutes, the heal, at most 10 minutes of drain, the reading.
RUN_TIMEOUT = 1380

VERDICT = re.compile(
    r"nemesis: (?P<minutes>[\d.]+) min, (?P<faults>[\d,]+) faults .*?, (?P<timers>[\d,]+) timers, "
    r"lost (?P<lost>\d+), early (?P<early>\d+), after cancel (?P<after_cancel>\d+), "
    r"undone (?P<undone>\d+), unknown (?P<unknown>\d+), duplicates (?P<duplicates>\d+)"
)


def test_three_minutes_of_seed_4_lose_nothing_and_fire_nothing_early(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "NEMESIS_MINUTES": str(MINUTES),
        "NEMESIS_SEED": str(REGRESSION_SEED),
        "NEMESIS_DIR": str(tmp_path / "nemesis"),
    }
    run = subprocess.Popen(
        [sys.executable, "-m", "tests.nemesis"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, _ = run.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        run.send_signal(signal.SIGTERM)  # the runner stops the stack it started
        stdout, _ = run.communicate(timeout=120)
        pytest.fail(f"the nemesis ran past {RUN_TIMEOUT} s: {stdout.splitlines()[-15:]}")
    lines = stdout.strip().splitlines()
    verdicts = [m for line in lines if (m := VERDICT.search(line))]
    assert verdicts, f"no verdict line (exit {run.returncode}); last lines: {lines[-15:]}"
    verdict = verdicts[-1]
    assert int(verdict["faults"].replace(",", "")) >= 10, verdict.group(0)
    assert int(verdict["timers"].replace(",", "")) >= 500, verdict.group(0)
    judged = {k: int(verdict[k]) for k in ("lost", "early", "after_cancel", "undone", "unknown")}
    assert judged == dict.fromkeys(judged, 0), "\n".join(lines[-30:])
    assert run.returncode == 0, "\n".join(lines[-30:])
