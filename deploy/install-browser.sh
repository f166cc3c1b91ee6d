#!/usr/bin/env bash
# Headless browser for the status-page test (pytest -m browser): Debian's Chromium, and the
# Python Playwright package that drives it through executable_path=/usr/bin/chromium.
# Never `playwright install`: it downloads a browser, and these machines reach no such host.
# Usage: deploy/install-browser.sh [path/to/venv]   (default: .venv)
set -euo pipefail
VENV="${1:-.venv}"
if ! command -v chromium >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends chromium
fi
"$VENV/bin/pip" install --quiet 'playwright>=1.40'
chromium --version
"$VENV/bin/python" -c 'from importlib.metadata import version; print("playwright", version("playwright"))'
