"""``kafka-timers topics``, ``config`` and ``preflight``: a deployment's topics, settings
and permissions."""

from __future__ import annotations

import argparse
import json
import sys

from app.cli.common import settings_for
from app.cli.parsing import AddCommand, timeout_flag

__all__ = ["cmd_config", "cmd_preflight", "cmd_topics", "register"]


def cmd_topics(args: argparse.Namespace) -> int:
    from app.kafka.topics import ensure_topics, resolve_partitions, service_topics

    settings = resolve_partitions(settings_for(args), timeout=args.timeout)
    ensure_topics(settings, timeout=args.timeout)
    print(json.dumps({"partitions": settings.partitions, "topics": list(service_topics(settings))}))
    return 0


def cmd_preflight(args: argparse.Namespace) -> int:
    from app.kafka.topics import resolve_partitions
    from app.ops.preflight import Summary, run_preflight

    settings = resolve_partitions(settings_for(args), timeout=args.timeout)
    checks = run_preflight(settings, args.role, args.callback_topic, timeout=args.timeout)
    for check in checks:
        print(json.dumps(check.as_dict()) if args.json else check.line())
    summary = Summary.of(checks)
    print(summary.line(), file=sys.stderr)
    return summary.exit_status


def cmd_config(args: argparse.Namespace) -> int:
    from app.settings.reference import config_listing

    print(config_listing())
    return 0


def register(command: AddCommand) -> None:
    """Add ``topics``, ``config`` and ``preflight``, in this order."""
    p = command(
        "topics",
        "create the service topics (all with one partition count)",
        "kafka-timers topics --bootstrap-server kafka:9092 --command-config admin.properties",
        func=cmd_topics,
    )
    timeout_flag(p, 15.0, "seconds to reach the broker")

    p = command(
        "config",
        "list every setting: its variable, its value from the environment and its default "
        "(secrets masked); a bad value stops it as it would stop a process",
        "kafka-timers config",
        func=cmd_config,
    )

    p = command(
        "preflight",
        "check a cluster before deploying, for one principal's role: the topics, their "
        "settings, the callback topics, and the permissions the broker reports; print what "
        "is missing and how to fix it",
        "kafka-timers preflight --bootstrap-server kafka:9092 --command-config worker.properties",
        "kafka-timers preflight --role producer --command-config producer.properties",
        "kafka-timers preflight --callback-topic payments-retry --callback-topic 'reminders-*'",
        func=cmd_preflight,
    )
    p.add_argument(
        "--role",
        choices=("worker", "oscillator", "producer", "operator", "audit"),
        default="worker",
        help="what the principal of --command-config runs",
    )
    p.add_argument(
        "--callback-topic",
        action="append",
        default=[],
        metavar="TOPIC",
        help="a callback topic the workers will write (repeatable; 'prefix*' for a prefix)",
    )
    p.add_argument("--json", action="store_true", help="print every check as a JSON line")
    timeout_flag(p, 15.0, "seconds to reach the broker")
