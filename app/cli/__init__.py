"""The ``kafka-timers`` command: one entry point, one subcommand per process or action.

Errors the user can fix are one line on stderr and exit status 2, never a traceback
(3 for a cancel that was sent but not answered in time: see ``CancelNotAnswered``).

Each group of subcommands is a module of this package with a ``register(command)``
that adds its subcommands (their flags, examples and ``cmd_*`` function);
:data:`GROUPS` lists the groups in the order ``kafka-timers --help`` shows them. A new
subcommand goes into the group it belongs to, or into a new module added to
:data:`GROUPS`; one that talks to Kafka is named in
:data:`~app.cli.parsing.KAFKA_COMMANDS` too.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from app.cli import admin, dev, extra, fleet, ops, preview, processes, requests
from app.cli.common import worker_urls as _worker_urls  # noqa: F401 (tests' name for it)
from app.cli.parsing import (
    KAFKA_COMMANDS,
    HelpFormatter,
    Parser,
    examples_epilog,
    kafka_options,
    release_version,
    subcommand_adder,
)
from app.core.printable import printable
from kafka_timers_client.errors import KafkaTimersError

__all__ = ["GROUPS", "KAFKA_COMMANDS", "build_parser", "main"]

#: The groups of subcommands, each a module with ``register(command)``, in the order
#: ``kafka-timers --help`` lists them.
GROUPS = (dev, admin, processes, requests, extra, preview, fleet, ops)


def _unreadable_argument(args: Sequence[str]) -> str | None:
    """The first of ``args`` that is not valid UTF-8, shown safely, or None.

    Bytes that are not UTF-8 reach Python as lone surrogates, which no Kafka client,
    URL or JSON can carry: every command that encoded one (an id, a topic, a header, a
    value) stopped with a traceback. Refused here, once, before anything is parsed."""
    for arg in args:
        try:
            arg.encode()
        except UnicodeEncodeError:
            try:  # the bytes as given (os.fsdecode's surrogateescape), escaped
                raw = arg.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:  # a surrogate no bytes made
                raw = arg.encode("utf-8", "backslashreplace")
            return raw.decode("utf-8", "backslashreplace")[:80]
    return None


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="kafka-timers",
        description="Durable one-second timers on Kafka.",
        formatter_class=HelpFormatter,
        epilog=examples_epilog(
            "kafka-timers demo                     # or make run: a whole stack on this machine",
            "kafka-timers schedule --topic payments-retry --key order-7 --in 30s",
            "kafka-timers <command> --help         # each command's flags and examples",
        ),
    )
    parser.add_argument("--version", action="version", version=f"kafka-timers {release_version()}")
    kafka_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="<command>", parser_class=Parser)
    command = subcommand_adder(sub)
    for group in GROUPS:
        group.register(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    unreadable = _unreadable_argument(sys.argv[1:] if argv is None else argv)
    if unreadable is not None:
        print(f"kafka-timers: error: an argument is not valid UTF-8: {unreadable}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    if args.command is None:  # a bare kafka-timers: what it can do
        parser.print_help()
        return 2
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from app.worker.log_limits import install_escaping_filter

    install_escaping_filter(logging.getLogger())  # record text never reaches a log raw
    try:
        result: int = args.func(args)
        return result
    except KafkaTimersError as exc:
        # One line whatever the message holds (a value quoted from the environment).
        print(f"kafka-timers: error: {printable(' '.join(str(exc).splitlines()))}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        return 130
