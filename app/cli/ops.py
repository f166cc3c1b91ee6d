"""``kafka-timers export``, ``import``, ``migrate`` and ``audit``: moving a deployment's timers
and checking what it fired."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from app.cli.common import settings_for, stop_on_signals
from app.cli.parsing import AddCommand, hidden_alias, positive_seconds, timeout_flag
from app.settings import Settings
from kafka_timers_client.errors import KafkaTimersError

__all__ = ["cmd_audit", "cmd_export", "cmd_import", "cmd_migrate", "register"]


def cmd_audit(args: argparse.Namespace) -> int:
    from spark_audit.main import run as audit_run

    # Given before "audit": handed on; the audit's own flags after it win.
    given = [
        f"--{flag}={value}"
        for flag, value in (
            ("bootstrap-server", getattr(args, "bootstrap", None)),
            ("command-config", getattr(args, "command_config", None)),
        )
        if value is not None
    ]
    return audit_run([*given, *args.audit_args])  # total: 0, 1 or 2, one line


def deployment(settings: Settings, app_id: str | None, request_topic: str | None) -> Settings:
    """``settings`` with another deployment's app id and request topic, where given."""
    from dataclasses import replace

    topics = settings.topics
    if request_topic is not None:
        topics = replace(topics, requests=request_topic)
    return replace(settings, app_id=app_id or settings.app_id, topics=topics)


def cmd_export(args: argparse.Namespace) -> int:
    from app.ops.export import export_timers, export_to_file, summary

    settings = deployment(settings_for(args), args.app_id, None)
    if args.output in (None, "-"):
        snapshot = export_timers(settings, sys.stdout, timeout=args.timeout)
    else:
        try:  # 0600, and the named file replaced only once the export is complete
            snapshot = export_to_file(settings, Path(args.output), timeout=args.timeout)
        except OSError as exc:
            raise KafkaTimersError(
                f"cannot write {args.output!r}: {exc.strerror or exc}; the file there, if "
                "any, is unchanged"
            ) from None
    print(json.dumps(summary(snapshot)), file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from app.ops.import_ import check_lines, import_timers

    settings = deployment(settings_for(args), None, args.request_topic)
    if args.input in (None, "-"):  # read once: each line checked, then sent
        report = import_timers(settings, sys.stdin, timeout=args.timeout)
    else:  # read twice: every line checked before any is sent
        try:
            with open(args.input, encoding="utf-8") as lines:
                check_lines(lines, settings.record_budget_bytes)
                lines.seek(0)
                report = import_timers(settings, lines, timeout=args.timeout, checked=True)
        except OSError as exc:
            raise KafkaTimersError(f"cannot read {args.input!r}: {exc.strerror}") from None
    print(
        json.dumps(
            {
                "imported": report.timers,
                "series": report.series,
                "topic": report.topic,
                "partitions": report.partitions,
            }
        )
    )
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from app.ops.migrate import migrate

    source = deployment(settings_for(args), args.from_app_id, args.from_request_topic)
    target = deployment(
        replace(source, bootstrap_servers=args.to_bootstrap or source.bootstrap_servers),
        None,
        args.to_request_topic,
    )

    def progress(event: dict[str, object]) -> None:
        print(json.dumps(event), flush=True)

    report = migrate(
        source,
        target,
        stop=stop_on_signals(),
        idle_exit=args.idle_exit,
        force=args.force,
        timeout=args.timeout,
        progress=progress,
    )
    print(
        json.dumps(
            {
                "stage": "done",
                "copied": report.copied,
                "series": report.series,
                "bridged": report.bridged,
                "unreadable": report.unreadable,
                "resumed": report.resumed,
                "source_partitions": report.source_partitions,
                "target_partitions": report.target_partitions,
                "positions": {str(p): o for p, o in sorted(report.positions.items())},
            }
        ),
        flush=True,
    )
    return 0


def register(command: AddCommand) -> None:
    """Add ``export``, ``import``, ``migrate`` and ``audit``, in this order."""
    p = command(
        "export",
        "write every pending timer (one-shot and series) as JSON lines",
        "kafka-timers export -o timers.jsonl",
        func=cmd_export,
    )
    p.add_argument("--app-id", help="the deployment's app id (default: $KAFKA_TIMERS_APP_ID)")
    p.add_argument("--output", "-o", help="file to write (default: stdout)")
    timeout_flag(p, 120.0, "seconds to read the changelog")

    p = command(
        "import",
        "send the timers of an export to a deployment (idempotent)",
        "kafka-timers import -i timers.jsonl --request-topic timer-request",
        func=cmd_import,
    )
    p.add_argument("--input", "-i", help="export file to read (default: stdin)")
    p.add_argument(
        "--request-topic",
        help="the deployment's request topic (default: $KAFKA_TIMERS_REQUEST_TOPIC)",
    )
    timeout_flag(p, 30.0, "seconds to reach the broker and send")

    p = command(
        "migrate",
        "move every pending timer to another deployment (more partitions, another "
        "cluster), then bridge the old request topic to the new one until stopped",
        "kafka-timers migrate --to-request-topic timer-request-v2 --idle-exit 300",
        "kafka-timers migrate --to-request-topic timer-request --to-bootstrap-server new:9092",
        func=cmd_migrate,
    )
    p.add_argument(
        "--from-app-id", help="the old deployment's app id (default: $KAFKA_TIMERS_APP_ID)"
    )
    p.add_argument(
        "--from-request-topic",
        help="the old deployment's request topic (default: $KAFKA_TIMERS_REQUEST_TOPIC)",
    )
    p.add_argument("--to-request-topic", required=True, help="the new deployment's request topic")
    p.add_argument(
        "--to-bootstrap-server",
        dest="to_bootstrap",
        metavar="HOST:PORT",
        help="the new deployment's brokers (default: the old ones)",
    )
    hidden_alias(p, "--to-bootstrap", "to_bootstrap")
    p.add_argument(
        "--idle-exit",
        type=positive_seconds,
        metavar="SECONDS",
        help="stop once the old request topic has been quiet this long (default: run until "
        "SIGTERM or Ctrl-C)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="go on although the old workers' consumer group has members",
    )
    timeout_flag(p, 120.0, "seconds for each step")

    # Everything after "audit" (flags included) belongs to the audit's own parser, which
    # takes --bootstrap-server and --command-config too.
    p = command(
        "audit",
        "PySpark audit of requested vs fired timers",
        add_help=False,
        prefix_chars="\x00",
        func=cmd_audit,
    )
    p.add_argument("audit_args", nargs=argparse.REMAINDER, help="see kafka-timers audit --help")
