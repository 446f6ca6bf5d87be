#!/usr/bin/env bash
# Builds .venv-scan: checkov, hadolint and shellcheck for tests/deploy, apart from .venv (checkov would downgrade
# packages the control plane uses). Idempotent: rebuilt only when requirements-scan.txt changes.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-scan
STAMP="$VENV/.installed"
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
if [ -f "$STAMP" ] && [ "$STAMP" -nt requirements-scan.txt ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q -r requirements-scan.txt
"$VENV/bin/checkov" --version >/dev/null
"$VENV/bin/hadolint" --version
"$VENV/bin/shellcheck" --version | head -n 2 | tail -n 1
touch "$STAMP"
