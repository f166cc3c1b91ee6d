"""``kafka-timers status``: the status page's numbers in a terminal, from every worker.

Reads each worker's ``/status/data`` over HTTP (the worker web port), adds them up
(:func:`app.status.model.merge_snapshots`) and prints one report. Exit status 0 when
every worker answered, 1 when some did not (the report covers those that did), and 2
(a :class:`KafkaTimersError`) when none did — so a cron job or a probe can tell.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from app.core.printable import printable
from app.settings import Settings
from app.status.forecast import FORECAST_WINDOWS, merge_forecasts
from app.status.model import AHEAD_ALERT_SECONDS, STORE_KEY_KINDS, merge_snapshots
from kafka_timers_client.errors import KafkaTimersError

__all__ = ["fetch_json", "render_status", "status_main"]

#: Seconds to wait for each worker.
HTTP_TIMEOUT = 5.0
#: A partition whose newest tick is older than this is shown as stale (the alert's 5 s).
STALE_TICK_SECONDS = 5.0
BAR_WIDTH = 40


def fetch_json(
    url: str, timeout: float = HTTP_TIMEOUT, token: str | None = None
) -> tuple[int, Any]:
    """``(HTTP status, decoded JSON body)``; raise ``OSError`` if nothing answers.

    ``token`` is the operator's credential, sent as ``Authorization: Bearer``.
    """
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()
        return exc.code, json.loads(body) if body else None


def _bar(value: float, top: float) -> str:
    if top <= 0 or value <= 0:
        return ""
    eighths = round(BAR_WIDTH * 8 * value / top)
    return "█" * (eighths // 8) + ("", "▏", "▎", "▍", "▌", "▋", "▊", "▉")[eighths % 8]


def _n(value: float | None) -> str:
    if value is None:
        return "-"
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"


def _secs(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _hms(second: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(second))


def _rows(title: str, rows: Sequence[tuple[str, float]], empty: str) -> list[str]:
    lines = [title]
    if not rows:
        return [*lines, f"  {empty}"]
    top = max(v for _, v in rows)
    width = max(len(label) for label, _ in rows)
    lines += [f"  {label:<{width}} {_n(v):>8} {_bar(v, top)}" for label, v in rows]
    return lines


def _oscillator_lines(data: Mapping[str, Any]) -> list[str]:
    """Each oscillator's lead over the workers' clocks, flagged past the alert's 1 s."""
    lines = ["oscillator clocks (seconds ahead of the workers' clocks)"]
    oscillators = data.get("oscillators", {})
    if not oscillators:
        lines.append("  no ticks seen")
    for source, clock in oscillators.items():
        ahead = clock.get("ahead_seconds")
        flag = ""
        if ahead is not None and ahead > AHEAD_ALERT_SECONDS:
            flag = "  AHEAD: its ticks wait for the workers' clocks; check NTP"
        shown = "-" if ahead is None else f"{ahead:+.2f}"
        lines.append(
            f"  {printable(source, 64):<24} {shown:>10} s   "
            f"{_n(clock.get('ticks_held'))} ticks held{flag}"
        )
    held = data.get("held_ticks", {})
    if held:
        lines.append(
            f"  holding ticks on partition(s) {', '.join(sorted(held, key=int))}: they fire "
            "as the workers' clocks reach each second"
        )
    return lines


