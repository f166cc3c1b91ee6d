"""Clocks a unit test moves by hand, for code that takes its clock as a callable."""

from __future__ import annotations

__all__ = ["Clocks", "ManualClock"]


class ManualClock:
    """A clock that stands still until the test moves :attr:`now`; called, it reads it."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Clocks:
    """A wall clock (:attr:`now`) and a monotonic one (:attr:`mono`) moved together."""

    def __init__(self, now: float, mono: float) -> None:
        self.now = now
        self.mono = mono

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.mono += seconds
