"""What ``TimerClient.schedule`` accepts, the worker reads as the very timer it returned.

Generated calls, not listed cases: any due time (floats with NaN and infinities, integers
past int64, Decimals past any float, negative times), any recurrence, spread, key,
headers and ids (lone surrogates included). For each, ``schedule`` either raises
:class:`KafkaTimersError` with one line, or sends one record that the worker's reader
(:func:`parse_request`) takes as a timer with the returned due second, inside the bounds
every deployment's policy holds a due second to (0 to ``MAX_SECONDS``). Before this
test, a due of 2**64 was sent as a protobuf varint that the worker read back as second
0: a timer the user asked for in the far future fired at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.raw_record import RawRecord
from app.core.request_format import parse_request
from app.core.timer import Cancel, Timer
from kafka_timers_client import TimerClient
from kafka_timers_client.bounds import MAX_SECONDS
from kafka_timers_client.errors import KafkaTimersError
from tests.support.proto import offline_client

NOW = 1_800_000_000.25

#: Numbers a caller can pass for a time: realistic, edges, and hostile.
times = st.one_of(
    st.floats(min_value=NOW - 10**6, max_value=NOW + 10**8),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**63 - 1, 2**63, 2**64, 2**64 + 5, MAX_SECONDS, MAX_SECONDS + 1, -1, 0]),
    st.decimals(allow_nan=True, allow_infinity=True),
    st.just(Decimal("1e400")),
)
delays = st.one_of(
    st.floats(min_value=0, max_value=10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70),
)
texts = st.one_of(st.from_regex(r"[a-z0-9._-]{1,20}", fullmatch=True), st.text(max_size=20))


@st.composite
def calls(draw: st.DrawFn) -> dict[str, Any]:
    """The keyword arguments of one ``schedule`` call (topic and value aside)."""
    kwargs: dict[str, Any] = {}
    kind = draw(st.sampled_from(["at", "delay", "every", "cron", "debounce"]))
    if kind == "debounce":
        durations = st.one_of(
            st.integers(-5, 10**13), st.sampled_from(["30s", "1.5s", "0s", "5m", "1e400"])
        )
        kwargs["debounce"] = draw(durations)
        if draw(st.booleans()):
            kwargs["max_wait"] = draw(durations)
    elif kind == "at":
        kwargs["at"] = draw(times)
    elif kind == "delay":
        kwargs["delay"] = draw(delays)
    else:
        if kind == "every":
            kwargs["every"] = draw(
                st.one_of(st.integers(-5, 10**13), st.sampled_from(["30s", "1d"]))
            )
        else:
            kwargs["cron"] = draw(st.sampled_from(["*/10 * * * * *", "0 9 * * MON-FRI", "bad"]))
        for name in ("start", "end"):
            if draw(st.booleans()):
                kwargs[name] = draw(times)
        if draw(st.booleans()):
            kwargs["count"] = draw(st.integers(-(2**70), 2**70))
    if draw(st.booleans()):
        kwargs["spread"] = draw(
            st.one_of(st.integers(-5, 10**6), st.sampled_from(["20s", "1e400"]))
        )
    if draw(st.booleans()):
        kwargs["key"] = draw(st.one_of(texts, st.binary(max_size=8)))
    if draw(st.booleans()):
        kwargs["timer_id"] = draw(texts)
    if draw(st.booleans()):
        kwargs["token"] = draw(texts)
    if draw(st.booleans()):
        kwargs["headers"] = draw(st.lists(st.tuples(texts, st.binary(max_size=8)), max_size=3))
    return kwargs


@pytest.fixture(scope="module")
def client() -> Iterator[TimerClient]:
    """A client whose sends are recorded, never produced (no broker: pure logic)."""
    yield from offline_client(NOW)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kwargs=calls(), topic=texts)
def test_what_schedule_accepts_the_worker_reads_as_the_timer_it_returned(
    client: TimerClient, kwargs: dict[str, Any], topic: str
) -> None:
    sent: list[tuple[str, bytes | None, int | None]] = []

    def record(key: str, value: bytes | None, *_: Any, timestamp_ms: int | None = None) -> None:
        sent.append((key, value, timestamp_ms))

    setattr(client, "_send", record)  # noqa: B010 (the instance's, not the method's type)
    try:
        scheduled = client.schedule(topic, b"payload", **kwargs)
    except KafkaTimersError as refused:
        assert "\n" not in str(refused) and not sent
        return
    [(key, value, timestamp_ms)] = sent
    assert 0 <= scheduled.due <= MAX_SECONDS
    read = parse_request(
        RawRecord(
            topic="timer-request",
            partition=0,
            offset=1,
            timestamp_ms=timestamp_ms or int(NOW * 1000),
            key=key.encode(),
            value=value,
            headers=(),
        ),
        NOW,
    )
    assert isinstance(read, Timer)
    assert (read.id, read.token, read.due, read.spread) == (
        scheduled.id,
        scheduled.token,
        scheduled.due,
        scheduled.spread,
    )


@settings(max_examples=500, deadline=None)
@given(
    action=st.sampled_from(["cancel", "pause", "resume", "tombstone"]),
    timer_id=st.one_of(texts, st.just(""), st.text(min_size=1025, max_size=1030)),
    token=texts,
)
def test_a_cancel_pause_or_resume_the_client_sends_names_its_timer_as_the_worker_reads_it(
    client: TimerClient, action: str, timer_id: str, token: str
) -> None:
    sent: list[tuple[str, bytes | None]] = []
    setattr(client, "_send", lambda key, value, *_, **__: sent.append((key, value)))  # noqa: B010
    try:
        if action == "tombstone":
            client.tombstone(timer_id)
        else:
            getattr(client, action)(timer_id, token)
    except KafkaTimersError as refused:
        assert "\n" not in str(refused) and not sent
        return
    [(key, value)] = sent
    read = parse_request(
        RawRecord("timer-request", 0, 1, int(NOW * 1000), key.encode(), value, ()), NOW
    )
    assert isinstance(read, Cancel)
    assert (read.id, read.token) == (timer_id, "" if action == "tombstone" else token)
    if action != "tombstone":
        assert read.action.value == action
