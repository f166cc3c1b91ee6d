"""Command-line options of ``kafka-timers audit`` (and ``spark-submit spark_audit/main.py``).

A bad flag is one line on stderr and exit status 2, like every other kafka-timers command.
"""

from __future__ import annotations

import argparse
import re
import time
from dataclasses import dataclass, field
from typing import NoReturn

from kafka_timers_client.due import parse_at, parse_duration
from kafka_timers_client.errors import InvalidTimeSpec
from spark_audit.errors import AuditError
from spark_audit.reading import SourceKind

__all__ = ["AuditOptions", "build_parser", "parse_options"]

DEFAULT_OUTPUT = ".kafka-timers/audit"
#: The default window: as long as the request topic the service creates keeps requests.
DEFAULT_WINDOW = "7d"
#: Records set aside before the audit fails for it: a few hostile records written to the
#: fired topic must not hold the gate shut; a topic full of them means the evidence is gone.
DEFAULT_MAX_SET_ASIDE = 100
_DURATION_WITH_UNIT = re.compile(r"^\d+(\.\d+)?\s*(ms|s|m|h|d|w)$")


def _since(raw: str, as_of: float) -> float | None:
    """``--since``: ``all``, a duration before ``as_of`` (``7d``), or a point in time."""
    text = raw.strip().lower()
    if text == "all":
        return None
    if _DURATION_WITH_UNIT.match(text):  # 7d, 36h (a bare number is an epoch second)
        return as_of - parse_duration(text)
    return float(parse_at(raw))


