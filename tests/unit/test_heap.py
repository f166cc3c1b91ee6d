"""Settling the heap freezes what startup built and raises the collector's thresholds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_settle_heap_freezes_startup_and_raises_the_thresholds() -> None:
    # In a fresh interpreter: freezing this one would keep the test session's garbage.
    code = (
        "import gc, app.worker.faust_app; from app.worker.heap import GC_THRESHOLDS, "
        "settle_heap; assert gc.get_freeze_count() == 0; settle_heap(); "
        "assert gc.get_freeze_count() > 1000, gc.get_freeze_count(); "
        "assert gc.get_threshold() == GC_THRESHOLDS, gc.get_threshold()"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])
