"""A callback librdkafka could not deliver comes back from ``take_failures`` with its
timer, on a real producer (one whose broker never answers, so every record times out
locally): the delivery report reaches the callback's own handler however ``produce`` is
called (every argument by position since the keywords' lookups were a third of it)."""

from __future__ import annotations

from app.core.timer import Timer
from app.worker.output import OutputProducer


def test_an_undelivered_callback_is_reported_with_its_timer() -> None:
    output = OutputProducer(
        {
            "bootstrap.servers": "127.0.0.1:1",  # nothing listens there
            "message.timeout.ms": 200,
            "socket.connection.setup.timeout.ms": 1000,
            "log_level": 0,
        },
        worker_id="w-1",
        fired_topic="fired",
        dlq_topic="dlq",
    )
    timers = [
        Timer(id=f"t{i}", due=100, topic="cb", key=b"k", value=b"v", token="tok") for i in range(3)
    ]
    for timer in timers:
        output.callback(timer, partition=0, fired_at_ms=100_000)
    output._producer.flush(10)  # the reports are served here: all three timed out
    failures = output.take_failures()
    assert sorted(t.id for t, _ in failures) == ["t0", "t1", "t2"]
    assert {t.id: t for t, _ in failures}["t1"] is timers[1]
    assert all("timed out" in error.lower() for _, error in failures)
    assert output.take_failures() == []  # taken once
