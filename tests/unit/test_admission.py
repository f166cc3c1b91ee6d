"""The heavy views' share of the event loop, with a fake clock."""

from __future__ import annotations

from app.status.admission import LoopBudget
from tests.support.fake_clock import ManualClock as Clock


def test_work_is_admitted_until_the_budget_is_spent_then_refused_until_it_refills() -> None:
    clock = Clock()
    budget = LoopBudget(share=0.05, burst=0.05, clock=clock)
    admitted = 0
    while budget.admit():  # 10 ms each: the saved-up 50 ms, and what refills meanwhile
        admitted += 1
        with budget.spend():
            clock.now += 0.01
    assert admitted == 6 and budget.refused == 1
    clock.now += 0.4  # refills 20 ms
    assert budget.admit()
    with budget.spend():
        clock.now += 0.03  # one piece may overdraw...
    clock.now += 0.2
    assert not budget.admit()  # ...and the next waits until it is paid back
    clock.now += 0.5
    assert budget.admit()


def test_over_a_long_stretch_the_share_is_kept() -> None:
    clock = Clock()
    budget = LoopBudget(share=0.05, burst=0.05, clock=clock)
    spent = 0.0
    for _ in range(100_000):  # a request every 0.1 ms, each taking 0.2 ms when admitted
        if budget.admit():
            with budget.spend():
                clock.now += 0.0002
                spent += 0.0002
        clock.now += 0.0001
    elapsed = clock.now - 100.0
    assert spent <= 0.05 * elapsed + 0.05 + 0.0002
