"""The worker's status page, its JSON endpoints and ``kafka-timers status`` show what was done.

One module-wide scene on a real broker: an oscillator and one worker (so one worker's
numbers are the whole truth), then a known set of timers — some due in the next
minutes, some in hours and days, a few firing at once, one cancelled — and two bad
requests. Every test reads the same scene through a different window: the JSON
endpoints, the terminal command, and the page itself in headless Chromium.

The browser test needs Debian's ``chromium`` (installed by ``make test`` where the
machine allows it) and the ``playwright`` package (dev extras). Without them it skips
with one line saying what to install; CI refuses the skip.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from app.dev.broker import free_port
from app.kafka.topics import ensure_topics
from app.settings import Settings
from app.status.cli import status_main
from app.status.model import (
    SOON_BUCKET_SECONDS,
)
from kafka_timers_client.client import ScheduledTimer, TimerClient
from kafka_timers_client.errors import KafkaTimersError
from tests.conftest import OPERATOR_TOKEN, fresh_settings
from tests.support.broker import BrokerInfo
from tests.support.probes import get_admitted
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

#: Reads a chart's bars as ``{data-label: data-value}``.
BARS_JS = "rs => Object.fromEntries(rs.map(r => [r.dataset.label, Number(r.dataset.value)]))"
CHROMIUM = os.environ.get("KAFKA_TIMERS_CHROMIUM", "/usr/bin/chromium")
#: Flags for a headless Chromium on a machine with no way out (see the env notes).
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@dataclass
class Scene:
    """What was done to the worker, so each test knows what it should show."""

    url: str
    topic: str
    worker: str
    partitions: int
    #: Pending timers due in the next minutes (the cancelled one excluded).
    soon: dict[str, ScheduledTimer]
    #: Pending timers due in hours (1h-6h) and days (1d-7d).
    hours: dict[str, ScheduledTimer]
    days: dict[str, ScheduledTimer]
    fired: dict[str, ScheduledTimer]
    cancelled: ScheduledTimer

    @property
    def pending(self) -> dict[str, ScheduledTimer]:
        return {**self.soon, **self.hours, **self.days}

    def soon_bars(self) -> Counter[int]:
        """Expected "next minutes" bars: bar start second -> count."""
        return Counter(
            t.due // SOON_BUCKET_SECONDS * SOON_BUCKET_SECONDS for t in self.soon.values()
        )


#: How long a view answering "busy" (503 with ``Retry-After``: its heavy views are at
#: their share of the worker's event loop, which a loaded machine reaches) is asked again.
BUSY_DEADLINE = 30.0


def get_json(url: str, token: str | None = OPERATOR_TOKEN) -> tuple[int, Any]:
    """The status and JSON body of ``url``. A busy answer is not an answer yet: it is
    asked again a second later (its ``Retry-After``), as a client should, until
    :data:`BUSY_DEADLINE`."""
    return get_admitted(url, token, BUSY_DEADLINE)


def fired_in(history: list[list[float]]) -> float:
    """How many fires a fires-per-second history adds up to, after its first reading:
    each point is (reading time, rate since the reading before)."""
    return sum(rate * (t - before) for (before, _), (t, rate) in pairwise(history))


def data(scene: Scene) -> dict[str, Any]:
    status, body = get_json(scene.url + "/status/data")
    assert status == 200
    result: dict[str, Any] = body
    return result


@pytest.fixture(scope="module")
def scene(broker: BrokerInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    settings = fresh_settings(broker.bootstrap)
    ensure_topics(settings)
    with running_stack(settings, tmp_path_factory.mktemp("status")) as stack:
        topic = stack.callback_topic("status-callbacks")
        web_port = free_port()
        url = f"http://127.0.0.1:{web_port}"
        stack.oscillator()
        stack.worker("status-worker", web_port=web_port)

        def ready() -> bool:
            try:
                status, body = get_json(url + "/status/data")
            except OSError:
                return False
            ticking = {int(p) for p, t in body["last_tick"].items() if t["age"] < 3}
            everything = set(range(settings.partitions))
            return status == 200 and set(body["partitions_held"]) == everything == ticking

        wait_until(ready, 60, "the worker to hold and tick every partition", interval=0.2)

        now = time.time()
        client = TimerClient(settings)
        soon = [client.schedule(topic, b"s", at=now + 90 + 7 * i) for i in range(12)]
        special = client.schedule(topic, b"s", at=now + 100.5, timer_id="order/7 ü?&")
        hours = [client.schedule(topic, b"h", at=now + 3 * 3600 + i) for i in range(2)]
        days = [client.schedule(topic, b"d", at=now + 2 * 86400 + i) for i in range(3)]
        fired = [client.schedule(topic, b"f", key=f"f{i}", at=now + 2) for i in range(3)]
        cancelled = soon.pop()
        client.cancel(cancelled.id, cancelled.token)
        client.flush()
        producer = stack.producer()
        requests = settings.topics.requests
        producer.produce(requests, json.dumps({"topic": "__nope", "in": "5s"}).encode(), b"r1")
        producer.produce(requests, b"{not json at all", b"r2")
        producer.flush(10)
        scene = Scene(
            url=url,
            topic=topic,
            worker="status-worker",
            partitions=settings.partitions,
            soon={t.id: t for t in [*soon, special]},
            hours={t.id: t for t in hours},
            days={t.id: t for t in days},
            fired={t.id: t for t in fired},
            cancelled=cancelled,
        )

        def settled() -> bool:
            totals = get_json(url + "/status/data")[1]["totals"]
            return bool(
                totals["fired"] == len(scene.fired)
                and totals["rejected"] == 2
                and totals["cancelled"] == 1
                and totals["pending"] == len(scene.pending)
            )

        wait_until(settled, 30, "the worker to count the scene", interval=0.2)
        yield scene


def test_status_data_counts_what_was_scheduled(scene: Scene) -> None:
    d = data(scene)
    assert d["worker"] == scene.worker
    assert d["totals"] == {
        "pending": len(scene.pending),
        "scheduled": len(scene.pending) + len(scene.fired) + 1,  # + the cancelled one
        "fired": len(scene.fired),
        "cancelled": 1,
        "rejected": 2,
    }
    assert d["fired_by_topic"] == {scene.topic: len(scene.fired)}
    assert d["rejected_by_reason"] == {"topic_not_allowed": 1, "malformed": 1}
    assert sum(d["pending_by_partition"].values()) == len(scene.pending)
    due = d["pending_by_due"]
    soon = due["soon"]
    bars = {
        soon["start"] + i * soon["bucket_seconds"]: c for i, c in enumerate(soon["counts"]) if c
    }
    assert bars == dict(scene.soon_bars())
    far = {f["label"]: f["count"] for f in due["far"] if f["count"]}
    assert far == {"1h-6h": len(scene.hours), "1d-7d": len(scene.days)}
    assert due["overdue"] == 0
    assert (due["scanned"], due["unscanned"]) == (len(scene.pending), 0)
    lateness = d["lateness"]
    assert lateness["count"] == len(scene.fired)
    assert lateness["p50"] is not None and 0 <= lateness["p50"] < 2
    assert sum(b["count"] for b in lateness["buckets"]) == len(scene.fired)
    assert {int(p) for p in d["last_tick"]} == set(range(scene.partitions))
    assert all(t["age"] < 3 for t in d["last_tick"].values())
    # The history goes back to the worker's start (nothing fired in its first second):
    # its rates, times the seconds between readings, add up to exactly what fired, once
    # a reading (one a second) has been taken since the last fire.
    history = wait_until(
        lambda: (
            (h := data(scene)["fires_per_second"]) and fired_in(h) > len(scene.fired) - 0.5 and h
        ),
        5,
        "a counter reading after the last fire",
        interval=0.2,
    )
    assert history[0][1] == 0 and all(rate >= 0 for _, rate in history)
    assert fired_in(history) == pytest.approx(len(scene.fired))
    # Every request was applied: no partition this worker holds is behind.
    assert {int(p) for p in d["request_lag"]} == set(range(scene.partitions))
    assert all(lag == {"records": 0, "seconds": 0} for lag in d["request_lag"].values())


def test_a_timer_is_looked_up_by_id_and_its_token_is_never_shown(scene: Scene) -> None:
    def lookup(timer_id: str) -> tuple[int, Any]:
        return get_json(scene.url + "/timers/" + urllib.parse.quote(timer_id, safe=""))

    for timer in scene.pending.values():
        status, body = lookup(timer.id)
        assert status == 200, body
        assert (body["id"], body["state"], body["due"]) == (timer.id, "pending", timer.due)
        assert body["topic"] == scene.topic and 0 <= body["partition"] < scene.partitions
        assert timer.token not in json.dumps(body)
    for timer in scene.fired.values():
        status, body = lookup(timer.id)
        assert (status, body["state"], body["due"]) == (200, "fired", timer.due)
    status, body = lookup(scene.cancelled.id)
    assert (status, body["state"]) == (200, "cancelled")
    assert scene.cancelled.token not in json.dumps(body)
    status, body = lookup("no-such-timer")
    assert status == 404 and body["id"] == "no-such-timer"


def test_next_due_lists_pending_timers_in_due_order(scene: Scene) -> None:
    expected = sorted(scene.pending.values(), key=lambda t: t.due)
    status, body = get_json(scene.url + "/timers/next?n=5")
    assert status == 200
    assert [t["due"] for t in body["timers"]] == [t.due for t in expected[:5]]
    assert {t["id"] for t in body["timers"]} <= {t.id for t in expected if t.due <= expected[4].due}
    status, body = get_json(scene.url + "/timers/next?n=1000")
    assert sorted(t["id"] for t in body["timers"]) == sorted(scene.pending)
    assert all("token" not in t for t in body["timers"])
    for bad in ("0", "1001", "many"):
        status, body = get_json(scene.url + f"/timers/next?n={bad}")
        assert status == 400 and "error" in body


def test_status_command_prints_the_same_numbers(scene: Scene) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "app", "status", "--url", scene.url],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert f"pending {len(scene.pending)} " in text
    assert f"fired {len(scene.fired)} " in text
    assert "rejected 2 " in text and "cancelled 1 " in text
    rows: dict[str, str] = {}
    for line in text.splitlines():  # the first row of each label: sections come in order
        if line.startswith("  ") and len(parts := line.split()) >= 2:
            rows.setdefault(parts[0], parts[1])
    assert rows["1d-7d"] == str(len(scene.days)) and rows["1h-6h"] == str(len(scene.hours))
    assert rows["topic_not_allowed"] == "1" and rows["malformed"] == "1"
    assert rows[scene.topic] == str(len(scene.fired))
    assert "STALE" not in text

    out = io.StringIO()
    args = argparse.Namespace(url=[scene.url], json=True)
    assert status_main(Settings(operator_token=OPERATOR_TOKEN), args, out) == 0
    merged = json.loads(out.getvalue())
    assert merged["totals"]["pending"] == len(scene.pending)
    assert sum(merged["pending_by_due"]["soon"]["counts"]) == len(scene.soon)

    out = io.StringIO()
    args = argparse.Namespace(url=[scene.url], timer=scene.cancelled.id, json=True)
    assert status_main(Settings(operator_token=OPERATOR_TOKEN), args, out) == 0
    assert json.loads(out.getvalue())["state"] == "cancelled"


def test_status_command_says_which_workers_did_not_answer(scene: Scene) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    out = io.StringIO()
    args = argparse.Namespace(url=[scene.url, nobody])
    assert status_main(Settings(operator_token=OPERATOR_TOKEN), args, out) == 1  # partial answer
    assert f"pending {len(scene.pending)} " in out.getvalue()
    with pytest.raises(KafkaTimersError, match="no worker answered"):
        status_main(
            Settings(operator_token=OPERATOR_TOKEN), argparse.Namespace(url=[nobody]), io.StringIO()
        )


@pytest.fixture(scope="module")
def playwright_or_skip() -> Any:
    """Playwright's ``sync_playwright``, checked before the scene starts."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Python package playwright missing: make install (dev extras) installs it")
    if not Path(CHROMIUM).exists():
        pytest.skip(
            f"no Chromium at {CHROMIUM}: install the Debian/Ubuntu package 'chromium' "
            "(or set KAFKA_TIMERS_CHROMIUM to another binary)"
        )
    return sync_playwright


