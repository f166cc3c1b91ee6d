"""``GET /timers``: the pending timers of this worker that match filters, a page at a time.

What ``kafka-timers list`` asks every worker (``--url``), with the operator's credential
(as ``/timers/next``). Filters: :class:`app.core.timer_filter.TimerFilter` (``topic``,
``key`` or ``key_prefix``, ``id_prefix``, ``due_from``/``due_to``, ``series``), and
``limit`` (at most :data:`LIST_MAX` timers a page), ``cursor`` (from the page before).

A page reads the held partitions' stores in key order (due second, then id), from the
cursor on, and stops at ``limit`` matches, at :data:`EXAMINE_MAX` timers examined or at
:data:`SCAN_SECONDS` of work, whichever comes first, answering the cursor to go on from
(``null``: the end). Every page spends from the heavy views' loop budget
(:mod:`app.status.admission`: past it, 503 and ``Retry-After: 1``), so however many
listings run, the timers' event loop gives them at most its heavy share. A listing is
not a snapshot: a timer that fires, is cancelled or is stored behind the cursor between
pages is missed, one stored ahead of it is found; and the cursor names a partition, so
after a rebalance a page starts over on the partitions the worker holds then. Never a
token or a payload (:func:`app.status.views.timer_json`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from app.core.keys import PENDING, PENDING_END, bucket_floor, parse_timer_key
from app.core.stored import unpack_timer
from app.core.timer import Timer
from app.core.timer_filter import TimerFilter
from app.core.wheel import PartitionWheel
from kafka_timers_client.spread import MAX_SPREAD_SECONDS

__all__ = ["EXAMINE_MAX", "LIST_MAX", "SCAN_SECONDS", "list_page", "parse_cursor"]

#: Most timers one page returns.
LIST_MAX = 1000
#: Most stored timers one page examines.
EXAMINE_MAX = 5000
#: Most event-loop time one page's scan takes, seconds.
SCAN_SECONDS = 0.01


def parse_cursor(text: str | None) -> tuple[int, bytes] | None:
    """``<partition>:<hex of the last key>``; ``ValueError`` if it is not one."""
    if not text:
        return None
    partition, sep, key = text.partition(":")
    if not sep or len(key) > 8192:
        raise ValueError("not a cursor from this listing")
    try:
        return int(partition), bytes.fromhex(key)
    except ValueError:
        raise ValueError("not a cursor from this listing") from None


def _range(flt: TimerFilter) -> tuple[bytes, bytes]:
    """Store keys a timer matching ``flt``'s due window can have: a timer is keyed under
    its due second or later (a spread: at most a day later)."""
    low = bucket_floor(flt.due_from) if flt.due_from is not None else PENDING
    high = (
        bucket_floor(flt.due_to + MAX_SPREAD_SECONDS + 1) if flt.due_to is not None else PENDING_END
    )
    return low, high


def list_page(
    wheels: Mapping[int, PartitionWheel],
    flt: TimerFilter,
    *,
    limit: int,
    cursor: tuple[int, bytes] | None,
    describe: Callable[[int, Timer], dict[str, Any]],
    examine_max: int = EXAMINE_MAX,
    seconds: float = SCAN_SECONDS,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """One page: ``timers`` (described), ``cursor`` (``None`` at the end), ``examined``."""
    deadline = clock() + seconds
    low, high = _range(flt)
    found: list[dict[str, Any]] = []
    examined = 0
    for p in sorted(wheels):
        if cursor is not None and p < cursor[0]:
            continue
        start = low
        if cursor is not None and p == cursor[0]:
            start = max(low, cursor[1] + b"\x00")
        for key, value in wheels[p].scan_pending(start, high):
            examined += 1
            if flt.id_may_match(parse_timer_key(key)[1]):
                timer = unpack_timer(value)
                if flt.matches(timer):
                    found.append(describe(p, timer))
            if (
                len(found) >= limit
                or examined >= examine_max
                or (not examined & 63 and clock() > deadline)
            ):
                return {"timers": found, "cursor": f"{p}:{key.hex()}", "examined": examined}
    return {"timers": found, "cursor": None, "examined": examined}


def page_body(worker: str, page: dict[str, Any]) -> bytes:
    return json.dumps({"worker": worker, **page}).encode()


#: Longest ``list`` waits out a worker that answers busy (503), per page, seconds.
BUSY_WAIT_SECONDS = 60.0


def list_workers(
    urls: list[str],
    flt: TimerFilter,
    token: str | None,
    emit: Callable[[dict[str, Any]], None],
    *,
    page_size: int = LIST_MAX,
    fetch: Callable[..., tuple[int, Any]] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[int, list[str]]:
    """Page through ``GET /timers`` of every worker in ``urls``, calling ``emit`` for each
    timer; return how many, and the workers that failed (one line each)."""
    from urllib.parse import urlencode

    from app.status.cli import fetch_json

    get = fetch or fetch_json
    count = 0
    failed: list[str] = []
    for base in urls:
        cursor: str | None = None
        busy_since: float | None = None
        while True:
            query = {**flt.to_query(), "limit": str(page_size)}
            if cursor is not None:
                query["cursor"] = cursor
            try:
                status, body = get(f"{base}/timers?{urlencode(query)}", token=token)
            except (OSError, ValueError) as exc:  # not a URL; an answer that is not JSON
                failed.append(f"{base}: {' '.join(str(exc).splitlines())[:200]}")
                break
            if status == 503:
                busy_since = busy_since or time.monotonic()
                if time.monotonic() - busy_since > BUSY_WAIT_SECONDS:
                    failed.append(f"{base}: busy for {BUSY_WAIT_SECONDS:g} s")
                    break
                sleep(0.2)
                continue
            busy_since = None
            if status != 200 or not isinstance(body, dict):
                error = body.get("error") if isinstance(body, dict) else body
                failed.append(f"{base}: HTTP {status}: {error}")
                break
            for timer in body.get("timers", []):
                emit({**timer, "worker": body.get("worker")})
                count += 1
            cursor = body.get("cursor")
            if cursor is None:
                break
    return count, failed
