"""The cost of the fire-time checks, A/B in the same process and run.

When a timer comes due the worker checks it again under the rules it runs with now (the
allow-list, the deny-list, the payload limit: :meth:`TimerService._refused_at_fire`),
collects the tick's callback topics to find any that do not exist
(:meth:`TimerService._look_up_topics`; the directory already knows them, as in steady
state), and writes a digest of the token, not the token, on the fired topic
(:func:`app.core.fired.token_digest`). Those three are timed per timer over the same
timers, alternating with a pass of the same loop that does none of them, best of
several passes each. The difference is set beside the worker's CPU per timer fired in
this run's ingest scenario: the target is at most 5% of it. In-process CPU time, so the
figure hardly moves with the machine's other load.

The same for routing: a request already on its id's owner partition pays the
owner check (:func:`app.core.routing.owner_of` and a comparison) and the hop-marker test
on its headers; timed over the same requests with and without them, set beside the
worker's CPU per request stored in this run's ingest scenario (target: at most 5%).

The checks that keep deployments apart (control records, tokens, idempotent
forwarding), target at most 2% each, timed the same way:

- a request on its owner partition: the control-suffix refusal of its callback topic, the
  token rule (a replace needs the stored token) and the ``timer-hop`` test of a record
  that carries an ordinary header (:func:`app.core.routing.split_hop`);
- a forwarded request: the signature of its copy (:func:`app.core.routing.hop_value` with
  the deployment's secret) and its check on the owner, with the replay test
  (:func:`app.core.routing.is_replayed`), against the unsigned hop of before. Only a
  request read off its owner pays them, and it already pays a second read, parse and
  produce, so the cost is set beside the worker's CPU per *forwarded* request stored in
  this run's hop scenario (:func:`bench.hop.per_forwarded_us`); its share of a request
  on its owner is printed beside it. The floor is two keyed hashes of the copy (one to
  sign, one to check; keyed BLAKE2b, the standard library's one-pass MAC): about 13,000
  instructions, 1.3 µs here, of the 25,800 the signed hop costs (callgrind);
- a timer fired: the control-suffix refusal among the rules checked again.

The ``A`` and ``O`` keys are one write per partition per unit of work (thousands of
requests), not per request, and are left out.

``python -m bench.belonging`` prints the figures alone.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Collection
from dataclasses import replace

from app.core.fired import token_digest
from app.core.policy import CONTROL_SUFFIX, RequestPolicy
from app.core.raw_record import RawRecord
from app.core.routing import hop_value, is_replayed, owner_of, split_hop
from app.core.timer import Timer
from app.worker.metrics import WorkerMetrics
from app.worker.service import TimerService
from app.worker.topic_directory import TopicDirectory
from bench.context import RunContext, ScenarioResult
from bench.report import Figure

__all__ = [
    "control_suffix_cost_us",
    "fire_check_cost_us",
    "forwarded_cost_us",
    "owner_request_cost_us",
    "routing_cost_us",
    "run",
]

START = 1_767_225_600
#: Timers per pass, passes per variant.
TIMERS, PASSES = 50_000, 9
#: Share of the worker's CPU per timer fired the checks may cost.
TARGET_SHARE = 0.05
#: The same for the checks that keep deployments apart (control, tokens, forwarding).
ROUND_TWO_SHARE = 0.02
#: A deployment secret, as KAFKA_TIMERS_CONTROL_SECRET holds one.
SECRET = "bench-" + "s" * 26
#: Callback topics the timers spread over (a tick's timers name a few).
TOPICS = ("orders", "payments", "reminders", "erasure")


def _timers(count: int) -> list[Timer]:
    return [
        Timer(
            id=f"belong-{i:09d}",
            due=START,
            topic=TOPICS[i % len(TOPICS)],
            key=b"%d" % i,
            value=b'{"order": 42, "pad": "' + b"x" * 60 + b'"}',
            token=secrets.token_hex(8),
        )
        for i in range(count)
    ]


class _NoOutput:
    transactional = False


def _service() -> TimerService:
    def list_topics(_timeout: float) -> Collection[str]:
        return TOPICS

    service = TimerService(
        policy=RequestPolicy.build(
            allow_patterns=(".*",),
            deny_patterns=("legacy-.*",),
            own_topics=("ticks", "requests", "fired", "dlq"),
            app_id="bench",
            max_payload_bytes=900_000,
            horizon_seconds=10 * 366 * 86400,
        ),
        output=_NoOutput(),  # type: ignore[arg-type]  # nothing is written for allowed timers
        metrics=WorkerMetrics(),
        stores=None,  # type: ignore[arg-type]
        topics=TopicDirectory(list_topics),
    )
    asyncio.run(service._look_up_topics(_timers(len(TOPICS))))  # steady state: all seen
    return service


def _checked(service: TimerService, timers: list[Timer]) -> float:
    started = time.process_time()
    asyncio.run(service._look_up_topics(timers))
    refused = service._refused_at_fire
    for timer in timers:
        if not refused(timer, 0):
            token_digest(timer.token)
    return time.process_time() - started


def _unchecked(timers: list[Timer]) -> float:
    started = time.process_time()
    asyncio.run(asyncio.sleep(0))
    for timer in timers:
        if timer.token is None:
            raise AssertionError
    return time.process_time() - started


def fire_check_cost_us(timers: int = TIMERS, passes: int = PASSES) -> tuple[float, float]:
    """Best CPU µs per timer ``(checked, unchecked)`` over alternating passes."""
    batch = _timers(timers)
    service = _service()
    checked, unchecked = [], []
    for _ in range(passes):
        checked.append(_checked(service, batch))
        unchecked.append(_unchecked(batch))
    return min(checked) / timers * 1e6, min(unchecked) / timers * 1e6


def _routed(ids: list[str], partitions: int) -> float:
    started = time.process_time()
    stray = 0
    for timer_id in ids:
        if owner_of(timer_id, partitions) != 0:
            stray += 1
    return time.process_time() - started


def _unrouted(ids: list[str]) -> float:
    started = time.process_time()
    stray = 0
    for timer_id in ids:
        if timer_id is None:
            stray += 1
    return time.process_time() - started


def routing_cost_us(requests: int = TIMERS, passes: int = PASSES) -> tuple[float, float]:
    """Best CPU µs per request ``(routed, unrouted)``: the owner check of a request id as
    the worker makes it, over alternating passes."""
    ids = [f"order-{i:012d}-{secrets.token_hex(4)}" for i in range(requests)]
    routed, unrouted = [], []
    for _ in range(passes):
        routed.append(_routed(ids, 8))
        unrouted.append(_unrouted(ids))
    return min(routed) / requests * 1e6, min(unrouted) / requests * 1e6


def _records(count: int) -> list[RawRecord]:
    """Requests as they arrive: one ordinary header each (a trace context, say), so the
    hop test reads the headers rather than skipping an empty tuple."""
    value = b"\x0a\x06orders\x12\x04body" + b"x" * 60
    return [
        RawRecord(
            "requests",
            0,
            i,
            START * 1000,
            b"order-%012d" % i,
            value,
            (("traceparent", b"00-%032x-%016x-01" % (i, i)),),
        )
        for i in range(count)
    ]


def _owner_checked(records: list[RawRecord], tokens: list[str]) -> float:
    started = time.process_time()
    for record, token in zip(records, tokens, strict=True):
        split_hop(record, 8, SECRET)
        if record.topic.endswith(CONTROL_SUFFIX):
            raise AssertionError
        if token and token != record.topic:  # the token rule's comparison
            pass
    return time.process_time() - started


def _owner_unchecked(records: list[RawRecord], tokens: list[str]) -> float:
    started = time.process_time()
    for record, token in zip(records, tokens, strict=True):
        if record is None or token is None:
            raise AssertionError
    return time.process_time() - started


def owner_request_cost_us(requests: int = TIMERS, passes: int = PASSES) -> tuple[float, float]:
    """Best CPU µs per request on its owner ``(checked, unchecked)``: the control, token
    and hop checks."""
    records = _records(requests)
    tokens = [secrets.token_hex(8) for _ in records]
    checked, unchecked = [], []
    for _ in range(passes):
        checked.append(_owner_checked(records, tokens))
        unchecked.append(_owner_unchecked(records, tokens))
    return min(checked) / requests * 1e6, min(unchecked) / requests * 1e6


def _hopped(records: list[RawRecord], secret: str | None) -> float:
    """Forward (the hop's value) and receive (its check, and with a secret the replay
    test) every record, as the forwarder and the owner each do once per copy."""
    started = time.process_time()
    applied: dict[int, int] = {}
    for record in records:
        hop = hop_value(record, secret)
        copy = RawRecord(
            record.topic,
            1,
            record.offset,
            record.timestamp_ms,
            record.key,
            record.value,
            (*record.headers, ("timer-hop", hop)),
        )
        _, origin = split_hop(copy, 8, secret)
        if origin is None:
            raise AssertionError("the bench's copy was not read as one")
        if secret is not None:
            is_replayed(origin, applied)
    return time.process_time() - started


def forwarded_cost_us(requests: int = TIMERS, passes: int = PASSES) -> tuple[float, float]:
    """Best CPU µs per forwarded request ``(signed, unsigned)``: the signed hop and the
    replay test against the hop of before."""
    records = _records(requests)
    signed, unsigned = [], []
    for _ in range(passes):
        signed.append(_hopped(records, SECRET))
        unsigned.append(_hopped(records, None))
    return min(signed) / requests * 1e6, min(unsigned) / requests * 1e6


def _suffix_checked(topics: list[str]) -> float:
    started = time.process_time()
    for topic in topics:
        if topic.endswith(CONTROL_SUFFIX):
            raise AssertionError
    return time.process_time() - started


def _suffix_unchecked(topics: list[str]) -> float:
    started = time.process_time()
    for topic in topics:
        if topic is None:
            raise AssertionError
    return time.process_time() - started


def control_suffix_cost_us(timers: int = TIMERS, passes: int = PASSES) -> tuple[float, float]:
    """Best CPU µs per timer fired ``(checked, unchecked)``: the control-suffix refusal."""
    topics = [TOPICS[i % len(TOPICS)] for i in range(timers)]
    checked, unchecked = [], []
    for _ in range(passes):
        checked.append(_suffix_checked(topics))
        unchecked.append(_suffix_unchecked(topics))
    return min(checked) / timers * 1e6, min(unchecked) / timers * 1e6


def _share_figure(
    name: str,
    with_us: float,
    without_us: float,
    whole_us: float | None,
    whole: str,
    per: str,
    target: float = TARGET_SHARE,
) -> Figure:
    """The cost ``with_us - without_us`` set beside ``whole_us`` of this run (target: at
    most ``target`` of it)."""
    cost = max(0.0, with_us - without_us)
    baseline = f"with {with_us:.2f} µs, without {without_us:.2f} µs"
    met: bool | None = None
    if whole_us:
        share = cost / whole_us
        baseline += f"; {share:.1%} of the worker's {whole_us:.1f} µs per {per}"
        met = share <= target
    return Figure(
        "belonging",
        name,
        f"+{cost:.2f} µs",
        baseline,
        f"≤ {target:.0%} of {whole} CPU per {per.split()[0]}",
        met,
        value=cost,
    )


def _forwarded_figure(signed: float, unsigned: float, ctx: RunContext) -> Figure:
    """The signed hop's cost beside the CPU of the request that pays it: a forwarded
    request stored (the hop scenario's, this run), with its share of a request on its
    owner (ingest's) shown too. Without the hop scenario's figure (``--only``), beside
    ingest's alone, the stricter comparison."""
    forwarded_cpu = ctx.baselines.forwarded_cpu_us
    if not forwarded_cpu:
        return _share_figure(
            "signed hop and replay test, a forwarded request (CPU)",
            signed,
            unsigned,
            ctx.baselines.ingest_cpu_us,
            "ingest",
            "request",
            ROUND_TWO_SHARE,
        )
    figure = _share_figure(
        "signed hop and replay test, a forwarded request (CPU)",
        signed,
        unsigned,
        forwarded_cpu,
        "forwarded request",
        "forwarded request stored",
        ROUND_TWO_SHARE,
    )
    owner_cpu = ctx.baselines.ingest_cpu_us
    if owner_cpu:
        cost = max(0.0, signed - unsigned)
        figure = replace(
            figure,
            baseline=f"{figure.baseline}; {cost / owner_cpu:.1%} of one on its owner's "
            f"{owner_cpu:.1f} µs",
        )
    return replace(figure, target=f"≤ {ROUND_TWO_SHARE:.0%} of a forwarded request's CPU")


def run(ctx: RunContext) -> ScenarioResult:
    ctx.say("belonging: the fire-time checks with and without, in process")
    with_checks, without = fire_check_cost_us()
    figure = _share_figure(
        "fire-time checks per timer: rules again, topic exists, token digest (CPU)",
        with_checks,
        without,
        ctx.baselines.fire_cpu_us,
        "fire",
        "timer fired",
    )
    routed, unrouted = routing_cost_us()
    routing_figure = _share_figure(
        "routing by id, a request already on its owner partition (CPU)",
        routed,
        unrouted,
        ctx.baselines.ingest_cpu_us,
        "ingest",
        "request",
    )
    owner, owner_plain = owner_request_cost_us()
    signed, unsigned = forwarded_cost_us()
    suffix, suffix_plain = control_suffix_cost_us()
    round_two = [
        _share_figure(
            "control, token and hop checks, a request on its owner (CPU)",
            owner,
            owner_plain,
            ctx.baselines.ingest_cpu_us,
            "ingest",
            "request",
            ROUND_TWO_SHARE,
        ),
        _forwarded_figure(signed, unsigned, ctx),
        _share_figure(
            "control-suffix refusal per timer fired (CPU)",
            suffix,
            suffix_plain,
            ctx.baselines.fire_cpu_us,
            "fire",
            "timer fired",
            ROUND_TWO_SHARE,
        ),
    ]
    return ScenarioResult(
        figures=[figure, routing_figure, *round_two],
        details={
            "checked_us": with_checks,
            "unchecked_us": without,
            "routed_us": routed,
            "unrouted_us": unrouted,
            "owner_checked_us": owner,
            "owner_unchecked_us": owner_plain,
            "forward_signed_us": signed,
            "forward_unsigned_us": unsigned,
            "suffix_checked_us": suffix,
            "suffix_unchecked_us": suffix_plain,
        },
    )


if __name__ == "__main__":
    checked_us, unchecked_us = fire_check_cost_us()
    print(f"fire-time checks: with {checked_us:.2f} µs, without {unchecked_us:.2f} µs per timer")
    routed_us, unrouted_us = routing_cost_us()
    print(f"routing by id: with {routed_us:.2f} µs, without {unrouted_us:.2f} µs per request")
    owner_us, plain_us = owner_request_cost_us()
    print(
        f"control, token and hop checks, on its owner: with {owner_us:.2f} µs, "
        f"without {plain_us:.2f} µs"
    )
    signed_us, unsigned_us = forwarded_cost_us()
    print(
        f"signed hop and replay test, forwarded: signed {signed_us:.2f} µs, "
        f"unsigned {unsigned_us:.2f} µs"
    )
    suffix_us, plain_us = control_suffix_cost_us()
    print(f"control-suffix refusal: with {suffix_us:.2f} µs, without {plain_us:.2f} µs")