#: Chromium's own log line for a response it fetched with that status (not the page's).
BUSY_LOAD = "the server responded with a status of 503"


def page_error(message: Any) -> bool:
    """An error the page reported, not the browser's log of a busy (503) answer.

    A heavy view the worker is too busy for answers 503 with ``Retry-After``; the page asks
    again after it (``status.js``, ``getJSON``), and the assertions that follow prove that
    it got its answer. Any other console error fails the test.
    """
    return bool(message.type == "error" and BUSY_LOAD not in message.text)


@contextmanager
def status_page(
    sync_playwright: Any,
    url: str,
    errors: list[str],
    console: Callable[[Any], bool] | None = None,
) -> Iterator[Any]:
    """The status page of the worker at ``url`` in headless Chromium, once it has
    refreshed twice. What the page reports as an error, and the console messages
    ``console`` picks, are appended to ``errors``."""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1600})
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            if console is not None:
                page.on("console", lambda msg: errors.append(msg.text) if console(msg) else None)
            page.goto(url + "/status")
            page.wait_for_function("Number(document.body.dataset.refreshes) >= 2", timeout=15000)
            yield page
        finally:
            browser.close()


@pytest.mark.browser
def test_status_page_in_headless_chromium_shows_what_was_scheduled(
    playwright_or_skip: Any, scene: Scene
) -> None:
    errors: list[str] = []
    with status_page(playwright_or_skip, scene.url, errors, console=page_error) as page:

        def number(selector: str) -> str:
            return page.inner_text(selector).strip()

        assert number("#worker-id") == scene.worker
        assert number("#total-pending") == str(len(scene.pending))
        assert number("#total-fired") == str(len(scene.fired))
        assert number("#total-cancelled") == "1"
        assert number("#total-rejected") == "2"
        assert number("#total-overdue") == "0"
        assert number("#tick-badge") == "ticking"
        assert number("#clock-badge") == "clocks agree"
        oscillators = page.eval_on_selector_all(
            "#oscillator-table tbody tr", "rows => rows.map(r => r.dataset.source)"
        )
        assert oscillators == ["oscillator-1"]

        def bars(chart: str) -> dict[str, float]:
            values: dict[str, float] = page.eval_on_selector_all(f"#{chart} rect.bar", BARS_JS)
            return {label: v for label, v in values.items() if v}

        expected_soon = {
            time.strftime("%H:%M:%S", time.gmtime(start)): count
            for start, count in scene.soon_bars().items()
        }
        assert bars("chart-soon") == expected_soon
        assert bars("chart-far") == {"1h-6h": len(scene.hours), "1d-7d": len(scene.days)}
        assert bars("chart-rejects") == {"topic_not_allowed": 1, "malformed": 1}
        assert bars("chart-topics") == {scene.topic: len(scene.fired)}
        assert sum(bars("chart-lateness").values()) == len(scene.fired)
        ages: dict[str, float] = page.eval_on_selector_all("#chart-ticks rect.bar", BARS_JS)
        assert list(ages) == [f"p{p}" for p in range(scene.partitions)]
        assert all(0 <= age < 3 for age in ages.values()), ages
        assert page.eval_on_selector_all("#chart-ticks rect.bar.bad", "rs => rs.length") == 0
        lag = page.eval_on_selector_all("#chart-request-lag rect.bar", BARS_JS)
        assert lag == {f"p{p}": 0 for p in range(scene.partitions)}
        assert page.get_attribute("#chart-fires polyline", "data-points") not in (None, "0")
        since_start = page.inner_text("#lateness-table tbody tr:nth-child(2)")
        assert since_start.split("\t")[-1].strip() == str(len(scene.fired))
        assert "\u2013" not in since_start.split("\t")[1], "p50 since start is shown"

        # Which timers exist is the operator's: nothing listed until the token is given.
        assert page.eval_on_selector_all("#next-table tbody tr", "rows => rows.length") == 0
        assert "credential" in page.inner_text("#next-note")
        page.fill("#operator-token", OPERATOR_TOKEN)
        page.click("#token-go")
        page.wait_for_function(
            "document.querySelectorAll('#next-table tbody tr').length > 0", timeout=5000
        )
        first = min(scene.pending.values(), key=lambda t: t.due)
        next_ids = page.eval_on_selector_all(
            "#next-table tbody tr", "rows => rows.map(r => r.dataset.id)"
        )
        assert len(next_ids) == len(scene.pending)
        assert scene.pending[next_ids[0]].due == first.due

        # The lookup's first answer is a busy one: the page asks again after Retry-After.
        busy: list[str] = []

        def busy_once(route: Any) -> None:
            if busy:
                route.continue_()
                return
            busy.append(route.request.url)
            route.fulfill(
                status=503,
                headers={"Retry-After": "1", "Content-Type": "application/json"},
                body='{"error": "busy"}',
            )

        page.route("**/timers/order*", busy_once)
        page.fill("#lookup-id", "order/7 ü?&")
        page.click("#lookup-go")
        page.wait_for_function(
            "document.getElementById('lookup-result').textContent.includes('pending')",
            timeout=5000,
        )
        assert len(busy) == 1, busy
        looked_up = json.loads(page.inner_text("#lookup-result"))
        assert (looked_up["id"], looked_up["due"]) == (
            "order/7 ü?&",
            scene.soon["order/7 ü?&"].due,
        )
        page.screenshot(path=str(Path(os.environ.get("TMPDIR", "/tmp")) / "status-page.png"))
    assert errors == [], f"the page reported errors: {errors}"


