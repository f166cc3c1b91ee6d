"""The in-process fire probe (``bench/fire_path_probe.py``) fires every timer it stored, in
each of its modes: ``make bench`` counts instructions in it, and a mode that fired nothing
would count nothing and compare as cheap. ``--held`` (a limited topic: held by the tick,
delivered by release rounds, then forgotten) too, in one partition (``--hot``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--rocksdb"],
        ["--series"],
        ["--rocksdb", "--series"],
        ["--held"],
        ["--held", "--rocksdb"],
        ["--held", "--rocksdb", "--hot", "--settle"],
    ],
)
def test_the_probe_fires_every_timer_in_each_mode(flags: list[str]) -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "fire_path_probe.py"), "48", "1", *flags],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},  # the tree under test, as make bench runs it
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])  # it asserts fired == timers
    assert result["timers"] == 48
    assert result["cpu_per_timer_us"] > 0
