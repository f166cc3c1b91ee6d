"""``kafka-timers export``: every pending timer of a deployment, as JSON lines.

Read from the deployment's changelog (:mod:`app.ops.snapshot`), so it works with the
workers running or stopped; see there for what the snapshot is consistent with.

An export holds every timer's cancel token: whoever reads the file can cancel any of
them. :func:`export_to_file` writes it readable by its owner only (mode 0600), to a
temporary file in the same directory that replaces the named file only once complete:
an export that fails (no broker, a full disk) leaves the file that was there, byte for
byte, and never a half-written one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import TextIO

from app.ops.jsonl import encode_line
from app.ops.snapshot import Snapshot, read_snapshot
from app.settings import Settings

__all__ = ["EXPORT_MODE", "export_timers", "export_to_file", "summary"]

#: An export's file mode: its owner's only (it holds every cancel token).
EXPORT_MODE = 0o600


def export_timers(settings: Settings, out: TextIO, timeout: float = 120.0) -> Snapshot:
    """Write one line per pending timer of ``settings``' deployment to ``out``."""
    snapshot = read_snapshot(settings, timeout)
    _write(snapshot, out)
    return snapshot


def _write(snapshot: Snapshot, out: TextIO) -> None:
    for pending in snapshot.timers:
        out.write(encode_line(pending.timer, pending.partition))
        out.write("\n")
    out.flush()


def export_to_file(settings: Settings, path: Path, timeout: float = 120.0) -> Snapshot:
    """Export to ``path``, atomically and with mode 0600 (see the module's doc).

    The changelog is read first, then written to a temporary file in ``path``'s
    directory (created 0600), flushed to disk and renamed over ``path``; on any failure
    the temporary file is removed and ``path`` is untouched.
    """
    snapshot = read_snapshot(settings, timeout)
    directory = path.parent
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        os.fchmod(fd, EXPORT_MODE)  # mkstemp's mode already; said once more, on purpose
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            _write(snapshot, out)
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    with contextlib.suppress(OSError):  # the rename itself, durable
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return snapshot


def summary(snapshot: Snapshot) -> dict[str, object]:
    """What an export found, for its one line on stderr."""
    return {
        "timers": len(snapshot.timers),
        "series": snapshot.series,
        "partitions": snapshot.partitions,
        "changelog": snapshot.topic,
        "changelog_records": snapshot.records,
        "request_offsets": {str(p): o for p, o in sorted(snapshot.request_offsets.items())},
    }
