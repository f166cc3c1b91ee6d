"""``kafka-timers oscillator`` and ``worker``: the service's two long-running processes."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from app.cli.common import settings_for, stop_on_signals
from app.cli.parsing import AddCommand, hidden_alias, timeout_flag

__all__ = ["cmd_oscillator", "cmd_worker", "register"]


def cmd_oscillator(args: argparse.Namespace) -> int:
    from oscillator.main import run_oscillator

    run_oscillator(settings_for(args), stop_on_signals(), timeout=args.timeout)
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

    settings = settings_for(args)
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


def _oscillator_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metrics-port", type=int, help="Prometheus port (default: none)")


def _worker_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data-dir",
        help="RocksDB directory, one per worker process (default: $KAFKA_TIMERS_DATA_DIR)",
    )
    p.add_argument("--web-port", type=int, help="status page port (default 6066)")
    p.add_argument("--metrics-port", type=int, help="Prometheus port (default: $METRICS_PORT)")
    p.add_argument("--loglevel", default="info", help="log level")


def _process(
    command: AddCommand,
    name: str,
    help_text: str,
    example: str,
    *,
    id_flag: str,
    id_help: str,
    flags: Callable[[argparse.ArgumentParser], None],
    timeout_help: str,
    func: Callable[[argparse.Namespace], int],
) -> None:
    """One process's subcommand: its id flag (``--id`` kept for scripts), its own
    ``flags``, and how long it waits for the broker at start."""
    p = command(name, help_text, example, func=func)
    p.add_argument(id_flag, dest="worker_id", help=id_help)
    hidden_alias(p, "--id", "worker_id")
    flags(p)
    timeout_flag(p, 15.0, timeout_help)


def register(command: AddCommand) -> None:
    """Add ``oscillator`` and ``worker``, in this order."""
    _process(
        command,
        "oscillator",
        "send one tick per second to every partition",
        "kafka-timers oscillator --oscillator-id osc-1 --metrics-port 9101",
        id_flag="--oscillator-id",
        id_help="name in logs and tick records (default: host-pid)",
        flags=_oscillator_flags,
        timeout_help="seconds to reach the broker at start",
        func=cmd_oscillator,
    )
    _process(
        command,
        "worker",
        "run a Faust worker that stores and fires timers",
        "kafka-timers worker --worker-id w1 --data-dir /var/lib/kafka-timers/w1",
        id_flag="--worker-id",
        id_help="worker id in logs, metrics and fired records (default: host-pid)",
        flags=_worker_flags,
        timeout_help="seconds for each call to the broker at start",
        func=cmd_worker,
    )
