"""``Timer.__init__`` builds the instance's dict from a copy of the defaults: every field
given is what it reads back, every field is in the dict in the declared order (only
``debounce`` stays out of it when ``None``), and two timers built alike are equal."""

from __future__ import annotations

import pickle
from dataclasses import fields, replace

from app.core.debounce import Debounce
from app.core.timer import Timer, one_shot
from kafka_timers_client.late import LatePolicy
from kafka_timers_client.recurrence import Recurrence

NAMES = [f.name for f in fields(Timer)]


def test_a_plain_timer_holds_every_field_but_debounce_at_its_default() -> None:
    timer = Timer("a", 7, "t", None, b"v")
    assert list(vars(timer)) == [n for n in NAMES if n != "debounce"]
    assert vars(timer) == {
        "id": "a",
        "due": 7,
        "topic": "t",
        "key": None,
        "value": b"v",
        "token": "",
        "headers": (),
        "recurrence": None,
        "seq": 0,
        "fired_before": 0,
        "late": None,
        "spread": 0,
        "schema_id": None,
    }
    assert timer.debounce is None


def test_every_field_given_reads_back() -> None:
    given = {
        "id": "b",
        "due": 9,
        "topic": "t",
        "key": b"k",
        "value": None,
        "token": "s",
        "headers": (("h", b"1"),),
        "recurrence": Recurrence.interval(60, start=9),
        "seq": 2,
        "fired_before": 1,
        "late": LatePolicy(skip_after_ms=5),
        "spread": 30,
        "schema_id": 4,
        "debounce": Debounce(seconds=5, max_wait=None, first_ms=1, merged=2, last_offset=3),
    }
    timer = Timer(**given)  # type: ignore[arg-type]
    assert list(vars(timer)) == NAMES
    assert {n: getattr(timer, n) for n in NAMES} == given
    assert Timer(**given) == timer and hash(Timer(**given)) == hash(timer)  # type: ignore[arg-type]
    assert pickle.loads(pickle.dumps(timer)) == timer
    assert replace(timer, seq=0).seq == 0 and timer.seq == 2


def test_timers_do_not_share_a_dict() -> None:
    one, two = Timer("a", 1, "t", None, None), Timer("a", 1, "t", None, None, seq=3)
    assert one.seq == 0 and two.seq == 3 and vars(one) is not vars(two)


def test_one_shot_is_the_timer_init_builds() -> None:
    for args in (("a", 7, "t", None, b"v", ""), ("é", -1, "", b"k", None, "tok")):
        quick, built = one_shot(*args), Timer(*args)
        assert quick == built and hash(quick) == hash(built)
        assert vars(quick) == vars(built) and list(vars(quick)) == list(vars(built))
        assert type(quick) is Timer and quick.debounce is None