@dataclass(frozen=True)
class AuditOptions:
    """What to audit, against which rules, and where the results go."""

    #: The audit's "now", epoch ms: a timer is missing only if due + grace is before it.
    as_of_ms: int
    #: How late a fire may be before the timer counts as missing, ms.
    grace_ms: int = 60_000
    #: Start of the audit window, epoch ms (``None``: the whole history): only what
    #: happened from then on counts as a violation, so daily windows report each once.
    since_ms: int | None = None
    #: Exit 0 despite duplicate fires (the at-least-once window), still reporting them.
    allow_duplicates: bool = False
    #: Directory for summary.json, report.html and the Parquet tables.
    output_dir: str = DEFAULT_OUTPUT
    #: Where Spark writes the Parquet tables (default: under ``output_dir``); on a cluster,
    #: a filesystem every executor can reach (``hdfs://``, ``s3a://``).
    tables_uri: str | None = None
    #: Spark master (``local[*]``, ``spark://host:7077``, ``yarn``); default: Spark's own.
    master: str | None = None
    source: SourceKind = SourceKind.PYTHON
    #: A Kafka client properties file (``--command-config``), over the environment.
    command_config: str | None = None
    #: Overrides of the topics from the environment.
    requests_topic: str | None = None
    fired_topic: str | None = None
    bootstrap: str | None = None
    #: Split a Kafka partition into Spark partitions of at most this many offsets.
    max_offsets_per_partition: int | None = None
    #: Extra options for the Kafka source (``kafka.*`` go to the client).
    kafka_options: dict[str, str] = field(default_factory=dict)
    #: Extra Spark settings for a session the audit starts itself.
    spark_conf: dict[str, str] = field(default_factory=dict)
    #: Most violations of each kind, and records set aside for each reason, listed in
    #: summary.json and the reports (all of them go to Parquet).
    max_listed: int = 100
    #: Most records the audit may set aside (fired-topic records it cannot read, timers
    #: it could not judge) before that is a finding of its own: exit status 1.
    max_set_aside: int = DEFAULT_MAX_SET_ASIDE
    #: Print nothing but the one-line verdict.
    quiet: bool = False
    #: Spark's log level while the audit runs (``FATAL``: the audit's own line says why
    #: a run failed; ``ERROR`` or ``WARN`` to see Spark's stack traces).
    spark_log_level: str = "FATAL"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _pairs(items: list[str] | None, flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise AuditError(f"{flag} needs name=value, got {item!r}")
        out[name] = value
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kafka-timers audit",
        description=(
            "Reconcile timer requests with fires: missing, duplicate, early, after-cancel and "
            "superseded fires, and the lateness distribution. Exit 1 on any violation."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "examples:\n"
            "  kafka-timers audit --since 1d --allow-duplicates\n"
            "  kafka-timers audit --bootstrap-server kafka:9092 --command-config audit.properties "
            "--master yarn --tables-uri s3a://bucket/audit"
        ),
    )
    parser.add_argument("--as-of", help="audit time, epoch seconds or ISO 8601 (default: now)")
    parser.add_argument(
        "--grace", default="60s", help="how late a fire may be before it is missing (60s)"
    )
    parser.add_argument(
        "--since",
        default=DEFAULT_WINDOW,
        help=(
            "start of the audit window: epoch seconds, ISO 8601, a duration before --as-of "
            f"(e.g. 1d), or 'all' (default {DEFAULT_WINDOW}: the request topic's retention)"
        ),
    )
    parser.add_argument(
        "--allow-duplicates",
        action="store_true",
        help="report duplicate fires but exit 0 for them (at-least-once delivery)",
    )
    parser.add_argument("--output", default=DEFAULT_OUTPUT, help=f"directory ({DEFAULT_OUTPUT})")
    parser.add_argument("--tables-uri", help="where Spark writes Parquet (default: --output)")
    parser.add_argument("--master", help="Spark master, e.g. local[*] or spark://host:7077")
    parser.add_argument(
        "--source",
        choices=[s.value for s in SourceKind],
        default=SourceKind.PYTHON.value,
        help="python: built-in Python data source; kafka: Spark's connector (needs its jar)",
    )
    parser.add_argument(
        "--request-topic", dest="requests_topic", help="default: $KAFKA_TIMERS_REQUEST_TOPIC"
    )
    # The old spellings, kept for scripts: accepted, not shown.
    parser.add_argument(
        "--requests-topic", dest="requests_topic", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    parser.add_argument("--fired-topic", help="default: $KAFKA_TIMERS_FIRED_TOPIC")
    parser.add_argument(
        "--bootstrap-server",
        dest="bootstrap",
        metavar="HOST:PORT",
        help="the brokers, comma-separated (default: $KAFKA_BOOTSTRAP_SERVERS)",
    )
    parser.add_argument(
        "--bootstrap", dest="bootstrap", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        help="Kafka client properties (bootstrap.servers, security.protocol, sasl.*, "
        "ssl.*.location), over the environment and under --bootstrap-server",
    )
    parser.add_argument(
        "--max-offsets-per-partition",
        type=int,
        help="split each Kafka partition into Spark partitions of this many offsets",
    )
    parser.add_argument(
        "--kafka-option", action="append", help="source option name=value (repeatable)"
    )
    parser.add_argument("--conf", action="append", help="Spark setting name=value (repeatable)")
    parser.add_argument(
        "--max-listed",
        type=int,
        default=100,
        help="violations of each kind, records set aside for each reason, listed (100)",
    )
    parser.add_argument(
        "--max-set-aside",
        type=int,
        default=DEFAULT_MAX_SET_ASIDE,
        help=(
            "records the audit cannot read (fired topic) or timers it cannot judge, beyond "
            f"which the audit fails (exit 1) even without violations ({DEFAULT_MAX_SET_ASIDE})"
        ),
    )
    parser.add_argument("--quiet", action="store_true", help="print only the verdict line")
    parser.add_argument(
        "--spark-log-level",
        default="FATAL",
        choices=["ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"],
        help="Spark's log while it runs (FATAL: a failure is one line; ERROR shows traces)",
    )
    return parser


def parse_options(argv: list[str], now: float | None = None) -> AuditOptions:
    """Options from ``argv``; raise :class:`AuditError` for values that make no sense."""
    args = build_parser().parse_args(argv)
    try:
        as_of = float(parse_at(args.as_of)) if args.as_of else (now or time.time())
        grace = parse_duration(args.grace)
        since = _since(args.since, as_of)
    except InvalidTimeSpec as exc:
        raise AuditError(str(exc)) from exc
    if since is not None and since > as_of:
        raise AuditError("--since must not be after --as-of")
    if args.max_offsets_per_partition is not None and args.max_offsets_per_partition < 1:
        raise AuditError("--max-offsets-per-partition must be at least 1")
    if args.max_listed < 0:
        raise AuditError("--max-listed must not be negative")
    if args.max_set_aside < 0:
        raise AuditError("--max-set-aside must not be negative")
    return AuditOptions(
        as_of_ms=int(as_of * 1000),
        grace_ms=int(grace * 1000),
        since_ms=None if since is None else int(since * 1000),
        allow_duplicates=args.allow_duplicates,
        output_dir=args.output,
        tables_uri=args.tables_uri,
        master=args.master,
        source=SourceKind(args.source),
        requests_topic=args.requests_topic,
        fired_topic=args.fired_topic,
        bootstrap=args.bootstrap,
        command_config=args.command_config,
        max_offsets_per_partition=args.max_offsets_per_partition,
        kafka_options=_pairs(args.kafka_option, "--kafka-option"),
        spark_conf=_pairs(args.conf, "--conf"),
        max_listed=args.max_listed,
        max_set_aside=args.max_set_aside,
        quiet=args.quiet,
        spark_log_level=args.spark_log_level,
    )
