"""What the JavaScript client's redelivery module sends, the worker reads as the very
timer and cancel meant, and it sends what the Python client sends.

Generated cases: keys (none, text, bytes that are not UTF-8), values (none, bytes) and
headers (repeated names, the service's own ``timer-*`` ones, an old ``delivery-count``,
bytes values). ``node`` runs the compiled module (``clients/js/test/redelivery_requests.ts``,
no broker); each request is read by the worker's parser (:func:`parse_request`) and
compared with what the Python client's :func:`schedule_request` builds from the same
message. ``make unit`` builds the client first (the Makefile's ``js-client``).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.raw_record import RawRecord
from app.core.request_format import parse_request
from app.core.timer import Cancel, Timer
from kafka_timers_client.redelivery import copy_headers, schedule_request
from tests.support.node import NodeScript, node_script

DUE = 1_900_000_000


@pytest.fixture(scope="module")
def node() -> Iterator[NodeScript]:
    with node_script("redelivery_requests.js") as script:
        yield script


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _read(value: bytes, key: str) -> Timer | Cancel:
    record = RawRecord("timer-request", 0, 7, DUE * 1000 - 5000, key.encode(), value)
    return parse_request(record, now=DUE - 5)


names = st.sampled_from(["trace", "tenant", "timer-id", "Timer-Token", "delivery-count", "x"])


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    key=st.one_of(st.none(), st.text(max_size=20).map(str.encode), st.binary(max_size=20)),
    value=st.one_of(st.none(), st.binary(max_size=100)),
    headers=st.lists(st.tuples(names, st.binary(max_size=10)), max_size=6),
    count=st.integers(1, 9),
)
def test_js_copies_are_the_python_clients(
    node: NodeScript,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes]],
    count: int,
) -> None:
    # kafkajs groups a repeated header name together: compare in that order.
    grouped = [h for name in dict.fromkeys(n for n, _ in headers) for h in headers if h[0] == name]
    timer_id = "g/jobs/3/41"
    answer = node.ask(
        {
            "copy": {
                "topic": "jobs",
                "key": _b64(key),
                "value": _b64(value),
                "headers": [[n, _b64(v)] for n, v in grouped],
                "id": timer_id,
                "token": "tok",
                "due": DUE,
                "origin": "jobs/3/41",
                "count": count,
            }
        }
    )
    raw: Any = grouped
    message = Message(topic="jobs", partition=3, offset=41, key=key, value=value, headers=raw)
    expected = schedule_request(
        "jobs", key, value, copy_headers(message, count), timer_id, "tok", DUE
    )
    if isinstance(expected, str):
        assert answer == {"reason": expected}
        return
    sent = base64.b64decode(answer["sent"])
    timer = _read(sent, timer_id)
    assert isinstance(timer, Timer)
    wanted = _read(expected, timer_id)
    assert timer == wanted
    assert dict(timer.headers)["delivery-count"] == str(count).encode()


def test_a_js_ack_is_a_cancel_with_the_token(node: NodeScript) -> None:
    sent = base64.b64decode(node.ask({"ack": ["g/jobs/3/41", "tok"]})["sent"])
    cancel = _read(sent, "g/jobs/3/41")
    assert isinstance(cancel, Cancel)
    assert (cancel.id, cancel.token) == ("g/jobs/3/41", "tok")
