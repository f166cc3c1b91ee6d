"""Bounded logging: a broker that is away for an hour costs a few hundred lines, not
millions.

Every client of a worker (librdkafka's producer and consumers, aiokafka's under Faust)
reports each failed connection attempt: about 100 lines a second while the broker is
unreachable, 8 million a day, 75 MB in 78 minutes (measured). The lines differ only in
numbers (ports, milliseconds, counts), so :class:`RepeatFilter` lets the first line of
each *shape* (the message with its digits blanked) through, drops the repeats within a
window, and when the shape shows up again after the window says how many it dropped.
An outage is then one line per kind of failure, and a summary per kind per window.

The same handlers get :class:`~app.core.printable.EscapingFilter` first: a message that
quotes a record (an id, a topic, an oscillator name, a control key) is written with its
control characters escaped, one record one line.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable

from app.core.printable import EscapingFilter

__all__ = [
    "DEFAULT_WINDOW_SECONDS",
    "RepeatFilter",
    "install_escaping_filter",
    "install_repeat_filter",
]

#: Repeats of one shape within this many seconds are counted, not written.
DEFAULT_WINDOW_SECONDS = 60.0
#: Shapes remembered at once; past this the oldest window is forgotten (its count lost).
MAX_SHAPES = 1000
#: Characters of a message that make its shape.
SHAPE_CHARS = 160

_DIGITS = re.compile(r"\d+")


class RepeatFilter(logging.Filter):
    """Passes the first record of each shape per window; counts and later reports the rest."""

    def __init__(
        self,
        window: float = DEFAULT_WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._window = window
        self._clock = clock
        #: shape -> (window start, records dropped in it)
        self._seen: dict[tuple[str, int, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:
            return True
        shape = (record.name, record.levelno, _DIGITS.sub("#", text[:SHAPE_CHARS]))
        now = self._clock()
        seen = self._seen.get(shape)
        if seen is not None and now - seen[0] < self._window:
            self._seen[shape] = (seen[0], seen[1] + 1)
            return False
        if seen is not None and seen[1]:
            record.msg = f"{text} ({seen[1]} more like it in the last {now - seen[0]:.0f} s)"
            record.args = ()
        elif len(self._seen) >= MAX_SHAPES:
            del self._seen[next(iter(self._seen))]
        self._seen.pop(shape, None)
        self._seen[shape] = (now, 0)
        return True


def install_repeat_filter(
    logger: logging.Logger, repeat: RepeatFilter | None = None
) -> RepeatFilter:
    """Put one :class:`RepeatFilter` on every handler of ``logger`` (the root, once
    logging is set up): handlers see the records of every logger below it. An
    :class:`~app.core.printable.EscapingFilter` goes before it
    (:func:`install_escaping_filter`)."""
    install_escaping_filter(logger)
    repeat = repeat or RepeatFilter()
    for handler in logger.handlers:
        if not any(isinstance(f, RepeatFilter) for f in handler.filters):
            handler.addFilter(repeat)
    return repeat


def install_escaping_filter(logger: logging.Logger) -> None:
    """Put an :class:`~app.core.printable.EscapingFilter` first on every handler of
    ``logger`` (the root, once logging is set up), so no message reaches a handler with
    a raw control character."""
    for handler in logger.handlers:
        if not any(isinstance(f, EscapingFilter) for f in handler.filters):
            handler.filters.insert(0, EscapingFilter())
