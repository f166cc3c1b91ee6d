"""The parser's conventions: help with defaults and examples, one-line errors, seconds flags,
``--bootstrap-server`` and ``--command-config`` as Kafka's own tools spell them, and the
``command`` a group module adds each of its subcommands with."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

__all__ = [
    "KAFKA_COMMANDS",
    "MAX_FLAG_SECONDS",
    "AddCommand",
    "HelpFormatter",
    "Parser",
    "examples_epilog",
    "hidden_alias",
    "kafka_options",
    "positive_seconds",
    "release_version",
    "subcommand_adder",
    "timeout_flag",
]


#: Longest wait or timeout a flag takes, seconds (about 116 days): ``inf`` and
#: ``1e400`` overflowed librdkafka's milliseconds with a traceback, and ``nan`` made a
#: wait for the broker that never reached its deadline.
MAX_FLAG_SECONDS = 1e7


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text[:40]!r}") from None
    if not 0 < value <= MAX_FLAG_SECONDS:  # NaN fails it too
        raise argparse.ArgumentTypeError(
            f"must be more than 0 and at most {MAX_FLAG_SECONDS:,.0f} seconds, not {text[:40]}"
        )
    return value


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def release_version() -> str:
    """This release's version, from the installed package's metadata (pyproject.toml's
    ``version``; RELEASES lists each release's commit)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kafka-timers")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Each option's default in its help (unless it says one already), and the examples
    of an epilog kept as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default in (None, False, argparse.SUPPRESS)
            or not action.option_strings
        ):
            return text
        return f"{text} (default: %(default)s)"


def hidden_alias(p: argparse.ArgumentParser, flag: str, dest: str, **kwargs: Any) -> None:
    """An old spelling kept for scripts: accepted, not shown in the help."""
    p.add_argument(flag, dest=dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)


def kafka_options(p: argparse.ArgumentParser, *, top: bool = False) -> None:
    """``--bootstrap-server`` and ``--command-config``, as Kafka's own tools spell them.

    Taken both before and after the subcommand: neither level has a default of its own
    (``SUPPRESS``), so a subcommand's parser never overwrites what came before it."""
    where = "" if top else " (also before the subcommand)"
    p.add_argument(
        "--bootstrap-server",
        dest="bootstrap",
        metavar="HOST:PORT",
        default=argparse.SUPPRESS,
        help="the brokers, comma-separated (default: $KAFKA_BOOTSTRAP_SERVERS, else a running "
        f"demo's, else 127.0.0.1:9092){where}",
    )
    hidden_alias(p, "--bootstrap", "bootstrap")
    p.add_argument(
        "--command-config",
        dest="command_config",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help="Kafka client properties (bootstrap.servers, security.protocol, sasl.*, "
        f"ssl.*.location), over the environment and under the flags{where}",
    )


def timeout_flag(p: argparse.ArgumentParser, default: float, what: str) -> None:
    p.add_argument(
        "--timeout", type=positive_seconds, default=default, metavar="SECONDS", help=what
    )


def examples_epilog(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


#: The subcommands that talk to Kafka: each takes --bootstrap-server and
#: --command-config after its name too.
KAFKA_COMMANDS = (
    "topics",
    "preflight",
    "oscillator",
    "worker",
    "schedule",
    "cancel",
    "pause",
    "resume",
    "trigger",
    "backfill",
    "rate",
    "status",
    "get",
    "list",
    "cancel-bulk",
    "export",
    "import",
    "migrate",
    "audit",
)


class AddCommand(Protocol):
    """Adds one subcommand and returns its parser, for its flags.

    ``help_text`` is the line in ``kafka-timers --help`` and, capitalised, the
    subcommand's description; ``examples`` make its epilog. A subcommand named in
    :data:`KAFKA_COMMANDS` takes ``--bootstrap-server`` and ``--command-config`` too.
    ``func`` runs it: it takes the parsed arguments and returns the exit status."""

    def __call__(
        self,
        name: str,
        help_text: str,
        *examples: str,
        func: Callable[[argparse.Namespace], int],
        **kwargs: Any,
    ) -> argparse.ArgumentParser: ...


def subcommand_adder(sub: argparse._SubParsersAction[Any]) -> AddCommand:
    """The :class:`AddCommand` that adds subcommands to ``sub``."""

    def command(
        name: str,
        help_text: str,
        *examples: str,
        func: Callable[[argparse.Namespace], int],
        **kwargs: Any,
    ) -> Any:
        p = sub.add_parser(
            name,
            help=help_text,
            description=help_text[0].upper() + help_text[1:] + ".",
            formatter_class=HelpFormatter,
            epilog=examples_epilog(*examples) if examples else None,
            **kwargs,
        )
        if name in KAFKA_COMMANDS and name != "audit":
            kafka_options(p)
        p.set_defaults(func=func)
        return p

    return command
