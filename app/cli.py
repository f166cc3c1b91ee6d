"""The ``kafka-timers`` command: one entry point, one subcommand per process or action.

Errors the user can fix are one line on stderr and exit status 2, never a traceback
(3 for a cancel that was sent but not answered in time: see ``CancelNotAnswered``).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any, NoReturn

from app.cli_preview import add_calendar_options, add_preview_command, calendar_options
from app.core.errors import ConfigurationError, KafkaTimersError
from app.core.printable import printable
from app.settings import Settings

__all__ = ["main"]


#: Seconds ``cancel --wait`` waits for the answer when given no number.
DEFAULT_CANCEL_WAIT = 10.0
#: How far back ``get`` searches the fired topic when no worker gives a due second.
DEFAULT_GET_SINCE = "1d"


#: Longest wait or timeout a flag takes, seconds (about 116 days): ``inf`` and
#: ``1e400`` overflowed librdkafka's milliseconds with a traceback, and ``nan`` made a
#: wait for the broker that never reached its deadline.
MAX_FLAG_SECONDS = 1e7


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text[:40]!r}") from None
    if not 0 < value <= MAX_FLAG_SECONDS:  # NaN fails it too
        raise argparse.ArgumentTypeError(
            f"must be more than 0 and at most {MAX_FLAG_SECONDS:,.0f} seconds, not {text[:40]}"
        )
    return value


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


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


#: Commands that run a part of a deployment: they never adopt a running demo's broker
#: unasked (a worker started in another shell must not join the demo by accident).
_PROCESS_COMMANDS = ("worker", "oscillator", "demo", "broker")


def _settings(args: argparse.Namespace) -> Settings:
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
        "KAFKA_TIMERS_WORKER_ID": (_worker_id_flag(args), getattr(args, "worker_id", None)),
        "KAFKA_TIMERS_DATA_DIR": ("--data-dir", getattr(args, "data_dir", None)),
        "KAFKA_TIMERS_WEB_PORT": ("--web-port", getattr(args, "web_port", None)),
        "METRICS_PORT": ("--metrics-port", getattr(args, "metrics_port", None)),
    }
    flags.update({var: given[var] for var in given if given[var][1] is not None})
    settings = Settings.from_env_and_flags(flags)
    if args.command in _PROCESS_COMMANDS:
        return settings
    return _demo_settings(settings, "KAFKA_BOOTSTRAP_SERVERS" in flags)


def _worker_id_flag(args: argparse.Namespace) -> str:
    return "--oscillator-id" if args.command == "oscillator" else "--worker-id"


def _demo_settings(settings: Settings, broker_named: bool) -> Settings:
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


def _stop_on_signals(*, hangup: bool = False) -> threading.Event:
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


def _worker_urls(settings: Settings, args: argparse.Namespace) -> tuple[Settings, list[str]]:
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


def cmd_broker(args: argparse.Namespace) -> int:
    from app.dev.broker import DevBroker

    broker = DevBroker(args.port, quiet=not args.verbose).start()
    print(f"dev broker listening; export KAFKA_BOOTSTRAP_SERVERS={broker.bootstrap}", flush=True)
    stop = _stop_on_signals(hangup=True)
    try:
        while not stop.wait(0.5):
            if broker.process is None or broker.process.poll() is not None:
                raise KafkaTimersError("dev broker exited unexpectedly")
    finally:
        broker.stop()
    return 0


def cmd_topics(args: argparse.Namespace) -> int:
    from app.kafka.topics import ensure_topics, resolve_partitions, service_topics

    settings = resolve_partitions(_settings(args), timeout=args.timeout)
    ensure_topics(settings, timeout=args.timeout)
    print(json.dumps({"partitions": settings.partitions, "topics": list(service_topics(settings))}))
    return 0


def cmd_preflight(args: argparse.Namespace) -> int:
    from app.kafka.topics import resolve_partitions
    from app.ops.preflight import Summary, run_preflight

    settings = resolve_partitions(_settings(args), timeout=args.timeout)
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


def cmd_oscillator(args: argparse.Namespace) -> int:
    from oscillator.main import run_oscillator

    run_oscillator(_settings(args), _stop_on_signals(), timeout=args.timeout)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:

    from app.kafka.topic_config import record_budget, tombstone_retention_seconds
    from app.kafka.topics import ensure_topics, resolve_partitions
    from app.status.health import probes_on_loop, register_health_views
    from app.status.views import register_status_views
    from app.telemetry import serve_metrics
    from app.worker.descriptors import install_descriptor_guard, prepare_descriptors
    from app.worker.faust_app import build_worker
    from app.worker.layout_refusal import install_layout_refusal
    from app.worker.startup import StartupProbe, until_broker_answers
    from app.worker.stopping import TimersWorker
    from app.worker.web_limits import install_web_limits

    settings = _settings(args)
    # A broker that does not answer at start is waited for, not given up on: the worker
    # stays up, not ready, with probes and metrics on its metrics port meanwhile.
    probe = StartupProbe(settings.metrics_port, settings.metrics_bind)
    try:
        settings = until_broker_answers(
            "partition count of the service topics",
            lambda: resolve_partitions(settings, timeout=args.timeout),
            probe,
        )
        # Before any store opens: raise the open-file limit, refuse if it cannot do.
        prepare_descriptors(settings.partition_count, settings.web_max_connections)
        configs = until_broker_answers(
            "service topics", lambda: ensure_topics(settings, timeout=args.timeout), probe
        )
        worker_app = build_worker(
            settings,
            tombstone_retention=tombstone_retention_seconds(configs[settings.changelog_topic]),
            max_record_bytes=record_budget(settings, configs),
        )
    except BaseException:
        probe.close()
        raise
    register_status_views(worker_app.app, worker_app.service, worker_app.metrics, settings)
    register_health_views(worker_app.app, worker_app.health, worker_app.service)
    install_web_limits(worker_app.app, settings)
    worker = TimersWorker(
        worker_app.app,
        loglevel=args.loglevel,
        quiet=True,
        stop_grace=settings.stop_grace_seconds,
        on_stop=worker_app.service.begin_stopping,
    )
    probe.close()  # the worker's own server takes the metrics port over at once
    serve_metrics(
        settings.metrics_port,
        worker_app.metrics.registry,
        # Probes outside the web port's connection cap, answered by the event loop.
        checks=probes_on_loop(worker.loop, worker_app.health, worker_app.service),
        addr=settings.metrics_bind,
    )
    install_descriptor_guard(worker.loop)
    install_layout_refusal(worker.loop)
    worker.execute_from_commandline()
    return 0


def cmd_schedule(args: argparse.Namespace) -> int:
    from app.client import TimerClient
    from app.core.due import parse_at, parse_duration
    from app.core.late import LatePolicy

    settings = _settings(args)
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
    from app.client import TimerClient
    from app.kafka.topics import wait_for_broker

    settings = _settings(args)
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


def _control_topic_name(text: str) -> str:
    from app.core.policy import is_legal_topic

    if not is_legal_topic(text):
        raise KafkaTimersError(f"--topic {text[:100]!r} is not a legal topic name")
    return text


def _control_settings(args: argparse.Namespace) -> Settings:
    """The settings a control command sends and signs with. ``KAFKA_TIMERS_CONTROL_SECRET``
    set, the environment's and flags' alone. Unset, a running ``kafka-timers demo`` (its
    discovery file, readable by this user only) gives its secret, and its broker and app
    id unless the environment or ``--bootstrap`` chose others (then another stack: no
    secret, and the command says so)."""
    from app.dev.discovery import read_demo_stack

    settings = _settings(args)
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


def _send_control(args: argparse.Namespace, key: bytes, value: bytes | None) -> dict[str, Any]:
    """Write one signed record to the control topic (created if missing); what to print."""
    from app.kafka.control import send_control
    from app.kafka.topics import ensure_control_topic

    settings = _control_settings(args)
    topic = ensure_control_topic(settings, timeout=args.timeout)
    offset = send_control(settings, key, value, timeout=args.timeout)
    return {"control_topic": topic, "key": key.decode(), "offset": offset}


def _operator_name() -> str:
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except Exception:  # no user name in this environment
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _pause_timer(args: argparse.Namespace, action: str) -> int:
    """``pause`` / ``resume --id --token``: the timer's owner, through the request topic
    (answered on the fired topic like a cancel)."""
    from app.client import TimerClient
    from app.kafka.topics import wait_for_broker

    if args.token is None:
        raise KafkaTimersError(f"{action} --id needs --token (the token it was scheduled with)")
    settings = _settings(args)
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
    topic = _control_topic_name(args.topic)
    key, value = pause_record(topic, by=_operator_name(), at_ms=int(time.time() * 1000))
    print(json.dumps({"topic": topic, "paused": True, **_send_control(args, key, value)}))
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    from app.core.control import PAUSE

    _one_target(args, "resume")
    if args.timer_id is not None:
        return _pause_timer(args, "resume")
    topic = _control_topic_name(args.topic)
    out = _send_control(args, f"{PAUSE}{topic}".encode(), None)  # a tombstone clears it
    print(json.dumps({"topic": topic, "paused": False, **out}))
    return 0


def _pause_arguments(p: argparse.ArgumentParser, done: str, refused: str) -> None:
    p.add_argument("--topic", help="callback topic (an operator: every timer to it)")
    p.add_argument("--id", dest="timer_id", help="one timer or series (its owner)")
    p.add_argument("--token", help="with --id: the token it was scheduled with")
    p.add_argument(
        "--wait",
        nargs="?",
        type=_positive_seconds,
        const=DEFAULT_CANCEL_WAIT,
        metavar="SECONDS",
        help=f"with --id: wait for the answer and print it: {done}, {refused} "
        f"(default {DEFAULT_CANCEL_WAIT:g} s; exit 3 if none came)",
    )
    p.add_argument(
        "--timeout", type=_positive_seconds, default=10.0, help="seconds to reach the broker"
    )


def cmd_rate(args: argparse.Namespace) -> int:
    import time

    from app.core.control import RATE, rate_record
    from app.settings import parse_topic_rate_limits

    topic = _control_topic_name(args.topic)
    if args.clear:
        out = _send_control(args, f"{RATE}{topic}".encode(), None)
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
    key, value = rate_record(topic, per_second, by=_operator_name(), at_ms=int(time.time() * 1000))
    print(json.dumps({"topic": topic, "per_second": per_second, **_send_control(args, key, value)}))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from app.dev.demo import run_demo

    return run_demo(
        timers=args.timers,
        duration=args.duration,
        partitions=args.partitions,
        demo_file=Path(_settings(args).demo_file),
    )


def cmd_status(args: argparse.Namespace) -> int:
    from app.status.cli import status_main

    settings, args.url = _worker_urls(_settings(args), args)
    return status_main(settings, args)


def cmd_get(args: argparse.Namespace) -> int:
    from app.status.timer_state import get_main

    settings, args.url = _worker_urls(_settings(args), args)
    return get_main(settings, args)


def _filter_from_args(args: argparse.Namespace) -> Any:
    import math

    from app.core.due import parse_at
    from app.core.timer_filter import TimerFilter

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

    settings, urls = _worker_urls(_settings(args), args)
    flt = _filter_from_args(args)
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

    flt = _filter_from_args(args)
    if flt == TimerFilter():
        raise KafkaTimersError(
            "cancel-bulk needs at least one filter (--topic, --key, --key-prefix, "
            "--id-prefix, --due-from, --due-to, --series)"
        )
    settings = _control_settings(args)
    ensure_control_topic(settings, timeout=args.timeout)
    result = bulk_cancel(
        settings,
        flt,
        dry_run=args.dry_run,
        wait=args.wait,
        by=_operator_name(),
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


def _deployment(settings: Settings, app_id: str | None, request_topic: str | None) -> Settings:
    """``settings`` with another deployment's app id and request topic, where given."""
    from dataclasses import replace

    topics = settings.topics
    if request_topic is not None:
        topics = replace(topics, requests=request_topic)
    return replace(settings, app_id=app_id or settings.app_id, topics=topics)


