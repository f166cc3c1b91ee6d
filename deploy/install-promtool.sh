#!/usr/bin/env bash
# promtool, for tests/unit/test_compose.py: checks deploy/prometheus/prometheus.yml and
# runs the alert rules' unit tests (deploy/prometheus/alerts.test.yml). Debian ships it
# in the 'prometheus' package; the Prometheus server it also installs is not started here.
set -euo pipefail
if ! command -v promtool >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends prometheus
fi
promtool --version | head -n 1