def _forecast_lines(
    total: Mapping[str, Any] | None, by_topic: Mapping[str, Any] | None
) -> list[str]:
    """The due-load forecast: the windows in all, per topic with the operator's
    credential, and the next 24 hours by hour."""
    if not total:
        return []
    head = "due-load forecast" + ("" if total.get("complete", True) else " (catching up)")
    width = max([len("all topics"), *(len(t) for t in (by_topic or {}).get("topics", {}))])
    names = "".join(f"{w:>10}" for w in FORECAST_WINDOWS)
    lines = ["", f"{head}: pending due from now (UTC minute)", f"  {'':<{width}} {names}"]

    def row(name: str, doc: Mapping[str, Any]) -> str:
        counts = "".join(f"{_n(doc['windows'].get(w, 0)):>10}" for w in FORECAST_WINDOWS)
        return f"  {name:<{width}} {counts}"

    lines.append(row("all topics", total))
    if by_topic:
        lines += [row(topic, doc) for topic, doc in by_topic.get("topics", {}).items()]
    else:
        lines.append("  (by callback topic: with KAFKA_TIMERS_OPERATOR_TOKEN set)")
    hours = total.get("hours", [])[:24]
    lines += _rows(
        "pending by due hour (UTC), next 24 hours",
        [(_hms(total["hour_start"] + i * 3600)[:5], c) for i, c in enumerate(hours) if c],
        "none",
    )
    return lines


def render_status(data: Mapping[str, Any]) -> str:
    """The merged snapshot as plain text, in the page's order (what it quotes, an
    oscillator's name from a tick say, with control characters escaped)."""
    totals = data["totals"]
    due = data["pending_by_due"]
    lat = data["lateness"]
    workers = [printable(w, 200) for w in data.get("workers", []) if w]
    lines = [
        f"kafka-timers status at {_hms(data['now'])} UTC, "
        f"{len(workers)} worker(s): {', '.join(workers)}",
        "",
        f"pending {_n(totals.get('pending'))}   overdue {_n(due['overdue'])}   "
        f"scheduled {_n(totals.get('scheduled'))}   fired {_n(totals.get('fired'))}   "
        f"cancelled {_n(totals.get('cancelled'))}   rejected {_n(totals.get('rejected'))}   "
        f"fires/s {_n(data.get('fires_per_second_recent'))}",
        f"lateness since start: p50 {_secs(lat.get('p50'))}   p90 {_secs(lat.get('p90'))}   "
        f"p99 {_secs(lat.get('p99'))}   ({_n(lat.get('count'))} fires)",
        "",
    ]
    soon = due["soon"]
    per_minute: dict[int, int] = {}
    for i, count in enumerate(soon["counts"]):
        minute = (soon["start"] + i * soon["bucket_seconds"]) // 60 * 60
        per_minute[minute] = per_minute.get(minute, 0) + count
    lines += _rows(
        "pending by due minute (UTC), next 10 minutes",
        [(_hms(m)[:5], c) for m, c in sorted(per_minute.items())],
        "none",
    )
    lines += _rows("pending further out", [(f["label"], f["count"]) for f in due["far"]], "none")
    if due.get("unscanned"):
        lines.append(
            f"  ({_n(due['unscanned'])} more due at or after {_hms(due['exact_before'])} "
            "were not scanned: counts from then on are lower bounds)"
        )
    lines += _forecast_lines(data.get("due_forecast"), data.get("due_forecast_by_topic"))
    lines.append("")
    ticks = sorted(data["last_tick"].items(), key=lambda kv: int(kv[0]))
    lines.append("last tick per partition")
    if not ticks:
        lines.append("  no ticks yet")
    for p, info in ticks:
        flag = "  STALE: no oscillator reaches it" if info["age"] > STALE_TICK_SECONDS else ""
        lines.append(f"  p{p:<4} {_hms(info['second'])}  {info['age']:6.1f} s ago{flag}")
    lines.append("")
    keys = data.get("store_keys_by_partition", {})
    totals_keys = data.get("store_keys", {})
    lines.append(
        "store keys (RocksDB): "
        + "   ".join(f"{kind} {_n(totals_keys.get(kind, 0))}" for kind in STORE_KEY_KINDS)
    )
    for p, counts in sorted(keys.items(), key=lambda kv: int(kv[0])):
        lines.append(
            f"  p{p:<4} "
            + "  ".join(f"{kind} {counts.get(kind, 0):>9}" for kind in STORE_KEY_KINDS)
        )
    lines.append("")
    lines += _oscillator_lines(data)
    lines.append("")
    lines += _rows("rejected by reason", sorted(data["rejected_by_reason"].items()), "none")
    lines += _rows("fired by callback topic", sorted(data["fired_by_topic"].items()), "none")
    return _shown("\n".join(lines))


