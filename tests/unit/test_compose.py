"""The deployment files agree with the code: no Docker engine runs here, so check by reading.

docker-compose.yml, the Dockerfile, the Procfile, Prometheus's scrape config and alert
rules and the Grafana dashboard each repeat names the code owns — subcommands and flags,
environment variables, ports, metric names. Each test below reads one of those files
and checks it against the code itself (the CLI parser, :class:`Settings`, the metric
registries), so renaming something in the code breaks a test, not a deployment.

The alert rules are also checked and unit-tested by ``promtool`` (Debian package
``prometheus``, installed by ``make test`` where the machine allows it). Without it
those tests skip with one line saying so; CI refuses the skip.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.cli import build_parser
from app.settings import Settings
from app.worker.metrics import WorkerMetrics
from oscillator.health import LIVEZ_PATH
from oscillator.metrics import OscillatorMetrics
from tests.support.full_settings import full_settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = ROOT / "docker-compose.yml"
PROMETHEUS_DIR = DEPLOY / "prometheus"
GRAFANA_DIR = DEPLOY / "grafana"


def _load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = _load_yaml(COMPOSE)
    return data


def _kafka_timers_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: svc for name, svc in compose["services"].items() if svc.get("build")}


def _entrypoint() -> list[str]:
    """The Dockerfile's exec-form ENTRYPOINT of the final stage."""
    entry = None
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("ENTRYPOINT"):
            entry = json.loads(line.removeprefix("ENTRYPOINT").strip())
    assert entry is not None, "Dockerfile has no ENTRYPOINT"
    return list(entry)


def _parse_cli(argv: list[str]) -> Any:
    try:
        return build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse reports on stderr and exits
        raise AssertionError(f"kafka-timers rejects {argv!r}") from exc


def _known_environment() -> set[str]:
    """Every variable :meth:`Settings.from_env` reads (what ``to_env`` writes, all set)."""
    return set(full_settings().to_env())


def _effective_settings(svc: dict[str, Any]) -> tuple[Any, Settings]:
    """What the process in ``svc`` would run with: its env, then its command-line flags."""
    args = _parse_cli(list(svc["command"]))
    env = {k: str(v) for k, v in svc.get("environment", {}).items()}
    settings = Settings.from_env(env).with_overrides(
        worker_id=getattr(args, "id", None),
        data_dir=getattr(args, "data_dir", None),
        web_port=getattr(args, "web_port", None),
        metrics_port=getattr(args, "metrics_port", None),
    )
    return args, settings


def _worker_metrics_probe_paths() -> set[str]:
    """The probe paths the worker serves on its metrics port."""
    import asyncio

    from app.status.health import probes_on_loop

    loop = asyncio.new_event_loop()
    try:
        return set(probes_on_loop(loop, None, None))  # type: ignore[arg-type]
    finally:
        loop.close()


def _worker_health_paths() -> set[str]:
    """The paths the worker's health views register on its web server."""
    from app.status.health import register_health_views

    paths: set[str] = set()

    class App:
        def page(self, path: str, name: str) -> Any:
            paths.add(path)
            return lambda handler: handler

    register_health_views(App(), None, None)  # type: ignore[arg-type]
    return paths


def _container_ports(svc: dict[str, Any]) -> set[int]:
    ports = {int(p) for p in svc.get("expose", [])}
    for mapping in svc.get("ports", []):
        ports.add(int(str(mapping).split(":")[-1]))
    return ports


