"""The cost of the per-record guards, A/B in the same process and run.

The guards: numbers bounded while text, text checked for UTF-8 and length, JSON decoded
without NaN and with bounded numbers, the whole-record size check. They are measured by
handling the same requests (protobuf as ``bench.load`` sends them, and JSON as
``TimerClient`` would) through ``parse_request``, the policy check and the size check,
once as the worker does and once with the guards patched out (the code as it was before
them), alternating, best of several passes each. The difference per request is set
beside the worker's CPU per request stored in this run's ingest scenario: the target is
at most 5% of it. In-process CPU time, so the figure hardly moves with the machine's
other load, as the ingest figure's CPU per request does not.

``python -m bench.guards`` prints the figures alone.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

from app.core import request_etf1, request_format, request_json, request_rules
from app.core.budget import DEFAULT_MAX_RECORD_BYTES, check_fits
from app.core.policy import RequestPolicy
from app.core.raw_record import RawRecord
from app.core.request_format import parse_request
from app.core.timer import Timer
from bench.context import RunContext, ScenarioResult
from bench.load import TimerSpec, request_record, timer_ids
from bench.report import Figure
from kafka_timers_client import due as due_module

__all__ = ["guard_cost_us", "run"]

START = 1_767_225_600
#: Requests per pass, passes per variant.
REQUESTS, PASSES = 20_000, 9
#: Share of the worker's CPU per request stored the guards may cost.
TARGET_SHARE = 0.05


def _records(count: int, kind: str) -> list[RawRecord]:
    """Protobuf requests as the benchmarks send them, or JSON ones as clients do."""
    records = []
    for i, timer_id in enumerate(timer_ids(f"guard-{kind}-", count)):
        if kind == "protobuf":
            value = request_record(TimerSpec(timer_id, START + 60), "callbacks")
        else:
            value = json.dumps(
                {
                    "id": timer_id,
                    "topic": "callbacks",
                    "at": START + 60,
                    "token": f"{i:016x}",
                    "key": timer_id,
                    "value": '{"order": 42, "pad": "' + "x" * 60 + '"}',
                    "headers": {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"},
                }
            ).encode()
        records.append(RawRecord("requests", 0, i, START * 1000, timer_id.encode(), value))
    return records


@contextmanager
def _unguarded() -> Iterator[None]:
    """The request path without the guards: what parsing was before them."""
    saved: dict[tuple[Any, str], Any] = {}

    def patch(module: Any, name: str, value: Any) -> None:
        saved[(module, name)] = getattr(module, name)
        setattr(module, name, value)

    def plain_epoch(text: str) -> Decimal:
        return Decimal(text.strip())

    patch(request_format, "_bounded", lambda request: request)
    patch(request_format, "checked_text", lambda text, name, limit: text)
    patch(request_rules, "checked_text", lambda text, name, limit: text)
    patch(request_json, "_JSON", json.JSONDecoder())
    patch(request_rules, "parse_epoch", plain_epoch)
    patch(request_etf1, "parse_epoch", plain_epoch)
    patch(due_module, "parse_epoch", plain_epoch)
    try:
        yield
    finally:
        for (module, name), value in saved.items():
            setattr(module, name, value)


def _pass(records: list[RawRecord], policy: RequestPolicy, *, sized: bool) -> float:
    now = START + 1.0
    started = time.process_time()
    for record in records:
        request = parse_request(record)
        if isinstance(request, Timer):
            policy.check(request, now)
            if sized:
                check_fits(request, DEFAULT_MAX_RECORD_BYTES)
    return time.process_time() - started


def guard_cost_us(kind: str, requests: int = REQUESTS, passes: int = PASSES) -> tuple[float, float]:
    """Best CPU µs per ``kind`` request ``(guarded, unguarded)`` over alternating passes."""
    records = _records(requests, kind)
    policy = RequestPolicy.build(
        allow_patterns=(".*",),
        own_topics=("ticks", "requests", "fired", "dlq"),
        app_id="bench",
        max_payload_bytes=900_000,
        horizon_seconds=10 * 366 * 86400,
    )
    guarded, unguarded = [], []
    for _ in range(passes):
        guarded.append(_pass(records, policy, sized=True))
        with _unguarded():
            unguarded.append(_pass(records, policy, sized=False))
    return min(guarded) / requests * 1e6, min(unguarded) / requests * 1e6


def run(ctx: RunContext) -> ScenarioResult:
    ctx.say("guards: the request path with and without the per-record guards, in process")
    measured = {kind: guard_cost_us(kind) for kind in ("protobuf", "json")}
    ingest_cpu = ctx.baselines.ingest_cpu_us
    figures, details = [], {}
    for kind, (with_guards, without) in measured.items():
        cost = max(0.0, with_guards - without)
        details[kind] = {"guarded_us": with_guards, "unguarded_us": without}
        met: bool | None = None
        baseline = f"with {with_guards:.2f} µs, without {without:.2f} µs"
        if ingest_cpu:
            # The ingest scenario stores protobuf requests; a JSON request costs the
            # worker what a protobuf one does plus its slower parsing (measured here).
            whole = ingest_cpu + max(0.0, without - measured["protobuf"][1])
            share = cost / whole
            baseline += f"; {share:.1%} of the worker's {whole:.1f} µs per request"
            met = share <= TARGET_SHARE
        figures.append(
            Figure(
                "guards",
                f"per-record guards, {kind} request: CPU (parse, check, size check)",
                f"+{cost:.2f} µs",
                baseline,
                f"≤ {TARGET_SHARE:.0%} of ingest CPU per request",
                met,
                value=cost,
            )
        )
    return ScenarioResult(figures=figures, details=details)


if __name__ == "__main__":
    for name in ("protobuf", "json"):
        guarded, plain = guard_cost_us(name)
        print(f"{name}: with guards {guarded:.2f} µs, without {plain:.2f} µs")
