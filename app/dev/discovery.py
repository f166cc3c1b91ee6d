"""Where a running demo is: the file through which ``kafka-timers demo`` tells the
other commands (``schedule``, ``cancel``, ``status``, ``get``, ``list``, ...) its
workers' URLs and its broker's address.

The demo starts its workers on free ports (never 6066, which a worker of the user's own
may hold), so without this a command in another shell would ask ``127.0.0.1:6066`` and
find nothing. The demo writes the file when its workers start and removes it when it
stops; a file left by a demo that was killed names a dead process id and is ignored.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["DemoStack", "read_demo_stack", "remove_demo_stack", "write_demo_stack"]


@dataclass(frozen=True)
class DemoStack:
    """What a command needs to reach the demo's stack."""

    #: Process id of the ``kafka-timers demo`` that wrote it: a dead one means a stale file.
    pid: int
    #: The dev broker's address (``KAFKA_BOOTSTRAP_SERVERS``).
    bootstrap: str
    #: The demo's app id (``KAFKA_TIMERS_APP_ID``).
    app_id: str
    #: Each worker's web URL, the root of its status page and ``/timers`` routes.
    workers: tuple[str, ...]
    #: Each worker's Prometheus ``/metrics`` URL.
    metrics: tuple[str, ...]
    #: The operator's credential the demo gave its workers, so that ``get`` and ``list``
    #: may look timers up (the file is readable by this user only).
    operator_token: str | None = field(default=None, repr=False)
    #: The control secret the demo gave its workers, so that ``pause``, ``resume``,
    #: ``rate`` and ``cancel-bulk`` aimed at its broker and app id can sign their records.
    control_secret: str | None = field(default=None, repr=False)


def write_demo_stack(path: Path, stack: DemoStack) -> None:
    """Write ``stack`` to ``path`` whole (a reader never sees half a file), readable
    only by this user."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(asdict(stack), out)
    os.replace(partial, path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def read_demo_stack(path: Path) -> DemoStack | None:
    """The running demo's stack, or ``None``: no file, a file that cannot be read, or
    one whose demo is no longer running."""
    try:
        doc = json.loads(path.read_text())
        stack = DemoStack(
            pid=int(doc["pid"]),
            bootstrap=str(doc["bootstrap"]),
            app_id=str(doc["app_id"]),
            workers=tuple(str(u) for u in doc["workers"]),
            metrics=tuple(str(u) for u in doc.get("metrics", ())),
            operator_token=str(doc["operator_token"]) if doc.get("operator_token") else None,
            control_secret=str(doc["control_secret"]) if doc.get("control_secret") else None,
        )
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    # A pid past what os.kill takes raised OverflowError (a file anyone may write).
    if not 0 < stack.pid < 2**31 or not stack.workers or not _alive(stack.pid):
        return None
    return stack


def remove_demo_stack(path: Path) -> None:
    """Remove ``path`` if this process wrote it (another demo may have started since)."""
    stack = read_demo_stack(path)
    if stack is not None and stack.pid == os.getpid():
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
