"""The configuration the service creates its topics with, and the check of existing ones."""

from __future__ import annotations

from dataclasses import replace

from app.kafka.topic_config import (
    DescribedConfig,
    check_existing,
    tombstone_retention_seconds,
    topic_specs,
)
from app.settings import Settings

SETTINGS = replace(Settings(), bootstrap_servers="kafka:9092", partitions=8)
CHANGELOG = SETTINGS.changelog_topic


def test_every_service_topic_has_an_explicit_policy_and_the_changelog_is_compacted() -> None:
    specs = topic_specs(SETTINGS)
    assert set(specs) == {*SETTINGS.topics.all(), CHANGELOG}
    for spec in specs.values():
        assert spec.config["cleanup.policy"] in ("compact", "delete"), spec.name
        if spec.config["cleanup.policy"] == "delete":
            assert int(spec.config["retention.ms"]) > 0, spec.name
    changelog = specs[CHANGELOG].config
    assert changelog["cleanup.policy"] == "compact"
    assert "retention.ms" not in changelog, "a compacted changelog must not also expire"
    assert float(changelog["min.cleanable.dirty.ratio"]) < 0.5
    assert int(changelog["segment.bytes"]) < 1024**3
    # ticks: a worker only needs the newest; a short retention bounds the replay
    assert int(specs[SETTINGS.topics.ticks].config["retention.ms"]) <= 6 * 3_600_000
    # requests are kept at least as long as ids are remembered
    requests = specs[SETTINGS.topics.requests].config
    assert int(requests["retention.ms"]) >= SETTINGS.remember_seconds * 1000


def test_a_changelog_that_is_not_compacted_is_fatal_with_the_fix() -> None:
    for described in ({"cleanup.policy": "delete"}, {}, {"cleanup.policy": "compact,delete"}):
        fatal, _ = check_existing(SETTINGS, {CHANGELOG: described})
        assert fatal is not None
        assert "\n" not in fatal
        assert (
            "kafka-configs --bootstrap-server kafka:9092 --alter --entity-type topics "
            f"--entity-name {CHANGELOG} --add-config cleanup.policy=compact"
        ) in fatal
    assert "broker default" in (check_existing(SETTINGS, {CHANGELOG: {}})[0] or "")


def test_a_compacted_changelog_passes_and_other_differences_only_warn() -> None:
    described = {
        CHANGELOG: {"cleanup.policy": "compact", "segment.ms": "604800000"},
        SETTINGS.topics.ticks: {"cleanup.policy": "delete", "retention.ms": "604800000"},
        SETTINGS.topics.requests: {},  # auto-created: nothing reported, nothing judged
        "someone-elses-topic": {"cleanup.policy": "delete"},
    }
    fatal, warnings = check_existing(SETTINGS, described)
    assert fatal is None
    assert len(warnings) == 2
    assert any("segment.ms=604800000" in w and CHANGELOG in w for w in warnings)
    assert any("retention.ms=604800000" in w and SETTINGS.topics.ticks in w for w in warnings)


def test_a_broker_default_is_never_judged_but_a_changelog_must_still_be_compacted() -> None:
    """As Apache Kafka describes a topic: every config, the unset ones as defaults."""
    dlq = SETTINGS.topics.dlq
    described = {
        dlq: DescribedConfig(
            {
                "cleanup.policy": "delete",
                "max.message.bytes": "200000",
                "retention.ms": "604800000",
            },
            defaults=["retention.ms"],  # 7 days, Kafka's default: not what we create it with
        ),
        SETTINGS.topics.ticks: DescribedConfig(
            {"cleanup.policy": "delete", "retention.ms": "60000", "segment.ms": "604800000"},
            defaults=["cleanup.policy", "segment.ms"],
        ),
    }
    fatal, warnings = check_existing(SETTINGS, described)
    assert fatal is None
    assert len(warnings) == 1 and "retention.ms=60000" in warnings[0], warnings
    assert described[dlq].set_on_topic() == {
        "cleanup.policy": "delete",
        "max.message.bytes": "200000",
    }
    # a changelog left at the broker's default policy is as fatal as one set to delete
    default_policy = DescribedConfig({"cleanup.policy": "delete"}, defaults=["cleanup.policy"])
    fatal, _ = check_existing(SETTINGS, {CHANGELOG: default_policy})
    assert fatal is not None and "cleanup.policy=delete (the broker's default)" in fatal


def test_tombstone_retention_defaults_to_apache_kafkas() -> None:
    assert tombstone_retention_seconds({}) == 86400
    assert tombstone_retention_seconds({"delete.retention.ms": "3600000"}) == 3600


def test_the_record_budget_is_the_smallest_of_the_producer_and_the_topics_written() -> None:
    import pytest

    from app.kafka.topic_config import record_budget
    from kafka_timers_client.errors import ConfigurationError

    settings = replace(Settings(), max_payload_bytes=100_000)
    assert record_budget(settings, {}) == 1_000_000
    described = {
        settings.changelog_topic: {"max.message.bytes": "500000"},
        settings.topics.requests: {"max.message.bytes": "1000"},  # never written: no say
    }
    assert record_budget(settings, described) == 499_900
    with pytest.raises(
        ConfigurationError, match="lower it to at most 34364, or raise it: kafka-configs"
    ):
        record_budget(settings, {settings.topics.dlq: {"max.message.bytes": "100000"}})
