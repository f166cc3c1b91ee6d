#!/usr/bin/env bash
# The tools some tests need beyond the virtualenv: Debian's Chromium (driven by the
# Playwright package from the dev extras, through executable_path=/usr/bin/chromium) for
# the status-page browser test, and promtool (Debian package 'prometheus') for the
# Prometheus config and alert-rule tests, and kubectl (its built-in kustomize renders
# deploy/kubernetes for tests/unit/test_kubernetes.py; Debian package 'kubernetes-client'
# where no kubectl is installed already), and kcat (tests/integration/test_kcat_protocol.py
# runs docs/protocol.md's kcat example as written). `make test` and CI (`make test` through
# .ci/run) both run this script, so `make test` gets what CI gets.
#
# Installs with apt where the machine allows it (root, or passwordless sudo, and
# apt-get); never downloads a browser itself (`playwright install` reaches hosts these
# machines cannot). Where it cannot install, it says what is missing and exits 0: the
# tests that need the tool then skip with one line saying what to install, and CI,
# which refuses every skip, fails on them.
set -euo pipefail

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v kubectl >/dev/null 2>&1 || missing+=(kubernetes-client)
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        SUDO="no"
    fi
fi
if [ "$SUDO" = "no" ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "test tools: cannot install ${missing[*]} here (needs root or sudo, and apt-get);" \
        "their tests will skip. Install Debian/Ubuntu packages: ${missing[*]}" >&2
    exit 0
fi
echo "test tools: installing ${missing[*]} with apt-get (once; later runs skip this)" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
