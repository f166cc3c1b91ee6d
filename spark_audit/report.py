"""The audit's findings for people: a console summary and a self-contained HTML page."""

from __future__ import annotations

from datetime import datetime, timezone
from html import escape
from typing import Any

from spark_audit.charts import bar_chart
from spark_audit.summary import AuditSummary, LatenessRow
from spark_audit.verdicts import REFUSED_OUTCOMES, ViolationKind, utc_text

__all__ = ["console_summary", "fire_rate_bars", "html_report", "verdict_line"]

_KINDS = [k.value for k in ViolationKind]
#: The extra fires a summary without them shows (one written before they were counted).
_NO_EXTRA = {"triggered": 0, "backfilled": 0}
_NO_REFUSED = dict.fromkeys(REFUSED_OUTCOMES, 0)


def _utc(ms: int | None) -> str:
    return "-" if ms is None else utc_text(ms)


def _due(second: int | None) -> str:
    return "-" if second is None else _utc(second * 1000).replace(".000Z", "Z")


def verdict_line(summary: AuditSummary) -> str:
    """One line: PASS or FAIL, and why."""
    aside = summary.set_aside_count
    aside_note = f", {aside:,} records set aside" if aside else ""
    too_much = (
        f"{aside:,} records set aside, more than --max-set-aside {summary.max_set_aside:,}"
        if summary.too_much_set_aside
        else ""
    )
    if summary.exit_code == 0:
        excused = summary.violation_counts.get(ViolationKind.DUPLICATE.value, 0)
        note = f" ({excused} duplicate fires allowed)" if excused else ""
        return f"audit PASS: {summary.timers:,} timers, no violations{note}{aside_note}"
    n = summary.gating_violations
    if not n:
        return f"audit FAIL: {too_much} ({summary.timers:,} timers, no violations)"
    found = ", ".join(
        f"{summary.violation_counts[k]} {k}" for k in _KINDS if summary.violation_counts.get(k)
    )
    extra = f"; {too_much}" if too_much else aside_note
    return (
        f"audit FAIL: {n:,} violation{'s' if n != 1 else ''} in {summary.timers:,} timers: "
        f"{found}{extra}"
    )


#: Widths a bar of the fire-rate chart may stand for, minutes.
_RATE_STEPS = (1, 5, 15, 60, 360, 1440)


