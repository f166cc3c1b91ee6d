"""``kafka-timers schedule``, ``cancel``, ``pause``, ``resume`` and ``rate``: a timer's owner
through the request topic, an operator through the signed control topic."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from app.cli.common import (
    control_topic_name,
    operator_name,
    send_control_record,
    settings_for,
)
from app.cli.parsing import AddCommand, positive_seconds, timeout_flag
from app.cli.preview import add_calendar_options, calendar_options
from kafka_timers_client.errors import KafkaTimersError

__all__ = [
    "DEFAULT_CANCEL_WAIT",
    "cmd_cancel",
    "cmd_pause",
    "cmd_rate",
    "cmd_resume",
    "cmd_schedule",
    "register",
]


#: Seconds ``cancel --wait`` waits for the answer when given no number.
DEFAULT_CANCEL_WAIT = 10.0


def cmd_schedule(args: argparse.Namespace) -> int:
    from kafka_timers_client.client import TimerClient
    from kafka_timers_client.due import parse_at, parse_duration
    from kafka_timers_client.late import LatePolicy

    settings = settings_for(args)
    headers = []
    for item in args.header or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise KafkaTimersError(f"--header needs name=value, got {item!r}")
        headers.append((name, value.encode()))
    at: Decimal | None = parse_at(args.at) if args.at is not None else None
    delay = parse_duration(args.in_) if args.in_ is not None else None
    calendar, cal = calendar_options(args)
    if args.cron is not None or args.every is not None:  # refused before any broker is asked
        TimerClient.build_recurrence(
            args.cron, args.tz, args.every, args.start, args.end, args.count, calendar=cal
        )
    if args.late is not None:
        LatePolicy.parse(args.late)
    TimerClient.spread_seconds(args.spread, args.every)
    if args.max_wait is not None and args.debounce is None:
        raise KafkaTimersError("--max-wait needs --debounce")
    if args.debounce is not None:
        TimerClient.debounce_window(args.debounce, args.max_wait)
    if args.cron is None and args.every is None:
        for flag, value in (("--tz", args.tz), ("--start", args.start), ("--end", args.end)):
            if value is not None:
                raise KafkaTimersError(f"{flag} needs --cron or --every")
        if args.count is not None:
            raise KafkaTimersError("--count needs --cron or --every")
    from app.kafka.topics import wait_for_broker

    wait_for_broker(settings, timeout=args.timeout)
    client = TimerClient(settings)
    timer = client.schedule(
        args.topic,
        args.value.encode(),
        args.key,
        at=at,
        delay=delay,
        cron=args.cron,
        tz=args.tz,
        every=args.every,
        start=args.start,
        end=args.end,
        count=args.count,
        late=args.late,
        spread=args.spread,
        timer_id=args.timer_id,
        token=args.token,
        headers=headers,
        debounce=args.debounce,
        max_wait=args.max_wait,
        **calendar,
    )
    client.flush(args.timeout)
    out: dict[str, Any] = {"id": timer.id, "token": timer.token, "due": timer.due}
    if timer.spread:
        out.update(spread=timer.spread, fires_at=timer.fire_at)
    if timer.recurrence is not None:
        out["series"] = timer.recurrence.describe()
    print(json.dumps(out))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from app.kafka.topics import wait_for_broker
    from kafka_timers_client.client import TimerClient

    settings = settings_for(args)
    wait_for_broker(settings, timeout=args.timeout)
    client = TimerClient(settings)
    if args.wait is None:
        if args.tombstone:
            client.tombstone(args.timer_id)
        else:
            client.cancel(args.timer_id, args.token)
        client.flush(args.timeout)
        print(json.dumps({"id": args.timer_id, "cancel": "sent"}))
        return 0
    # Every answer is definite, a refused token included: exit 0, the outcome says it.
    if args.tombstone:
        outcome = client.tombstone(args.timer_id, wait=args.wait)
    else:
        outcome = client.cancel(args.timer_id, args.token, wait=args.wait)
    client.close()
    print(json.dumps({"id": args.timer_id, "outcome": outcome.value}))
    return 0


def _pause_timer(args: argparse.Namespace, action: str) -> int:
    """``pause`` / ``resume --id --token``: the timer's owner, through the request topic
    (answered on the fired topic like a cancel)."""
    from app.kafka.topics import wait_for_broker
    from kafka_timers_client.client import TimerClient

    if args.token is None:
        raise KafkaTimersError(f"{action} --id needs --token (the token it was scheduled with)")
    settings = settings_for(args)
    wait_for_broker(settings, timeout=args.timeout)
    client = TimerClient(settings)
    send = client.pause if action == "pause" else client.resume
    if args.wait is None:
        send(args.timer_id, args.token)
        client.flush(args.timeout)
        print(json.dumps({"id": args.timer_id, action: "sent"}))
        return 0
    outcome = send(args.timer_id, args.token, wait=args.wait)
    client.close()
    print(json.dumps({"id": args.timer_id, "outcome": outcome.value}))
    return 0


def _one_target(args: argparse.Namespace, action: str) -> None:
    if (args.topic is None) == (args.timer_id is None):
        raise KafkaTimersError(
            f"{action} needs either --topic (an operator, every callback to it) or --id "
            "with --token (a timer's owner, that timer)"
        )


def cmd_pause(args: argparse.Namespace) -> int:
    import time

    from app.core.control import pause_record

    _one_target(args, "pause")
    if args.timer_id is not None:
        return _pause_timer(args, "pause")
    topic = control_topic_name(args.topic)
    key, value = pause_record(topic, by=operator_name(), at_ms=int(time.time() * 1000))
    print(json.dumps({"topic": topic, "paused": True, **send_control_record(args, key, value)}))
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    from app.core.control import PAUSE

    _one_target(args, "resume")
    if args.timer_id is not None:
        return _pause_timer(args, "resume")
    topic = control_topic_name(args.topic)
    out = send_control_record(args, f"{PAUSE}{topic}".encode(), None)  # a tombstone clears it
    print(json.dumps({"topic": topic, "paused": False, **out}))
    return 0


def _pause_command(
    command: AddCommand,
    name: str,
    help_text: str,
    done: str,
    func: Callable[[argparse.Namespace], int],
) -> None:
    """``pause`` or ``resume``: the same flags, ``done`` the answer when it worked."""
    p = command(
        name,
        help_text,
        f"kafka-timers {name} --topic reminders",
        f"kafka-timers {name} --id remind-42 --token s3cret --wait",
        func=func,
    )
    p.add_argument("--topic", help="callback topic (an operator: every timer to it)")
    p.add_argument("--id", dest="timer_id", help="one timer or series (its owner)")
    p.add_argument("--token", help="with --id: the token it was scheduled with")
    p.add_argument(
        "--wait",
        nargs="?",
        type=positive_seconds,
        const=DEFAULT_CANCEL_WAIT,
        metavar="SECONDS",
        help=f"with --id: wait for the answer and print it: {done}, wrong_token, "
        f"already_fired or not_found (default {DEFAULT_CANCEL_WAIT:g} s; exit 3 if none came)",
    )
    p.add_argument(
        "--timeout", type=positive_seconds, default=10.0, help="seconds to reach the broker"
    )


def cmd_rate(args: argparse.Namespace) -> int:
    import time

    from app.core.control import RATE, rate_record
    from app.settings import parse_topic_rate_limits

    topic = control_topic_name(args.topic)
    if args.clear:
        out = send_control_record(args, f"{RATE}{topic}".encode(), None)
        print(json.dumps({"topic": topic, "limit": "as configured", **out}))
        return 0
    per_second: float | None
    if args.limit.strip().lower() in ("none", "off", "unlimited"):
        per_second = None
    else:
        try:
            per_second = parse_topic_rate_limits(f"{topic}={args.limit}")[topic]
        except ValueError as exc:
            raise KafkaTimersError(f"--limit {args.limit[:100]!r}: {exc}") from None
    key, value = rate_record(topic, per_second, by=operator_name(), at_ms=int(time.time() * 1000))
    print(
        json.dumps(
            {"topic": topic, "per_second": per_second, **send_control_record(args, key, value)}
        )
    )
    return 0


def register(command: AddCommand) -> None:
    """Add ``schedule``, ``cancel``, ``pause``, ``resume`` and ``rate``, in this order."""
    p = command(
        "schedule",
        "schedule a timer or a series; print its id, token and (first) due second",
        "kafka-timers schedule --topic payments-retry --key order-7 --value '{\"attempt\":2}' "
        "--in 30s",
        "kafka-timers schedule --topic reminders --value hi --at 2026-12-24T09:00:00Z "
        "--id remind-42 --token s3cret",
        "kafka-timers schedule --topic digest --cron '0 0 9 * * MON-FRI' --tz Europe/Paris",
        "kafka-timers schedule --topic heartbeat --every 30s --count 100 --late 'skip-after 10s'",
        "kafka-timers schedule --topic reindex --id doc-7 --debounce 30s --max-wait 5m",
        func=cmd_schedule,
    )
    p.add_argument("--topic", required=True, help="callback topic")
    p.add_argument("--key", help="callback key (default: none)")
    p.add_argument("--value", default="", help="callback value (text; default: empty)")
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--at", help="epoch seconds or ISO 8601 (UTC if no zone)")
    when.add_argument("--in", dest="in_", metavar="DURATION", help="delay: 30s, 5m, 2h, 3d")
    when.add_argument(
        "--cron",
        help="recurring: cron, 5 fields or 6 with the seconds first ('0 0 9 * * MON-FRI')",
    )
    when.add_argument("--every", help="recurring: a fixed interval, e.g. 30s, 5m, 1d")
    when.add_argument(
        "--debounce",
        metavar="DURATION",
        help="due this long after this request (e.g. 30s); each later --debounce request "
        "for the same --id while it is pending moves it to that long after that request and "
        "replaces its callback, which carries timer-debounced: <requests merged>. Without "
        "--token none is sent, so every request for the id merges",
    )
    p.add_argument("--tz", help="IANA time zone of the --cron times (default UTC)")
    p.add_argument("--start", help="recurring: no occurrence before (epoch s or ISO 8601)")
    p.add_argument("--end", help="recurring: no occurrence after (epoch s or ISO 8601)")
    p.add_argument(
        "--count", type=int, help="recurring: at most this many occurrences (default: no limit)"
    )
    p.add_argument(
        "--late",
        help="late-fire policy: fire | skip-after <duration>, and for a series coalesce | all "
        "(comma-separated; default: the service's)",
    )
    p.add_argument(
        "--max-wait",
        metavar="DURATION",
        help="with --debounce: never fire later than this after the first request merged "
        "(at least the debounce; default: no bound)",
    )
    p.add_argument(
        "--spread",
        help="fire at a second in [due, due + spread] fixed by the id, e.g. 60s (at most 1d; "
        "default: none)",
    )
    p.add_argument(
        "--id",
        dest="timer_id",
        help="timer id (default: random; scheduling an id again replaces it)",
    )
    p.add_argument("--token", help="cancellation token (default: random; with --debounce: none)")
    p.add_argument("--header", action="append", help="callback header name=value (repeatable)")
    timeout_flag(p, 10.0, "seconds to reach the broker and send")
    add_calendar_options(p)

    p = command(
        "cancel",
        "cancel a timer by id and token; --wait prints what the worker did",
        "kafka-timers cancel --id remind-42 --token s3cret --wait",
        "kafka-timers cancel --id remind-42 --tombstone",
        func=cmd_cancel,
    )
    p.add_argument("--id", dest="timer_id", required=True, help="timer id")
    authority = p.add_mutually_exclusive_group(required=True)
    authority.add_argument("--token", help="the token the timer was scheduled with")
    authority.add_argument(
        "--tombstone",
        action="store_true",
        help="cancel by id alone, whatever the token (an etf1 tombstone: a null value)",
    )
    p.add_argument(
        "--wait",
        type=positive_seconds,
        nargs="?",
        const=DEFAULT_CANCEL_WAIT,
        metavar="SECONDS",
        help="wait for the answer and print it: cancelled, already_fired, wrong_token, "
        f"cancelled_in_advance or not_found (default {DEFAULT_CANCEL_WAIT:g} s; "
        "exit 3 if none came)",
    )
    timeout_flag(p, 10.0, "seconds to reach the broker")

    _pause_command(
        command,
        "pause",
        "hold callbacks: --topic every callback to a topic (an operator, through the control "
        "topic; records are signed with KAFKA_TIMERS_CONTROL_SECRET), or --id --token one "
        "timer or series (its owner)",
        "paused",
        cmd_pause,
    )
    _pause_command(
        command,
        "resume",
        "deliver a paused topic (--topic) or timer (--id --token) again: what came due "
        "meanwhile goes out first, by its late policy",
        "resumed",
        cmd_resume,
    )

    p = command(
        "rate",
        "set a callback topic's rate limit while the service runs (control topic)",
        "kafka-timers rate --topic reminders --limit 500/s",
        "kafka-timers rate --topic reminders --clear",
        func=cmd_rate,
    )
    p.add_argument("--topic", required=True, help="callback topic")
    limit = p.add_mutually_exclusive_group(required=True)
    limit.add_argument(
        "--limit", help="callbacks across the service: 500/s, 30/m, 100/h; none for no limit"
    )
    limit.add_argument(
        "--clear",
        action="store_true",
        help="back to KAFKA_TIMERS_TOPIC_RATE_LIMITS's limit for the topic (or none)",
    )
    timeout_flag(p, 10.0, "seconds to reach the broker")