def test_the_stack_has_kafka_two_oscillators_two_workers_prometheus_and_grafana(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    assert services["kafka"]["image"].startswith("apache/kafka:")
    roles = [
        _parse_cli(list(s["command"])).command for s in _kafka_timers_services(compose).values()
    ]
    assert sorted(roles) == ["oscillator", "oscillator", "worker", "worker"]
    assert services["prometheus"]["image"].startswith("prom/prometheus:")
    assert services["grafana"]["image"].startswith("grafana/grafana:")


def test_kafka_runs_in_kraft_mode_and_advertises_what_the_services_use(
    compose: dict[str, Any],
) -> None:
    env = compose["services"]["kafka"]["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert "KAFKA_ZOOKEEPER_CONNECT" not in env
    node_id = env["KAFKA_NODE_ID"]
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{node_id}@kafka:")
    # Kafka's storage tool refuses a cluster id that is not a base64 UUID (16 bytes).
    assert len(base64.urlsafe_b64decode(env["CLUSTER_ID"] + "==")) == 16
    listeners = dict(item.split("://") for item in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] in listeners
    protocol_map = dict(
        kv.split(":") for kv in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
    )
    assert set(listeners) | {env["KAFKA_CONTROLLER_LISTENER_NAMES"]} <= set(protocol_map)
    for name, svc in _kafka_timers_services(compose).items():
        _, settings = _effective_settings(svc)
        assert settings.bootstrap_servers in listeners.values(), name
        assert protocol_map[_listener_for(listeners, settings.bootstrap_servers)] == (
            settings.security.protocol
        ), name
        assert svc["depends_on"]["kafka"]["condition"] == "service_healthy", name


def _listener_for(listeners: dict[str, str], address: str) -> str:
    return next(name for name, addr in listeners.items() if addr == address)


def test_every_service_command_is_a_real_subcommand_of_the_image_entrypoint(
    compose: dict[str, Any],
) -> None:
    assert _entrypoint() == ["kafka-timers"]
    services = _kafka_timers_services(compose)
    assert len(services) == 4
    for name, svc in services.items():
        assert svc["build"] == ".", name
        args = _parse_cli(list(svc["command"]))
        assert args.worker_id == name, f"{name}: its id should match the service name"


def test_every_environment_variable_is_one_the_code_reads(compose: dict[str, Any]) -> None:
    known = _known_environment()
    for name, svc in _kafka_timers_services(compose).items():
        unknown = set(svc["environment"]) - known
        assert not unknown, f"{name} sets variables no code reads: {sorted(unknown)}"
        Settings.from_env({k: str(v) for k, v in svc["environment"].items()})  # parses


def test_workers_have_their_own_data_volume_and_ports_match_the_code(
    compose: dict[str, Any],
) -> None:
    data_dirs: dict[str, str] = {}
    for name, svc in _kafka_timers_services(compose).items():
        args, settings = _effective_settings(svc)
        assert settings.metrics_port is not None, f"{name} exports no /metrics"
        ports = _container_ports(svc)
        assert settings.metrics_port in ports, f"{name}: metrics port not exposed"
        if args.command == "worker":
            assert settings.web_port in ports, f"{name}: status page port not exposed"
            mounts = {m.split(":")[1]: m.split(":")[0] for m in svc["volumes"]}
            assert settings.data_dir in mounts, f"{name}: RocksDB dir is not on a volume"
            data_dirs[name] = mounts[settings.data_dir]
            assert mounts[settings.data_dir] in compose["volumes"]
            check = " ".join(svc["healthcheck"]["test"])
            # On the metrics port, outside the web port's connection cap.
            assert f"127.0.0.1:{settings.metrics_port}/readyz'" in check
            assert "/readyz" in _worker_health_paths()
            assert "/readyz" in _worker_metrics_probe_paths()
        else:
            check = " ".join(svc["healthcheck"]["test"])
            assert f"127.0.0.1:{settings.metrics_port}{LIVEZ_PATH}'" in check
    assert len(set(data_dirs.values())) == len(data_dirs) == 2, "one RocksDB volume per worker"
    host_ports = [
        str(p).split(":")[0] for svc in compose["services"].values() for p in svc.get("ports", [])
    ]
    assert len(host_ports) == len(set(host_ports)), "two services publish one host port"


def test_dockerfile_defaults_match_the_settings_and_exposed_ports() -> None:
    text = (ROOT / "Dockerfile").read_text()
    env = dict(re.findall(r"(\w+)=(\S+)", text.split("ENV", 2)[-1].split("VOLUME")[0]))
    settings = Settings.from_env(env)
    exposed = {int(p) for p in re.search(r"^EXPOSE (.+)$", text, re.M).group(1).split()}  # type: ignore[union-attr]
    assert {settings.web_port, settings.metrics_port} == exposed
    assert settings.data_dir in re.search(r'^VOLUME \["(.+)"\]', text, re.M).group(1)  # type: ignore[union-attr]
    assert _parse_cli(json.loads(re.search(r"^CMD (.+)$", text, re.M).group(1))).command  # type: ignore[union-attr]


def test_prometheus_scrapes_every_process_on_its_metrics_port(compose: dict[str, Any]) -> None:
    config = _load_yaml(PROMETHEUS_DIR / "prometheus.yml")
    targets = {
        (job["job_name"], target)
        for job in config["scrape_configs"]
        for static in job.get("static_configs", [])
        for target in static["targets"]
    }
    for name, svc in _kafka_timers_services(compose).items():
        args, settings = _effective_settings(svc)
        assert (f"kafka-timers-{args.command}", f"{name}:{settings.metrics_port}") in targets
    for rule_file in config["rule_files"]:
        assert (PROMETHEUS_DIR / rule_file).is_file()
    mounts = compose["services"]["prometheus"]["volumes"]
    assert "./deploy/prometheus:/etc/prometheus:ro" in mounts
    assert (
        "--config.file=/etc/prometheus/prometheus.yml"
        in compose["services"]["prometheus"]["command"]
    )


def _exported_metric_names() -> set[str]:
    """Every series name the processes export, as Prometheus sees it."""
    names: set[str] = set()
    worker, oscillator = WorkerMetrics(), OscillatorMetrics()
    worker.fired.labels(callback_topic="t").inc()
    worker.rejected.labels(reason="r").inc()
    worker.last_tick.labels(partition="0").set(1)
    worker.clock_skew.labels(source="oscillator-1").set(0)
    worker.ticks_held.labels(source="oscillator-1").inc()
    worker.oscillator_ahead.labels(source="oscillator-1").set(0)
    worker.request_lag_records.labels(partition="0").set(0)
    worker.request_lag_seconds.labels(partition="0").set(0)
    worker.request_group_lag.labels(partition="0").set(0)
    for registry in (worker.registry, oscillator.registry):
        for family in registry.collect():
            names.update(sample.name for sample in family.samples)
    return names


_PROMQL_WORDS = {
    "sum", "by", "rate", "increase", "histogram_quantile", "time", "max", "min", "le",
    "up", "without", "on", "and", "or", "unless", "avg", "count", "abs", "bool", "deriv",
}  # fmt: skip


def _metric_names_in(expr: str) -> set[str]:
    """Identifiers in a PromQL expression that are metric names (not functions, labels)."""
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    expr = re.sub(r"(by|without|on)\s*\([^)]*\)", "", expr)  # grouping labels
    return {w for w in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr) if w not in _PROMQL_WORDS}


def _alert_rules() -> list[dict[str, Any]]:
    rules = _load_yaml(PROMETHEUS_DIR / "alerts.yml")
    return [rule for group in rules["groups"] for rule in group["rules"]]


def test_alert_rules_cover_the_required_failures_with_metrics_that_exist() -> None:
    exported = _exported_metric_names()
    rules = {rule["alert"]: rule for rule in _alert_rules()}
    assert {
        "KafkaTimersNoTicks",
        "KafkaTimersFireLatenessHigh",
        "KafkaTimersDeadLettersGrowing",
        "KafkaTimersRequestLag",
    } <= set(rules)
    assert "kafka_timers_last_tick_seconds" in rules["KafkaTimersNoTicks"]["expr"]
    assert "> 5" in rules["KafkaTimersNoTicks"]["expr"]
    assert "histogram_quantile(0.99" in rules["KafkaTimersFireLatenessHigh"]["expr"]
    assert "> 2" in rules["KafkaTimersFireLatenessHigh"]["expr"]
    assert "kafka_timers_rejected_total" in rules["KafkaTimersDeadLettersGrowing"]["expr"]
    lag = rules["KafkaTimersRequestLag"]["expr"]
    assert "kafka_timers_request_lag_seconds" in lag
    assert "kafka_timers_request_group_lag_records" in lag
    for name, rule in rules.items():
        unknown = _metric_names_in(rule["expr"]) - exported - {"up"}
        assert not unknown, f"{name} uses metrics no process exports: {unknown}"


def _dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (GRAFANA_DIR / "dashboards" / "kafka-timers.json").read_text()
    )
    return data


