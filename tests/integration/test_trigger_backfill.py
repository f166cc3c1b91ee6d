"""``kafka-timers trigger`` and ``backfill`` (and the client's) against a real worker and
oscillator on the broker: what each fires, once each, now and never early."""

from __future__ import annotations

import json
import time
import uuid
from itertools import pairwise

from app.dev.stack import wait_until_firing
from app.kafka.records import Record
from kafka_timers_client.client import TimerClient
from kafka_timers_client.extra_fires import MAX_BACKFILL, backfill_id
from kafka_timers_client.outcome import BackfillOutcome, TriggerOutcome
from tests.support.cli import run_cli
from tests.support.stack import Stack

#: Generous: 2 shared cores; an answer comes in ~50 ms when the machine is idle.
ANSWER_WAIT = 30.0
FIRE_TIMEOUT = 60.0


def callbacks(records: list[Record], prefix: str) -> list[Record]:
    """The callbacks whose ``timer-id`` is ``prefix`` or starts with ``prefix@``."""
    out = []
    for record in records:
        timer_id = (record.header("timer-id") or b"").decode()
        if timer_id == prefix or timer_id.startswith(prefix + "@"):
            out.append(record)
    return out


def header(record: Record, name: str) -> str | None:
    value = record.header(name)
    return None if value is None else value.decode()


def test_trigger_fires_a_one_shot_once_now_and_a_series_one_extra_occurrence(
    stack: Stack,
) -> None:
    topic = stack.callback_topic("triggered")
    stack.oscillator()
    stack.worker()
    client = TimerClient(stack.settings)
    wait_until_firing(stack.settings, client, topic)
    tag = uuid.uuid4().hex[:8]
    one = client.schedule(topic, b"one", delay=20, timer_id=f"one-{tag}", token="tok")
    guarded = client.schedule(topic, b"no", delay=600, timer_id=f"guarded-{tag}", token="tok")
    hb = client.schedule(topic, b"hb", every=5, timer_id=f"hb-{tag}", token="tok")
    client.flush()
    with stack.reader(topic) as reader:
        # The series' first occurrence: it runs.
        reader.wait_for(lambda rs: len(callbacks(rs, hb.id)) >= 1, FIRE_TIMEOUT)
        sent = time.time()
        result = run_cli(stack.settings, "trigger", "--id", one.id, "--token", "tok")
        answered = time.time()
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == {"id": one.id, "outcome": "triggered"}
        fired = reader.wait_for(lambda rs: callbacks(rs, one.id), FIRE_TIMEOUT)
        [now] = callbacks(fired, one.id)
        arrived = time.time()
        # The callback it would have had at its second, long before that second.
        assert now.value == b"one" and header(now, "timer-due") == str(one.due)
        triggered_at = int(header(now, "timer-trigger") or 0)
        assert int(sent) - 1 <= triggered_at <= arrived
        assert arrived < one.due - 5, "it waited for its second"
        print(
            f"\ntrigger one-shot: answered in {answered - sent:.2f}s (CLI process included), "
            f"callback {arrived - sent:.2f}s after the command, {one.due - arrived:.1f}s "
            "before its second"
        )
        # A series: one extra occurrence now, then its schedule goes on.
        before = len(callbacks(reader.records, hb.id))
        t0 = time.time()
        assert client.trigger(hb.id, "tok", wait=ANSWER_WAIT) is TriggerOutcome.TRIGGERED
        reader.wait_for(
            lambda rs: any("@trigger:" in (header(r, "timer-id") or "") for r in rs),
            FIRE_TIMEOUT,
        )
        print(f"trigger series: extra occurrence {time.time() - t0:.2f}s after the call")
        # Refused and unknown: answered, nothing fires.
        refused = run_cli(stack.settings, "trigger", "--id", guarded.id, "--token", "nope")
        assert refused.returncode == 2 and refused.stdout == ""
        assert refused.stderr.count("\n") == 1 and "token does not match" in refused.stderr
        assert client.trigger(guarded.id, "nope", wait=ANSWER_WAIT) is TriggerOutcome.WRONG_TOKEN
        assert client.trigger(f"nobody-{tag}", "tok", wait=ANSWER_WAIT) is TriggerOutcome.NOT_FOUND
        assert client.trigger(one.id, "tok", wait=ANSWER_WAIT) is TriggerOutcome.ALREADY_FIRED
        # Past the one-shot's own second, and two more occurrences of the series.
        reader.wait_for(
            lambda rs: len(callbacks(rs, hb.id)) >= before + 3 and time.time() > one.due + 2,
            FIRE_TIMEOUT,
        )
        records = reader.records
    client.close()
    assert len(callbacks(records, one.id)) == 1, "the one-shot fired again at its second"
    assert callbacks(records, guarded.id) == []
    series = callbacks(records, hb.id)
    extras = [r for r in series if header(r, "timer-trigger") is not None]
    assert len(extras) == 1 and header(extras[0], "timer-seq") is None
    assert (header(extras[0], "timer-id") or "").startswith(f"{hb.id}@trigger:")
    seqs = [int(header(r, "timer-seq") or 0) for r in series if r not in extras]
    assert seqs == list(range(1, len(seqs) + 1)), "the series' schedule changed"
    dues = [int(header(r, "timer-due") or 0) for r in series if r not in extras]
    assert {b - a for a, b in pairwise(dues)} == {5}


