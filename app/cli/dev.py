"""``kafka-timers demo`` and ``broker``: a whole stack, or the dev broker alone, on this machine."""

from __future__ import annotations

import argparse
from pathlib import Path

from app.cli.common import settings_for, stop_on_signals
from app.cli.parsing import AddCommand, positive_seconds
from kafka_timers_client.errors import KafkaTimersError

__all__ = ["cmd_broker", "cmd_demo", "register"]


def cmd_broker(args: argparse.Namespace) -> int:
    from app.dev.broker import DevBroker

    broker = DevBroker(args.port, quiet=not args.verbose).start()
    print(f"dev broker listening; export KAFKA_BOOTSTRAP_SERVERS={broker.bootstrap}", flush=True)
    stop = stop_on_signals(hangup=True)
    try:
        while not stop.wait(0.5):
            if broker.process is None or broker.process.poll() is not None:
                raise KafkaTimersError("dev broker exited unexpectedly")
    finally:
        broker.stop()
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from app.dev.demo import run_demo

    return run_demo(
        timers=args.timers,
        duration=args.duration,
        partitions=args.partitions,
        demo_file=Path(settings_for(args).demo_file),
    )


def register(command: AddCommand) -> None:
    """Add ``demo`` and ``broker``, in this order."""
    p = command(
        "demo",
        "dev broker + 2 oscillators + 2 workers on this machine; watch timers fire",
        "kafka-timers demo",
        "kafka-timers demo --timers 100 --duration 30",
        func=cmd_demo,
    )
    p.add_argument("--timers", type=int, default=36, help="timers the demo schedules")
    p.add_argument(
        "--duration",
        type=positive_seconds,
        default=None,
        metavar="SECONDS",
        help="stop after this many seconds once all fired (default: run until Ctrl-C)",
    )
    p.add_argument("--partitions", type=int, default=8, help="partitions of each service topic")

    p = command(
        "broker",
        "run the embedded dev broker (Tansu) in the foreground",
        "kafka-timers broker --port 9092",
        func=cmd_broker,
    )
    p.add_argument("--port", type=int, default=9092, help="port to listen on")
    p.add_argument("--verbose", action="store_true", help="show the broker's own log")
