"""Operator settings are validated at start: one line naming the variable, never a traceback.

Covers the callback allow-list (its syntax and RE2), the horizon and remembering bounds
(12-digit key seconds), the payload limit derived from the producer's record budget,
and a fuzz of every variable :meth:`Settings.from_env` reads.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.policy import LAST_KEY_SECOND, RequestPolicy, compile_topic_pattern
from app.core.timer import Timer
from app.kafka.config import confluent_producer
from app.settings import (
    DEFAULT_MESSAGE_MAX_BYTES,
    MAX_HORIZON_SECONDS,
    MAX_REMEMBER_SECONDS,
    RECORD_RESERVE_BYTES,
    Settings,
    split_allow_list,
)
from kafka_timers_client.errors import ConfigurationError, RejectedRequest, RejectReason
from tests.support.cli import run_app
from tests.support.full_settings import full_settings

NOW = 1_767_225_600
P = "KAFKA_TIMERS_"

#: Every variable from_env reads; test_every_variable_is_fuzzed keeps it complete.
VARIABLES = (
    "KAFKA_BOOTSTRAP_SERVERS",
    "METRICS_PORT",
    P + "METRICS_PORT",
    *(
        P + name
        for name in (
            "PARTITIONS",
            "REPLICATION_FACTOR",
            "TICK_TOPIC",
            "REQUEST_TOPIC",
            "FIRED_TOPIC",
            "DLQ_TOPIC",
            "APP_ID",
            "WORKER_ID",
            "DATA_DIR",
            "WEB_PORT",
            "WEB_BIND",
            "WEB_MAX_CONNECTIONS",
            "WEB_IDLE_TIMEOUT",
            "METRICS_BIND",
            "CALLBACK_ALLOW",
            "MAX_PAYLOAD_BYTES",
            "HORIZON_SECONDS",
            "PRODUCER_MESSAGE_MAX_BYTES",
            "SESSION_TIMEOUT",
            "HEARTBEAT_INTERVAL",
            "TICK_FETCH_WAIT_MS",
            "EXACTLY_ONCE",
            "CLOCK_SKEW_WARN_SECONDS",
            "TICK_TOLERANCE_SECONDS",
            "TICK_MAX_AHEAD_SECONDS",
            "TICK_MAX_SOURCES",
            "TICK_SOURCE_SILENCE_SECONDS",
            "LIVENESS_TIMEOUT",
            "STOP_GRACE_SECONDS",
            "CATCHUP_STALL_SECONDS",
            "LATE_POLICY",
            "SECURITY_PROTOCOL",
            "SASL_MECHANISM",
            "SASL_USERNAME",
            "SASL_PASSWORD",
            "SSL_CAFILE",
            "SSL_CERTFILE",
            "SSL_KEYFILE",
            "REMEMBER_SECONDS",
            "MAX_CANCELS_IN_ADVANCE",
            "CALLBACK_DENY",
            "MAX_TOPIC_LABELS",
            "OPERATOR_TOKEN",
            "TOPIC_RATE_LIMITS",
            "TOPIC_QUOTAS",
            "TENANT_HEADER",
            "TENANT_QUOTAS",
            "DEMO_FILE",
        )
    ),
)


def refused(env: dict[str, str]) -> str:
    """The one-line message from_env refuses ``env`` with."""
    with pytest.raises(ConfigurationError) as info:
        Settings.from_env(env)
    message = str(info.value)
    assert len(message.splitlines()) == 1, message
    return message


# -- the allow-list: syntax ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "patterns"),
    [
        ("payments.*", ("payments.*",)),
        ("payments.*,orders.*", ("payments.*", "orders.*")),  # the old comma list
        ("payments.*, orders.*", ("payments.*", "orders.*")),  # no " orders.*" any more
        ("payments.*,,orders.*,", ("payments.*", "orders.*")),
        (r"orders-\d{1,3}", (r"orders-\d{1,3}",)),
        ("[a-z,]+", ("[a-z,]+",)),
        ("[],]x,y", ("[],]x", "y")),  # a ] first in a class is a literal
        ("[^],]x,y", ("[^],]x", "y")),
        ("[[:alpha:],]+ z", ("[[:alpha:],]+", "z")),
        ("(ab|c,d)e,f", ("(ab|c,d)e", "f")),
        (r"a\,b,c", (r"a\,b", "c")),
        (r"a\[,b", (r"a\[", "b")),  # an escaped [ opens no class
        ("cb-.*\norders-.*\n", ("cb-.*", "orders-.*")),
        ("  cb-.*\t orders-.* ", ("cb-.*", "orders-.*")),
    ],
)
def test_the_allow_list_splits_on_commas_and_whitespace_outside_brackets(
    text: str, patterns: tuple[str, ...]
) -> None:
    assert split_allow_list(text) == patterns
    assert Settings.from_env({P + "CALLBACK_ALLOW": text}).callback_allow == patterns


def test_a_comma_inside_a_repetition_no_longer_breaks_the_pattern() -> None:
    policy = Settings.from_env(
        {P + "CALLBACK_ALLOW": r"orders-\d{1,3},cb-[a-z,]+"}
    ).request_policy()
    policy.check_topic("orders-12")
    policy.check_topic("cb-abc")
    for topic in ("orders-1234", "orders-", "cb-"):
        with pytest.raises(RejectedRequest):
            policy.check_topic(topic)


@pytest.mark.parametrize("text", [",", " , ", "\n"])
def test_an_allow_list_with_no_pattern_is_refused(text: str) -> None:
    assert "KAFKA_TIMERS_CALLBACK_ALLOW" in refused({P + "CALLBACK_ALLOW": text})


def test_the_allow_list_survives_the_trip_to_a_child_process() -> None:
    text = r"orders-\d{1,3}, [a-z,]+  cb\,x  (a|b,c)"
    settings = Settings.from_env({P + "CALLBACK_ALLOW": text})
    assert Settings.from_env(settings.to_env()).callback_allow == settings.callback_allow


# -- the allow-list: RE2 ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        (r"(a)\1", "invalid escape sequence"),  # backreference
        ("(?=cb)cb.*", "invalid perl operator"),  # lookahead
        ("(?<!x)cb", "invalid perl operator"),  # lookbehind
        ("[a-", "missing ]"),
        ("x{1,1001}", "invalid repetition size"),
    ],
)
def test_a_pattern_re2_refuses_is_one_line_naming_it(pattern: str, why: str) -> None:
    message = refused({P + "CALLBACK_ALLOW": f"ok-.*,{pattern}"})
    assert message.startswith("KAFKA_TIMERS_CALLBACK_ALLOW: callback allow pattern ")
    assert repr(pattern) in message and why in message


def test_a_backtracking_pattern_takes_linear_time() -> None:
    # Python's re takes about 2**n steps here; RE2 is linear in the topic's length.
    policy = RequestPolicy.build(
        allow_patterns=("(a+)+b", "(a|aa)+c", "(.*a){20}"),
        own_topics=(),
        app_id="kafka-timers",
        max_payload_bytes=100,
        horizon_seconds=3600,
    )
    start = time.thread_time()
    for n in (30, 100, 249):
        policy.check_topic("a" * (n - 1) + "a")  # (.*a){20} matches
        with pytest.raises(RejectedRequest):
            policy.check_topic("a" * (n - 1) + "x")
    assert time.thread_time() - start < 1.0


def test_patterns_match_in_full_and_compare_by_their_text() -> None:
    pattern = compile_topic_pattern("cb-[0-9]+")
    assert pattern.fullmatch("cb-12")
    assert not pattern.fullmatch("cb-12x") and not pattern.fullmatch("xcb-12")
    assert pattern == compile_topic_pattern("cb-[0-9]+")
    assert hash(pattern) == hash(compile_topic_pattern("cb-[0-9]+"))


def test_a_policy_pickles_for_the_spark_executors() -> None:
    import pickle

    policy = Settings.from_env({P + "CALLBACK_ALLOW": "cb-.*"}).request_policy()
    again = pickle.loads(pickle.dumps(policy))
    assert again == policy
    again.check_topic("cb-1")
    with pytest.raises(RejectedRequest):
        again.check_topic("other")


# -- horizon and remembering: 12-digit key seconds ------------------------------------


@pytest.mark.parametrize("value", ["0", "-1", str(MAX_HORIZON_SECONDS + 1), str(10**13)])
def test_a_horizon_outside_the_key_layout_is_refused(value: str) -> None:
    message = refused({P + "HORIZON_SECONDS": value})
    assert message.startswith(f"KAFKA_TIMERS_HORIZON_SECONDS={value!r}: must be from 1 to ")


@pytest.mark.parametrize("value", ["0", "-5", str(MAX_REMEMBER_SECONDS + 1)])
def test_remembering_outside_the_key_layout_is_refused(value: str) -> None:
    assert "KAFKA_TIMERS_REMEMBER_SECONDS" in refused({P + "REMEMBER_SECONDS": value})


def test_the_largest_horizon_and_remembering_stay_inside_twelve_digits() -> None:
    settings = Settings.from_env(
        {
            P + "HORIZON_SECONDS": str(MAX_HORIZON_SECONDS),
            P + "REMEMBER_SECONDS": str(MAX_REMEMBER_SECONDS),
        }
    )
    latest_forget = NOW + settings.horizon_seconds + settings.remember_seconds
    assert latest_forget <= LAST_KEY_SECOND
    assert len(b"%012d" % latest_forget) == 12


def test_a_due_time_past_twelve_digits_is_refused_whatever_the_horizon() -> None:
    policy = RequestPolicy.build(
        allow_patterns=(".*",),
        own_topics=(),
        app_id="kafka-timers",
        max_payload_bytes=100,
        horizon_seconds=10**13,  # built directly: from_env would refuse it
    )
    policy.check(Timer(id="a", due=LAST_KEY_SECOND, topic="cb", key=None, value=b""), NOW)
    with pytest.raises(RejectedRequest) as info:
        policy.check(Timer(id="a", due=LAST_KEY_SECOND + 1, topic="cb", key=None, value=b""), NOW)
    assert info.value.reason is RejectReason.DUE_OUT_OF_RANGE


# -- the payload limit and the record budget -------------------------------------------


def test_the_payload_limit_is_the_record_budget_less_the_reserve() -> None:
    settings = Settings.from_env({})
    assert settings.record_budget_bytes == DEFAULT_MESSAGE_MAX_BYTES == 1_000_000
    assert RECORD_RESERVE_BYTES == 65_536
    assert settings.max_payload_bytes == 934_464 == Settings().max_payload_bytes
    assert settings.request_policy().max_payload_bytes == 934_464
    assert confluent_producer(settings)["message.max.bytes"] == 1_000_000


def test_raising_the_producers_budget_raises_the_derived_limit() -> None:
    settings = Settings.from_env({P + "PRODUCER_MESSAGE_MAX_BYTES": "4000000"})
    assert settings.record_budget_bytes == 4_000_000
    assert settings.max_payload_bytes == 4_000_000 - 65_536
    assert confluent_producer(settings)["message.max.bytes"] == 4_000_000
    again = Settings.from_env(settings.to_env())
    assert (again.record_budget_bytes, again.max_payload_bytes) == (4_000_000, 3_934_464)
    explicit = Settings.from_env(
        {P + "PRODUCER_MESSAGE_MAX_BYTES": "4000000", P + "MAX_PAYLOAD_BYTES": "3000000"}
    )
    assert explicit.max_payload_bytes == 3_000_000


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({P + "MAX_PAYLOAD_BYTES": "1048576"}, "MAX_PAYLOAD_BYTES"),  # the old default
        ({P + "MAX_PAYLOAD_BYTES": "934465"}, "MAX_PAYLOAD_BYTES"),
        ({P + "MAX_PAYLOAD_BYTES": "-1"}, "MAX_PAYLOAD_BYTES"),
        (
            {P + "PRODUCER_MESSAGE_MAX_BYTES": "500000", P + "MAX_PAYLOAD_BYTES": "934464"},
            "MAX_PAYLOAD_BYTES",
        ),
        ({P + "PRODUCER_MESSAGE_MAX_BYTES": "65536"}, "PRODUCER_MESSAGE_MAX_BYTES"),
        ({P + "PRODUCER_MESSAGE_MAX_BYTES": "1000000001"}, "PRODUCER_MESSAGE_MAX_BYTES"),
    ],
)
def test_a_payload_limit_the_producer_cannot_send_is_refused(
    env: dict[str, str], name: str
) -> None:
    assert refused(env).startswith(f"KAFKA_TIMERS_{name}=")


def test_the_largest_payload_limit_is_accepted() -> None:
    assert Settings.from_env({P + "MAX_PAYLOAD_BYTES": "934464"}).max_payload_bytes == 934_464
    assert Settings.from_env({P + "MAX_PAYLOAD_BYTES": "0"}).max_payload_bytes == 0


# -- every other variable ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"KAFKA_BOOTSTRAP_SERVERS": "PLAINTEXT://k:9092"}, "KAFKA_BOOTSTRAP_SERVERS"),
        ({"KAFKA_BOOTSTRAP_SERVERS": "k:9092,"}, "KAFKA_BOOTSTRAP_SERVERS"),
        ({"KAFKA_BOOTSTRAP_SERVERS": "k:99999"}, "KAFKA_BOOTSTRAP_SERVERS"),
        ({"KAFKA_BOOTSTRAP_SERVERS": "k:port"}, "KAFKA_BOOTSTRAP_SERVERS"),
        ({"METRICS_PORT": "70000"}, "METRICS_PORT"),
        ({P + "METRICS_PORT": "nine"}, "KAFKA_TIMERS_METRICS_PORT"),
        ({P + "PARTITIONS": "0"}, "PARTITIONS"),
        ({P + "PARTITIONS": "8.5"}, "PARTITIONS"),
        ({P + "REPLICATION_FACTOR": "0"}, "REPLICATION_FACTOR"),
        ({P + "TICK_TOPIC": "my ticks"}, "TICK_TOPIC"),
        ({P + "DLQ_TOPIC": ".."}, "DLQ_TOPIC"),
        ({P + "FIRED_TOPIC": "timer-request"}, "FIRED_TOPIC"),  # the request topic's name
        ({P + "APP_ID": "kafka timers"}, "APP_ID"),
        ({P + "APP_ID": "x" * 233}, "APP_ID"),
        ({P + "WORKER_ID": "w1\nw2"}, "WORKER_ID"),
        ({P + "DATA_DIR": "/dev/null"}, "DATA_DIR"),
        ({P + "WEB_PORT": "0"}, "WEB_PORT"),
        ({P + "WEB_BIND": "0.0.0.0:6066"}, "WEB_BIND"),
        ({P + "WEB_MAX_CONNECTIONS": "0"}, "WEB_MAX_CONNECTIONS"),
        ({P + "WEB_IDLE_TIMEOUT": "nan"}, "WEB_IDLE_TIMEOUT"),
        ({P + "METRICS_BIND": "all interfaces"}, "METRICS_BIND"),
        ({P + "SESSION_TIMEOUT": "nan"}, "SESSION_TIMEOUT"),
        ({P + "SESSION_TIMEOUT": "0.5"}, "SESSION_TIMEOUT"),  # not above the heartbeat
        ({P + "HEARTBEAT_INTERVAL": "inf"}, "HEARTBEAT_INTERVAL"),
        ({P + "HEARTBEAT_INTERVAL": "6"}, "HEARTBEAT_INTERVAL"),
        ({P + "TICK_FETCH_WAIT_MS": "1e3"}, "TICK_FETCH_WAIT_MS"),
        ({P + "EXACTLY_ONCE": "ture"}, "EXACTLY_ONCE"),
        ({P + "CLOCK_SKEW_WARN_SECONDS": "-1"}, "CLOCK_SKEW_WARN_SECONDS"),
        ({P + "TICK_TOLERANCE_SECONDS": "nan"}, "TICK_TOLERANCE_SECONDS"),
        ({P + "TICK_MAX_AHEAD_SECONDS": "59"}, "TICK_MAX_AHEAD_SECONDS"),
        ({P + "TICK_MAX_SOURCES": "0"}, "TICK_MAX_SOURCES"),
        ({P + "TICK_SOURCE_SILENCE_SECONDS": "inf"}, "TICK_SOURCE_SILENCE_SECONDS"),
        ({P + "LIVENESS_TIMEOUT": "0"}, "LIVENESS_TIMEOUT"),
        ({P + "STOP_GRACE_SECONDS": "0.5"}, "STOP_GRACE_SECONDS"),
        ({P + "CATCHUP_STALL_SECONDS": "0"}, "CATCHUP_STALL_SECONDS"),
        ({P + "LATE_POLICY": "later"}, "LATE_POLICY"),
        ({P + "LATE_POLICY": "skip-after " + "9" * 400 + "w"}, "LATE_POLICY"),
        ({P + "SECURITY_PROTOCOL": "TLS"}, "SECURITY_PROTOCOL"),
        ({P + "SECURITY_PROTOCOL": "SASL_SSL"}, "SECURITY_PROTOCOL"),
        ({P + "SASL_MECHANISM": "GSSAPI"}, "SASL_MECHANISM"),
        ({P + "SSL_CAFILE": "/nonexistent/ca.pem"}, "SSL_CAFILE"),
        ({P + "SSL_CERTFILE": "/"}, "SSL_CERTFILE"),
        ({P + "REMEMBER_SECONDS": "a week"}, "REMEMBER_SECONDS"),
    ],
)
def test_each_bad_setting_is_one_line_naming_its_variable(env: dict[str, str], name: str) -> None:
    assert name in refused(env)


def test_a_key_file_needs_its_certificate(tmp_path: Path) -> None:
    key = tmp_path / "service.key"
    key.write_text("key")
    assert "KAFKA_TIMERS_SSL_KEYFILE" in refused({P + "SSL_KEYFILE": str(key)})
    cert = tmp_path / "service.cert"
    cert.write_text("cert")
    settings = Settings.from_env({P + "SSL_KEYFILE": str(key), P + "SSL_CERTFILE": str(cert)})
    assert settings.security.ssl_keyfile == str(key)


def test_exactly_once_reads_the_usual_words() -> None:
    for word, value in (("true", True), ("YES", True), ("on", True), ("0", False), ("off", False)):
        assert Settings.from_env({P + "EXACTLY_ONCE": word}).exactly_once is value


def test_bootstrap_addresses_are_normalised() -> None:
    env = {"KAFKA_BOOTSTRAP_SERVERS": " kafka-1:9092, kafka_2:9093 ,[::1]:9094,10.0.0.5,k"}
    servers = Settings.from_env(env).bootstrap_servers
    assert servers == "kafka-1:9092,kafka_2:9093,[::1]:9094,10.0.0.5,k"


def test_every_variable_is_fuzzed() -> None:
    full = full_settings(operator_token="an-operator-token-of-24", tenant_header="tenant")
    assert set(full.to_env()) | {P + "METRICS_PORT"} == set(VARIABLES)


#: Values that broke some variable once, or look like numbers, ports, paths or patterns.
_NASTY = st.sampled_from(
    [
        "",
        " ",
        "\n",
        "\x00",
        "\udcff",
        "-1",
        "0",
        "1",
        "-0",
        "nan",
        "inf",
        "-inf",
        "1e400",
        "1e-400",
        "0x10",
        "1_000",
        "9" * 5000,
        "٣",
        "true",
        "SASL_SSL",
        "PLAIN",
        "/",
        "/dev/null",
        ".",
        "..",
        "timer-request",
        "a,b",
        "[a-z,]+",
        r"(a)\1",
        "(?=x)",
        "skip-after 1e400w",
        "[::1]:9092",
        "host:0",
    ]
)
_VALUES = st.one_of(
    _NASTY,
    st.text(),
    st.text(st.sampled_from("0123456789.-+eE_ ,:")),
    st.text(st.sampled_from("ab-.*+?()[]{}|^$\\,:=!<1 \n")),
    st.integers().map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
)


def _assert_clean(env: dict[str, str], names: tuple[str, ...]) -> None:
    try:
        parsed = Settings.from_env(env)
    except ConfigurationError as exc:
        message = str(exc)
        assert len(message.splitlines()) == 1, message
        assert any(name in message for name in names), (names, message)
    else:
        assert Settings.from_env(parsed.to_env()) == parsed


@pytest.mark.parametrize("name", VARIABLES)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=_VALUES)
def test_any_value_of_any_variable_is_accepted_or_refused_in_one_line(
    name: str, value: str
) -> None:
    _assert_clean({name: value}, (name,))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(env=st.dictionaries(st.sampled_from(VARIABLES), _VALUES, max_size=6))
def test_any_mix_of_values_is_accepted_or_refused_in_one_line(env: dict[str, str]) -> None:
    _assert_clean(env, tuple(env))


# -- the command's entry points -----------------------------------------------------------


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_app(*args, env={**env, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}, timeout=120)


@pytest.mark.parametrize(
    ("command", "env", "expected"),
    [
        (
            ["worker"],
            {P + "CALLBACK_ALLOW": r"cb-.*,(a)\1"},
            "kafka-timers: error: KAFKA_TIMERS_CALLBACK_ALLOW: callback allow pattern '(a)\\\\1' "
            "is refused by RE2: invalid escape sequence: \\1 (RE2 syntax: no backreferences or "
            "lookaround)",
        ),
        (
            ["worker"],
            {P + "MAX_PAYLOAD_BYTES": "1048576"},
            "kafka-timers: error: KAFKA_TIMERS_MAX_PAYLOAD_BYTES='1048576': must be from 0 to "
            "934464",
        ),
        (
            ["oscillator"],
            {P + "HORIZON_SECONDS": str(10**12)},
            "kafka-timers: error: KAFKA_TIMERS_HORIZON_SECONDS='1000000000000': must be from 1 "
            "to 100000000000",
        ),
        (
            ["oscillator"],
            {P + "SESSION_TIMEOUT": "nan"},
            "kafka-timers: error: KAFKA_TIMERS_SESSION_TIMEOUT='nan': must be from 0.001 to 3600",
        ),
        (
            ["topics"],
            {"KAFKA_BOOTSTRAP_SERVERS": "PLAINTEXT://k:9092"},
            "kafka-timers: error: KAFKA_BOOTSTRAP_SERVERS='PLAINTEXT://k:9092'",
        ),
        (
            ["schedule", "--topic", "t", "--in", "5s"],
            {P + "LATE_POLICY": "skip-after 1e400w"},
            "kafka-timers: error: KAFKA_TIMERS_LATE_POLICY",
        ),
    ],
)
def test_a_bad_setting_stops_each_entry_point_with_one_line_and_status_2(
    command: list[str], env: dict[str, str], expected: str
) -> None:
    result = _run(command, env)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(expected), lines[0]
    assert result.stdout == ""


def test_a_value_that_is_not_utf8_is_one_line() -> None:
    """Bytes that are not UTF-8 arrive as lone surrogates: librdkafka could not take the
    SASL user name, and every Kafka client failed with a traceback."""
    env = {
        "KAFKA_TIMERS_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "KAFKA_TIMERS_SASL_MECHANISM": "PLAIN",
        "KAFKA_TIMERS_SASL_USERNAME": "u\udcff",
        "KAFKA_TIMERS_SASL_PASSWORD": "p",
    }
    with pytest.raises(ConfigurationError, match="KAFKA_TIMERS_SASL_USERNAME is not valid UTF-8"):
        Settings.from_env(env)
    # The allow-list too, before RE2 is asked (it refused such a pattern as well).
    with pytest.raises(ConfigurationError, match="KAFKA_TIMERS_CALLBACK_ALLOW is not valid UTF-8"):
        Settings.from_env({"KAFKA_TIMERS_CALLBACK_ALLOW": "\ud800"})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("KAFKA_TIMERS_WEB_PORT", "1" * 100_000),
        ("KAFKA_TIMERS_APP_ID", "x" * 1_000_000),
        ("KAFKA_TIMERS_LATE_POLICY", "skip-after " + "9" * 5_000),
        ("KAFKA_BOOTSTRAP_SERVERS", "h" * 100_000),
        ("KAFKA_TIMERS_REMEMBER_SECONDS", "9" * 5_000),
    ],
)
def test_a_huge_value_is_quoted_cut_short(name: str, value: str) -> None:
    """A complaint quotes at most a hundred or two characters of the value: a value of a
    megabyte made a complaint of a megabyte."""
    with pytest.raises(ConfigurationError) as raised:
        Settings.from_env({name: value})
    message = str(raised.value)
    assert name in message and len(message) < 500, len(message)
