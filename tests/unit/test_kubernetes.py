"""deploy/kubernetes renders, validates offline, and agrees with the code.

No cluster runs here, so, as tests/unit/test_compose.py does for compose, check by
reading: render the Kustomize directory with kubectl's built-in kustomize (no cluster
needed), validate every built-in kind against the Kubernetes JSON schemas bundled in
``kubernetes-validate`` (strict: an unknown field fails), check the Prometheus Operator
kinds (no schema bundled) by hand, and check every variable against :class:`Settings`,
every port and probe path against the code, and the PrometheusRule against
deploy/prometheus/alerts.yml.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from app.settings import Settings
from oscillator.health import LIVEZ_PATH
from tests.unit.test_compose import (
    _known_environment,
    _parse_cli,
    _worker_health_paths,
    _worker_metrics_probe_paths,
)

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
#: The oldest Kubernetes release still widely run; the manifests use nothing newer.
KUBERNETES_VERSION = "1.28.0"
POD_NAME = "kafka-timers-worker-0"


def _kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        pytest.skip("kubectl not installed: install the Debian/Ubuntu package 'kubernetes-client'")
    return path


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    done = subprocess.run(
        [_kubectl(), "kustomize", str(KUBE)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def _container(workload: dict[str, Any]) -> dict[str, Any]:
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return container


def test_the_kustomization_renders_every_required_kind(rendered: list[dict[str, Any]]) -> None:
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in rendered)
    assert kinds == [
        ("ConfigMap", "kafka-timers-kafka"),
        ("Deployment", "kafka-timers-oscillator"),
        ("PodDisruptionBudget", "kafka-timers-oscillator"),
        ("PodDisruptionBudget", "kafka-timers-worker"),
        ("PrometheusRule", "kafka-timers"),
        ("Service", "kafka-timers-oscillator"),
        ("Service", "kafka-timers-worker"),
        ("ServiceMonitor", "kafka-timers"),
        ("StatefulSet", "kafka-timers-worker"),
    ]


def test_every_builtin_resource_validates_against_the_kubernetes_schemas(
    rendered: list[dict[str, Any]],
) -> None:
    example = yaml.safe_load((KUBE / "secret.example.yaml").read_text())
    for doc in [*rendered, example]:
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # CRDs: no schema bundled, checked below
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise AssertionError(f"{doc['kind']}/{doc['metadata']['name']}: {exc}") from exc


def test_a_broken_manifest_is_caught_by_the_validator() -> None:
    """The validator really checks: a typo in a field name fails."""
    doc = yaml.safe_load((KUBE / "worker-pdb.yaml").read_text())
    doc["spec"]["maxUnavailabel"] = doc["spec"].pop("maxUnavailable")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def _environment(
    docs: list[dict[str, Any]], workload: dict[str, Any]
) -> tuple[set[str], dict[str, str]]:
    """Every variable the pod sets (names) and the values it would run with."""
    container = _container(workload)
    names: set[str] = set()
    values: dict[str, str] = {}
    example = yaml.safe_load((KUBE / "secret.example.yaml").read_text())
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            data = _one(docs, "ConfigMap", source["configMapRef"]["name"])["data"]
            names |= set(data)
            values.update(data)
        else:
            ref = source["secretRef"]
            assert ref["name"] == example["metadata"]["name"]
            assert ref.get("optional") is True, "PLAINTEXT clusters have no credentials"
            names |= set(example["stringData"])
    for var in container["env"]:
        names.add(var["name"])
        if "value" in var:
            values[var["name"]] = var["value"]
        else:
            assert var["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
            values[var["name"]] = POD_NAME
    return names, values


def _settings(docs: list[dict[str, Any]], workload: dict[str, Any]) -> tuple[Any, Settings]:
    _, values = _environment(docs, workload)
    args = _parse_cli(list(_container(workload)["args"]))
    return args, Settings.from_env(values)


def test_every_environment_variable_is_one_the_code_reads(rendered: list[dict[str, Any]]) -> None:
    known = _known_environment()
    for kind, name in (
        ("StatefulSet", "kafka-timers-worker"),
        ("Deployment", "kafka-timers-oscillator"),
    ):
        workload = _one(rendered, kind, name)
        names, _ = _environment(rendered, workload)
        assert not names - known, f"{name} sets variables no code reads: {sorted(names - known)}"
        _, settings = _settings(rendered, workload)  # and they parse
        assert settings.worker_id == POD_NAME, "the worker id is the stable pod name"


def _running(
    rendered: list[dict[str, Any]], kind: str, name: str, command: str
) -> tuple[dict[str, Any], Settings]:
    """The workload ``name`` of ``kind``, checked to run ``kafka-timers <command>``, and
    the settings its environment gives."""
    workload = _one(rendered, kind, name)
    args, settings = _settings(rendered, workload)
    assert args.command == command
    return workload, settings


def _ports(container: dict[str, Any]) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in container["ports"]}


def test_workers_are_a_statefulset_with_stable_ids_volumes_probes_and_code_ports(
    rendered: list[dict[str, Any]],
) -> None:
    worker, settings = _running(rendered, "StatefulSet", "kafka-timers-worker", "worker")
    container = _container(worker)
    ports = _ports(container)
    assert ports == {"web": settings.web_port, "metrics": settings.metrics_port}
    (claim,) = worker["spec"]["volumeClaimTemplates"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == settings.data_dir
    assert worker["spec"]["template"]["spec"]["securityContext"]["fsGroup"] == 10001
    assert 1 <= worker["spec"]["replicas"] <= settings.partitions
    paths = _worker_health_paths()
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz" in paths
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez" in paths
    probe_paths = _worker_metrics_probe_paths()
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        # On the metrics port: outside the web port's connection cap.
        assert container[probe]["httpGet"]["port"] == "metrics", probe
        assert container[probe]["httpGet"]["path"] in probe_paths, probe
    # A takeover blocks the event loop while it reads changelogs: liveness must outlast it.
    live = container["livenessProbe"]
    assert live["periodSeconds"] * live["failureThreshold"] >= 60
    assert container["resources"]["requests"].keys() == {"cpu", "memory"}


def test_oscillators_are_two_or_more_spread_over_nodes_with_a_liveness_probe(
    rendered: list[dict[str, Any]],
) -> None:
    osc, settings = _running(rendered, "Deployment", "kafka-timers-oscillator", "oscillator")
    assert osc["spec"]["replicas"] >= 2
    pod = osc["spec"]["template"]["spec"]
    spread = {c["topologyKey"]: c["whenUnsatisfiable"] for c in pod["topologySpreadConstraints"]}
    assert spread["kubernetes.io/hostname"] == "DoNotSchedule"
    container = _container(osc)
    assert _ports(container) == {"metrics": settings.metrics_port}
    assert container["livenessProbe"]["httpGet"] == {"path": LIVEZ_PATH, "port": "metrics"}


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_services_budgets_and_the_servicemonitor_select_what_they_should(
    rendered: list[dict[str, Any]],
) -> None:
    workloads = {
        "worker": _one(rendered, "StatefulSet", "kafka-timers-worker"),
        "oscillator": _one(rendered, "Deployment", "kafka-timers-oscillator"),
    }
    monitor = _one(rendered, "ServiceMonitor", "kafka-timers")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    compose_jobs = {
        job["job_name"]
        for job in yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())[
            "scrape_configs"
        ]
    }
    for component, workload in workloads.items():
        pod_labels = workload["spec"]["template"]["metadata"]["labels"]
        assert _selects(workload["spec"]["selector"]["matchLabels"], pod_labels)
        service = _one(rendered, "Service", f"kafka-timers-{component}")
        assert _selects(service["spec"]["selector"], pod_labels)
        container_ports = _ports(_container(workload))
        for port in service["spec"]["ports"]:
            assert container_ports[port["targetPort"]] == port["port"], port
        assert _selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
        assert "metrics" in {p["name"] for p in service["spec"]["ports"]}
        # The operator names the job after the Service: the same job names as compose's.
        assert service["metadata"]["name"] in compose_jobs
        budget = _one(rendered, "PodDisruptionBudget", f"kafka-timers-{component}")
        assert _selects(budget["spec"]["selector"]["matchLabels"], pod_labels)
    assert workloads["worker"]["spec"]["serviceName"] == "kafka-timers-worker"


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location(
        "generate_prometheusrule", KUBE / "generate_prometheusrule.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_prometheusrule_is_generated_from_the_compose_alert_rules(
    rendered: list[dict[str, Any]],
) -> None:
    alerts = (ROOT / "deploy" / "prometheus" / "alerts.yml").read_text()
    expected = _generator().render(alerts)
    assert (KUBE / "prometheusrule.yaml").read_text() == expected, (
        "deploy/kubernetes/prometheusrule.yaml is out of date: "
        "run python deploy/kubernetes/generate_prometheusrule.py"
    )
    rule = _one(rendered, "PrometheusRule", "kafka-timers")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"]["groups"] == yaml.safe_load(alerts)["groups"]
    for group in rule["spec"]["groups"]:
        for r in group["rules"]:
            assert {"alert", "expr", "labels", "annotations"} <= set(r), r


def test_promtool_accepts_the_prometheusrule_groups(
    rendered: list[dict[str, Any]], tmp_path: Path
) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed: install the Debian/Ubuntu package 'prometheus'")
    rule = _one(rendered, "PrometheusRule", "kafka-timers")
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    done = subprocess.run(
        [promtool, "check", "rules", "rules.yml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
