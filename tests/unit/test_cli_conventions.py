"""The CLI follows the conventions of Kafka's own tools: ``--bootstrap-server`` (before or
after the subcommand), ``--command-config FILE``, one meaning per flag name, defaults and
examples in the help, and a bare ``kafka-timers`` that lists what it can do."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

import pytest

from app.cli import KAFKA_COMMANDS, build_parser
from app.kafka.command_config import parse_properties, read_command_config
from kafka_timers_client.errors import ConfigurationError
from tests.support.cli import run_app

#: The least each subcommand needs to parse.
REQUIRED: dict[str, list[str]] = {
    "schedule": ["--topic", "t", "--in", "5s"],
    "cancel": ["--id", "x", "--token", "y"],
    "trigger": ["--id", "x", "--token", "y"],
    "backfill": ["--id", "x", "--token", "y", "--from", "0", "--to", "60"],
    "rate": ["--topic", "t", "--clear"],
    "get": ["--id", "x"],
    "migrate": ["--to-request-topic", "new"],
}


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


#: A control secret, so that the control commands (pause, rate) get as far as the broker.
CONTROL_SECRET = {"KAFKA_TIMERS_CONTROL_SECRET": "test-control-secret-0123456789"}


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_app(
        *args, env={"PATH": "/usr/bin:/bin", **CONTROL_SECRET, **(env or {})}, timeout=60
    )


@pytest.mark.parametrize("command", [c for c in KAFKA_COMMANDS if c != "audit"])
@pytest.mark.parametrize("spelling", ["--bootstrap-server", "--bootstrap"])
def test_bootstrap_server_after_every_kafka_subcommand(command: str, spelling: str) -> None:
    extra = REQUIRED.get(command, [])
    after = build_parser().parse_args([command, *extra, spelling, "h1:9092"])
    assert after.bootstrap == "h1:9092"
    before = build_parser().parse_args([spelling, "h2:9092", command, *extra])
    assert before.bootstrap == "h2:9092"
    # Both: the one nearer the command's own flags wins, as with any repeated flag.
    both = build_parser().parse_args(
        ["--bootstrap-server", "h2:1", command, *extra, spelling, "h3:1"]
    )
    assert both.bootstrap == "h3:1"
    config = build_parser().parse_args([command, *extra, "--command-config", "c.properties"])
    assert config.command_config == "c.properties"


def test_every_subcommand_comes_from_one_group_and_runs_a_function() -> None:
    """A group module adds its subcommands in ``register``; a subcommand named in
    KAFKA_COMMANDS but added by no group (or added twice) is caught here."""
    from app.cli import GROUPS

    subparsers = _subparsers()
    assert set(KAFKA_COMMANDS) <= set(subparsers)
    for name, sub in subparsers.items():
        assert callable(sub.get_default("func")), name
    for group in GROUPS:
        assert callable(group.register), group.__name__


def test_the_audit_takes_them_too() -> None:
    from spark_audit.options import parse_options

    options = parse_options(
        ["--bootstrap-server", "h:1", "--request-topic", "r", "--command-config", "f"]
    )
    assert (options.bootstrap, options.requests_topic, options.command_config) == ("h:1", "r", "f")
    old = parse_options(["--bootstrap", "h:2", "--requests-topic", "r2"])
    assert (old.bootstrap, old.requests_topic) == ("h:2", "r2")


@pytest.mark.parametrize(
    "args",
    [
        ["schedule", "--topic", "t", "--in", "5s", "--timeout", "1", "--bootstrap-server"],
        ["cancel", "--id", "x", "--token", "y", "--timeout", "1", "--bootstrap-server"],
        ["rate", "--topic", "t", "--limit", "5/s", "--timeout", "1", "--bootstrap-server"],
        ["pause", "--topic", "t", "--timeout", "1", "--bootstrap-server"],
    ],
)
def test_a_real_process_uses_the_broker_named_after_the_subcommand(args: list[str]) -> None:
    done = run(*args, "127.0.0.1:1")
    assert done.returncode == 2, done.stderr
    assert "127.0.0.1:1" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_command_config_names_the_broker_and_flags_win(tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text("# a Kafka client file\nbootstrap.servers = 127.0.0.1:1\nclient.id=me\n")
    base = ["schedule", "--topic", "t", "--in", "5s", "--timeout", "1"]
    done = run(*base, "--command-config", str(config))
    assert done.returncode == 2 and "at 127.0.0.1:1" in done.stderr, done.stderr
    done = run(*base, "--command-config", str(config), "--bootstrap-server", "127.0.0.1:2")
    assert done.returncode == 2 and "at 127.0.0.1:2" in done.stderr, done.stderr


def test_a_bad_command_config_is_one_line_naming_the_property(tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text("bootstrap.servers=127.0.0.1:1\nssl.truststore.location=/x.jks\n")
    done = run("topics", "--command-config", str(config))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "kafka-timers: error: --command-config client.properties:2 ssl.truststore.location: a "
        "Java keystore, which these clients cannot read; set ssl.ca.location (a PEM CA "
        "bundle) instead"
    ]
    config.write_text("security.protocol=SASL_SSL\n")  # checked as its setting is
    done = run("topics", "--command-config", str(config))
    assert done.returncode == 2 and "needs KAFKA_TIMERS_SASL_USERNAME" in done.stderr


def test_properties_format() -> None:
    text = (
        "! comment\n  # another\n\nbootstrap.servers: a:1,\\\n    b:2\n"
        "sasl.password pa\\u0073s\\=word\nkey\\ with\\ space=v\n"
    )
    assert parse_properties(text) == [
        (4, "bootstrap.servers", "a:1,b:2"),
        (6, "sasl.password", "pass=word"),
        (7, "key with space", "v"),
    ]


def test_jaas_config_gives_the_sasl_credentials(tmp_path: Path) -> None:
    config = tmp_path / "c.properties"
    config.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        # the file escapes the backslash that JAAS then reads: p\\"w in the file is p"w
        'username="worker" password="p\\\\"w";\n'
    )
    got = {var: value for var, (_, value) in read_command_config(str(config)).items()}
    assert got == {
        "KAFKA_TIMERS_SECURITY_PROTOCOL": "SASL_SSL",
        "KAFKA_TIMERS_SASL_MECHANISM": "SCRAM-SHA-512",
        "KAFKA_TIMERS_SASL_USERNAME": "worker",
        "KAFKA_TIMERS_SASL_PASSWORD": 'p"w',
    }
    config.write_text("linger.ms=5\n")
    with pytest.raises(ConfigurationError, match=r"c.properties:1 linger.ms: not a property"):
        read_command_config(str(config))


def test_a_bare_command_lists_the_subcommands() -> None:
    done = run()
    assert done.returncode == 2
    for command in ("schedule", "cancel", "worker", "demo", "status", "audit"):
        assert f"\n    {command} " in done.stdout, done.stdout
    assert "required" not in done.stdout + done.stderr


def _visible_options(p: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {
        flag: action
        for action in p._actions
        if action.help != argparse.SUPPRESS
        for flag in action.option_strings
    }


def test_one_meaning_per_flag_name() -> None:
    meanings: dict[str, set[str]] = {}
    for name, p in _subparsers().items():
        for flag, action in _visible_options(p).items():
            meanings.setdefault(flag, set()).add(action.dest)
            if flag == "--count":
                assert name in ("schedule", "preview"), f"{name} --count"  # a series' count
    assert meanings["--id"] <= {"timer_id", "timer"}, meanings["--id"]
    assert meanings["--bootstrap-server"] == {"bootstrap"}
    assert "--requests-topic" not in meanings and "--bootstrap" not in meanings
    assert "--to-bootstrap" not in meanings
    assert meanings["--worker-id"] == {"worker_id"}


def test_old_spellings_still_work() -> None:
    parse = build_parser().parse_args
    assert parse(["worker", "--id", "w1"]).worker_id == "w1"
    assert parse(["oscillator", "--id", "o1"]).worker_id == "o1"
    assert parse(["list", "--count"]).count_only is True
    assert parse(["status", "--timer", "x"]).timer == "x"
    assert parse(["migrate", "--to-request-topic", "n", "--to-bootstrap", "h:1"]).to_bootstrap


def test_help_shows_defaults_and_examples() -> None:
    for name, p in _subparsers().items():
        if name == "audit":
            continue
        text = p.format_help()
        assert "examples:\n  kafka-timers " + name in text, name
        for action in p._actions:
            if action.help == argparse.SUPPRESS or not action.option_strings:
                continue
            if action.default not in (None, False, argparse.SUPPRESS):
                assert "default" in (p._get_formatter()._get_help_string(action) or ""), (
                    name,
                    action.option_strings,
                )
    audit = run("audit", "--help")
    assert "examples:" in audit.stdout and "--bootstrap-server" in audit.stdout


def test_client_commands_find_a_running_demo(tmp_path: Path) -> None:
    """In another shell, with nothing set, a client command reaches the demo's broker."""
    demo_file = tmp_path / "demo.json"
    demo_file.write_text(
        json.dumps(
            {
                "pid": os.getpid(),  # alive while this test runs
                "bootstrap": "127.0.0.1:1",
                "app_id": "kafka-timers-demo",
                "workers": ["http://127.0.0.1:1"],
            }
        )
    )
    env = {"KAFKA_TIMERS_DEMO_FILE": str(demo_file)}
    for args in (
        ["schedule", "--topic", "t", "--in", "5s", "--timeout", "1"],
        ["cancel", "--id", "x", "--token", "y", "--timeout", "1"],
        ["pause", "--topic", "t", "--timeout", "1"],
    ):
        done = run(*args, env=env)
        assert done.returncode == 2 and "at 127.0.0.1:1" in done.stderr, (args, done.stderr)
    # A broker named by the user wins over the demo's.
    done = run(
        "schedule", "--topic", "t", "--in", "5s", "--timeout", "1",
        env={**env, "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:2"},
    )  # fmt: skip
    assert "at 127.0.0.1:2" in done.stderr, done.stderr
