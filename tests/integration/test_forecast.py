"""The due-load forecast on real processes: two workers, timers across topics, minutes,
hours and days (some cancelled, one moved, some past the 7-day window), then the
forecast ``kafka-timers status`` adds up from both workers, and the metric, show exactly
those counts; a request without the operator's credential gets the totals only; the
status page draws it, by topic once the operator's token is entered (35-40 s without
the browser, 76 s with it on a 2-core machine at load average 15)."""

from __future__ import annotations

import argparse
import io
import json
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from app.dev.broker import free_port
from app.status.cli import status_main
from kafka_timers_client.client import TimerClient
from kafka_timers_client.errors import KafkaTimersError
from tests.conftest import OPERATOR_TOKEN
from tests.integration.test_metrics import scrape, total
from tests.integration.test_status_page import CHROMIUM, status_page
from tests.support.stack import Stack
from tests.support.waiting import wait_until

MINUTE, HOUR, DAY = 60, 3600, 86400


def get(url: str, token: str | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:  # not listening yet
        return 0, b""


def expected_rows(dues: list[int], doc: dict[str, Any]) -> dict[str, dict[int, int]]:
    """What a forecast document should show for timers due at ``dues`` (none overdue):
    by absolute minute over its minute rows, by absolute hour over its hour rows."""
    m0, h0 = doc["minute_start"], doc["hour_start"]
    minutes = Counter(
        d // MINUTE * MINUTE for d in dues if m0 <= d < m0 + len(doc["minutes"]) * MINUTE
    )
    hours = Counter(d // HOUR * HOUR for d in dues if m0 <= d and d < h0 + len(doc["hours"]) * HOUR)
    return {"minutes": dict(minutes), "hours": dict(hours)}


def shown_rows(doc: dict[str, Any]) -> dict[str, dict[int, int]]:
    return {
        "minutes": {doc["minute_start"] + i * MINUTE: n for i, n in enumerate(doc["minutes"]) if n},
        "hours": {doc["hour_start"] + i * HOUR: n for i, n in enumerate(doc["hours"]) if n},
    }


def test_forecast_counts_what_is_pending_by_topic_minute_and_hour(stack: Stack) -> None:
    settings = stack.settings
    topics = [stack.callback_topic(f"forecast-{c}") for c in "abc"]
    web = [free_port(), free_port()]
    metrics = [free_port(), free_port()]
    stack.oscillator()
    for i in range(2):
        stack.worker(f"worker-{i + 1}", web_port=web[i], metrics_port=metrics[i])
    urls = [f"http://127.0.0.1:{p}" for p in web]

    def ready() -> bool:
        return all(get(u + "/readyz")[0] == 200 for u in urls)

    wait_until(ready, 60, "both workers ready")

    # At least 10 minutes out, so nothing fires or becomes overdue during the test.
    base = (int(time.time()) // MINUTE + 10) * MINUTE
    plan = {
        topics[0]: [base + 5] * 3
        + [base + MINUTE + 1] * 2
        + [base + 2 * HOUR + 1, base + 5 * HOUR]
        + [base + 3 * DAY] * 2
        + [base + 9 * DAY],  # past the 7-day window: not counted
        topics[1]: [base + 7 * MINUTE] * 5 + [base + 26 * HOUR],
        topics[2]: [base + 30 * MINUTE] * 2,
    }
    client = TimerClient(settings)
    with client:
        for topic, dues in plan.items():
            for due in dues:
                client.schedule(topic, b"x", at=due)
        gone = client.schedule(topics[2], b"x", at=base + 40 * MINUTE)
        moved = client.schedule(topics[2], b"x", at=base + 50 * MINUTE, timer_id="forecast-moved")
        client.flush()
        # Stored first, then cancelled and moved: the forecast follows both.
        client.cancel(gone.id, gone.token, wait=30)
        client.schedule(topics[2], b"x", at=base + 6 * HOUR, timer_id=moved.id, token=moved.token)
        client.flush()
    plan[topics[2]].append(base + 6 * HOUR)
    every = [d for dues in plan.values() for d in dues]

    def merged() -> dict[str, Any] | None:
        """``kafka-timers status --json`` over both workers, once it shows the plan."""
        out = io.StringIO()
        try:
            status_main(settings, argparse.Namespace(url=urls, json=True), out=out)
        except KafkaTimersError:  # a worker busy (503): its views' share of the loop
            return None
        data = json.loads(out.getvalue())
        by_topic = data.get("due_forecast_by_topic")
        if not by_topic or not by_topic["complete"]:
            return None
        shown = {t: shown_rows(doc) for t, doc in by_topic["topics"].items()}
        want = {t: expected_rows(dues, by_topic["total"]) for t, dues in plan.items()}
        total_doc = data["due_forecast"]  # the public totals (cached a little apart)
        whole = shown_rows(total_doc) == expected_rows(every, total_doc)
        return data if shown == want and whole else None

    data = wait_until(
        merged, 40, "the forecast of both workers to show every timer planned", interval=1.0
    )
    assert data["due_forecast"]["overdue"] == 0
    a = data["due_forecast_by_topic"]["topics"][topics[0]]["windows"]
    assert a["next_24h"] == 7 and a["next_1h"] == 5 and a["next_5m"] == 0

    # The metric: both workers' gauges add up to the same windows (set every 10 s), as
    # totals: the metrics port asks for no credential, so it never shows a topic.
    windows = ("next_1m", "next_5m", "next_1h", "next_24h")
    want = {
        w: float(sum(data["due_forecast_by_topic"]["topics"][t]["windows"][w] for t in topics))
        for w in windows
    }

    def gauges() -> dict[str, float] | None:
        scrapes = [scrape(p) for p in metrics]
        assert not any(
            name == "kafka_timers_due_forecast" and dict(labels).keys() != {"window"}
            for s in scrapes
            for name, labels in s
        ), "a forecast series labelled by more than its window"
        got = {
            w: sum(total(s, "kafka_timers_due_forecast", window=w) for s in scrapes)
            for w in windows
        }
        return got if got == want else None

    wait_until(gauges, 30, "kafka_timers_due_forecast to show the same windows", interval=1.0)

    # Without the operator's credential: totals, never a topic.
    for url in urls:
        status, body = get(url + "/status/forecast")
        assert status == 401, body
        status, body = get(url + "/status/data")
        assert status == 200
        assert not any(t.encode() in body for t in topics), "a topic name in public JSON"
        assert json.loads(body)["due_forecast"]["minutes"]
        status, body = get(url + "/status/forecast", token="wrong-token-0123456789")
        assert status == 401

    # The page: the forecast's bars and table, per topic once the token is entered.
    browser_check(urls[0])


def browser_check(url: str) -> None:
    """The status page of one worker in headless Chromium (where the status page test
    can run: Debian's chromium and the playwright package; else left to that test)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return
    if not Path(CHROMIUM).exists():
        return
    status, body = get(url + "/status/forecast", token=OPERATOR_TOKEN)
    assert status == 200, body
    topics = {t for t, doc in json.loads(body)["topics"].items() if doc["windows"]["next_24h"]}
    errors: list[str] = []
    with status_page(sync_playwright, url, errors) as page:
        bars = page.eval_on_selector_all("#chart-forecast-hours rect.bar", "r => r.length")
        assert bars == 168
        rows = page.eval_on_selector_all(
            "#forecast-table tbody tr", "rows => rows.map(r => r.dataset.topic)"
        )
        assert rows == ["all topics"], rows
        page.fill("#operator-token", OPERATOR_TOKEN)
        page.click("#token-go")
        page.wait_for_function(
            "document.querySelectorAll('#forecast-table tbody tr').length > 1", timeout=10000
        )
        rows = page.eval_on_selector_all(
            "#forecast-table tbody tr", "rows => rows.map(r => r.dataset.topic)"
        )
        assert topics <= set(rows[1:]), (topics, rows)
    assert errors == [], errors
