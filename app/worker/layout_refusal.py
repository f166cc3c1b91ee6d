"""A stored timer in a layout newer than this release reads stops the worker: one line.

:class:`~app.core.stored.StoredLayoutTooNew` surfaces where a partition is loaded (every
stored timer's version is checked then, :meth:`app.core.wheel.PartitionWheel.recount`)
or a stored timer is read: in a tick, a request batch, or the assignment after a
rebalance (which reads the partition's request offset from its table). Left to Faust,
the tick agent logs a traceback and its supervisor restarts it, every ~6 s for ever:
that partition fires nothing from that timer on, and the other partitions' timers of
the same tick fire again at each restart (measured on 0.2.0 with a version-3 timer in
the changelog). So, wherever it surfaces: one critical line saying what and what to do,
and exit 78 at once, before anything of that partition is fired, forgotten or
acknowledged. A supervisor that restarts the worker gets the same line again until the
right release runs.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, NoReturn

from app.core.stored import StoredLayoutTooNew

__all__ = ["exit_if_layout_too_new", "install_layout_refusal"]

log = logging.getLogger(__name__)


def exit_if_layout_too_new(exc: BaseException | None) -> None:
    """Exit with one line if ``exc`` is (or was raised from) a too-new stored layout."""
    seen = 0
    while exc is not None and seen < 8:  # wrapped by whoever re-raised it on the way
        if isinstance(exc, StoredLayoutTooNew):
            _exit(exc)
        exc = exc.__cause__ or exc.__context__
        seen += 1


def _exit(exc: StoredLayoutTooNew) -> NoReturn:
    log.critical("kafka-timers worker stops (exit %d): %s", exc.exit_status, exc)
    logging.shutdown()
    os._exit(exc.exit_status)


def install_layout_refusal(loop: asyncio.AbstractEventLoop) -> None:
    """Make a too-new stored layout exit the worker wherever it surfaces: every Faust
    service, agent and task that crashes (``mode.Service.crash``) and every exception an
    event-loop callback leaves unhandled."""
    from mode import Service

    if not getattr(Service.crash, "_kafka_timers_layout_guarded", False):
        original = Service.crash

        async def crash(self: Any, reason: BaseException) -> None:
            exit_if_layout_too_new(reason)
            await original(self, reason)

        crash._kafka_timers_layout_guarded = True  # type: ignore[attr-defined]
        Service.crash = crash  # type: ignore[method-assign]

    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exit_if_layout_too_new(context.get("exception"))
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