def cmd_export(args: argparse.Namespace) -> int:
    from app.ops.export import export_timers, export_to_file, summary

    settings = _deployment(_settings(args), args.app_id, None)
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

    settings = _deployment(_settings(args), None, args.request_topic)
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

    source = _deployment(_settings(args), args.from_app_id, args.from_request_topic)
    target = _deployment(
        replace(source, bootstrap_servers=args.to_bootstrap or source.bootstrap_servers),
        None,
        args.to_request_topic,
    )

    def progress(event: dict[str, object]) -> None:
        print(json.dumps(event), flush=True)

    report = migrate(
        source,
        target,
        stop=_stop_on_signals(),
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


def release_version() -> str:
    """This release's version, from the installed package's metadata (pyproject.toml's
    ``version``; RELEASES lists each release's commit)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kafka-timers")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
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


def _hidden_alias(p: argparse.ArgumentParser, flag: str, dest: str, **kwargs: Any) -> None:
    """An old spelling kept for scripts: accepted, not shown in the help."""
    p.add_argument(flag, dest=dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)


def _kafka_options(p: argparse.ArgumentParser, *, top: bool = False) -> None:
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
    _hidden_alias(p, "--bootstrap", "bootstrap")
    p.add_argument(
        "--command-config",
        dest="command_config",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help="Kafka client properties (bootstrap.servers, security.protocol, sasl.*, "
        f"ssl.*.location), over the environment and under the flags{where}",
    )


def _timeout(p: argparse.ArgumentParser, default: float, what: str) -> None:
    p.add_argument(
        "--timeout", type=_positive_seconds, default=default, metavar="SECONDS", help=what
    )


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def _filter_flags(p: argparse.ArgumentParser) -> None:
    """The filters of ``list`` and ``cancel-bulk`` (app.core.timer_filter)."""
    p.add_argument("--topic", help="callback topic")
    key = p.add_mutually_exclusive_group()
    key.add_argument("--key", help="callback key, exactly")
    key.add_argument("--key-prefix", help="callback keys starting with this")
    p.add_argument("--id-prefix", help="timer ids starting with this")
    p.add_argument("--due-from", help="due at or after (epoch s or ISO 8601)")
    p.add_argument("--due-to", help="due at or before (epoch s or ISO 8601)")
    p.add_argument("--series", action="store_true", help="series only")


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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kafka-timers",
        description="Durable one-second timers on Kafka.",
        formatter_class=_HelpFormatter,
        epilog=_examples(
            "kafka-timers demo                     # or make run: a whole stack on this machine",
            "kafka-timers schedule --topic payments-retry --key order-7 --in 30s",
            "kafka-timers <command> --help         # each command's flags and examples",
        ),
    )
    parser.add_argument("--version", action="version", version=f"kafka-timers {release_version()}")
    _kafka_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="<command>", parser_class=_Parser)

    def command(name: str, help_text: str, *examples: str, **kwargs: Any) -> Any:
        p = sub.add_parser(
            name,
            help=help_text,
            description=help_text[0].upper() + help_text[1:] + ".",
            formatter_class=_HelpFormatter,
            epilog=_examples(*examples) if examples else None,
            **kwargs,
        )
        if name in KAFKA_COMMANDS and name != "audit":
            _kafka_options(p)
        return p

    p = command(
        "demo",
        "dev broker + 2 oscillators + 2 workers on this machine; watch timers fire",
        "kafka-timers demo",
        "kafka-timers demo --timers 100 --duration 30",
    )
    p.add_argument("--timers", type=int, default=36, help="timers the demo schedules")
    p.add_argument(
        "--duration",
        type=_positive_seconds,
        default=None,
        metavar="SECONDS",
        help="stop after this many seconds once all fired (default: run until Ctrl-C)",
    )
    p.add_argument("--partitions", type=int, default=8, help="partitions of each service topic")
    p.set_defaults(func=cmd_demo)

    p = command(
        "broker",
        "run the embedded dev broker (Tansu) in the foreground",
        "kafka-timers broker --port 9092",
    )
    p.add_argument("--port", type=int, default=9092, help="port to listen on")
    p.add_argument("--verbose", action="store_true", help="show the broker's own log")
    p.set_defaults(func=cmd_broker)

    p = command(
        "topics",
        "create the service topics (all with one partition count)",
        "kafka-timers topics --bootstrap-server kafka:9092 --command-config admin.properties",
    )
    _timeout(p, 15.0, "seconds to reach the broker")
    p.set_defaults(func=cmd_topics)

    p = command(
        "config",
        "list every setting: its variable, its value from the environment and its default "
        "(secrets masked); a bad value stops it as it would stop a process",
        "kafka-timers config",
    )
    p.set_defaults(func=cmd_config)

    p = command(
        "preflight",
        "check a cluster before deploying, for one principal's role: the topics, their "
        "settings, the callback topics, and the permissions the broker reports; print what "
        "is missing and how to fix it",
        "kafka-timers preflight --bootstrap-server kafka:9092 --command-config worker.properties",
        "kafka-timers preflight --role producer --command-config producer.properties",
        "kafka-timers preflight --callback-topic payments-retry --callback-topic 'reminders-*'",
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
    _timeout(p, 15.0, "seconds to reach the broker")
    p.set_defaults(func=cmd_preflight)

    p = command(
        "oscillator",
        "send one tick per second to every partition",
        "kafka-timers oscillator --oscillator-id osc-1 --metrics-port 9101",
    )
    p.add_argument(
        "--oscillator-id",
        dest="worker_id",
        help="name in logs and tick records (default: host-pid)",
    )
    _hidden_alias(p, "--id", "worker_id")
    p.add_argument("--metrics-port", type=int, help="Prometheus port (default: none)")
    _timeout(p, 15.0, "seconds to reach the broker at start")
    p.set_defaults(func=cmd_oscillator)

    p = command(
        "worker",
        "run a Faust worker that stores and fires timers",
        "kafka-timers worker --worker-id w1 --data-dir /var/lib/kafka-timers/w1",
    )
    p.add_argument(
        "--worker-id",
        dest="worker_id",
        help="worker id in logs, metrics and fired records (default: host-pid)",
    )
    _hidden_alias(p, "--id", "worker_id")
    p.add_argument(
        "--data-dir",
        help="RocksDB directory, one per worker process (default: $KAFKA_TIMERS_DATA_DIR)",
    )
    p.add_argument("--web-port", type=int, help="status page port (default 6066)")
    p.add_argument("--metrics-port", type=int, help="Prometheus port (default: $METRICS_PORT)")
    p.add_argument("--loglevel", default="info", help="log level")
    _timeout(p, 15.0, "seconds for each call to the broker at start")
    p.set_defaults(func=cmd_worker)

    p = command(
        "schedule",
        "schedule a timer or a series; print its id, token and (first) due second",
        "kafka-timers schedule --topic payments-retry --key order-7 --value '{\"attempt\":2}' "
        "--in 30s",
        "kafka-timers schedule --topic reminders --value hi --at 2026-12-24T09:00:00Z "
        "--id remind-42 --token s3cret",
        "kafka-timers schedule --topic digest --cron '0 0 9 * * MON-FRI' --tz Europe/Paris",
        "kafka-timers schedule --topic heartbeat --every 30s --count 100 --late 'skip-after 10s'",
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
        "--spread",
        help="fire at a second in [due, due + spread] fixed by the id, e.g. 60s (at most 1d; "
        "default: none)",
    )
    p.add_argument(
        "--id",
        dest="timer_id",
        help="timer id (default: random; scheduling an id again replaces it)",
    )
    p.add_argument("--token", help="cancellation token (default: random)")
    p.add_argument("--header", action="append", help="callback header name=value (repeatable)")
    _timeout(p, 10.0, "seconds to reach the broker and send")
    p.set_defaults(func=cmd_schedule)
    add_calendar_options(p)
    add_preview_command(command)

    p = command(
        "cancel",
        "cancel a timer by id and token; --wait prints what the worker did",
        "kafka-timers cancel --id remind-42 --token s3cret --wait",
        "kafka-timers cancel --id remind-42 --tombstone",
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
        type=_positive_seconds,
        nargs="?",
        const=DEFAULT_CANCEL_WAIT,
        metavar="SECONDS",
        help="wait for the answer and print it: cancelled, already_fired, wrong_token, "
        f"cancelled_in_advance or not_found (default {DEFAULT_CANCEL_WAIT:g} s; "
        "exit 3 if none came)",
    )
    _timeout(p, 10.0, "seconds to reach the broker")
    p.set_defaults(func=cmd_cancel)

    p = command(
        "pause",
        "hold callbacks: --topic every callback to a topic (an operator, through the control "
        "topic; records are signed with KAFKA_TIMERS_CONTROL_SECRET), or --id --token one "
        "timer or series (its owner)",
        "kafka-timers pause --topic reminders",
        "kafka-timers pause --id remind-42 --token s3cret --wait",
    )
    _pause_arguments(p, "paused", "wrong_token, already_fired or not_found")
    p.set_defaults(func=cmd_pause)

    p = command(
        "resume",
        "deliver a paused topic (--topic) or timer (--id --token) again: what came due "
        "meanwhile goes out first, by its late policy",
        "kafka-timers resume --topic reminders",
        "kafka-timers resume --id remind-42 --token s3cret --wait",
    )
    _pause_arguments(p, "resumed", "wrong_token, already_fired or not_found")
    p.set_defaults(func=cmd_resume)

    p = command(
        "rate",
        "set a callback topic's rate limit while the service runs (control topic)",
        "kafka-timers rate --topic reminders --limit 500/s",
        "kafka-timers rate --topic reminders --clear",
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
    _timeout(p, 10.0, "seconds to reach the broker")
    p.set_defaults(func=cmd_rate)

    p = command(
        "status",
        "pending, fires, lateness and ticks of running workers",
        "kafka-timers status",
        "kafka-timers status --url http://w1:6066 --url http://w2:6066 --json",
        "kafka-timers status --next 10",
    )
    p.add_argument(
        "--url", action="append", help="worker web URL (repeatable; default: a running demo's)"
    )
    p.add_argument("--json", action="store_true", help="print the merged numbers as JSON")
    p.add_argument("--id", dest="timer", metavar="ID", help="look one timer up on every worker")
    _hidden_alias(p, "--timer", "timer", metavar="ID")
    p.add_argument("--next", type=int, metavar="N", help="the next N due timers over all workers")
    p.set_defaults(func=cmd_status)

    p = command(
        "get",
        "one timer's state: pending (next due second), fired (when) or cancelled",
        "kafka-timers get --id remind-42",
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
    _timeout(p, 30.0, "seconds for reading the fired topic")
    p.set_defaults(func=cmd_get)

    p = command(
        "list",
        "pending timers matching filters, on every worker (--url), one JSON line each, "
        "without tokens or payloads (needs KAFKA_TIMERS_OPERATOR_TOKEN, or a running demo)",
        "kafka-timers list --topic reminders",
        "kafka-timers list --key-prefix customer-42/ --count-only",
    )
    p.add_argument(
        "--url", action="append", help="worker web URL (repeatable; default: a running demo's)"
    )
    _filter_flags(p)
    p.add_argument(
        "--count-only", dest="count_only", action="store_true", help="print only how many match"
    )
    _hidden_alias(p, "--count", "count_only", action="store_true")
    p.set_defaults(func=cmd_list)

    p = command(
        "cancel-bulk",
        "cancel every pending timer matching filters, on every worker, through the "
        "control topic; prints how many (--dry-run: only counts)",
        "kafka-timers cancel-bulk --topic reminders --key-prefix customer-42/ --dry-run",
        "kafka-timers cancel-bulk --topic reminders --due-to 2027-01-01T00:00:00Z",
    )
    _filter_flags(p)
    p.add_argument("--dry-run", action="store_true", help="count what would be cancelled")
    p.add_argument(
        "--wait",
        type=_positive_seconds,
        default=120.0,
        metavar="SECONDS",
        help="seconds to wait for every partition's answer (exit 3 past it)",
    )
    _timeout(p, 10.0, "seconds to reach the broker")
    p.set_defaults(func=cmd_cancel_bulk)

    p = command(
        "export",
        "write every pending timer (one-shot and series) as JSON lines",
        "kafka-timers export -o timers.jsonl",
    )
    p.add_argument("--app-id", help="the deployment's app id (default: $KAFKA_TIMERS_APP_ID)")
    p.add_argument("--output", "-o", help="file to write (default: stdout)")
    _timeout(p, 120.0, "seconds to read the changelog")
    p.set_defaults(func=cmd_export)

    p = command(
        "import",
        "send the timers of an export to a deployment (idempotent)",
        "kafka-timers import -i timers.jsonl --request-topic timer-request",
    )
    p.add_argument("--input", "-i", help="export file to read (default: stdin)")
    p.add_argument(
        "--request-topic",
        help="the deployment's request topic (default: $KAFKA_TIMERS_REQUEST_TOPIC)",
    )
    _timeout(p, 30.0, "seconds to reach the broker and send")
    p.set_defaults(func=cmd_import)

    p = command(
        "migrate",
        "move every pending timer to another deployment (more partitions, another "
        "cluster), then bridge the old request topic to the new one until stopped",
        "kafka-timers migrate --to-request-topic timer-request-v2 --idle-exit 300",
        "kafka-timers migrate --to-request-topic timer-request --to-bootstrap-server new:9092",
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
    _hidden_alias(p, "--to-bootstrap", "to_bootstrap")
    p.add_argument(
        "--idle-exit",
        type=_positive_seconds,
        metavar="SECONDS",
        help="stop once the old request topic has been quiet this long (default: run until "
        "SIGTERM or Ctrl-C)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="go on although the old workers' consumer group has members",
    )
    _timeout(p, 120.0, "seconds for each step")
    p.set_defaults(func=cmd_migrate)

    # Everything after "audit" (flags included) belongs to the audit's own parser, which
    # takes --bootstrap-server and --command-config too.
    p = command(
        "audit",
        "PySpark audit of requested vs fired timers",
        add_help=False,
        prefix_chars="\x00",
    )
    p.add_argument("audit_args", nargs=argparse.REMAINDER, help="see kafka-timers audit --help")
    p.set_defaults(func=cmd_audit)
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


if __name__ == "__main__":
    sys.exit(main())
