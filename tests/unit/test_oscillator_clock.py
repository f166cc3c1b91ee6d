from oscillator.clock import current_second, wait_for_second


class FakeTime:
    """A clock that moves only when someone sleeps on it."""

    def __init__(self, now: float, oversleep: float = 0.0, undersleep: float = 0.0) -> None:
        self.now = now
        self.oversleep = oversleep
        self.undersleep = undersleep
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        self.sleeps.append(seconds)
        early = self.undersleep if seconds > self.undersleep else 0.0
        self.now += seconds - early + self.oversleep
        return False


def test_waits_until_the_boundary() -> None:
    t = FakeTime(99.25)
    assert wait_for_second(100, t.clock, t.wait) == 100.0
    assert t.sleeps == [0.75]


def test_a_sleep_that_wakes_early_never_ticks_early() -> None:
    t = FakeTime(99.0, undersleep=0.3)
    reached = wait_for_second(100, t.clock, t.wait)
    assert reached is not None and reached >= 100
    assert len(t.sleeps) > 1


def test_stop_interrupts_the_wait() -> None:
    assert wait_for_second(100, lambda: 99.0, lambda _s: True) is None


def test_current_second() -> None:
    assert current_second(lambda: 100.999) == 100
