"""The settings table: every setting declared once on its field, and what is generated
from it (reading, writing back, the ``kafka-timers config`` listing, the docs' table)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from app.cli import main
from app.settings import SecuritySettings, Settings, TopicNames
from app.settings.reference import BEGIN, DOCS, END, MASK, config_listing, docs_table, with_table
from app.settings.reference import main as reference_main
from app.settings.table import specs
from kafka_timers_client.errors import ConfigurationError

SECRET = "0123456789abcdef-secret"


def test_the_docs_table_is_generated_from_the_declarations() -> None:
    text = DOCS.read_text(encoding="utf-8")
    assert with_table(text) == text, (
        "docs/configuration.md's settings table is out of date: "
        "run `make docs-settings` (python -m app.settings.reference)"
    )


def test_the_check_fails_on_a_stale_table_and_the_rewrite_mends_it(tmp_path: Path) -> None:
    stale = tmp_path / "configuration.md"
    good = DOCS.read_text(encoding="utf-8")
    stale.write_text(good.replace("| `KAFKA_TIMERS_WEB_PORT`", "| `KAFKA_TIMERS_WEB_PART`"))
    assert reference_main(["--check", "--docs", str(stale)]) == 1
    assert reference_main(["--docs", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == good
    assert reference_main(["--check", "--docs", str(stale)]) == 0


def test_every_field_is_a_setting_with_its_own_variable() -> None:
    declared = {spec.path for spec in specs(Settings)}
    fields = {f.name for f in dataclasses.fields(Settings)} - {"topics", "security", "chosen"}
    fields |= {f"topics.{f.name}" for f in dataclasses.fields(TopicNames)}
    fields |= {f"security.{f.name}" for f in dataclasses.fields(SecuritySettings)}
    assert declared == fields
    variables = [spec.env for spec in specs(Settings)]
    assert len(variables) == len(set(variables))
    table = docs_table()
    assert all(f"`{name}`" in table for name in variables)


def test_the_table_gives_each_field_its_declared_default() -> None:
    built = Settings.from_env({"KAFKA_TIMERS_WORKER_ID": "w", "KAFKA_TIMERS_DEMO_FILE": "d"})
    direct = Settings(worker_id="w", demo_file="d")
    assert built == direct
    for spec in specs(Settings):
        if spec.default is not None:
            obj = getattr(direct, spec.path.split(".")[0])
            value = getattr(obj, spec.path.split(".")[1]) if "." in spec.path else obj
            assert value == spec.default, spec.path


def test_to_env_round_trips_settings_away_from_every_default(tmp_path: Path) -> None:
    cafile = tmp_path / "ca.pem"
    cafile.write_text("ca")
    changed = Settings(
        bootstrap_servers="k1:9092,k2:9093",
        partitions=3,
        topics=TopicNames(ticks="t", requests="r", fired="f", dlq="d"),
        web_idle_timeout=2.5,
        metrics_port=9100,
        callback_deny=("connect-.*", "orders-\\d{1,3}"),
        producer_message_max_bytes=2_000_000,
        max_payload_bytes=1000,
        exactly_once=True,
        otlp_endpoint="http://collector:4318",
        operator_token=SECRET,
        control_secret=SECRET,
        topic_rate_limits=(("reminders", 500.0), ("billing", 50 / 60)),
        security=SecuritySettings(
            protocol="SASL_SSL",
            sasl_mechanism="PLAIN",
            sasl_username="u",
            sasl_password="p",
            ssl_cafile=str(cafile),
        ),
    )
    env = changed.to_env()
    assert env["KAFKA_TIMERS_TOPIC_RATE_LIMITS"] == "reminders=500/s,billing=0.833333333333/s"
    again = Settings.from_env(env)
    assert dataclasses.replace(again, topic_rate_limits=changed.topic_rate_limits) == changed
    assert again.topic_rate_limits[0] == ("reminders", 500.0)
    assert again.topic_rate_limits[1][1] == pytest.approx(50 / 60)
    assert "KAFKA_TIMERS_SSL_CERTFILE" not in env  # unset stays unset


def test_the_listing_shows_values_and_defaults_and_masks_secrets() -> None:
    listing = config_listing(
        {
            "KAFKA_TIMERS_WEB_PORT": "7000",
            "KAFKA_TIMERS_CONTROL_SECRET": SECRET,
            "KAFKA_TIMERS_SECURITY_PROTOCOL": "sasl_plaintext",
            "KAFKA_TIMERS_SASL_USERNAME": "alice",
            "KAFKA_TIMERS_SASL_PASSWORD": "hunter2-password",
        }
    )
    rows = {line.split()[0]: line.split()[1:] for line in listing.splitlines()[1:]}
    assert rows["KAFKA_TIMERS_WEB_PORT"] == ["7000", "6066"]
    assert rows["KAFKA_TIMERS_SECURITY_PROTOCOL"] == ["SASL_PLAINTEXT", "PLAINTEXT"]
    assert rows["KAFKA_TIMERS_CONTROL_SECRET"][0] == MASK
    assert rows["KAFKA_TIMERS_SASL_PASSWORD"][0] == MASK
    assert rows["KAFKA_TIMERS_APP_ID"] == ["(unset)", "kafka-timers"]
    assert SECRET not in listing and "hunter2" not in listing
    assert len(rows) == len(list(specs(Settings)))


def test_the_listing_refuses_what_a_process_refuses() -> None:
    with pytest.raises(ConfigurationError, match="KAFKA_TIMERS_WEB_PORT='0': must be from 1"):
        config_listing({"KAFKA_TIMERS_WEB_PORT": "0"})


def test_kafka_timers_config(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KAFKA_TIMERS_OPERATOR_TOKEN", SECRET)
    monkeypatch.setenv("KAFKA_TIMERS_TICK_TOPIC", "my-ticks")
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    assert "KAFKA_TIMERS_TICK_TOPIC" in out and "my-ticks" in out and SECRET not in out
    monkeypatch.setenv("KAFKA_TIMERS_TICK_TOPIC", "bad topic")
    assert main(["config"]) == 2
    assert (
        "KAFKA_TIMERS_TICK_TOPIC='bad topic' is not a Kafka topic name" in capsys.readouterr().err
    )


def test_the_markers_are_in_the_docs_once() -> None:
    text = DOCS.read_text(encoding="utf-8")
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    assert text.index(BEGIN) < text.index(END)


@pytest.mark.parametrize(
    ("first", "second"),
    [("TICK_TOPIC", "DLQ_TOPIC"), ("REQUEST_TOPIC", "FIRED_TOPIC"), ("TICK_TOPIC", "FIRED_TOPIC")],
)
def test_two_service_topics_with_one_name_are_refused_naming_both(first: str, second: str) -> None:
    """The variables named come from the topics' own declarations (``TopicNames``)."""
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env({f"KAFKA_TIMERS_{first}": "same", f"KAFKA_TIMERS_{second}": "same"})
    assert str(caught.value) == (
        f"KAFKA_TIMERS_{second}='same' is also KAFKA_TIMERS_{first}: "
        "each service topic needs its own name"
    )
