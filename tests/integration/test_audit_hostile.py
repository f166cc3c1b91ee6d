"""Issue 29: no single record can fail the audit's gate.

Each hostile record, written to either topic, is judged (a request the worker's rules
refuse) or set aside (a fired-topic record the audit cannot read), listed with its
topic, partition, offset and reason; the audit finishes and its exit status depends on
the violations alone (and on ``--max-set-aside``, a finding of its own).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from app.settings import Settings
from spark_audit.baseline import reconcile_in_process
from spark_audit.verdicts import Rules
from tests.integration.test_audit import History, spark  # noqa: F401 (fixture)
from tests.integration.test_hostile_input import produce_with_raw_header_name
from tests.support.audit_run import run_audit

pytestmark = pytest.mark.spark

_DEEP = b'{"topic":"cb","value":"x","in":"1s","x":' + b"[" * 50_000 + b"]" * 50_000 + b"}"

#: Hostile request values (JSON unless said otherwise), by what they test.
HOSTILE_REQUESTS: dict[str, bytes] = {
    "bad number 1e400": b'{"topic":"cb","value":"x","at":1e400,"id":"h-1"}',
    "5000-digit integer": b'{"topic":"cb","value":"x","at":' + b"9" * 5000 + b',"id":"h-2"}',
    "NaN": b'{"topic":"cb","value":"x","at":NaN,"id":"h-3"}',
    "lone surrogate id": b'{"topic":"cb","value":"x","in":"1s","id":"\\ud800"}',
    "lone surrogate topic": b'{"topic":"c\\udfffb","value":"x","in":"1s","id":"h-4"}',
    "deep JSON": _DEEP,
    "time zone that is a directory": (
        b'{"topic":"cb","value":"x","cron":"0 * * * *","tz":"America","id":"h-5"}'
    ),
    "not a request at all": b"\xff\xfe\x00garbage",
}


def _fired(**changes: Any) -> bytes:
    doc: dict[str, Any] = {
        "event": "fired",
        "id": "ghost",
        "token": "h1:000000000000000000000000",
        "partition": 0,
        "worker": "w1",
        "due": 1_767_225_600,
        "fired_at_ms": 1_767_225_600_020,
        "topic": "cb",
    }
    doc.update(changes)
    return json.dumps(doc).encode()


#: Hostile fired-topic values: out-of-range and ill-typed fields, bad text, bad JSON.
HOSTILE_FIRED: dict[str, bytes] = {
    **HOSTILE_REQUESTS,
    "due over int64": _fired(due=2**64),
    "due beyond the key layout": _fired(due=10**15),
    "fire time over int64": _fired(fired_at_ms=2**63 + 5),
    "negative fire time": _fired(fired_at_ms=-1),
    "NaN due": _fired(due=float("nan")),
    "float fire time": _fired(fired_at_ms=1.5e12),
    "partition over int32": _fired(partition=2**31),
    "lone surrogate id (fired)": _fired(id="\ud800"),
    "lone surrogate worker": _fired(worker="w\udfff"),
}


def _produce_fired(h: History, value: bytes, ts_s: float, partition: int = 0) -> tuple[int, int]:
    delivered: list[tuple[int, int]] = []
    h._producer.produce(
        h.settings.topics.fired,
        value,
        b"hostile",
        partition=partition,
        timestamp=int(ts_s * 1000),
        on_delivery=lambda err, msg: delivered.append((msg.partition(), msg.offset())),
    )
    h._producer.flush(10)
    assert delivered
    return delivered[0]


def test_each_hostile_record_in_either_topic_is_listed_and_only_violations_fail(
    spark: Any,  # noqa: F811
    settings: Settings,
    tmp_path: Path,
) -> None:
    h = History(settings)
    t0 = int(time.time()) - 3600
    for i in range(3):  # a clean history around the hostile records
        h.schedule(f"ok-{i}", f"k{i}", t0 + 600 + i, t0)
        h.fired(f"ok-{i}", f"k{i}", t0 + 600 + i, (t0 + 600 + i) * 1000 + 25)
    requests, fired = settings.topics.requests, settings.topics.fired
    expected: dict[tuple[str, int, int], str] = {}
    for name, value in HOSTILE_REQUESTS.items():
        expected[(requests, *h.request("hostile", value, t0, partition=0))] = name
    for name, value in HOSTILE_FIRED.items():
        expected[(fired, *_produce_fired(h, value, t0))] = name
    for topic in (requests, fired):
        offset = produce_with_raw_header_name(
            settings.bootstrap_servers, topic, 1, b"raw-name", b"\x00not-json", b"\xff\xfename"
        )
        expected[(topic, 1, offset)] = "header name that is not UTF-8"

    code, summary = run_audit(settings, tmp_path / "a", "--since", "all")
    listed = {(r["topic"], r["partition"], r["offset"]): r for r in summary["set_aside"]}
    for where, name in expected.items():
        assert where in listed, f"{name} at {where} is not listed"
        assert listed[where]["reason"], name
        want = "refused" if where[0] == requests else "set_aside"
        assert listed[where]["disposition"] == want, name
    assert listed[(requests, 1, expected_offset(expected, requests))]["reason"] == "malformed"
    assert summary["violation_counts"] == {} and summary["statuses"] == {"fired": 3}
    assert summary["reads"]["unreadable_fired_records"] == len(HOSTILE_FIRED) + 1
    assert code == 0, "hostile records alone must not fail the gate"
    assert (tmp_path / "a" / "report.html").exists()

    # The exit status follows the violations: one early fire is 1, and only that.
    h.schedule("v-early", "e", t0 + 700, t0)
    h.fired("v-early", "e", t0 + 700, (t0 + 700) * 1000 - 300)
    code, summary = run_audit(settings, tmp_path / "b", "--since", "all")
    assert (code, summary["violation_counts"]) == (1, {"early": 1})
    # The scale tool's single-process yardstick reads the same records the same way.
    rules = Rules(as_of_ms=summary["as_of_ms"], grace_ms=summary["grace_ms"])
    baseline = reconcile_in_process(settings, rules)
    assert (baseline.timers, baseline.violation_counts) == (summary["timers"], {"early": 1})

    # More records set aside than allowed is a finding of its own.
    code, summary = run_audit(settings, tmp_path / "c", "--since", "all", "--max-set-aside", "3")
    assert code == 1 and "set aside" in (tmp_path / "c" / "report.html").read_text()


def expected_offset(expected: dict[tuple[str, int, int], str], topic: str) -> int:
    """Offset of the raw-header-name record on ``topic`` (partition 1)."""
    return next(o for (t, p, o), n in expected.items() if t == topic and p == 1)
