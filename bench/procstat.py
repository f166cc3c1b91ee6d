"""What a child process costs, read from ``/proc`` and the file system (Linux only).

RSS comes from ``VmRSS`` in ``/proc/<pid>/status`` and CPU time from ``utime + stime`` in
``/proc/<pid>/stat``: both are the kernel's own accounting, so they need no agent in the
measured process and cannot perturb it. Those CPU times count in clock ticks (10 ms), too
coarse for a one-second sample of an idle process (the target is 20 ms in a second), so
short samples read the scheduler's own nanosecond counter of each thread instead
(``/proc/<pid>/task/<tid>/schedstat``).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "cpu_between",
    "cpu_seconds",
    "disk_bytes",
    "peak_rss_bytes",
    "rss_bytes",
    "thread_cpu_ns",
    "thread_names",
    "thread_shares",
    "thread_wakeups",
]

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


def thread_cpu_ns(pid: int) -> dict[int, int]:
    """Nanoseconds each thread of ``pid`` has run on a CPU so far, by thread id."""
    times: dict[int, int] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            times[int(task.name)] = int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended while we read
    return times


def cpu_between(before: dict[int, int], after: dict[int, int]) -> float:
    """CPU seconds used between two :func:`thread_cpu_ns` readings of one process.

    A thread started in between counts from zero; one that ended in between is missed
    (a worker's threads live as long as it does, so a sample loses nothing there).
    """
    return sum(ns - before.get(tid, 0) for tid, ns in after.items()) / 1e9


def thread_names(pid: int) -> dict[int, str]:
    """Each thread's name as the kernel has it (``comm``): librdkafka names its own
    (``rdk:main``, ``rdk:broker1``); Python threads share the interpreter's."""
    names = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            names[int(task.name)] = (task / "comm").read_text().strip()
        except (FileNotFoundError, ProcessLookupError):
            continue
    return names


def thread_wakeups(pid: int) -> dict[int, int]:
    """Voluntary context switches of each thread so far: how often it slept and woke."""
    counts = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    counts[int(task.name)] = int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError):
            continue
    return counts


def thread_shares(
    names: dict[int, str],
    cpu: tuple[dict[int, int], dict[int, int]],
    wakeups: tuple[dict[int, int], dict[int, int]],
    seconds: float,
) -> dict[str, tuple[float, float]]:
    """``"<tid> <name>": (share of one core, wakeups a second)`` of each thread between
    two readings ``seconds`` apart, busiest first."""
    (cpu0, cpu1), (woke0, woke1) = cpu, wakeups
    shares = {
        f"{tid} {names.get(tid, '?')}": (
            round((ns - cpu0.get(tid, 0)) / 1e9 / seconds, 5),
            round((woke1.get(tid, 0) - woke0.get(tid, 0)) / seconds, 1),
        )
        for tid, ns in cpu1.items()
    }
    return dict(sorted(shares.items(), key=lambda kv: -kv[1][0]))
