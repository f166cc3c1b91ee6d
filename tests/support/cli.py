"""Code in a process of its own: the real ``kafka-timers`` command as a user runs it, or a
snippet in a fresh interpreter (nothing this test process imported or patched)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

from app.settings import Settings

__all__ = ["run_app", "run_cli", "run_python"]


def run_cli(
    settings: Settings | None, *args: str, timeout: float = 90.0
) -> subprocess.CompletedProcess[str]:
    """``kafka-timers <args>``, configured through its environment only (``settings``:
    none, for errors found before any setting is read); stdout and stderr apart."""
    env = {**os.environ, **settings.to_env()} if settings is not None else None
    return run_app(*args, env=env, timeout=timeout)


def run_app(
    *args: str, env: Mapping[str, str] | None, timeout: float
) -> subprocess.CompletedProcess[str]:
    """``kafka-timers <args>`` (``python -m app``) with exactly the environment ``env``
    (None: this process's); stdout and stderr apart, whatever it exits with."""
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_python(code: str, timeout: float = 120.0) -> str:
    """``python -c <code>`` in a fresh interpreter; what it printed. Fails the test,
    with its stderr, unless it exits 0."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
