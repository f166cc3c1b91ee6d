"""A broker that stays away (issue 23): the worker's log stays bounded, it stays alive,
and SIGTERM ends it within its stop grace whether or not the broker answers.

This test runs its own dev broker (the session's is shared by every other test) and
stops it under a running worker.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from app.dev.broker import DevBroker
from app.kafka.topics import ensure_topics
from tests.conftest import fresh_settings
from tests.support.stack import Stack, fired_ids
from tests.support.waiting import wait_until

#: Runs alone, in ``make test``'s serial part: it gates a SIGTERM's stop at its grace plus 0.2
#: s, which another test's load beside it would move.
pytestmark = [pytest.mark.serial, pytest.mark.own_broker("stops the broker under a worker")]

#: How long the broker stays away in the test (``KAFKA_TIMERS_TEST_OUTAGE_SECONDS`` sets
#: another, e.g. 600 for the ten minutes of the README's figure).
OUTAGE_SECONDS = float(os.environ.get("KAFKA_TIMERS_TEST_OUTAGE_SECONDS", "45"))
#: At most this many lines in the outage: one per kind of failure and a summary per kind
#: per minute (80 in the first minute, 30 in each after), where every connection attempt
#: of every client used to be a line (about 100 a second, measured before).
MAX_OUTAGE_LINES = 80 + 30 * max(0, int(OUTAGE_SECONDS // 60))
STOP_GRACE = 5.0


def test_an_outage_costs_few_log_lines_and_sigterm_still_stops_the_worker(
    tmp_path: Path,
) -> None:
    with DevBroker() as broker:
        settings = fresh_settings(broker.bootstrap, partitions=2)
        ensure_topics(settings)
        stack = Stack(settings, tmp_path)
        try:
            topic = stack.callback_topic(f"outage-{settings.app_id}")
            stack.oscillator()
            worker = stack.worker("outage-worker", loglevel="info", stop_grace_seconds=STOP_GRACE)
            from kafka_timers_client.client import TimerClient

            with TimerClient(settings) as client:
                timer = client.schedule(topic, b"before", at=time.time() + 2)
            with stack.reader(topic) as reader:
                reader.wait_for(lambda rs: timer.id in fired_ids(rs), 90)
            before = len(worker.log_text().splitlines())
            broker.stop()
            away_since = time.monotonic()
            # Observe the whole outage: the worker must stay up through it (waiting on the
            # process itself, which returns at once should it exit).
            remaining = OUTAGE_SECONDS - (time.monotonic() - away_since)
            try:
                code = worker.process.wait(timeout=max(0.0, remaining))
            except subprocess.TimeoutExpired:
                code = None
            assert code is None, f"the worker exited ({code}) while the broker was away"
            lines = worker.log_text().splitlines()[before:]
            shapes = collections.Counter(re.sub(r"\d+", "#", line)[-120:] for line in lines)
            print(f"\n{len(lines)} log lines in {OUTAGE_SECONDS:.0f} s with the broker away")
            assert len(lines) <= MAX_OUTAGE_LINES, (
                f"{len(lines)} lines in {OUTAGE_SECONDS} s away: "
                + "; ".join(f"{n}x {s}" for s, n in shapes.most_common(5))
            )
            stopped = time.monotonic()
            worker.process.send_signal(signal.SIGTERM)
            wait_until(lambda: not worker.alive, STOP_GRACE + 10, "the worker to exit")
            took = time.monotonic() - stopped
            # within the grace; 0.2 s for this test's polling and the signal's delivery
            assert took <= STOP_GRACE + 0.2, f"SIGTERM took {took:.1f} s with the broker away"
            print(f"SIGTERM -> exit {took:.1f} s (stop grace {STOP_GRACE:g} s)")
            assert worker.process.returncode == 0
            assert "exiting now; nothing acknowledged is lost" in worker.log_text()
        finally:
            stack.close()
