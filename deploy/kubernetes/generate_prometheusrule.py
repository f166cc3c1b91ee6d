"""Write prometheusrule.yaml: the Prometheus Operator form of deploy/prometheus/alerts.yml.

    python deploy/kubernetes/generate_prometheusrule.py

One source of alert rules for compose and Kubernetes: edit alerts.yml (and its promtool
tests), then run this. tests/unit/test_kubernetes.py fails while the two differ.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ALERTS = HERE.parent / "prometheus" / "alerts.yml"
TARGET = HERE / "prometheusrule.yaml"

HEADER = """\
# GENERATED from deploy/prometheus/alerts.yml by generate_prometheusrule.py: do not edit.
# Your Prometheus must select it (ruleSelector; kube-prometheus-stack: its release label).
"""


def render(alerts_text: str) -> str:
    """The PrometheusRule resource for the rule groups in ``alerts_text``."""
    rules: dict[str, Any] = yaml.safe_load(alerts_text)
    resource = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "kafka-timers", "labels": {"app.kubernetes.io/name": "kafka-timers"}},
        "spec": {"groups": rules["groups"]},
    }
    return HEADER + yaml.safe_dump(resource, sort_keys=False, width=100, allow_unicode=True)


def main() -> int:
    TARGET.write_text(render(ALERTS.read_text()))
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
