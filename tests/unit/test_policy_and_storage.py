import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.policy import LAST_KEY_SECOND, RequestPolicy
from app.core.stored import pack_timer, unpack_timer
from app.core.timer import Timer
from kafka_timers_client.errors import RejectedRequest, RejectReason
from kafka_timers_client.late import LatePolicy
from kafka_timers_client.recurrence import Recurrence

NOW = 1_767_225_600


def policy(allow: tuple[str, ...] = (".*",)) -> RequestPolicy:
    return RequestPolicy.build(
        allow_patterns=allow,
        own_topics=("oscillator", "timer-request", "timer-fired", "timer-request-dlq"),
        app_id="kafka-timers",
        max_payload_bytes=100,
        horizon_seconds=3600,
    )


def timer(topic: str = "payments", due: int = NOW + 10, value: bytes = b"v") -> Timer:
    return Timer(id="a", due=due, topic=topic, key=None, value=value)


@pytest.mark.parametrize(
    ("topic", "reason"),
    [
        ("", RejectReason.MISSING_TOPIC),
        ("bad topic!", RejectReason.INVALID_TOPIC),
        ("..", RejectReason.INVALID_TOPIC),
        ("x" * 250, RejectReason.INVALID_TOPIC),
        ("__consumer_offsets", RejectReason.TOPIC_NOT_ALLOWED),
        ("__transaction_state", RejectReason.TOPIC_NOT_ALLOWED),
        ("timer-request", RejectReason.TOPIC_NOT_ALLOWED),
        ("oscillator", RejectReason.TOPIC_NOT_ALLOWED),
        ("timer-fired", RejectReason.TOPIC_NOT_ALLOWED),
        ("timer-request-dlq", RejectReason.TOPIC_NOT_ALLOWED),
        ("kafka-timers-timers-changelog", RejectReason.TOPIC_NOT_ALLOWED),
        ("kafka-timers-__assignor-__leader", RejectReason.TOPIC_NOT_ALLOWED),
    ],
)
def test_refused_topics(topic: str, reason: RejectReason) -> None:
    with pytest.raises(RejectedRequest) as info:
        policy().check(timer(topic=topic), NOW)
    assert info.value.reason is reason


def test_allow_list_cannot_reopen_internal_topics() -> None:
    strict = policy(allow=("payments.*", "__.*", "timer-.*"))
    strict.check(timer(topic="payments-retry"), NOW)
    for topic in ("orders", "__consumer_offsets", "timer-request"):
        with pytest.raises(RejectedRequest):
            strict.check(timer(topic=topic), NOW)


def test_an_allowed_topic_is_remembered_and_a_refused_one_never() -> None:
    strict = policy(allow=("payments.*",))
    for _ in range(2):  # the second round answers from the remembered topics
        strict.check(timer(topic="payments"), NOW)
        with pytest.raises(RejectedRequest) as info:
            strict.check(timer(topic="orders"), NOW)
        assert info.value.reason is RejectReason.TOPIC_NOT_ALLOWED
    assert strict._allowed == {"payments"}
    # The remembered topics are no part of the policy's identity.
    assert strict == policy(allow=("payments.*",))
    assert hash(strict) == hash(policy(allow=("payments.*",)))


def test_remembered_topics_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("app.core.policy.ALLOWED_CACHE_SIZE", 3)
    p = policy()
    for n in range(10):
        p.check(timer(topic=f"t{n}"), NOW)
    assert p._allowed == {"t0", "t1", "t2"}
    p.check(timer(topic="t9"), NOW)  # past the bound: still checked, still allowed


def test_due_range_and_payload_size() -> None:
    p = policy()
    p.check(timer(due=NOW + 3600), NOW)
    p.check(timer(due=0), NOW)  # 1970 itself is fine (late: fires at once)
    for bad in (timer(due=-1), timer(due=NOW + 3601)):
        with pytest.raises(RejectedRequest) as info:
            p.check(bad, NOW)
        assert info.value.reason is RejectReason.DUE_OUT_OF_RANGE
    with pytest.raises(RejectedRequest) as info:
        p.check(timer(value=b"x" * 101), NOW)
    assert info.value.reason is RejectReason.PAYLOAD_TOO_LARGE


def _refusal(p: RequestPolicy, t: Timer, now: float) -> tuple[RejectReason, str] | None:
    try:
        p.check(t, now)
    except RejectedRequest as exc:
        return exc.reason, str(exc)
    return None