def _shown(text: str) -> str:
    """``text`` for a terminal: its lines as they are, any other control character
    escaped (the names and ids quoted are escaped where quoted, newlines included)."""
    return "\n".join(printable(line) for line in text.split("\n"))


def _render_next(timers: Sequence[Mapping[str, Any]], now: float) -> str:
    lines = [f"{'due (UTC)':<20} {'in':>8}  {'partition':>9}  {'topic':<24} id"]
    for t in timers:
        due = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t["due"]))
        lines.append(
            f"{due:<20} {t['due'] - now:>7.0f}s  {t['partition']:>9}  "
            f"{printable(t['topic']):<24} {printable(t['id'])}"
        )
    return _shown("\n".join(lines))


def _forecast_by_topic(urls: Sequence[str], token: str) -> dict[str, Any] | None:
    """Every worker's ``/status/forecast`` added up (None if none answered it)."""
    docs = []
    for url in urls:
        try:
            status, body = fetch_json(url + "/status/forecast", token=token)
        except (OSError, ValueError):
            continue
        if status == 200:
            docs.append(body)
    return merge_forecasts(docs)


def status_main(settings: Settings, args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Print the status of running workers (see the module docstring for exit codes).

    Reads ``args.url`` (repeatable; default the local worker's web port) and, when the
    parser offers them, ``args.json`` (print JSON), ``args.timer`` (look one timer up on
    every worker) and ``args.next`` (the next N due over all workers).
    """
    out = out or sys.stdout
    urls = [u.rstrip("/") for u in (getattr(args, "url", None) or [])] or [
        f"http://127.0.0.1:{settings.web_port}"
    ]
    as_json = bool(getattr(args, "json", False))
    timer_id: str | None = getattr(args, "timer", None)
    next_n: int | None = getattr(args, "next", None)

    if timer_id is not None:
        path = "/timers/" + urllib.parse.quote(timer_id, safe="")
    elif next_n is not None:
        path = f"/timers/next?n={next_n}"
    else:
        path = "/status/data"
    answers: list[tuple[str, int, Any]] = []
    failed: list[str] = []
    for url in urls:
        try:
            status, body = fetch_json(url + path, token=settings.operator_token)
        except (OSError, ValueError) as exc:
            failed.append(f"{url} ({exc})")
            continue
        answers.append((url, status, body))
    for failure in failed:
        print(f"kafka-timers: warning: no answer from {failure}", file=sys.stderr)
    if not answers:
        raise KafkaTimersError(
            "no worker answered: " + "; ".join(failed) + " (is a worker running? --url?)"
        )
    partial = 1 if failed else 0

    if timer_id is not None:
        found = [body for _, status, body in answers if status == 200]
        if not found:
            print(json.dumps({"id": timer_id, "error": "not found on any worker"}), file=out)
            return 1
        print(json.dumps(found[0], indent=None if as_json else 2), file=out)
        return partial
    bad = [f"{url}: HTTP {status} {body}" for url, status, body in answers if status != 200]
    if bad:
        raise KafkaTimersError("; ".join(bad))
    if next_n is not None:
        timers = sorted(
            (t for _, _, body in answers for t in body["timers"]),
            key=lambda t: (t["due"], t["partition"], t["id"]),
        )[:next_n]
        print(json.dumps(timers) if as_json else _render_next(timers, time.time()), file=out)
        return partial
    merged = merge_snapshots([body for _, _, body in answers])
    if settings.operator_token:  # the forecast by callback topic is the operator's
        merged["due_forecast_by_topic"] = _forecast_by_topic(urls, settings.operator_token)
    if as_json:
        print(json.dumps(merged, default=lambda v: None if math.isinf(v) else v), file=out)
    else:
        print(render_status(merged), file=out)
    return partial
