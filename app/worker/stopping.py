"""The worker's process: it stops within its grace whether or not the broker answers,
and its log stays bounded while the broker is away.

Faust stops a worker by stopping each service in turn, and several of them (the
consumer's commit, the producer's flush, the group's leave) wait on the broker: with the
broker gone, a worker sent SIGTERM logged "Stopping..." and was still there 30 s later
(measured), until the orchestrator's SIGKILL. :class:`TimersWorker` arms a watchdog when
the first stop signal arrives: if the orderly stop has not finished within
``stop_grace`` seconds, the process exits at once, with status 0 and one line. Nothing
is lost by that: the worker acknowledges requests and ticks only after what they caused
is durable, and RocksDB's log survives an exit, so whatever was in flight is read again
by the next owner.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

import faust

from app.worker.log_limits import install_repeat_filter

__all__ = ["DEFAULT_STOP_GRACE_SECONDS", "TimersWorker"]

log = logging.getLogger(__name__)

#: Seconds an orderly stop may take before the worker exits regardless (Kubernetes
#: waits 30 s by default before SIGKILL).
DEFAULT_STOP_GRACE_SECONDS = 10.0

#: The watchdog fires this much before the grace ends (at most a tenth of it), so that
#: the process is gone within the grace, its own teardown included (measured without:
#: 5.1 s from SIGTERM to exit with a 5 s grace).
EXIT_MARGIN_SECONDS = 0.5


class TimersWorker(faust.Worker):  # type: ignore[misc]
    """Faust's worker, with a bounded stop and a bounded log, and no terminal spinner."""

    def __init__(
        self,
        *args: Any,
        stop_grace: float = DEFAULT_STOP_GRACE_SECONDS,
        on_stop: Callable[[], None] | None = None,
        **kw: Any,
    ):
        super().__init__(*args, **kw)
        #: Called once, when the first stop signal arrives (on the event loop), before
        #: Faust begins stopping its services: the timer service then starts no new
        #: round (:meth:`app.worker.service.TimerService.begin_stopping`).
        self._on_stop = on_stop
        # Faust's spinner turns once per log record of any level: at --loglevel warning
        # or above it puts the root logger at DEBUG (so that it has records to turn on)
        # and each library's debug call then builds, formats and filters a record that
        # no handler prints. An idle worker spent 0.3-0.8% of a core on that alone
        # (aiokafka formats a FetchRequest per fetch), and the spinner's escape codes
        # ended up in log files. Without it the root logger keeps the level asked for.
        self.spinner = None
        self._stop_grace = stop_grace
        self._watchdog: threading.Timer | None = None

    def on_setup_root_logger(self, logger: logging.Logger, level: int) -> None:
        super().on_setup_root_logger(logger, level)
        install_repeat_filter(logger)

    def _schedule_shutdown(self, signum: signal.Signals) -> None:
        if self._watchdog is None and self._on_stop is not None:
            try:
                self._on_stop()
            except Exception:  # the stop goes on whatever the hook does
                log.exception("preparing the timer service to stop failed")
        if self._watchdog is None:
            fire_in = self._stop_grace - min(EXIT_MARGIN_SECONDS, self._stop_grace / 10)
            self._watchdog = threading.Timer(fire_in, self._out_of_grace, [signum])
            self._watchdog.daemon = True
            self._watchdog.start()
        super()._schedule_shutdown(signum)

    def _out_of_grace(self, signum: signal.Signals) -> None:
        sys.stderr.write(
            f"kafka-timers worker: {signal.Signals(signum).name} received, its "
            f"{self._stop_grace:g} s grace nearly over, and the orderly stop has not "
            "finished (is the broker away?): exiting now; nothing acknowledged is lost\n"
        )
        sys.stderr.flush()
        os._exit(0)
