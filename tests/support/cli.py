"""The real ``kafka-timers`` command in a process of its own, as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys

from app.settings import Settings

__all__ = ["run_cli"]


def run_cli(
    settings: Settings | None, *args: str, timeout: float = 90.0
) -> subprocess.CompletedProcess[str]:
    """``kafka-timers <args>``, configured through its environment only (``settings``:
    none, for errors found before any setting is read); stdout and stderr apart."""
    env = {**os.environ, **settings.to_env()} if settings is not None else None
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