def test_grafana_is_provisioned_with_the_datasource_the_dashboard_uses(
    compose: dict[str, Any],
) -> None:
    datasources = _load_yaml(GRAFANA_DIR / "provisioning" / "datasources" / "prometheus.yml")
    (source,) = datasources["datasources"]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    providers = _load_yaml(GRAFANA_DIR / "provisioning" / "dashboards" / "kafka-timers.yml")
    (provider,) = providers["providers"]
    grafana = compose["services"]["grafana"]
    mounts = dict(m.rsplit(":", 1)[0].split(":") for m in grafana["volumes"] if m.startswith("."))
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    assert mounts["./deploy/grafana/dashboards"] == provider["options"]["path"]
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == provider["options"]["path"] + "/kafka-timers.json"
    for panel in _dashboard()["panels"]:
        assert panel["datasource"]["uid"] == source["uid"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == source["uid"], panel["title"]


def test_the_dashboard_shows_the_required_panels_from_metrics_that_exist() -> None:
    exported = _exported_metric_names()
    panels = _dashboard()["panels"]
    exprs = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in panels}
    wanted = {
        "fired per second by callback topic": "kafka_timers_fired_total",
        "pending": "kafka_timers_pending",
        "lateness p50 / p99": "kafka_timers_fire_lateness_seconds_bucket",
        "tick delay": "kafka_timers_oscillator_tick_delay_seconds_bucket",
        "rejected": "kafka_timers_rejected_total",
        "request lag (records)": "kafka_timers_request_group_lag_records",
        "request lag (seconds)": "kafka_timers_request_lag_seconds",
    }
    for words, metric in wanted.items():
        matching = [t for t in exprs if words in t.lower()]
        assert matching, f"no panel titled like {words!r}"
        assert any(metric in exprs[t] for t in matching), f"{words!r} panels do not use {metric}"
    lateness = next(e for t, e in exprs.items() if "lateness p50 / p99" in t.lower())
    assert "histogram_quantile(0.5," in lateness and "histogram_quantile(0.99," in lateness
    assert "by (callback_topic)" in next(e for t, e in exprs.items() if "callback topic" in t)
    for title, expr in exprs.items():
        unknown = _metric_names_in(expr.replace("$__rate_interval", "1m")) - exported
        assert not unknown, f"panel {title!r} uses metrics no process exports: {unknown}"


