"""What a child process costs, read from ``/proc`` and the file system (Linux only).

RSS comes from ``VmRSS`` in ``/proc/<pid>/status`` and CPU time from ``utime + stime`` in
``/proc/<pid>/stat``: both are the kernel's own accounting, so they need no agent in the
measured process and cannot perturb it.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cpu_seconds", "disk_bytes", "peak_rss_bytes", "rss_bytes"]

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} for pid {pid} (a zombie?)")


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` now, in bytes (``VmRSS``)."""
    return _status_kb(pid, "VmRSS")


def peak_rss_bytes(pid: int) -> int:
    """Largest resident set size ``pid`` has had, in bytes (``VmHWM``, the high-water mark)."""
    return _status_kb(pid, "VmHWM")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time ``pid`` has used so far, in seconds (all its threads)."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    # The command name (field 2) may contain spaces: split after its closing parenthesis.
    fields = raw[raw.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / _CLOCK_TICKS


def disk_bytes(path: str | Path) -> int:
    """Space the files under ``path`` occupy on disk (allocated blocks, as ``du`` counts)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:
                continue  # RocksDB deletes obsolete files while we walk
    return total
