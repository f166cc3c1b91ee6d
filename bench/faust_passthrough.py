"""The Faust baseline: a plain agent that forwards each event with ``await topic.send``.

Run as its own process (``python -m bench.faust_passthrough``), configured by the
environment like a worker (:meth:`Settings.from_env`), with the same Faust settings the
worker uses where they matter for speed (broker, session, offset reset). It reads the
request topic and forwards every record, unchanged, to ``BENCH_PASSTHROUGH_OUT``: what
the simplest Faust service on this machine and broker does per event, measured in the
same run as the service it is compared with.

``BENCH_PASSTHROUGH_MODE=take`` instead takes batches with ``take_events``, as the
worker's request agent did before requests bypassed Faust, and sends one record per
batch: Faust's own per-event cost with nothing else in the loop (a diagnostic, not a
published figure).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import faust

from app.settings import Settings

__all__ = ["build_passthrough", "main"]


def build_passthrough(settings: Settings, out_topic: str, mode: str) -> faust.App:
    """The Faust app: one agent from the request topic to ``out_topic``."""
    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    app = faust.App(
        settings.app_id,
        broker=[f"kafka://{hp}" for hp in settings.bootstrap_servers.split(",")],
        datadir=settings.data_dir,
        web_enabled=False,
        topic_partitions=settings.partitions,
        broker_session_timeout=settings.session_timeout,
        broker_heartbeat_interval=settings.heartbeat_interval,
        consumer_auto_offset_reset="earliest",
        autodiscover=False,
        loghandlers=[],
    )
    source = app.topic(
        settings.topics.requests,
        key_serializer="raw",
        value_serializer="raw",
        partitions=settings.partitions,
    )
    sink = app.topic(
        out_topic, key_serializer="raw", value_serializer="raw", partitions=settings.partitions
    )

    if mode == "take":

        @app.agent(source, name="passthrough")
        async def take(stream: Any) -> None:
            async for events in stream.take_events(2000, within=0.02):
                await sink.send(key=b"batch", value=b"%d" % len(events))

    else:

        @app.agent(source, name="passthrough")
        async def forward(stream: Any) -> None:
            async for event in stream.events():
                await sink.send(key=event.message.key, value=event.message.value)

    return app


def main() -> None:
    settings = Settings.from_env()
    app = build_passthrough(
        settings,
        os.environ["BENCH_PASSTHROUGH_OUT"],
        os.environ.get("BENCH_PASSTHROUGH_MODE", "send"),
    )
    worker = faust.Worker(app, loglevel="warning", quiet=True)
    worker.execute_from_commandline()


if __name__ == "__main__":
    main()