def test_backfill_fires_each_occurrence_of_the_window_once_through_the_rate_limit(
    stack: Stack,
) -> None:
    free = stack.callback_topic("backfilled")
    limited = stack.callback_topic("backfilled-limited")
    stack.oscillator()
    stack.worker(topic_rate_limits=((limited, 20.0),))
    client = TimerClient(stack.settings)
    wait_until_firing(stack.settings, client, free)
    tag = uuid.uuid4().hex[:8]
    start = (int(time.time()) // 10 + 360) * 10  # an hour out: no occurrence of its own
    series = client.schedule(free, b"bf", every=10, start=start, timer_id=f"bf-{tag}", token="t")
    slow = client.schedule(limited, b"bf", every=1, start=start, timer_id=f"slow-{tag}", token="t")
    client.flush()
    low = start - 3600 - 500  # [low, low + 500): 50 occurrences of the 10 s grid
    expected = {low + 10 * i for i in range(50)}
    with stack.reader(free) as reader:
        sent = time.time()
        result = run_cli(
            stack.settings,
            "backfill",
            *("--id", series.id, "--token", "t", "--from", str(low), "--to", str(low + 500)),
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == {
            "id": series.id,
            "outcome": "backfilled",
            "window": [low, low + 500],
        }
        reader.wait_for(lambda rs: len(callbacks(rs, series.id)) >= 50, FIRE_TIMEOUT)
        print(f"\nbackfill of 50: all delivered {time.time() - sent:.2f}s after the command")
        # The same window again fires nothing again; a trigger after it is the barrier.
        again = client.backfill(series.id, "t", low, low + 500, wait=ANSWER_WAIT)
        assert again is BackfillOutcome.BACKFILLED
        assert client.trigger(series.id, "t", wait=ANSWER_WAIT) is TriggerOutcome.TRIGGERED
        reader.wait_for(
            lambda rs: any(header(r, "timer-trigger") for r in callbacks(rs, series.id)),
            FIRE_TIMEOUT,
        )
        records = callbacks(reader.records, series.id)
    backfilled = [r for r in records if header(r, "timer-backfill") is not None]
    assert len(backfilled) == 50, "each occurrence exactly once"
    assert {int(header(r, "timer-backfill") or 0) for r in backfilled} == expected
    for record in backfilled:
        second = int(header(record, "timer-backfill") or 0)
        assert header(record, "timer-id") == backfill_id(series.id, second)
        assert header(record, "timer-due") == str(second)
        assert int(header(record, "timer-fired-at") or 0) >= sent * 1000 - 1000
    # A window over the bound: one line, a non-zero exit, nothing fired.
    too_wide = run_cli(
        stack.settings,
        "backfill",
        *("--id", series.id, "--token", "t"),
        *("--from", str(low - 10 * MAX_BACKFILL), "--to", str(low + 1)),
    )
    assert too_wide.returncode == 2 and too_wide.stdout == ""
    assert too_wide.stderr.count("\n") == 1
    assert "holds more than 10,000 occurrences" in too_wide.stderr
    # Through the topic's rate limit like any callback: 200 at 20/s take about 10 s.
    with stack.reader(limited) as reader:
        t0 = time.time()
        outcome = client.backfill(slow.id, "t", low, low + 200, wait=ANSWER_WAIT)
        assert outcome is BackfillOutcome.BACKFILLED
        reader.wait_for(lambda rs: len(callbacks(rs, slow.id)) >= 200, FIRE_TIMEOUT)
        got = callbacks(reader.records, slow.id)
    client.close()
    fired_at = sorted(int(header(r, "timer-fired-at") or 0) for r in got)
    spread_s = (fired_at[-1] - fired_at[0]) / 1000
    print(
        f"backfill of 200 to a topic limited to 20/s: delivered over {spread_s:.1f}s "
        f"({199 / max(spread_s, 0.001):.1f}/s), all in {time.time() - t0:.1f}s"
    )
    assert len(got) == 200 and len({header(r, "timer-id") for r in got}) == 200
    assert spread_s >= 199 / 20 * 0.8, "the rate limit did not hold back the backfill"
