#!/usr/bin/env bash
# Builds .venv-scan: checkov, hadolint and shellcheck for tests/deploy, apart from .venv (checkov would downgrade
# packages the control plane uses). Installed from requirements-scan.lock (every package pinned with its hashes,
# compiled by `make lock` from requirements-scan.txt). Idempotent: rebuilt only when the lock changes.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-scan
STAMP="$VENV/.installed"
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
if [ -f "$STAMP" ] && [ "$STAMP" -nt requirements-scan.lock ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q --require-hashes -r requirements-scan.lock
"$VENV/bin/checkov" --version >/dev/null
"$VENV/bin/hadolint" --version
"$VENV/bin/shellcheck" --version | head -n 2 | tail -n 1
touch "$STAMP"