def test_status_data_shows_store_keys_by_kind(scene: Scene) -> None:
    keys = data(scene)["store_keys"]
    # two keys per pending timer; two per cancelled id (index entry + expiry key), and
    # per fired id its index entry and a share of an expiry batch (one key or more)
    assert keys["pending"] == 2 * len(scene.pending)
    fired_ids_and_cancel = len(scene.fired) + 2
    assert fired_ids_and_cancel < keys["remembered"] <= fired_ids_and_cancel + len(scene.fired)
    assert (
        0 < keys["bookkeeping"] <= (5 + scene.partitions) * scene.partitions
    )  # + the A key and an O key per origin partition
    by_partition = data(scene)["store_keys_by_partition"]
    assert sum(k["pending"] for k in by_partition.values()) == keys["pending"]


def test_which_timers_exist_needs_the_operators_credential(scene: Scene) -> None:
    pending = sorted(scene.pending)
    quoted = urllib.parse.quote(pending[0], safe="")
    for path in ("/timers/next?n=1000", f"/timers/{quoted}", "/timers/no-such-timer"):
        for token in (None, "not-the-operator-token-at-all"):
            status, body = get_json(scene.url + path, token=token)
            assert status == 401, (path, token, body)
            shown = json.dumps(body)
            assert not any(timer_id in shown for timer_id in pending), shown
            assert "no-such-timer" not in shown  # not even whether an id exists
    status, _ = get_json(scene.url + "/status/data", token=None)
    assert status == 200  # the page itself, /livez, /readyz and /metrics need none
