"""Figures and how they are printed: one row per figure, each beside its baseline.

A :class:`Figure` is what the issue asks to publish: a measured value, the baseline
measured in the same run that it should be read against, the target (if any) and
whether the target was met. The table is plain text, so it pastes into the docs and a
terminal alike; the JSON keeps the same rows plus every raw detail.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "Figure",
    "fmt_bytes",
    "fmt_count",
    "fmt_ms",
    "fmt_rate",
    "fmt_seconds",
    "render",
    "render_markdown",
    "verdict",
]


@dataclass(frozen=True)
class Figure:
    """One published number."""

    #: Scenario it belongs to (``ingest``, ``steady``...).
    scenario: str
    #: What was measured, in words.
    name: str
    #: The measured value, formatted with its unit ("12,345/s", "180 ms").
    result: str
    #: The same-run baseline to read it against, formatted ("Faust 4,800/s -> 2.6x").
    baseline: str = ""
    #: The target from the issue, if this figure has one ("≥ 10,000/s").
    target: str = ""
    #: True/False when there is a target, None otherwise.
    met: bool | None = None
    #: The raw value in base units (per second, seconds, bytes) for the JSON.
    value: float | None = None
    #: Anything else worth keeping in the JSON.
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if isinstance(self.value, float) and not math.isfinite(self.value):
            data["value"] = None
        return data


def fmt_count(n: float) -> str:
    """``1234567`` -> ``1,234,567``."""
    return f"{n:,.0f}"


def fmt_rate(per_second: float, unit: str = "/s") -> str:
    """A rate with thousands separators."""
    if not math.isfinite(per_second):
        return "∞"
    return f"{per_second:,.0f}{unit}"


def fmt_ms(seconds: float) -> str:
    """Seconds shown as milliseconds, with a decimal below 10 ms."""
    ms = seconds * 1000
    return f"{ms:.1f} ms" if abs(ms) < 10 else f"{ms:,.0f} ms"


def fmt_seconds(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 100 else f"{seconds:,.0f} s"


def fmt_bytes(n: float) -> str:
    """Bytes in MB (10^6), the unit the targets are stated in."""
    return f"{n / 1e6:,.1f} MB"


def verdict(met: bool | None) -> str:
    return "" if met is None else ("met" if met else "MISSED")


def render(figures: Sequence[Figure]) -> str:
    """A fixed-width text table: scenario, figure, result, baseline, target, verdict."""
    header = ("scenario", "figure", "result", "baseline (same run)", "target", "")
    rows = [(f.scenario, f.name, f.result, f.baseline, f.target, verdict(f.met)) for f in figures]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out = [line(header), line(["-" * w for w in widths])]
    previous = None
    for row in rows:
        shown = list(row)
        if row[0] == previous:
            shown[0] = ""  # one scenario name per group keeps the table readable
        previous = row[0]
        out.append(line(shown))
    return "\n".join(out)


def render_markdown(figures: Sequence[Figure]) -> str:
    """The same table as GitHub Markdown, for docs/performance.md."""
    out = [
        "| scenario | figure | result | baseline (same run) | target | |",
        "|---|---|---|---|---|---|",
    ]
    for f in figures:
        cells = (f.scenario, f.name, f.result, f.baseline, f.target, verdict(f.met))
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(out)
