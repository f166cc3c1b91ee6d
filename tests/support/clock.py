"""Start real processes with their wall clocks moved: hours, days, years ahead.

A timer service has to behave the same next year and in nine years; a test cannot wait
that long, so it moves the clocks of the oscillator and worker processes it starts. The
moving is done inside each child by ``tests/support/timeshift/sitecustomize.py``
(time-machine, from interpreter start); this module only says how to ask for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["OFFSET_VARIABLE", "SITE_DIR", "ChildClock", "moved_clock"]

#: The variable the child's ``sitecustomize`` reads: seconds to add to its wall clock.
#: Test-only, so deliberately not a :class:`app.settings.Settings` field.
OFFSET_VARIABLE = "KAFKA_TIMERS_TEST_CLOCK_OFFSET"
#: The directory holding that ``sitecustomize.py``; it goes first on the child's path.
SITE_DIR = Path(__file__).parent / "timeshift"


@dataclass(frozen=True)
class ChildClock:
    """What a child process needs to run on a moved clock."""

    #: Variables to add to the child's environment.
    env: dict[str, str] = field(default_factory=dict)
    #: Directories to put before the child's own ``PYTHONPATH`` entries.
    python_path: tuple[str, ...] = ()


def moved_clock(offset: float) -> ChildClock:
    """A child's clock ``offset`` seconds ahead of the real one (0: the real clock)."""
    if not offset:
        return ChildClock()
    return ChildClock({OFFSET_VARIABLE: repr(float(offset))}, (str(SITE_DIR),))
