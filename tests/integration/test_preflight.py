"""``kafka-timers preflight`` against a real broker: it names what is missing, with the
command that fixes it, and passes once the cluster has it."""

from __future__ import annotations

import json
import uuid

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from app.kafka.config import confluent_common
from app.kafka.demand import demand_topic
from app.kafka.topic_config import control_topic
from app.kafka.topics import ensure_topics
from app.settings import Settings
from tests.conftest import fresh_settings
from tests.support.broker import BrokerInfo
from tests.support.cli import run_cli


def checks(settings: Settings, *args: str) -> tuple[int, dict[str, dict[str, str]]]:
    done = run_cli(settings, "preflight", "--json", *args)
    assert done.returncode in (0, 1), done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert "preflight:" in done.stderr.splitlines()[-1], done.stderr
    return done.returncode, {c["what"]: c for c in lines}


def test_preflight_names_what_is_missing_and_passes_once_it_is_there(broker: BrokerInfo) -> None:
    settings = fresh_settings(broker.bootstrap)  # topics no one created yet
    callback = f"cb-{uuid.uuid4().hex[:8]}"
    status, found = checks(settings, "--callback-topic", callback)
    assert status == 1
    for name in (
        *settings.topics.all(),
        settings.changelog_topic,
        control_topic(settings),
        demand_topic(settings),
    ):
        check = found[f"topic {name}"]
        assert check["status"] == "MISSING" and "kafka-topics" in check["detail"], check
    assert found[f"callback topic {callback}"]["status"] == "MISSING"

    ensure_topics(settings)  # the control and demand topics too
    ensure_topics(settings, [callback])
    status, found = checks(settings, "--callback-topic", callback)
    assert status == 0, found
    assert {c["status"] for c in found.values()} <= {"ok", "UNKNOWN"}
    assert found[f"topic {settings.changelog_topic}"]["status"] == "ok"

    # A changelog that is not compacted would lose timers: missing, with its fix.
    admin = AdminClient(confluent_common(settings))
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        settings.changelog_topic,
        incremental_configs=[
            ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(15)
    status, found = checks(settings)
    changelog = found[f"topic {settings.changelog_topic}"]
    assert status == 1 and changelog["status"] == "MISSING", changelog
    assert "cleanup.policy=compact" in changelog["detail"], changelog
    # Each role checks only the topics it uses.
    status, found = checks(settings, "--role", "producer")
    assert status == 0 and f"topic {settings.changelog_topic}" not in found, found
