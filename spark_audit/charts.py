"""Bar charts as inline SVG: the HTML report needs no plotting library and no network."""

from __future__ import annotations

import math
from html import escape

__all__ = ["bar_chart"]

_WIDTH, _HEIGHT = 760, 280
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 12, 28, 64


def _nice_max(value: int) -> int:
    """A round axis maximum at or above ``value`` (1, 2, 5 times a power of ten)."""
    if value <= 0:
        return 1
    magnitude = 1
    while magnitude * 10 <= value:
        magnitude *= 10
    for step in (1, 2, 5, 10):
        if step * magnitude >= value:
            return step * magnitude
    return 10 * magnitude


def _tick(value: float) -> str:
    """``125000`` as ``125k``: axis labels must fit left of the axis."""
    for size, suffix in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if value >= size:
            return f"{value / size:g}{suffix}"
    return f"{value:g}"


def _log_top(value: int) -> int:
    """The power of ten at or above ``value`` (at least 10): a log axis' maximum."""
    top = 10
    while top < value:
        top *= 10
    return top


def bar_chart(
    bars: list[tuple[str, int]],
    title: str,
    *,
    y_label: str,
    max_labels: int = 12,
    highlight: set[int] | None = None,
    log_scale: bool = False,
    max_counted: int = 40,
) -> str:
    """An SVG bar chart of ``(label, value)``; at most ``max_labels`` x labels are drawn.

    Bars whose index is in ``highlight`` are drawn in the warning colour (early fires).
    With ``log_scale`` the height is ``log10(1 + value)``, so 5 early fires among 20,000
    still show as a bar a fifth as tall, not a pixel. Each bar carries its count above it
    when there are at most ``max_counted`` bars (every bar has it as a tooltip).
    """
    plot_w = _WIDTH - _LEFT - _RIGHT
    plot_h = _HEIGHT - _TOP - _BOTTOM
    peak = max((v for _, v in bars), default=0)
    top = _log_top(peak) if log_scale else _nice_max(peak)

    def scaled(value: float) -> float:
        if log_scale:
            return math.log10(1 + value) / math.log10(1 + top)
        return value / top

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}" '
        f'viewBox="0 0 {_WIDTH} {_HEIGHT}" role="img" aria-label="{escape(title)}">',
        f'<text x="{_WIDTH / 2}" y="16" text-anchor="middle" class="title">{escape(title)}</text>',
        f'<line x1="{_LEFT}" y1="{_TOP + plot_h}" x2="{_LEFT + plot_w}" y2="{_TOP + plot_h}" '
        'class="axis"/>',
        f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_TOP + plot_h}" class="axis"/>',
    ]
    ticks = (
        [0, *(10**k for k in range(round(math.log10(top)) + 1))]
        if log_scale
        else [top * i / 4 for i in range(5)]
    )
    for value in ticks:
        y = _TOP + plot_h - plot_h * scaled(value)
        parts.append(
            f'<text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">'
            f"{_tick(value)}</text>"
        )
    parts.append(
        f'<text x="14" y="{_TOP + plot_h / 2}" text-anchor="middle" class="tick" '
        f'transform="rotate(-90 14 {_TOP + plot_h / 2})">'
        f"{escape(y_label + (' (log scale)' if log_scale else ''))}</text>"
    )
    if not bars:
        parts.append(
            f'<text x="{_WIDTH / 2}" y="{_TOP + plot_h / 2}" text-anchor="middle">no data</text>'
        )
    slot = plot_w / max(len(bars), 1)
    every = max(1, -(-len(bars) // max_labels))
    for i, (label, value) in enumerate(bars):
        height = plot_h * scaled(value)
        x = _LEFT + i * slot
        css = "bar warn" if highlight and i in highlight else "bar"
        parts.append(
            f'<rect x="{x + slot * 0.1:.2f}" y="{_TOP + plot_h - height:.2f}" '
            f'width="{max(slot * 0.8, 0.5):.2f}" height="{height:.2f}" class="{css}">'
            f"<title>{escape(label)}: {value}</title></rect>"
        )
        if len(bars) <= max_counted:
            parts.append(
                f'<text x="{x + slot / 2:.1f}" y="{_TOP + plot_h - height - 3:.1f}" '
                f'text-anchor="middle" class="count">{value:,}</text>'
            )
        if i % every == 0:
            lx, ly = x + slot / 2, _TOP + plot_h + 12
            parts.append(
                f'<text x="{lx:.1f}" y="{ly}" text-anchor="end" class="tick" '
                f'transform="rotate(-35 {lx:.1f} {ly})">{escape(label)}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)
