"""Control records come only from operators: signed with the deployment's secret, and
never a callback of any deployment (``*-timer-control`` refused at store and fire time).
Also the bounded work of the follower: bulk cancels queued one at a time, gates that
change one topic at a time."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core import policy as policy_module
from app.core.control import (
    SIGNATURE_HEADER,
    ControlRecord,
    pause_record,
    read_signed_control,
    sign_control,
)
from app.core.policy import RequestPolicy
from app.core.timer_filter import TimerFilter
from app.settings import Settings
from app.worker import control as control_module
from app.worker.control import ControlFollower
from app.worker.topic_gates import TopicGates
from kafka_timers_client.errors import RejectedRequest, RejectReason
from tests.unit.test_service import NOW, Harness

SECRET = "a-control-secret-of-24-chars"
TOPIC = "kt-b-timer-control"


def signed(key: bytes, value: bytes | None, secret: str = SECRET, topic: str = TOPIC) -> Any:
    return [(SIGNATURE_HEADER, sign_control(secret, topic, key, value))]


def test_a_signed_record_is_read_and_every_other_is_ignored() -> None:
    key, value = pause_record("orders", by="op", at_ms=1)
    read = read_signed_control(key, value, signed(key, value), secret=SECRET, topic=TOPIC)
    assert (read.kind, read.topic, read.clear) == ("pause", "orders", False)
    tomb = read_signed_control(key, None, signed(key, None), secret=SECRET, topic=TOPIC)
    assert (tomb.kind, tomb.clear) == ("pause", True)
    refused = {
        "unsigned": read_signed_control(key, value, None, secret=SECRET, topic=TOPIC),
        "empty headers": read_signed_control(key, value, [], secret=SECRET, topic=TOPIC),
        "other secret": read_signed_control(
            key, value, signed(key, value, "another-secret-entirely"), secret=SECRET, topic=TOPIC
        ),
        "other deployment": read_signed_control(
            key, value, signed(key, value, topic="kt-a-timer-control"), secret=SECRET, topic=TOPIC
        ),
        "value changed": read_signed_control(
            key, b'{"paused": false}', signed(key, value), secret=SECRET, topic=TOPIC
        ),
        "key changed": read_signed_control(
            b"pause/billing", value, signed(key, value), secret=SECRET, topic=TOPIC
        ),
        # A signed pause is no signed resume: a tombstone is told from an empty value.
        "tombstone of a signed value": read_signed_control(
            key, None, signed(key, b""), secret=SECRET, topic=TOPIC
        ),
        "two signatures": read_signed_control(
            key, value, signed(key, value) * 2, secret=SECRET, topic=TOPIC
        ),
        "no secret here": read_signed_control(
            key, value, signed(key, value), secret=None, topic=TOPIC
        ),
        "dict headers, wrong": read_signed_control(
            key, value, {SIGNATURE_HEADER: b"hmac-sha256-v1=00"}, secret=SECRET, topic=TOPIC
        ),
    }
    for what, record in refused.items():
        assert record.kind == "ignored", what
        assert record.reason, what


@given(
    key=st.one_of(st.none(), st.binary(max_size=600)),
    value=st.one_of(st.none(), st.binary(max_size=200)),
    headers=st.one_of(
        st.none(),
        st.lists(
            st.tuples(
                st.sampled_from([SIGNATURE_HEADER, "other"]),
                st.one_of(st.none(), st.binary(max_size=80), st.text(max_size=80)),
            ),
            max_size=3,
        ),
    ),
)
def test_reading_any_record_with_any_headers_is_total_and_never_applies_a_forgery(
    key: bytes | None, value: bytes | None, headers: Any
) -> None:
    record = read_signed_control(key, value, headers, secret=SECRET, topic=TOPIC)
    assert record.kind == "ignored"


@pytest.mark.parametrize(
    ("topic", "named", "unrelated"),
    [
        *(
            (topic, "control topic", "timer-control-events")
            for topic in (
                "kt-b-timer-control",
                "other-deployment-timer-control",
                "x-timer-control",
                "-timer-control",
            )
        ),
        # Another deployment's demand topic: a callback there would be read as one of
        # its workers' reports (rate-limit backlogs, quota counts and claims).
        ("kt-b-timer-demand", "demand topic", "timer-demand-forecasts"),
        ("other-deployment-timer-demand", "demand topic", "timer-demand-forecasts"),
    ],
)
def test_every_control_or_demand_topic_is_refused_as_a_callback_topic(
    topic: str, named: str, unrelated: str
) -> None:
    policy = RequestPolicy.build(
        allow_patterns=(".*",),
        own_topics=("ticks",),
        app_id="kt-a",
        max_payload_bytes=100,
        horizon_seconds=3600,
    )
    with pytest.raises(RejectedRequest) as info:
        policy.check_topic(topic)
    assert info.value.reason is RejectReason.TOPIC_NOT_ALLOWED
    assert named in info.value.detail
    policy.check_topic(unrelated)  # only the name's end counts


def test_a_timer_stored_to_a_control_topic_before_is_refused_when_due(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Stored under rules without the refusal (an older version), dead-lettered with the
    reason when due once the worker runs with it."""
    with monkeypatch.context() as m:
        m.setattr(policy_module, "CONTROL_SUFFIX", "-no-such-suffix-at-all")
        h = Harness()
        h.requests(
            h.schedule("kept", NOW + 5, topic="orders"),
            h.schedule("hostile", NOW + 5, topic="other-app-timer-control"),
        )
    h.restart()
    h.tick(NOW + 5)
    assert h.fired() == ["kept"]
    refused = {(timer_id, reason.value) for timer_id, reason in h.output.durable.dead_timers}
    assert refused == {("hostile", "topic_not_allowed")}


