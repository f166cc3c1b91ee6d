"""``kafka-timers get``: one timer's state, from the workers and from the fired topic.

Two sources, because neither knows everything:

- the worker holding the timer's partition (``GET /timers/<id>``, as ``status --timer``
  asks) knows the newest version of the timer: pending with its due second, or fired,
  or cancelled. It is the only source for a pending timer, and the authority on which
  version is current (a timer scheduled again after it fired is pending again);
- the fired topic knows *when* a timer fired or was cancelled, and by which worker, and
  still knows it when the worker has forgotten the id, or no worker answers.

So ``get`` asks the workers first, and a pending answer is final: no Kafka read at all.
When no worker that answered holds the timer's partition, the fired topic tells what
happened last, which is the state for a one-shot timer's fire and for a cancel, but not
for a series: after a fire its next occurrence is pending, on a worker nobody reached.
That is ``unknown``, with the ``reason`` and the ``last_fire``, never ``fired``.
Otherwise it reads the one partition of the fired topic that holds the id's records —
the partition the worker named, else murmur2 of the id over the request topic's
partition count, as every producer placed it — newest first, and takes the record that
matches what the worker said (for a fire, the one with the same due second). Like the
status endpoints, it never shows a token or a payload.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from app.core.fired import FiredKind, FiredRecord, defines_state
from app.core.wheel import CancelOutcome
from app.settings import Settings
from app.status.cli import fetch_json
from kafka_timers_client.due import parse_duration
from kafka_timers_client.fired_reader import FiredPartitionReader
from kafka_timers_client.partitioner import partition_for

__all__ = ["SearchPlan", "describe", "get_main", "search_plan"]

#: A fire is never stamped before its due second, given right clocks; this much slack
#: covers a worker clock that is a little behind.
CLOCK_SLACK_MS = 60_000
#: The states ``get`` reports, besides the workers' own.
UNKNOWN = "unknown"
_CANCELLED = CancelOutcome.CANCELLED.value
_IN_ADVANCE = CancelOutcome.CANCELLED_IN_ADVANCE.value


@dataclass(frozen=True)
class SearchPlan:
    """What to look for on the fired topic, and how far back."""

    #: Whether a record is the one that explains the state.
    accept: Callable[[FiredRecord], bool]
    #: Records stamped before this (epoch ms) cannot be it.
    floor_ms: int


def search_plan(answer: Mapping[str, Any] | None, now_ms: int, since_ms: int) -> SearchPlan | None:
    """The fired-topic search that completes the worker's ``answer`` (``None``: no
    worker knew the id), or ``None`` when there is nothing to look for."""
    floor_ms = now_ms - since_ms
    if answer is None:
        return SearchPlan(defines_state, floor_ms)
    state, due = answer.get("state"), answer.get("due")
    if state == "fired" and isinstance(due, int):
        return SearchPlan(
            lambda r: r.event is FiredKind.FIRED and r.due == due, due * 1000 - CLOCK_SLACK_MS
        )
    if state == "cancelled":
        return SearchPlan(lambda r: r.outcome == _CANCELLED, floor_ms)
    if state == "cancelled_in_advance":
        return SearchPlan(lambda r: r.outcome == _IN_ADVANCE, floor_ms)
    return None  # pending (the worker's word is final), or a state this client does not know


def _utc(epoch_ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_ms // 1000)) + (
        f".{epoch_ms % 1000:03d}Z"
    )


def describe(
    timer_id: str,
    partition: int,
    answer: Mapping[str, Any] | None,
    record: FiredRecord | None,
    *,
    unheld: str | None = None,
) -> dict[str, Any]:
    """The state of ``timer_id`` from the worker's ``answer`` and the fired-topic
    ``record`` found for it (either may be ``None``).

    ``unheld`` says why no worker spoke for the timer's partition (``None``: its holder
    answered): then a series' fire does not say the series is over (see the module
    docstring), and an unknown state carries it as its ``reason``.
    """
    series_fire = record is not None and record.event is FiredKind.FIRED and bool(record.seq)
    if answer is None and unheld is not None and record is not None and series_fire:
        last = describe(timer_id, partition, None, record)
        shown = ("due", "due_at", "fired_at", "fired_at_ms", "fired_by", "topic")
        return {
            "id": timer_id,
            "state": UNKNOWN,
            "partition": last["partition"],
            "reason": f"{unheld}: the series may have an occurrence pending",
            "last_fire": {k: last[k] for k in shown if k in last} | {"seq": record.seq},
            "sources": ["fired-topic"],
        }
    result: dict[str, Any] = {"id": timer_id, "state": UNKNOWN, "partition": partition}
    sources = []
    if answer is not None:
        # The endpoint already leaves tokens and payloads out; drop its error fields.
        result.update({k: v for k, v in answer.items() if k not in ("error", "token")})
        sources.append("worker")
    if record is not None:
        sources.append("fired-topic")
        result["partition"] = record.partition
        if record.event is FiredKind.FIRED:
            result.update(state="fired", due=record.due, topic=record.topic)
            result["fired_by"] = record.worker
            if record.fired_at_ms is not None:
                result["fired_at_ms"] = record.fired_at_ms
                result["fired_at"] = _utc(record.fired_at_ms)
        else:
            if answer is None:
                result["state"] = "cancelled" if record.outcome == _CANCELLED else _IN_ADVANCE
            result["cancelled_by"] = record.worker
            if record.at_ms is not None:
                result["cancelled_at_ms"] = record.at_ms
                result["cancelled_at"] = _utc(record.at_ms)
    if isinstance(result.get("due"), int) and result["due"] > 0:
        result["due_at"] = _utc(result["due"] * 1000)
    if result["state"] == UNKNOWN and unheld is not None:
        result["reason"] = unheld
    result["sources"] = sources
    return result


def _ask_workers(
    urls: Sequence[str], timer_id: str, token: str | None = None
) -> tuple[dict[str, Any] | None, set[int], list[str]]:
    """The first worker that knows the id (its answer), the partitions held by those
    that answered, and the URLs that did not answer."""
    path = "/timers/" + urllib.parse.quote(timer_id, safe="")
    found: dict[str, Any] | None = None
    held: set[int] = set()
    failed: list[str] = []
    for url in urls:
        try:
            status, body = fetch_json(url + path, token=token)
        except (OSError, ValueError) as exc:
            failed.append(f"{url} ({exc})")
            continue
        if status in (401, 403):  # no credential for which timers exist: say so
            error = body.get("error") if isinstance(body, dict) else None
            failed.append(f"{url} (HTTP {status}: {error})")
            continue
        if status == 200 and isinstance(body, dict):
            found = found or body
            if isinstance(body.get("partition"), int):
                held.add(body["partition"])
        elif isinstance(body, dict):
            held.update(p for p in body.get("partitions_held", ()) if isinstance(p, int))
    return found, held, failed


def get_main(settings: Settings, args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Print one timer's state as JSON: exit 0 when it is known, 1 when it is not (state
    ``unknown``: no source knows the id, or it is a series and no worker holding it
    answered). Workers that do not answer are warnings, not errors."""
    out = out or sys.stdout
    timer_id: str = args.timer_id
    urls = [u.rstrip("/") for u in (args.url or [])] or [f"http://127.0.0.1:{settings.web_port}"]
    since_ms = int(parse_duration(args.since) * 1000)
    answer, held, failed = _ask_workers(urls, timer_id, settings.operator_token)
    for failure in failed:
        print(f"kafka-timers: warning: no answer from {failure}", file=sys.stderr)
    plan = search_plan(answer, int(time.time() * 1000), since_ms)
    record: FiredRecord | None = None
    partition = answer.get("partition") if answer is not None else None
    if plan is not None or not isinstance(partition, int):
        deadline = time.monotonic() + args.timeout
        with FiredPartitionReader(settings.client_config()) as reader:
            if not isinstance(partition, int):
                count = reader.partition_count(settings.topics.requests, args.timeout)
                partition = partition_for(timer_id.encode(), count)
            if plan is not None:
                record = reader.newest(
                    partition,
                    timer_id.encode(),
                    plan.accept,
                    floor_ms=plan.floor_ms,
                    deadline=deadline,
                )
    unheld: str | None = None
    if answer is None and partition not in held:
        unheld = (
            "no worker answered"
            if len(failed) == len(urls)
            else (f"no worker that answered holds partition {partition}")
        )
        print(
            f"kafka-timers: warning: {unheld}: a pending timer would not show "
            "(--url of every worker?)",
            file=sys.stderr,
        )
    result = describe(timer_id, partition, answer, record, unheld=unheld)
    print(json.dumps(result), file=out)
    return 1 if result["state"] == UNKNOWN else 0