def test_procfile_has_oscillator_and_worker_process_types_the_cli_accepts() -> None:
    entries = dict(
        line.split(":", 1) for line in (ROOT / "Procfile").read_text().splitlines() if line.strip()
    )
    assert {"oscillator", "worker"} <= set(entries)
    for kind in ("oscillator", "worker"):
        argv = shlex.split(entries[kind])
        assert argv[0] == "kafka-timers", kind
        assert _parse_cli(argv[1:]).command == kind


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool not installed: install the Debian/Ubuntu package 'prometheus'")
    return path


def _run(argv: list[str], cwd: Path) -> None:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}"


def test_promtool_accepts_the_config_and_the_alerts_fire_as_their_unit_tests_say() -> None:
    promtool = _promtool()
    _run([promtool, "check", "config", "prometheus.yml"], PROMETHEUS_DIR)
    _run([promtool, "test", "rules", "alerts.test.yml"], PROMETHEUS_DIR)


def test_promtool_parses_every_dashboard_query(tmp_path: Path) -> None:
    promtool = _promtool()
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {
                        "record": f"dashboard:query_{i}",
                        "expr": t["expr"].replace("$__rate_interval", "1m"),
                    }
                    for i, t in enumerate(t for p in _dashboard()["panels"] for t in p["targets"])
                ],
            }
        ]
    }
    (tmp_path / "dashboard.rules.yml").write_text(yaml.safe_dump(rules))
    _run([promtool, "check", "rules", "dashboard.rules.yml"], tmp_path)
