"""Coverage-guided fuzzing (atheris, libFuzzer) of the worker's per-record request path.

Why (issue 21, point 7): Hypothesis (tests/unit/test_hostile_records.py) explores what its
strategies describe; libFuzzer mutates bytes toward branches of the parsers no input has
reached yet, and so finds inputs nobody described. Both drive the same entry point,
:func:`tests.support.hostile.check_record`: one record, then a valid canary, through
``TimerService.handle_requests`` on the memory stores, asserting the same properties
(never raises, canary stored, record accounted for, derived records within the 1 MB
budget, bounded time).

Each input is a record (:func:`tests.support.hostile.record_from_fuzz_input`: raw
bytes are the value; a ``KT1`` envelope also sets key, timestamp and headers). Inputs
that reach new code are added to ``fuzz/corpus/``, which the unit tests replay as
regression cases; a failing input is written to ``fuzz/crashes/``.

Run: ``make fuzz`` (``FUZZ_SECONDS``, default 60), or
``.venv/bin/python fuzz/request_path.py fuzz/corpus -max_total_time=60``.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

with atheris.instrument_imports(include=["app"]):
    from tests.support.hostile import TIME_BOUND_SECONDS, check_record, record_from_fuzz_input

#: Coverage instrumentation makes the Python code under test many times slower: a series
#: caught up from 1970 (1000 callbacks) measured 13 ms plain and 285 ms instrumented. So
#: the unit tests' bound times 20: still far below what a loop or a quadratic conversion
#: costs, and :class:`tests.support.hostile.Overran` stops anything at 2 s.
TIME_BOUND = TIME_BOUND_SECONDS * 20


def test_one_input(data: bytes) -> None:
    check_record(record_from_fuzz_input(data), time_bound=TIME_BOUND)


def main() -> None:
    logging.disable(logging.CRITICAL)  # a warning per dead letter: noise at this rate
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
