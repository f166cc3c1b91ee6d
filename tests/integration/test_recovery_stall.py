"""A changelog catch-up that cannot reach its end keeps the worker alive and not ready,
and it recovers when the broker does (issue 23, point 2).

The broker is the dev broker behind a TCP proxy (tests/support/kafka_proxy.py) that
holds back, unanswered, every request of the worker's catch-up consumer (its
``client.id`` ends in ``-catchup``) while the test says so: that client never gets a
record and never reaches a partition's end, exactly what a broker too slow for the
fetch's wait looked like (every worker raised after 60 s and exited, losing timers),
while the worker's other clients talk to the broker as usual.

A first worker stores timers and stops; the catch-up is stalled; a second worker, on an
empty data directory, must rebuild every partition from the changelog. With
``KAFKA_TIMERS_CATCHUP_STALL_SECONDS`` at 3 s (60 by default) the test sees several
stalled attempts: the worker must stay up, answer ``/livez`` (its event loop is not
held) and ``/readyz`` 503 with the stall's reason, and export
``kafka_timers_recovery_stalled`` 1 and a growing retry count; no timer may fire. Then
the proxy lets the requests through: the worker becomes ready and every timer fires
once, none early, those due during the stall as soon as it is ready.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import fresh_settings
from tests.support.faults import FireWatch, Verdict, schedule_spread
from tests.support.kafka_proxy import proxied_stack
from tests.support.probes import get_json, metric_total, start_probed
from tests.support.stack import fired_ids, running_stack
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.fault,
    pytest.mark.own_broker("reaches it through a proxy that stalls fetches, or starts it late"),
]

STARTUP = 60.0
TIMERS = 60
STALL_SECONDS = 3.0
#: Stalled attempts the worker must live through before the broker comes back.
STALLED_ATTEMPTS = 3


def test_a_catch_up_that_cannot_reach_the_end_leaves_the_worker_alive_and_not_ready(
    tmp_path: Path,
) -> None:
    with proxied_stack(tmp_path, partitions=2) as (proxy, stack):
        settings = stack.settings
        topic = stack.callback_topic(f"cb-stall-{settings.app_id}")
        stack.oscillator()
        first = start_probed(stack, "worker", "w-first")
        wait_until(lambda: get_json(first.metrics + "/readyz")[0] == 200, STARTUP, "w-first ready")
        now = int(time.time())
        # Half due while the catch-up is stalled, half after.
        plan = schedule_spread(settings, topic, TIMERS, now + 12, now + 40)
        wait_until(
            lambda: metric_total(first.metrics, "kafka_timers_pending") == TIMERS,
            STARTUP,
            "every timer stored by w-first",
        )
        assert first.process.stop() == 0

        proxy.stall("-catchup")
        with FireWatch(settings, topic) as watch:
            second = start_probed(
                stack,
                "worker",
                "w-second",
                loglevel="info",
                catchup_stall_seconds=STALL_SECONDS,
            )
            started = time.monotonic()
            seen: list[tuple[float, int | None, str]] = []

            def stalled_long_enough() -> bool:
                assert second.process.alive, "the worker exited while stalled"
                status, body = get_json(second.metrics + "/readyz", timeout=3)
                reason = body.get("reason", "") if isinstance(body, dict) else str(body)
                if not seen or seen[-1][1:] != (status, reason[:60]):
                    seen.append((round(time.monotonic() - started, 1), status, reason[:60]))
                assert status != 200, f"ready while its catch-up is held back: {body}"
                retries = metric_total(second.metrics, "kafka_timers_recovery_retries")
                return status == 503 and "stalled" in reason and retries >= STALLED_ATTEMPTS

            wait_until(
                stalled_long_enough,
                STARTUP,
                lambda: f"{STALLED_ATTEMPTS} stalled attempts; /readyz answers: {seen}",
                interval=0.2,
                between=watch.poll,
            )
            stalled_for = time.monotonic() - started
            # Alive and answering through the stall: the event loop is not held.
            live_status, live = get_json(second.metrics + "/livez", timeout=2)
            assert live_status == 200, live
            status, ready = get_json(second.metrics + "/readyz", timeout=2)
            assert status == 503 and "changelog_catch_up" in ready["stalled"], ready
            assert "attempt" in ready["reason"] and "retrying in" in ready["reason"], ready
            assert metric_total(second.metrics, "kafka_timers_recovery_stalled") == 1
            assert metric_total(second.metrics, "kafka_timers_not_ready_seconds") > 0
            assert proxy.held > 0, "the proxy held none of the catch-up's requests"
            watch.poll(0.5)
            assert not watch.fired_ids(), "a timer fired before its store was recovered"
            assert second.process.alive

            proxy.resume()
            resumed = time.monotonic()
            wait_until(
                lambda: get_json(second.metrics + "/readyz")[0] == 200,
                STARTUP,
                lambda: f"w-second ready after the resume; {second.process.log_text()[-3000:]}",
                interval=0.2,
                between=watch.poll,
            )
            ready_after = time.monotonic() - resumed
            assert metric_total(second.metrics, "kafka_timers_recovery_stalled") == 0
            assert metric_total(second.metrics, "kafka_timers_not_ready_seconds") == 0
            last_due = max(p.due for p in plan.values())
            watch.wait_all_fired(plan, max(0.0, last_due - time.time()) + STARTUP)
            watch.drain_stragglers()
            verdict = Verdict.of(plan, watch)
            print(
                f"\nstalled {stalled_for:.1f} s ({STALLED_ATTEMPTS}+ attempts of "
                f"{STALL_SECONDS:g} s, {proxy.held} requests held), ready "
                f"{ready_after:.1f} s after the resume; /readyz: {seen}; "
                f"{verdict.summary()}"
            )
            verdict.assert_none_lost_early_or_unknown(verdict.summary())
            assert verdict.duplicates == 0, verdict.summary()
            assert second.process.alive
            log = second.process.log_text()
            assert "did not complete" in log and "complete after" in log


def test_a_worker_started_before_its_broker_waits_for_it_alive_and_not_ready(
    tmp_path: Path,
) -> None:
    """The metadata waits at start (issue 23): a broker that does not answer a worker's
    start-up checks within ``--timeout`` (15 s) used to stop it with exit status 2."""
    from app.dev.broker import DevBroker, free_port
    from kafka_timers_client.client import TimerClient

    broker = DevBroker(free_port())
    settings = fresh_settings(broker.bootstrap, partitions=2)
    with running_stack(settings, tmp_path) as stack:
        worker = start_probed(stack, "worker", "w-early", loglevel="info")
        started = time.monotonic()

        def waiting_for_the_broker() -> bool:
            assert worker.process.alive, "the worker exited while the broker was away"
            status, body = get_json(worker.metrics + "/readyz", timeout=3)
            reason = body.get("reason", "") if isinstance(body, dict) else ""
            return status == 503 and "the broker did not answer" in reason

        wait_until(waiting_for_the_broker, STARTUP, "/readyz: waiting for the broker", 0.2)
        assert get_json(worker.metrics + "/livez")[0] == 200
        assert metric_total(worker.metrics, "kafka_timers_recovery_stalled") == 1
        waited = time.monotonic() - started
        with broker:
            stack.oscillator()
            wait_until(
                lambda: get_json(worker.metrics + "/readyz")[0] == 200,
                STARTUP,
                lambda: f"w-early ready once the broker is up; {worker.process.log_text()[-3000:]}",
                interval=0.2,
            )
            ready_after = time.monotonic() - started - waited
            topic = stack.callback_topic(f"cb-early-{settings.app_id}")
            with TimerClient(settings) as client:
                timer = client.schedule(topic, b"after", at=time.time() + 1)
            with stack.reader(topic) as reader:
                reader.wait_for(lambda rs: timer.id in fired_ids(rs), STARTUP)
            print(
                f"\nwaited {waited:.1f} s for the broker, alive and not ready; ready "
                f"{ready_after:.1f} s after it started; a timer then fired"
            )
            assert worker.process.alive
            stack.close()  # every worker leaves before the broker stops
