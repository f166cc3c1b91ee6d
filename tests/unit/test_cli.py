"""CLI errors are one readable line and a non-zero exit, never a traceback."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.cli import run_app
from tests.support.cli import run_cli as run_support_cli


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_support_cli(None, *args)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["schedule", "--topic", "t", "--in", "soon"], "cannot read duration 'soon'"),
        (["schedule", "--topic", "t", "--at", "next tuesday"], "cannot read time"),
        (["schedule", "--in", "5s"], "required: --topic"),
        (["schedule", "--topic", "t", "--at", "1", "--in", "5s"], "not allowed with"),
        (["schedule", "--topic", "t", "--in", "5s", "--header", "novalue"], "name=value"),
        (
            [
                "--bootstrap",
                "127.0.0.1:1",
                "schedule",
                "--topic",
                "t",
                "--in",
                "5s",
                "--timeout",
                "1",
            ],
            "no Kafka broker answered at 127.0.0.1:1",
        ),
        (
            ["--bootstrap", "127.0.0.1:1", "cancel", "--id", "x", "--token", "y", "--timeout", "1"],
            "no Kafka broker answered",
        ),
        (["cancel", "--id", "x"], "one of the arguments --token --tombstone is required"),
        (["cancel", "--id", "x", "--token", "t", "--tombstone"], "not allowed with"),
        (["cancel", "--id", "x", "--token", "t", "--wait", "0"], "must be more than 0"),
        (["cancel", "--id", "x", "--token", "t", "--wait", "soon"], "not a number of seconds"),
        (["get", "--id", "x", "--since", "a while"], "cannot read duration 'a while'"),
        (["frobnicate"], "invalid choice"),
        (["schedule", "--topic", "t", "--cron", "0 0 25 * * *"], "invalid_cron: cron '0 0 25"),
        (
            ["schedule", "--topic", "t", "--cron", "0 9 * * *", "--tz", "Europe/Pariss"],
            "unknown time zone 'Europe/Pariss'",
        ),
        (["schedule", "--topic", "t", "--every", "0s"], "interval 0s"),
        (["schedule", "--topic", "t", "--every", "5s", "--in", "5s"], "not allowed with"),
        (["schedule", "--topic", "t", "--in", "5s", "--count", "3"], "--count needs --cron"),
        (["schedule", "--topic", "t", "--in", "5s", "--late", "later"], "late-fire policy"),
        # Never a wait without end (nan never reaches a deadline) nor one past
        # librdkafka's milliseconds (inf, 1e400 overflowed with a traceback).
        (["schedule", "--topic", "t", "--in", "5s", "--timeout", "nan"], "at most 10,000,000"),
        (["pause", "--topic", "t", "--timeout", "inf"], "at most 10,000,000"),
        (["rate", "--topic", "t", "--limit", "5/s", "--timeout", "1e400"], "at most"),
        (["pause", "--id", "x", "--token", "y", "--wait", "inf"], "at most"),
        # Bytes that are not UTF-8 reach Python as lone surrogates (os.fsdecode): each
        # command that encoded one stopped with a traceback.
        (["status", "--timer", "a\udcff"], "not valid UTF-8: a\\xff"),
        (["schedule", "--topic", "t", "--in", "5s", "--header", "a=\udcff"], "not valid UTF-8"),
        # An empty prefix ("$UNSET") would match every timer: refused before any broker.
        (["cancel-bulk", "--id-prefix", ""], "--id-prefix is empty"),
        (["cancel-bulk", "--key-prefix", ""], "--key-prefix is empty"),
        (["cancel-bulk", "--topic", "t", "--id-prefix", "", "--dry-run"], "--id-prefix is empty"),
        (["list", "--key-prefix", ""], "--key-prefix is empty"),
    ],
)
def test_errors_are_one_line(args: list[str], expected: str) -> None:
    result = run_cli(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert expected in lines[0]
    assert "Traceback" not in result.stderr


def test_bad_setting_in_the_environment_is_one_line() -> None:
    result = run_app(
        "schedule",
        "--topic",
        "t",
        "--in",
        "5s",
        env={"KAFKA_TIMERS_PARTITIONS": "eight", "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == "kafka-timers: error: KAFKA_TIMERS_PARTITIONS='eight' is not a number"
    )


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"KAFKA_TIMERS_SECURITY_PROTOCOL": "SASL_SSL"}, "needs KAFKA_TIMERS_SASL_USERNAME"),
        (
            {
                "KAFKA_TIMERS_SECURITY_PROTOCOL": "SASL_SSL",
                "KAFKA_TIMERS_SASL_MECHANISM": "gssapi",
                "KAFKA_TIMERS_SASL_USERNAME": "u",
                "KAFKA_TIMERS_SASL_PASSWORD": "p",
            },
            "'GSSAPI'",
        ),
        ({"KAFKA_TIMERS_SECURITY_PROTOCOL": "TLS"}, "use one of PLAINTEXT"),
    ],
)
def test_bad_security_settings_are_one_line(env: dict[str, str], expected: str) -> None:
    result = run_app(
        "schedule", "--topic", "t", "--in", "5s", env={**env, "PATH": "/usr/bin:/bin"}, timeout=60
    )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert expected in result.stderr


def test_lowercase_scram_is_normalised() -> None:
    from app.settings import Settings

    settings = Settings.from_env(
        {
            "KAFKA_TIMERS_SECURITY_PROTOCOL": "sasl_ssl",
            "KAFKA_TIMERS_SASL_MECHANISM": "scram-sha-256",
            "KAFKA_TIMERS_SASL_USERNAME": "u",
            "KAFKA_TIMERS_SASL_PASSWORD": "p",
        }
    )
    assert settings.security.sasl_mechanism == "SCRAM-SHA-256"
    assert settings.security.protocol == "SASL_SSL"


def test_audit_flags_reach_the_audit_parser() -> None:
    result = run_cli("audit", "--help")
    assert result.returncode == 0
    assert "--allow-duplicates" in result.stdout and "--as-of" in result.stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["worker", "--web-port", "99999"], "--web-port='99999': must be from 1 to 65535"),
        (["worker", "--metrics-port", "0"], "--metrics-port='0': must be from 1 to 65535"),
        (["--bootstrap", "http://x:1", "topics"], "--bootstrap-server="),
        (["topics", "--bootstrap-server", "http://x:1"], "--bootstrap-server="),
    ],
)
def test_a_bad_flag_is_checked_as_its_setting_and_named_in_one_line(
    args: list[str], expected: str
) -> None:
    done = run_cli(*args)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and expected in lines[0], done.stderr
