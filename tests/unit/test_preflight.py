"""``kafka-timers preflight`` judges topics and permissions, and docs/deploy.md's
``kafka-acls`` scripts grant exactly what it checks."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from app.kafka.demand import demand_topic
from app.kafka.topic_config import CHANGELOG_CONFIG, control_topic, topic_specs
from app.ops.preflight import (
    ROLES,
    Grant,
    Status,
    grants,
    judge_permissions,
    judge_topics,
    role_topics,
)
from app.settings import Settings

SETTINGS = replace(Settings(), partitions=8)
DOCS = Path(__file__).resolve().parents[2] / "docs"


def _all_there() -> tuple[dict[str, int], dict[str, dict[str, str]]]:
    existing = {name: 8 for name in topic_specs(SETTINGS)}
    existing[control_topic(SETTINGS)] = 1
    existing[demand_topic(SETTINGS)] = 1
    configs = {name: dict(spec.config) for name, spec in topic_specs(SETTINGS).items()}
    return existing, configs


def test_a_cluster_with_every_topic_as_created_is_ok() -> None:
    existing, configs = _all_there()
    checks = judge_topics(SETTINGS, "worker", existing, configs)
    assert {c.status for c in checks} == {Status.OK}
    assert [c.what for c in checks] == [f"topic {n}" for n in role_topics(SETTINGS, "worker")]


def test_what_is_missing_or_wrong_is_named_with_its_fix() -> None:
    existing, configs = _all_there()
    del existing[SETTINGS.topics.fired]
    existing[SETTINGS.topics.dlq] = 4
    configs[SETTINGS.changelog_topic] = {**CHANGELOG_CONFIG, "cleanup.policy": "delete"}
    configs[SETTINGS.topics.ticks] = {"retention.ms": "1000"}
    checks = {c.what: c for c in judge_topics(SETTINGS, "worker", existing, configs)}
    fired = checks[f"topic {SETTINGS.topics.fired}"]
    assert fired.status is Status.MISSING and "kafka-topics" in fired.detail
    assert "--partitions 8" in fired.detail and "retention.ms=1209600000" in fired.detail
    assert "4 partitions" in checks[f"topic {SETTINGS.topics.dlq}"].detail
    changelog = checks[f"topic {SETTINGS.changelog_topic}"]
    assert changelog.status is Status.MISSING and "cleanup.policy=compact" in changelog.detail
    ticks = checks[f"topic {SETTINGS.topics.ticks}"]
    assert ticks.status is Status.MISSING and "retention.ms=1000" in ticks.detail
    assert checks[f"topic {SETTINGS.topics.requests}"].status is Status.OK


def test_callback_topics_must_exist_and_a_prefix_is_not_looked_for() -> None:
    existing, configs = _all_there()
    checks = judge_topics(SETTINGS, "worker", existing, configs, ["pay", "rem-*"])
    (pay,) = [c for c in checks if "callback" in c.what]
    assert pay.status is Status.MISSING and "never creates" in pay.detail
    existing["pay"] = 3
    checks = judge_topics(SETTINGS, "worker", existing, configs, ["pay"])
    assert [c.status for c in checks if "callback" in c.what] == [Status.OK]


def test_permissions_from_what_the_broker_reports() -> None:
    needed = [
        Grant("topic", "a", ("READ", "DESCRIBE"), "why"),
        Grant("topic", "b", ("WRITE", "DESCRIBE_CONFIGS"), "why"),
        Grant("group", "g", ("READ",), "why"),
        Grant("topic", "c", ("WRITE",), "why"),
        Grant("topic", "pre", ("WRITE",), "why", "prefixed"),
    ]
    authorized = {
        ("topic", "a"): frozenset({"READ"}),  # READ implies DESCRIBE
        ("topic", "b"): frozenset({"WRITE"}),  # no DESCRIBE_CONFIGS
        ("group", "g"): frozenset({"ALL"}),
        ("topic", "c"): None,  # the broker did not say
    }
    statuses = [c.status for c in judge_permissions(needed, authorized)]
    assert statuses == [Status.OK, Status.MISSING, Status.OK, Status.UNKNOWN, Status.UNKNOWN]
    (missing,) = [c for c in judge_permissions(needed, authorized) if c.status is Status.MISSING]
    assert "DESCRIBE_CONFIGS" in missing.detail and "WRITE" not in missing.detail.split(":")[1]


#: The variable each role's script names its principal with.
PRINCIPALS = {
    "worker": "WORKERS",
    "oscillator": "OSCILLATORS",
    "producer": "PRODUCERS",
    "operator": "OPERATORS",
    "audit": "AUDIT",
}


def _script_grants(role: str) -> set[tuple[str, str, str, str]]:
    """(resource, name, pattern, operation) of every kafka-acls line in the role's script."""
    text = (DOCS / "deploy.md").read_text()
    block = re.search(rf"```sh\n# acls-{role}\n(.*?)```", text, re.S)
    assert block is not None, f"docs/deploy.md has no script for {role}"
    script = block.group(1).replace("\\\n", " ")
    found = set()
    for line in script.splitlines():
        if not line.startswith("$ACLS --add"):
            continue
        assert f"--allow-principal ${PRINCIPALS[role]} " in line, line
        pattern = "prefixed" if "--resource-pattern-type prefixed" in line else "literal"
        resource = next(
            (kind, m.group(1))
            for kind, flag in (
                ("topic", "--topic"),
                ("group", "--group"),
                ("transactional-id", "--transactional-id"),
                ("cluster", "--cluster"),
            )
            if (m := re.search(rf"{flag}(?: (\S+))?", line))
        )
        name = resource[1] or "kafka-cluster"
        for op in re.findall(r"--operation (\w+)", line):
            found.add((resource[0], name, pattern, op.upper()))
    return found


def _expected(role: str, settings: Settings) -> set[tuple[str, str, str, str]]:
    return {
        (g.resource, g.name, g.pattern, op.replace("_", ""))
        for g in grants(settings, role, ["$CALLBACK_PREFIX*"])
        for op in g.operations
    }


@pytest.mark.parametrize("role", ROLES)
def test_the_deploy_docs_scripts_grant_what_preflight_checks(role: str) -> None:
    settings = replace(SETTINGS, exactly_once=True, worker_id="$WORKER_ID")
    script = {(r, n, p, op.replace("_", "")) for r, n, p, op in _script_grants(role)}
    assert script == _expected(role, settings)