def _meant(p: RequestPolicy, t: Timer, now: float) -> tuple[RejectReason, str] | None:
    """The rules as check spelled them out before it inlined them."""
    try:
        p.check_topic(t.topic)
        if t.due < 0 or t.due > min(now + p.horizon_seconds, LAST_KEY_SECOND):
            raise RejectedRequest(
                RejectReason.DUE_OUT_OF_RANGE,
                f"due {t.due} is before 1970 or more than {p.horizon_seconds}s ahead",
            )
        p.check_payload(t)
    except RejectedRequest as exc:
        return exc.reason, str(exc)
    return None


@given(
    topic=st.sampled_from(["payments", "", "__consumer_offsets", "bad topic", "x-timer-control"]),
    due=st.one_of(
        st.integers(-3, 3), st.integers(NOW, NOW + 7200), st.integers(10**12 - 3, 10**13)
    ),
    size=st.one_of(st.none(), st.integers(0, 102)),
    horizon=st.sampled_from([3600, 10**13]),
    now=st.sampled_from([NOW, NOW + 0.5]),
)
def test_check_refuses_what_its_rules_refuse(
    topic: str, due: int, size: int | None, horizon: int, now: float
) -> None:
    p = dataclasses.replace(policy(), horizon_seconds=horizon)
    t = Timer(id="a", due=due, topic=topic, key=None, value=None if size is None else b"v" * size)
    for _ in range(2):  # a topic that passed is remembered: the same answers after
        assert _refusal(p, t, now) == _meant(p, t, now)


def test_storage_round_trip_keeps_binary_and_absent_fields() -> None:
    original = Timer(
        id="ü-1",
        due=NOW,
        topic="t",
        key=b"\xff\x00",
        value=None,
        token="tok",
        headers=(("h", b"\x00"), ("scheduler-key", b"")),
    )
    assert unpack_timer(pack_timer(original)) == original
    keyless = Timer(id="x", due=1, topic="t", key=None, value=b"")
    assert unpack_timer(pack_timer(keyless)) == keyless


def test_storage_of_a_series_is_version_2_and_a_one_shot_timer_stays_version_1() -> None:
    cron = Recurrence.cron_series("0 0 9 * * MON-FRI", "Europe/Paris", count=10).anchored(NOW)
    occurrence = Timer(
        id="s",
        due=NOW + 86400,
        topic="t",
        key=None,
        value=b"v",
        token="tok",
        recurrence=cron,
        seq=4,
        fired_before=2,
        late=LatePolicy.parse("skip-after 5m, all"),
    )
    packed = pack_timer(occurrence)
    assert packed[0] == 2 and unpack_timer(packed) == occurrence
    every = Timer("e", NOW, "t", None, b"", recurrence=Recurrence.interval(30).anchored(NOW), seq=1)
    assert unpack_timer(pack_timer(every)) == every
    policy_only = Timer("p", NOW, "t", None, b"", late=LatePolicy.parse("fire"))
    assert unpack_timer(pack_timer(policy_only)) == policy_only
    plain = Timer("o", NOW, "t", None, b"")
    assert pack_timer(plain)[0] == 1  # readable by releases before series


def test_internal_topics_are_refused_by_construction_whatever_the_allow_list() -> None:
    from app.core.policy import RequestPolicy as Policy
    from kafka_timers_client.errors import RejectedRequest as Refused

    policy = Policy.build(
        allow_patterns=(".*",),
        deny_patterns=("connect-.*", "audit"),
        own_topics=("ticks", "requests", "fired", "dlq"),
        app_id="kt",
        max_payload_bytes=1000,
        horizon_seconds=86400,
    )
    for topic in (
        "__consumer_offsets",
        "__transaction_state",
        "_schemas",
        "_confluent-metrics",
        "other-deployment-timers-changelog",
        "wordcount-KSTREAM-AGGREGATE-0000000003-repartition",
        "kt-anything",
        "ticks",
        "connect-offsets",
        "audit",
    ):
        try:
            policy.check_topic(topic)
        except Refused as refused:
            assert refused.reason.value == "topic_not_allowed", topic
        else:
            raise AssertionError(f"{topic} was allowed")
    for topic in ("orders", "changelog-events", "audits", "reminders_v2"):
        policy.check_topic(topic)  # matching is on the whole name, not a part of it
