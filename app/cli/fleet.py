"""``kafka-timers status``, ``get``, ``list`` and ``cancel-bulk``: what the running workers hold,
and an operator's cancel of every timer a filter matches."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from app.cli.common import control_settings, operator_name, settings_for, worker_urls
from app.cli.parsing import AddCommand, hidden_alias, positive_seconds, timeout_flag
from kafka_timers_client.errors import KafkaTimersError

__all__ = ["DEFAULT_GET_SINCE", "cmd_cancel_bulk", "cmd_get", "cmd_list", "cmd_status", "register"]


#: How far back ``get`` searches the fired topic when no worker gives a due second.
DEFAULT_GET_SINCE = "1d"


def cmd_status(args: argparse.Namespace) -> int:
    from app.status.cli import status_main

    settings, args.url = worker_urls(settings_for(args), args)
    return status_main(settings, args)


def cmd_get(args: argparse.Namespace) -> int:
    from app.status.timer_state import get_main

    settings, args.url = worker_urls(settings_for(args), args)
    return get_main(settings, args)


def filter_from_args(args: argparse.Namespace) -> Any:
    import math

    from app.core.timer_filter import TimerFilter
    from kafka_timers_client.due import parse_at

    query: dict[str, str] = {}
    for name in ("topic", "key", "key_prefix", "id_prefix"):
        value = getattr(args, name)
        if value == "" and name.endswith("_prefix"):  # "$UNSET": never every timer
            flag = "--" + name.replace("_", "-")
            raise KafkaTimersError(
                f"{flag} is empty (an unset variable?): an empty prefix would match every "
                "timer, and there is no 'cancel everything'"
            )
        if value is not None:
            query[name] = value
    for name in ("due_from", "due_to"):
        value = getattr(args, name)
        if value is not None:
            at = parse_at(value)  # a window of whole seconds that holds the times given
            query[name] = str(math.floor(at) if name == "due_to" else math.ceil(at))
    if args.series:
        query["series"] = "true"
    try:
        return TimerFilter.from_query(query)
    except ValueError as exc:
        raise KafkaTimersError(str(exc)) from None


def cmd_list(args: argparse.Namespace) -> int:
    from app.status.listing import list_workers

    settings, urls = worker_urls(settings_for(args), args)
    flt = filter_from_args(args)
    if settings.operator_token is None:
        raise KafkaTimersError(
            "listing timers needs the operator's credential: set KAFKA_TIMERS_OPERATOR_TOKEN"
        )
    shown = 0

    def emit(timer: dict[str, Any]) -> None:
        nonlocal shown
        if not args.count_only:
            print(json.dumps(timer))
        shown += 1

    count, failed = list_workers(urls, flt, settings.operator_token, emit)
    for failure in failed:
        print(f"kafka-timers: warning: no listing from {failure}", file=sys.stderr)
    summary = {"matched": count, "workers": len(urls) - len(failed), "failed": len(failed)}
    print(json.dumps(summary), file=sys.stdout if args.count_only else sys.stderr)
    if failed and len(failed) == len(urls):
        return 2
    return 1 if failed else 0


def cmd_cancel_bulk(args: argparse.Namespace) -> int:
    from app.core.timer_filter import TimerFilter
    from app.kafka.control import bulk_cancel
    from app.kafka.topics import ensure_control_topic

    flt = filter_from_args(args)
    if flt == TimerFilter():
        raise KafkaTimersError(
            "cancel-bulk needs at least one filter (--topic, --key, --key-prefix, "
            "--id-prefix, --due-from, --due-to, --series)"
        )
    settings = control_settings(args)
    ensure_control_topic(settings, timeout=args.timeout)
    result = bulk_cancel(
        settings,
        flt,
        dry_run=args.dry_run,
        wait=args.wait,
        by=operator_name(),
        timeout=args.timeout,
    )
    print(json.dumps(result))
    if result["refused"] is not None:
        raise KafkaTimersError(f"the workers refused the bulk cancel: {result['refused']}")
    if result["partitions_missing"]:
        print(
            f"kafka-timers: warning: no answer within {args.wait:g} s from partitions "
            f"{result['partitions_missing']} (no worker holds them now?); sending the same "
            "cancel again is safe",
            file=sys.stderr,
        )
        return 3
    return 0


def filter_flags(p: argparse.ArgumentParser) -> None:
    """The filters of ``list`` and ``cancel-bulk`` (app.core.timer_filter)."""
    p.add_argument("--topic", help="callback topic")
    key = p.add_mutually_exclusive_group()
    key.add_argument("--key", help="callback key, exactly")
    key.add_argument("--key-prefix", help="callback keys starting with this")
    p.add_argument("--id-prefix", help="timer ids starting with this")
    p.add_argument("--due-from", help="due at or after (epoch s or ISO 8601)")
    p.add_argument("--due-to", help="due at or before (epoch s or ISO 8601)")
    p.add_argument("--series", action="store_true", help="series only")


def register(command: AddCommand) -> None:
    """Add ``status``, ``get``, ``list`` and ``cancel-bulk``, in this order."""
    p = command(
        "status",
        "pending, fires, lateness and ticks of running workers",
        "kafka-timers status",
        "kafka-timers status --url http://w1:6066 --url http://w2:6066 --json",
        "kafka-timers status --next 10",
        func=cmd_status,
    )
    p.add_argument(
        "--url", action="append", help="worker web URL (repeatable; default: a running demo's)"
    )
    p.add_argument("--json", action="store_true", help="print the merged numbers as JSON")
    p.add_argument("--id", dest="timer", metavar="ID", help="look one timer up on every worker")
    hidden_alias(p, "--timer", "timer", metavar="ID")
    p.add_argument("--next", type=int, metavar="N", help="the next N due timers over all workers")

    p = command(
        "get",
        "one timer's state: pending (next due second), fired (when) or cancelled",
        "kafka-timers get --id remind-42",
        func=cmd_get,
    )
    p.add_argument("--id", dest="timer_id", required=True, help="timer id")
    p.add_argument(
        "--url", action="append", help="worker web URL (repeatable; default: a running demo's)"
    )
    p.add_argument(
        "--since",
        default=DEFAULT_GET_SINCE,
        help="how far back to search the fired topic when no worker gives a due second",
    )
    timeout_flag(p, 30.0, "seconds for reading the fired topic")

    p = command(
        "list",
        "pending timers matching filters, on every worker (--url), one JSON line each, "
        "without tokens or payloads (needs KAFKA_TIMERS_OPERATOR_TOKEN, or a running demo)",
        "kafka-timers list --topic reminders",
        "kafka-timers list --key-prefix customer-42/ --count-only",
        func=cmd_list,
    )
    p.add_argument(
        "--url", action="append", help="worker web URL (repeatable; default: a running demo's)"
    )
    filter_flags(p)
    p.add_argument(
        "--count-only", dest="count_only", action="store_true", help="print only how many match"
    )
    hidden_alias(p, "--count", "count_only", action="store_true")

    p = command(
        "cancel-bulk",
        "cancel every pending timer matching filters, on every worker, through the "
        "control topic; prints how many (--dry-run: only counts)",
        "kafka-timers cancel-bulk --topic reminders --key-prefix customer-42/ --dry-run",
        "kafka-timers cancel-bulk --topic reminders --due-to 2027-01-01T00:00:00Z",
        func=cmd_cancel_bulk,
    )
    filter_flags(p)
    p.add_argument("--dry-run", action="store_true", help="count what would be cancelled")
    p.add_argument(
        "--wait",
        type=positive_seconds,
        default=120.0,
        metavar="SECONDS",
        help="seconds to wait for every partition's answer (exit 3 past it)",
    )
    timeout_flag(p, 10.0, "seconds to reach the broker")