def fire_rate_bars(
    per_minute: list[tuple[int, int]], max_bars: int = 720
) -> tuple[int, list[tuple[str, int]]]:
    """Bars for the fire-rate chart: ``(minutes per bar, [(UTC label, fires)])``.

    Minutes without fires get an empty bar, so gaps in time show as gaps; a span too
    long for one bar per minute is drawn with wider bars.
    """
    if not per_minute:
        return 1, []
    first, last = per_minute[0][0], per_minute[-1][0]
    span = (last - first) // 60 + 1
    step = next((s for s in _RATE_STEPS if span / s <= max_bars), _RATE_STEPS[-1])
    width = step * 60
    start = first - first % width
    counts = [0] * ((last - start) // width + 1)
    for minute, fires in per_minute:
        counts[(minute - start) // width] += fires
    fmt = "%H:%M" if step < 1440 else "%Y-%m-%d"
    labels = [
        datetime.fromtimestamp(start + i * width, tz=timezone.utc).strftime(fmt)
        for i in range(len(counts))
    ]
    return step, list(zip(labels, counts, strict=True))


def _lateness_line(row: LatenessRow) -> str:
    return (
        f"  {row.group:<32} {row.fires:>9}  {row.p50_ms:>9.0f}  {row.p90_ms:>9.0f}  "
        f"{row.p99_ms:>9.0f}  {row.max_ms:>9.0f}"
    )


def console_summary(summary: AuditSummary, per_kind: int = 5) -> str:
    """The summary printed at the end of a run."""
    reads = summary.reads
    lines = [
        f"kafka-timers audit as of {_utc(summary.as_of_ms)} (grace {summary.grace_ms / 1000:g} s"
        + (
            f", violations since {_utc(summary.since_ms)})"
            if summary.since_ms is not None
            else ", the whole history)"
        ),
        f"  read {reads.request_records} request records ({reads.rejected_requests} refused) "
        f"from {summary.requests_topic}, {reads.fired_records} records from "
        f"{summary.fired_topic} ({reads.unreadable_fired_records} unreadable)",
        f"  timers: {summary.timers}  "
        + "  ".join(f"{k}={v}" for k, v in sorted(summary.statuses.items())),
        "  violations: " + "  ".join(f"{k}={summary.violation_counts.get(k, 0)}" for k in _KINDS),
        "  occurrences (not violations): "
        + "  ".join(f"{k}={v}" for k, v in summary.occurrences.items()),
        "  extra fires (not violations): "
        + "  ".join(f"{k}={v}" for k, v in (summary.extra_fires or _NO_EXTRA).items()),
        "  routing (not violations): " + "  ".join(f"{k}={v}" for k, v in summary.routing.items()),
        "  refused by workers (not violations): "
        + "  ".join(f"{k}={v}" for k, v in (summary.refused or _NO_REFUSED).items()),
        "",
        f"  {'lateness (ms)':<32} {'fires':>9}  {'p50':>9}  {'p90':>9}  {'p99':>9}  {'max':>9}",
    ]
    if summary.lateness_overall is not None:
        lines.append(_lateness_line(summary.lateness_overall))
    lines.extend(_lateness_line(row) for row in summary.lateness_by_topic)
    if summary.violations:
        lines.append("")
        lines.append(f"  violations, the first {per_kind} of each kind:")
        for kind in _KINDS:
            listed = [v for v in summary.violations if v["kind"] == kind]
            for v in listed[:per_kind]:
                lines.append(
                    f"    {kind:<18} id={v['id']} partition={v['partition']} "
                    f"due={_due(v['due'])} at={_utc(v['at_ms'])}: {v['detail']}"
                )
            more = summary.violation_counts.get(kind, 0) - min(len(listed), per_kind)
            if listed and more > 0:
                lines.append(f"    {kind:<18} ... and {more:,} more")
    if summary.set_aside:
        lines.append("")
        lines.append(
            f"  records refused (the worker's rules) or set aside (unreadable), the first "
            f"{per_kind} of each reason:"
        )
        shown: dict[tuple[str, str, str], int] = {}
        for r in summary.set_aside:
            group = (r["disposition"], r["topic"], r["reason"])
            shown[group] = shown.get(group, 0) + 1
            if shown[group] <= per_kind:
                lines.append(
                    f"    {r['disposition']:<9} {r['topic']}[{r['partition']}]@{r['offset']} "
                    f"{r['reason']}: {r['detail'] or ''}"
                )
    if summary.violations or summary.set_aside:
        lines.append(f"    (all of them: {summary.output_dir}/report.html, summary.json)")
    lines.append("")
    lines.append(f"  {summary.elapsed_s:.1f} s; results in {summary.output_dir}")
    lines.append(verdict_line(summary))
    return "\n".join(lines)


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _lateness_table(rows: list[LatenessRow]) -> str:
    return _table(
        ["group", "fires", "p50 ms", "p90 ms", "p99 ms", "max ms"],
        [
            [
                r.group,
                r.fires,
                f"{r.p50_ms:.0f}",
                f"{r.p90_ms:.0f}",
                f"{r.p99_ms:.0f}",
                f"{r.max_ms:.0f}",
            ]
            for r in rows
        ],
    )


_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
.pass { color: #11772d; } .fail { color: #b00020; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
th { background: #f3f3f3; }
svg .bar { fill: #3b6ea8; } svg .bar.warn { fill: #c0392b; }
svg .axis { stroke: #444; } svg .tick { font-size: 11px; fill: #444; }
svg .title { font-size: 13px; font-weight: 600; }
"""


def _violations_html(summary: AuditSummary) -> str:
    """One table per kind found: its first N, with times in UTC."""
    if not summary.violations:
        return "<p>None.</p>"
    parts = []
    for kind in _KINDS:
        rows = [v for v in summary.violations if v["kind"] == kind]
        if not rows:
            continue
        total = summary.violation_counts.get(kind, len(rows))
        shown = f"the first {len(rows):,} of {total:,}" if total > len(rows) else f"{total:,}"
        parts.append(f"<h3>{escape(kind)}: {shown}</h3>")
        parts.append(
            _table(
                ["partition", "id", "callback topic", "due (UTC)", "at (UTC)", "detail"],
                [
                    [
                        v["partition"],
                        v["id"],
                        v.get("final_topic") or "",
                        _due(v["due"]),
                        _utc(v["at_ms"]),
                        v["detail"],
                    ]
                    for v in rows
                ],
            )
        )
    parts.append("<p>All of them are in <code>violations/</code> (Parquet).</p>")
    return "".join(parts)


def _set_aside_html(summary: AuditSummary) -> str:
    """Counts, then the first records of each (disposition, topic, reason)."""
    reads = summary.reads
    head = (
        f"<p>{reads.rejected_requests:,} request records refused by the worker's rules "
        "(dead-lettered: never timers) and "
        f"{summary.set_aside_count:,} records or timers set aside (the audit cannot use "
        f"them; more than {summary.max_set_aside:,} fails the audit). All are in "
        "<code>set_aside/</code> (Parquet).</p>"
    )
    if not summary.set_aside:
        return head
    rows = [
        [
            r["disposition"],
            r["topic"],
            r["partition"],
            r["offset"],
            _utc(r["ts_ms"]),
            r["reason"],
            r["detail"] or "",
        ]
        for r in summary.set_aside
    ]
    return head + _table(
        ["disposition", "topic", "partition", "offset", "timestamp (UTC)", "reason", "detail"],
        rows,
    )


def _per_topic_html(summary: AuditSummary) -> str:
    """Timers by status and violations by kind, one row per callback topic."""
    if not summary.by_topic:
        return "<p>No timers.</p>"
    statuses = sorted({k for c in summary.by_topic.values() for k in c if k not in _KINDS})
    kinds = [k for k in _KINDS if any(k in c for c in summary.by_topic.values())]
    lateness = {r.group: r for r in summary.lateness_by_topic}
    rows = []
    for topic in sorted(summary.by_topic):
        c = summary.by_topic[topic]
        late = lateness.get(topic)
        rows.append(
            [
                topic,
                *(c.get(k, 0) for k in statuses),
                *(c.get(k, 0) for k in kinds),
                f"{late.p99_ms:.0f}" if late else "-",
                f"{late.max_ms:.0f}" if late else "-",
            ]
        )
    return _table(
        ["callback topic", *statuses, *(f"{k} (violation)" for k in kinds), "p99 ms", "max ms"],
        rows,
    )


def html_report(summary: AuditSummary) -> str:
    """A single HTML file with inline charts: lateness histogram, fires per minute."""
    css = "pass" if summary.exit_code == 0 else "fail"
    counts = _table(
        ["violation", "count"], [[k, summary.violation_counts.get(k, 0)] for k in _KINDS]
    )
    statuses = _table(["status", "timers"], sorted(map(list, summary.statuses.items())))
    occurrences = _table(
        ["occurrences", "count"],
        [[k, v] for k, v in summary.occurrences.items()]
        + [[f"extra: {k}", v] for k, v in (summary.extra_fires or _NO_EXTRA).items()]
        + [[f"routing: {k}", v] for k, v in summary.routing.items()]
        + [[f"refused: {k}", v] for k, v in (summary.refused or _NO_REFUSED).items()],
    )
    histogram = bar_chart(
        summary.histogram,
        "Lateness of first fires",
        y_label="fires",
        highlight={0},
        log_scale=True,
    )
    kinds_chart = bar_chart(
        [(k, summary.violation_counts.get(k, 0)) for k in _KINDS],
        "Violations by kind",
        y_label="violations",
        highlight=set(range(len(_KINDS))),
        log_scale=True,
    )
    step, rate_bars = fire_rate_bars(summary.fires_per_minute)
    per_minute = bar_chart(
        rate_bars,
        "Fires per minute (UTC)" if step == 1 else f"Fires per {step} minutes (UTC)",
        y_label="fires",
    )
    violations = _violations_html(summary)
    set_aside = _set_aside_html(summary)
    per_topic = _per_topic_html(summary)
    overall = [summary.lateness_overall] if summary.lateness_overall else []
    reads = summary.reads
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kafka-timers audit</title>
<style>{_STYLE}</style></head><body>
<h1>kafka-timers audit</h1>
<p class="{css}"><strong>{escape(verdict_line(summary))}</strong></p>
<p>As of {_utc(summary.as_of_ms)}, grace {summary.grace_ms / 1000:g} s.
Read {reads.request_records} request records from <code>{escape(summary.requests_topic)}</code>
({reads.rejected_requests} refused) and {reads.fired_records} records from
<code>{escape(summary.fired_topic)}</code> ({reads.unreadable_fired_records} unreadable),
with the {escape(summary.source)} source, in {summary.elapsed_s:.1f} s.</p>
<h2>Violations</h2>{counts}{kinds_chart}
<h2>Timers</h2>{statuses}
<p>Occurrences (a one-shot timer is one): fired, skipped by <code>skip-after</code> and
folded by a series' <code>coalesce</code> policy. Skipped and coalesced ones are the
late-fire policy at work, not violations. Extra fires are those a trigger (a one-shot's
own fire, a series' extra occurrence) or a backfill asked for, each once: judged by
what they are, not by a schedule.</p>{occurrences}
<h2>Lateness</h2>
<p>First fire of each version, from its due second (or from its request, when that came
later); a trigger's or a backfill's fires are not counted here. The red bar counts early
fires; the scale is logarithmic, so a handful among millions still shows, and every bar
carries its count.</p>
{histogram}
{_lateness_table(overall)}
<h3>Per callback topic</h3>{_lateness_table(summary.lateness_by_topic)}
<h3>Per hour (UTC) of the fire</h3>{_lateness_table(summary.lateness_by_hour)}
<h2>Per callback topic</h2>{per_topic}
<h2>Fires per minute</h2>{per_minute}
<h2>Violations found</h2>{violations}
<h2>Records refused or set aside</h2>{set_aside}
</body></html>
"""
