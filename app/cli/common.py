"""What the subcommands share: the settings a command runs with (environment, ``--command-config``,
flags, a running demo), the workers it asks, the signed control records it sends, and
stopping on a signal."""

from __future__ import annotations

import argparse
import signal
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.settings import Settings
from kafka_timers_client.errors import ConfigurationError, KafkaTimersError

__all__ = [
    "PROCESS_COMMANDS",
    "control_settings",
    "control_topic_name",
    "demo_settings",
    "operator_name",
    "send_control_record",
    "settings_for",
    "stop_on_signals",
    "worker_id_flag",
    "worker_urls",
]


PROCESS_COMMANDS = ("worker", "oscillator", "demo", "broker")


def settings_for(args: argparse.Namespace) -> Settings:
    """The environment's settings with ``--command-config`` over them and the command's
    flags over both, all checked; then, for a client command where neither chose a
    broker nor an app id, a running demo's (its discovery file)."""
    from app.kafka.command_config import read_command_config

    flags: dict[str, tuple[str, object | None]] = {}
    config_file = getattr(args, "command_config", None)
    if config_file is not None:
        flags.update(read_command_config(config_file))
    given = {
        "KAFKA_BOOTSTRAP_SERVERS": ("--bootstrap-server", getattr(args, "bootstrap", None)),
        "KAFKA_TIMERS_WORKER_ID": (worker_id_flag(args), getattr(args, "worker_id", None)),
        "KAFKA_TIMERS_DATA_DIR": ("--data-dir", getattr(args, "data_dir", None)),
        "KAFKA_TIMERS_WEB_PORT": ("--web-port", getattr(args, "web_port", None)),
        "METRICS_PORT": ("--metrics-port", getattr(args, "metrics_port", None)),
    }
    flags.update({var: given[var] for var in given if given[var][1] is not None})
    settings = Settings.from_env_and_flags(flags)
    if args.command in PROCESS_COMMANDS:
        return settings
    return demo_settings(settings, "KAFKA_BOOTSTRAP_SERVERS" in flags)


def worker_id_flag(args: argparse.Namespace) -> str:
    return "--oscillator-id" if args.command == "oscillator" else "--worker-id"


def demo_settings(settings: Settings, broker_named: bool) -> Settings:
    """``settings`` pointed at a running ``kafka-timers demo`` when nothing named a broker
    or an app id (not the environment, a flag or ``--command-config``): so the commands
    a newcomer types in another shell reach the demo with no flags."""
    from app.dev.discovery import read_demo_stack

    if broker_named or settings.chosen & {"KAFKA_BOOTSTRAP_SERVERS", "KAFKA_TIMERS_APP_ID"}:
        return settings
    demo = read_demo_stack(Path(settings.demo_file))
    if demo is None:
        return settings
    return replace(
        settings,
        bootstrap_servers=demo.bootstrap,
        app_id=demo.app_id,
        operator_token=settings.operator_token or demo.operator_token,
        chosen=settings.chosen | {"KAFKA_BOOTSTRAP_SERVERS", "KAFKA_TIMERS_APP_ID"},
    )


def stop_on_signals(*, hangup: bool = False) -> threading.Event:
    """An event set on Ctrl-C and SIGTERM, and with ``hangup`` on SIGHUP (the terminal
    closed) unless ``nohup`` made the process ignore it."""
    stop = threading.Event()

    def handler(_signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    if hangup and signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signal.signal(signal.SIGHUP, handler)
    return stop


def worker_urls(settings: Settings, args: argparse.Namespace) -> tuple[Settings, list[str]]:
    """The worker URLs a command asks, and the settings to read Kafka with.

    ``--url`` wins, then ``KAFKA_TIMERS_WEB_PORT`` (this host). Without either, a running
    ``kafka-timers demo`` (its discovery file, :mod:`app.dev.discovery`) gives its
    workers, and its broker, app id and operator credential unless the environment or
    ``--bootstrap`` chose them; a chosen broker or app id other than the demo's means
    another stack, and the demo is left out. Last comes the default port,
    ``127.0.0.1:6066``.
    """
    from app.dev.discovery import read_demo_stack

    given = [u.rstrip("/") for u in (getattr(args, "url", None) or [])]
    if given:
        return settings, given
    local = [f"http://127.0.0.1:{settings.web_port}"]
    if "KAFKA_TIMERS_WEB_PORT" in settings.chosen:
        return settings, local
    demo = read_demo_stack(Path(settings.demo_file))
    if demo is None:
        return settings, local
    chosen = settings.chosen
    if "KAFKA_BOOTSTRAP_SERVERS" in chosen and settings.bootstrap_servers != demo.bootstrap:
        return settings, local
    if "KAFKA_TIMERS_APP_ID" in chosen and settings.app_id != demo.app_id:
        return settings, local
    demo_settings = replace(
        settings,
        bootstrap_servers=demo.bootstrap,
        app_id=demo.app_id,
        operator_token=settings.operator_token or demo.operator_token,
    )
    return demo_settings, list(demo.workers)


def control_topic_name(text: str) -> str:
    from app.core.policy import is_legal_topic

    if not is_legal_topic(text):
        raise KafkaTimersError(f"--topic {text[:100]!r} is not a legal topic name")
    return text


def control_settings(args: argparse.Namespace) -> Settings:
    """The settings a control command sends and signs with. ``KAFKA_TIMERS_CONTROL_SECRET``
    set, the environment's and flags' alone. Unset, a running ``kafka-timers demo`` (its
    discovery file, readable by this user only) gives its secret, and its broker and app
    id unless the environment or ``--bootstrap`` chose others (then another stack: no
    secret, and the command says so)."""
    from app.dev.discovery import read_demo_stack

    settings = settings_for(args)
    if settings.control_secret is not None:
        return settings
    demo = read_demo_stack(Path(settings.demo_file))
    chosen = settings.chosen
    if (
        demo is None
        or not demo.control_secret
        or ("KAFKA_BOOTSTRAP_SERVERS" in chosen and settings.bootstrap_servers != demo.bootstrap)
        or ("KAFKA_TIMERS_APP_ID" in chosen and settings.app_id != demo.app_id)
    ):
        raise ConfigurationError(
            "KAFKA_TIMERS_CONTROL_SECRET is unset: the workers apply only control records "
            "signed with the deployment's control secret"
        )
    return replace(
        settings,
        bootstrap_servers=demo.bootstrap,
        app_id=demo.app_id,
        control_secret=demo.control_secret,
    )


def send_control_record(
    args: argparse.Namespace, key: bytes, value: bytes | None
) -> dict[str, Any]:
    """Write one signed record to the control topic (created if missing); what to print."""
    from app.kafka.control import send_control
    from app.kafka.topics import ensure_control_topic

    settings = control_settings(args)
    topic = ensure_control_topic(settings, timeout=args.timeout)
    offset = send_control(settings, key, value, timeout=args.timeout)
    return {"control_topic": topic, "key": key.decode(), "offset": offset}


def operator_name() -> str:
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except Exception:  # no user name in this environment
        user = "unknown"
    return f"{user}@{socket.gethostname()}"