def test_the_cli_refuses_to_send_an_unsigned_record() -> None:
    from app.kafka.control import send_control
    from kafka_timers_client.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="KAFKA_TIMERS_CONTROL_SECRET"):
        send_control(Settings(), b"pause/x", b"{}", timeout=0.1)


def test_the_control_secret_is_read_checked_and_handed_to_children() -> None:
    from kafka_timers_client.errors import ConfigurationError

    settings = Settings.from_env({"KAFKA_TIMERS_CONTROL_SECRET": SECRET})
    assert settings.control_secret == SECRET
    assert Settings.from_env(settings.to_env()).control_secret == SECRET
    assert Settings.from_env({}).control_secret is None
    assert SECRET not in repr(settings)
    with pytest.raises(ConfigurationError, match="KAFKA_TIMERS_CONTROL_SECRET"):
        Settings.from_env({"KAFKA_TIMERS_CONTROL_SECRET": "short"})


# -- bounded work ---------------------------------------------------------------------


def test_gates_change_one_topic_at_a_time_and_gated_stays_right() -> None:
    gates = TopicGates({"limited": 10.0}, partitions=2, clock=lambda: 100.0)
    gated = gates.gated
    assert set(gated) == {"limited"}
    gates.pause("limited")
    gates.pause("paused")
    assert set(gated) == {"limited", "paused"}  # a live view
    gates.resume("limited")
    assert set(gated) == {"limited", "paused"}  # still limited
    gates.set_rate("limited", None)
    assert set(gated) == {"paused"}
    gates.set_rate("paused", 5.0)
    gates.resume("paused")
    assert set(gated) == {"paused"}  # still limited
    gates.set_rate("paused", None)
    assert not gated
    # Buckets are found by topic: a new rate reaches each partition's bucket.
    gates.set_rate("t", 20.0)
    assert gates.budget(0, "t") == 0 and gates.budget(1, "t") == 0
    gates.set_rate("t", 40.0)
    gates.forget([0])
    gates.set_rate("t", None)
    assert gates.budget(1, "t") is None


def test_many_pauses_cost_the_same_each() -> None:
    """60,000 distinct pauses: each used to rebuild the whole gated set (O(n^2), minutes);
    now the whole flood is well under a second."""
    import time

    gates = TopicGates(partitions=8)
    started = time.perf_counter()
    for i in range(60_000):
        gates.pause(f"topic-{i}")
    assert time.perf_counter() - started < 1.0
    assert len(gates.gated) == 60_000


def _bulk(request: str, clear: bool = False) -> ControlRecord:
    return ControlRecord(
        "cancel_bulk",
        request,
        clear=clear,
        filter=None if clear else TimerFilter.from_query({"key_prefix": "x/"}),
    )


def test_bulk_cancels_run_one_at_a_time_deduplicated_bounded_and_withdrawable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(control_module, "BULK_QUEUE_LIMIT", 5)

    async def scenario() -> None:
        ignored: list[int] = []
        follower = ControlFollower(Settings(), TopicGates(), {})
        follower._on_ignored = lambda: ignored.append(1)
        running: list[str] = []
        at_once = [0, 0]
        release = asyncio.Event()

        async def run(record: ControlRecord) -> None:
            at_once[0] += 1
            at_once[1] = max(at_once[1], at_once[0])
            running.append(record.topic)
            await release.wait()
            at_once[0] -= 1

        follower.bulk = run
        for i in range(8):
            follower.apply(_bulk(f"r{i}"))
        follower.apply(_bulk("r1"))  # again, while queued: once
        follower.apply(_bulk("r2", clear=True))  # withdrawn before it started
        await asyncio.sleep(0)  # one turn of the loop: the first bulk starts
        assert running == ["r0"]
        follower.apply(_bulk("r0"))  # again, while running: once
        assert len(ignored) == 3  # r5, r6 and r7: five waited already (r0 had not started)
        release.set()
        for _ in range(20):  # turns of the loop for the queue to drain, not a time
            await asyncio.sleep(0)
        assert running == ["r0", "r1", "r3", "r4"]
        assert at_once[1] == 1
        follower.stop()

    asyncio.run(scenario())


def test_a_flood_of_records_is_applied_a_bounded_batch_per_turn_of_the_loop() -> None:
    async def scenario() -> None:
        gates = TopicGates()
        follower = ControlFollower(Settings(), gates, {})
        turns = 0
        for i in range(3 * control_module.APPLY_BATCH):
            follower._inbox.append(ControlRecord("pause", f"t{i}"))
        follower._drain_scheduled = True
        asyncio.get_running_loop().call_soon(follower._drain)
        while follower._inbox:
            before = len(follower._inbox)
            await asyncio.sleep(0)  # one turn of the loop: what the test counts
            turns += 1
            assert before - len(follower._inbox) <= control_module.APPLY_BATCH
        assert turns >= 3
        assert len(gates.gated) == 3 * control_module.APPLY_BATCH

    asyncio.run(scenario())


def test_records_written_by_the_cli_helpers_verify() -> None:
    key, value = pause_record("orders", by="op", at_ms=1)
    header = sign_control(SECRET, TOPIC, key, value)
    assert header.startswith(b"hmac-sha256-v1=")
    doc = json.loads(value)
    assert doc["paused"] is True
