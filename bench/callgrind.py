"""Instructions counted by callgrind in one call of a probe: load-immune A/B figures.

CPU time on this shared 2-core machine moves by a third from run to run for the same
code (docs/performance.md, 2026-11-28); the instructions callgrind counts in a section
of a process repeat to 0.01%. A probe (``bench/fire_path_probe.py``) runs the section it
measures inside ``sys.call_tracing``, a C function that only calls its argument, and
callgrind collects only while that function runs (``--toggle-collect``). Instructions
are not time (cache misses and page faults are not in them): they judge two code paths
doing the same work, not rates.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "COUNTED_TIMERS",
    "FIRE_PATH_PROBE",
    "REPO",
    "REQUEST_PATH_PROBE",
    "counted_instructions",
]

REPO = Path(__file__).resolve().parent.parent
#: The probe of the worker's fire path, in-process (see its docstring).
FIRE_PATH_PROBE = REPO / "bench" / "fire_path_probe.py"
#: The probe of the worker's request path, in-process (see its docstring).
REQUEST_PATH_PROBE = REPO / "bench" / "request_path_probe.py"
#: Timers due at once in a counted fire: enough that the per-round costs are small
#: beside the per-timer ones, few enough for valgrind's ~50x slowdown.
COUNTED_TIMERS = 4_000


def counted_instructions(
    probe: Path, args: list[str], tree: Path, path: Sequence[Path] = ()
) -> int | None:
    """Instructions callgrind counts inside ``sys.call_tracing`` in ``python probe args``
    run on ``tree`` (its ``PYTHONPATH``, then ``path``, and its working directory); None
    without valgrind. ``path``: a tree's own ``clients/python``, say, ahead of the
    client package installed in the environment.

    ``PYTHONHASHSEED`` is fixed (set and dict orders, and so the work, repeat) and
    ``PYTHONMALLOC=malloc`` (valgrind follows the system allocator).
    """
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None
    out = subprocess.run(
        [
            valgrind,
            "--tool=callgrind",
            "--collect-atstart=no",
            "--toggle-collect=_PyEval_CallTracing",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            str(probe),
            *args,
        ],
        env={
            "PYTHONPATH": os.pathsep.join([str(tree), *map(str, path)]),
            "PATH": "/usr/bin:/bin",
            "PYTHONHASHSEED": "0",
            "PYTHONMALLOC": "malloc",
        },
        capture_output=True,
        text=True,
        check=True,
        cwd=tree,
    )
    collected = re.search(r"Collected : (\d+)", out.stderr)
    return None if collected is None else int(collected.group(1))
