"""Bounded exponential backoff, for a step that must be retried until it succeeds.

A worker that cannot finish a recovery step (a changelog catch-up that never reaches
the end of its partitions, a broker that answers nothing) does not give up and exit:
exiting loses nothing the next owner would not redo, but it turns a slow broker into
workers that restart in a loop, each time starting the same step over. It stays up,
not ready, and tries again: soon at first, then less and less often, never more than
:attr:`Backoff.maximum` apart, so it carries on within that much of the broker coming
back.

Each later attempt of a catch-up also lets the broker take longer over each fetch
(:func:`fetch_wait_ms`): a broker that needs longer than the wait to look through a
partition (the dev broker on a slow S3 store: every fetch lists every object of the
partition) answers a short wait with nothing at all, for ever.

Pure: the caller sleeps, and passes the randomness in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["CATCH_UP_FETCH_WAITS_MS", "Backoff", "fetch_wait_ms"]

#: The longest a catch-up fetch may wait at the broker, by attempt (the last repeats):
#: librdkafka reports a partition's end only after a fetch at the end has waited this
#: long, so the first attempt keeps it short (a takeover waits for it per partition).
CATCH_UP_FETCH_WAITS_MS: tuple[int, ...] = (10, 100, 500, 1000)


@dataclass(frozen=True)
class Backoff:
    """Delays between attempts: ``initial``, times ``factor`` each time, at most ``maximum``.

    ``jitter`` (0 to 1) takes up to that share off each delay at random, so that workers
    stalled by one broker do not retry in step.
    """

    initial: float = 1.0
    maximum: float = 30.0
    factor: float = 2.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if not 0 < self.initial <= self.maximum:
            raise ValueError(f"need 0 < initial <= maximum, got {self.initial}, {self.maximum}")
        if self.factor < 1:
            raise ValueError(f"factor must be at least 1, got {self.factor}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter must be within [0, 1], got {self.jitter}")

    def delay(self, retry: int, rand: Callable[[], float] | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first retry).

        ``rand`` returns a number in [0, 1) (``random.random``); without it, no jitter.
        """
        if retry < 1:
            raise ValueError(f"retries are numbered from 1, got {retry}")
        # Compared in logarithms: factor ** retry overflows a float long before a worker
        # that retries every 30 s for years gets there.
        if self.factor == 1 or (retry - 1) * math.log(self.factor) >= math.log(
            self.maximum / self.initial
        ):
            base = self.maximum if self.factor > 1 else self.initial
        else:
            base = self.initial * self.factor ** (retry - 1)
        if self.jitter and rand is not None:
            base -= base * self.jitter * rand()
        return base


def fetch_wait_ms(attempt: int, waits: Sequence[int] = CATCH_UP_FETCH_WAITS_MS) -> int:
    """The fetch wait of catch-up attempt ``attempt`` (1 for the first)."""
    if attempt < 1:
        raise ValueError(f"attempts are numbered from 1, got {attempt}")
    return waits[min(attempt, len(waits)) - 1]
