"""The one place that decides "bad record" or "broken system".

Whatever goes wrong while one request record is read, parsed, checked, stored or
answered is that record's problem unless it is *systemic*: the worker then stops
without acknowledging anything (exit 70) and a restart reads the record again. Every
other exception, a bug included, dead-letters the record with a reason and the worker
goes on with the next one. Getting this line wrong either way is expensive: a record
treated as a broken system kills every worker that reads it, in a loop; a broken system
treated as a bad record dead-letters good requests while the disk is full.

Systemic, and nothing else:

- :class:`~kafka_timers_client.errors.SystemicFailure` and its subclasses (a flush that times out,
  a changelog record the broker refused, a store that cannot be read or written);
- :class:`MemoryError`: the process, not the record, is out of room;
- running out of file descriptors (``EMFILE``, ``ENFILE``, RocksDB's "Too many open
  files"): so is the process or the host (:mod:`app.worker.descriptors`);
- anything that is not an :class:`Exception` (cancellation, ``SystemExit``,
  ``KeyboardInterrupt``): the worker is being stopped.
"""

from __future__ import annotations

import logging
import traceback

from app.worker.descriptors import is_out_of_descriptors
from kafka_timers_client.errors import RejectedRequest, RejectReason, SystemicFailure

__all__ = ["is_systemic", "rejection_for"]

log = logging.getLogger(__name__)

_SYSTEMIC: tuple[type[BaseException], ...] = (SystemicFailure, MemoryError)


def is_systemic(exc: BaseException) -> bool:
    """Whether ``exc`` means the worker cannot go on (see the module docstring)."""
    return (
        isinstance(exc, _SYSTEMIC) or not isinstance(exc, Exception) or is_out_of_descriptors(exc)
    )


def rejection_for(exc: Exception, where: str) -> tuple[RejectReason, str]:
    """The dead-letter reason and detail for a non-systemic ``exc`` raised by a record.

    A :class:`~kafka_timers_client.errors.RejectedRequest` carries its own. Anything else is a bug
    (``internal_error``): the detail and the log name the exception's class and where
    it was raised, never its message, which may quote the record's bytes; the log has
    the traceback (frames only) for whoever fixes it.
    """
    if isinstance(exc, RejectedRequest):
        return exc.reason, exc.detail
    name = type(exc).__name__
    frames = traceback.extract_tb(exc.__traceback__)
    at = f"{frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else "?"
    log.error(
        "internal error handling %s: %s at %s (the record is dead-lettered; please report)\n%s",
        where,
        name,
        at,
        "".join(traceback.format_list(frames)).rstrip(),
    )
    return RejectReason.INTERNAL_ERROR, f"{name} at {at}"
