"""The status page data and ``kafka-timers status`` show oscillators that run ahead."""

from __future__ import annotations

from typing import Any

from app.status.cli import render_status
from app.status.model import merge_snapshots, oscillator_clocks, read_sample
from app.worker.metrics import WorkerMetrics
from tests.support.status import worker_snapshot


def snapshot(worker: str, oscillators: dict[str, Any], held: dict[str, int]) -> dict[str, Any]:
    return worker_snapshot(worker, oscillators=oscillators, held_ticks=held)


def test_a_workers_sample_has_each_oscillators_lead_and_held_ticks() -> None:
    metrics = WorkerMetrics()
    metrics.oscillator_ahead.labels(source="fast").set(3599.5)
    metrics.oscillator_ahead.labels(source="good").set(-0.02)
    metrics.ticks_held.labels(source="fast").inc(16)
    clocks = oscillator_clocks(read_sample(metrics.registry, 1000.0))
    assert clocks == {
        "fast": {"ahead_seconds": 3599.5, "ticks_held": 16.0},
        "good": {"ahead_seconds": -0.02, "ticks_held": 0.0},
    }


def test_workers_add_up_held_ticks_and_keep_the_largest_lead() -> None:
    merged = merge_snapshots(
        [
            snapshot("a", {"fast": {"ahead_seconds": 3599.2, "ticks_held": 8.0}}, {"0": 5000}),
            snapshot(
                "b",
                {
                    "fast": {"ahead_seconds": 3599.6, "ticks_held": 4.0},
                    "good": {"ahead_seconds": -0.03, "ticks_held": 0.0},
                },
                {"1": 5001},
            ),
        ]
    )
    assert merged["oscillators"] == {
        "fast": {"ahead_seconds": 3599.6, "ticks_held": 12.0},
        "good": {"ahead_seconds": -0.03, "ticks_held": 0.0},
    }
    assert merged["held_ticks"] == {"0": 5000, "1": 5001}
    text = render_status(merged)
    fast = next(line for line in text.splitlines() if line.strip().startswith("fast"))
    good = next(line for line in text.splitlines() if line.strip().startswith("good"))
    assert "+3599.60" in fast and "12 ticks held" in fast and "AHEAD" in fast
    assert "-0.03" in good and "AHEAD" not in good
    assert "holding ticks on partition(s) 0, 1" in text


def test_an_oscillators_name_reaches_the_terminal_escaped() -> None:
    """A tick names its oscillator: ``kafka-timers status`` prints the name on the
    operator's terminal, so it is shown escaped, one line per oscillator."""
    hostile = "osc\nforged line\x1b]0;owned\x07\x1b[2J"
    merged = merge_snapshots(
        [snapshot("w\x1b[1m", {hostile: {"ahead_seconds": 0.1, "ticks_held": 0.0}}, {})]
    )
    text = render_status(merged)
    assert not any(c in text for c in "\x1b\x07")
    assert not any(line.startswith("forged") for line in text.splitlines())
    assert "osc\\nforged line\\x1b]0;owned" in text
