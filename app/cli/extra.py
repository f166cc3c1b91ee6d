"""``kafka-timers trigger`` and ``backfill``: fires a timer's owner asks for out of
schedule, through the request topic, answered on the fired topic like a cancel.

Both wait for the worker's answer and print it as JSON; an answer that fired nothing
(a wrong token, no such timer, a window too large) is one line on stderr and exit
status 2. What they fire goes out on the worker's next tick
(:mod:`kafka_timers_client.extra_fires`).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING

from app.cli.common import settings_for
from app.cli.parsing import AddCommand, positive_seconds, timeout_flag
from kafka_timers_client.errors import KafkaTimersError

if TYPE_CHECKING:
    from kafka_timers_client.client import TimerClient

__all__ = ["DEFAULT_WAIT", "cmd_backfill", "cmd_trigger", "register"]

#: Seconds trigger and backfill wait for the worker's answer by default.
DEFAULT_WAIT = 10.0

#: What each refusal means, for the one line that reports it.
_REFUSED = {
    "wrong_token": "refused: the token does not match the timer's",
    "not_found": "no pending timer with that id",
    "already_fired": "it has fired already (or is firing right now)",
    "not_a_series": "it is a one-shot timer: only a series has occurrences to backfill",
}


def _window_second(text: str, flag: str) -> int:
    from kafka_timers_client.due import due_second, parse_at

    try:
        return due_second(parse_at(text))
    except KafkaTimersError as exc:
        raise KafkaTimersError(f"{flag} {text[:60]!r}: {exc}") from None


def _client(args: argparse.Namespace) -> TimerClient:
    from app.kafka.topics import wait_for_broker
    from kafka_timers_client.client import TimerClient

    settings = settings_for(args)
    wait_for_broker(settings, timeout=args.timeout)
    return TimerClient(settings)


def _answered(args: argparse.Namespace, outcome: str, done: str, **extra: object) -> int:
    if outcome != done:
        why = _REFUSED.get(outcome, outcome)
        raise KafkaTimersError(f"{args.command} of timer {args.timer_id!r}: {why}")
    print(json.dumps({"id": args.timer_id, "outcome": outcome, **extra}))
    return 0


def cmd_trigger(args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        outcome = client.trigger(args.timer_id, args.token, wait=args.wait)
    finally:
        client.close()
    assert outcome is not None
    return _answered(args, outcome.value, "triggered")


def cmd_backfill(args: argparse.Namespace) -> int:
    from kafka_timers_client.extra_fires import MAX_BACKFILL, checked_window

    low = _window_second(args.from_, "--from")
    high = _window_second(args.to, "--to")
    checked_window(low, high)
    now = int(time.time())
    if high > now + 1:
        raise KafkaTimersError(
            f"--to {args.to[:60]!r} is {high - now - 1}s in the future: a backfill fires only "
            "occurrences already due (trigger fires one now)"
        )
    client = _client(args)
    try:
        outcome = client.backfill(args.timer_id, args.token, low, high, wait=args.wait)
    finally:
        client.close()
    assert outcome is not None
    if outcome.value == "too_many":
        raise KafkaTimersError(
            f"backfill of timer {args.timer_id!r} refused: [{low}, {high}) holds more than "
            f"{MAX_BACKFILL:,} occurrences; split the window"
        )
    return _answered(args, outcome.value, "backfilled", window=[low, high])


def _common_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--id", dest="timer_id", required=True, help="timer id")
    p.add_argument("--token", required=True, help="the token it was scheduled with ('' for none)")
    p.add_argument(
        "--wait",
        type=positive_seconds,
        default=DEFAULT_WAIT,
        metavar="SECONDS",
        help="seconds to wait for the worker's answer (exit 3 if none came)",
    )
    timeout_flag(p, 10.0, "seconds to reach the broker")


def register(command: AddCommand) -> None:
    """Add ``trigger`` and ``backfill``."""
    p = command(
        "trigger",
        "fire a timer now: a one-shot's callback goes out at once and the timer is gone; "
        "a series fires one extra occurrence and keeps its schedule",
        "kafka-timers trigger --id remind-42 --token s3cret",
        func=cmd_trigger,
    )
    _common_flags(p)
    p = command(
        "backfill",
        "fire the occurrences a series would have had in a past window [--from, --to), "
        "each with a timer-backfill header (at most 10,000)",
        "kafka-timers backfill --id digest --token s3cret --from 2026-11-01 --to 2026-11-08",
        "kafka-timers backfill --id hb-1 --token s3cret --from 1767225600 --to 1767229200",
        func=cmd_backfill,
    )
    _common_flags(p)
    p.add_argument(
        "--from",
        dest="from_",
        metavar="TIME",
        required=True,
        help="first second of the window (ISO 8601 or epoch s)",
    )
    p.add_argument(
        "--to",
        metavar="TIME",
        required=True,
        help="end of the window, excluded (ISO 8601 or epoch s; not in the future)",
    )
