"""What the nemesis drain waits for: only what the broker acknowledged.

In the hour on Apache Kafka the drain waited its whole ten minutes for 233 callbacks
with every worker ready; 202 of them were of requests never acknowledged and absent
from the request topic (sent while the broker was away): they could never come. The
other 31 were the checker's lost ones.
"""

from __future__ import annotations

import io
import random
import threading
from dataclasses import replace

from app.settings import Settings
from tests.nemesis.load import Load, _Timer
from tests.nemesis.stack import PLAIN_TOPIC


def _load() -> Load:
    settings = replace(Settings(), bootstrap_servers="127.0.0.1:1")  # never reached
    return Load(settings, io.StringIO(), random.Random(1), threading.Lock(), [])


def _timer(timer_id: str, version: int, acked: int, cancel: str = "") -> _Timer:
    return _Timer(timer_id, "tok", version, 100, 100, PLAIN_TOPIC, "plain", 0, cancel, 0.0, acked)


def test_a_version_never_acknowledged_is_not_waited_for_but_accepted() -> None:
    load = _load()
    load._timers = {
        "a": _timer("a", 3, 3),  # all acknowledged: its newest
        "b": _timer("b", 3, 2),  # v3 unacknowledged: v2, or v3 if the broker took it
        "c": _timer("c", 1, 0),  # nothing acknowledged: nothing to wait for
        "d": _timer("d", 2, 2, cancel="cancelled"),
    }
    assert load.expected() == {
        ("a", 0): frozenset({"a/v3"}),
        ("b", 0): frozenset({"b/v2", "b/v3"}),
    }
