"""The moved clock tests give to real child processes: ahead by exactly the offset, running."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from app.dev.stack import child_env
from tests.support.clock import OFFSET_VARIABLE, SITE_DIR, moved_clock

DAY = 86_400
#: The child reads its clock only after this long, as a service does after its imports
#: (the child's own pause, part of the scene: the test waits on its output, not a clock).
LATE_FIRST_READ = 0.5
CHILD = (
    f"import sys, time; time.sleep({LATE_FIRST_READ}); "
    "print(repr(time.time()), 'sitecustomize' in sys.modules)"
)


@pytest.mark.parametrize("offset", [3600, 400 * DAY, 9 * 365 * DAY + 2 * DAY])
def test_a_child_clock_is_ahead_by_the_offset_and_runs_from_its_start(offset: int) -> None:
    clock = moved_clock(offset)
    before = time.time()
    out = subprocess.check_output(
        [sys.executable, "-c", CHILD], env=child_env(clock.env, clock.python_path), text=True
    )
    after = time.time()
    read, loaded = out.split()
    assert loaded == "True"
    # The clock ran while the child slept: it did not wait for the first read to start.
    assert before + LATE_FIRST_READ <= float(read) - offset <= after


def test_no_offset_leaves_the_child_alone() -> None:
    clock = moved_clock(0)
    assert (clock.env, clock.python_path) == ({}, ())


def test_the_site_directory_goes_before_the_childs_own_python_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = moved_clock(60)
    assert clock.env == {OFFSET_VARIABLE: "60.0"}
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/inherited/a", "/inherited/b"]))
    env = child_env(clock.env, clock.python_path)
    assert env["PYTHONPATH"].split(os.pathsep) == [str(SITE_DIR), "/inherited/a", "/inherited/b"]
    env = child_env({**clock.env, "PYTHONPATH": "/own"}, clock.python_path)
    assert env["PYTHONPATH"].split(os.pathsep) == [str(SITE_DIR), "/own"]
    monkeypatch.delenv("PYTHONPATH")
    assert child_env({}, clock.python_path)["PYTHONPATH"] == str(SITE_DIR)
    assert "PYTHONPATH" not in child_env({})
