#!/usr/bin/env bash
# The toy re-make (issues 39, 34, 36) on the device host's CPUs (CUDA hidden, the numeric pins on), DETACHED and
# resumable, beside whatever the GPU runs: the toy calibration under the lower-noise protocol, then its two reseeds.
# The runs need the toy pair rebuilt under the pins in toy/ (branch remake holds it: `git checkout remake -- toy`
# before the device calls, `git checkout HEAD -- toy` after); `start` refuses any other pair.
#
# Why here: the re-make is ~120 toy runs per calibration at ~70 CPU-s each under the pins (docs/noise.md, README "Same
# numbers on every x86-64 CPU"); the device host's idle cores make one calibration in ~10 minutes where this project's
# 2-core machine needs hours. The runs are plain CPU work: what they compute does not depend on the GPU.
#
#   bash bench/toy_remake.sh start CORES      # e.g. start 12-15: the chain on those cores (taskset), jobs = their count
#   MAX_RUNS=18 bash bench/toy_remake.sh start 1   # only the grid (no adaptive round): a cap the ledger does not record
#   bash bench/toy_remake.sh poll SECONDS     # progress, then the ledgers into $OUT/toy_remake.tgz
#   bash bench/toy_remake.sh rebuild CORE      # the pinned toy build here: the same weights as toy/? ($RUN/rebuild.json)
#   bash bench/toy_remake.sh stop             # SIGTERM the chain (finished runs are in the ledgers), then collect
#
# The configs are bench/toy_remake/*.yaml; each runs from a copy in $RUN (ignored by git) whose paths are absolute and
# whose `output` is in $RUN, because every device call re-syncs the tracked files (a tracked ledger would be put back
# under a running campaign). Resuming across machines: commit the collected ledgers as bench/toy_remake/NAME.ledger.jsonl
# and `start` copies each one to $RUN when $RUN has none (only the missing runs are made).
set -uo pipefail
stage=${1:?stage: start CORES | rebuild CORE | poll SECONDS | status | stop | collect}
OUT=${OUT:-/tmp/out}
PY=${PY:-python3}
RUN=${RUN:-reports/toy_remake}
EVERY=${EVERY:-60}
NAMES=${NAMES:-toy toy-seed1000 toy-seed2000}
mkdir -p "$OUT" "$RUN"
export PYTHONPATH=/tmp/site:$PWD OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES= ADMITCHECK_NUMERIC_PINS=on PYTHONUNBUFFERED=1

prepare() {  # $RUN/NAME.yaml: the config with absolute paths and its output in $RUN; a committed ledger seeds $RUN's
  local n=$1
  [ -f "$RUN/$n.ledger.jsonl" ] || [ ! -f "bench/toy_remake/$n.ledger.jsonl" ] \
    || cp "bench/toy_remake/$n.ledger.jsonl" "$RUN/$n.ledger.jsonl"
  $PY - "bench/toy_remake/$n.yaml" "$RUN/$n.config.yaml" <<'PY'
import os, sys, yaml, pathlib
src, dst = pathlib.Path(sys.argv[1]).resolve(), pathlib.Path(sys.argv[2]).resolve()
c = yaml.safe_load(src.read_text())
absolute = lambda p: str((src.parent / p).resolve())
c["pair"]["student"], c["pair"]["teacher"] = absolute(c["pair"]["student"]), absolute(c["pair"]["teacher"])
for part in ("probe", "train", "eval"):
    c[part]["prompts"] = absolute(c[part]["prompts"])
c["output"] = str(dst.with_name(pathlib.Path(c["output"]).name))
if os.environ.get("MAX_RUNS"):  # e.g. 18: only the grid before any adaptive round (the ledger does not record the cap)
    c["levels"]["max_runs"] = int(os.environ["MAX_RUNS"])
dst.write_text(yaml.safe_dump(c, sort_keys=False))
PY
}
alive() { [ -f "$RUN/chain.pid" ] && kill -0 "$(cat "$RUN/chain.pid")" 2>/dev/null; }
collect() { tar czf "$OUT/toy_remake.tgz" "$RUN" 2>/dev/null; ls -la "$OUT"; }
status() {
  echo "== chain: $(alive && echo running || echo stopped)"; tail -n 2 "$RUN/chain.log" 2>/dev/null | cut -c1-300
  for n in $NAMES; do
    [ -f "$RUN/$n.config.yaml" ] || continue
    echo "== $n: $(wc -l < "$RUN/$n.ledger.jsonl" 2>/dev/null || echo 0) ledger lines"
    $PY -m admitcheck calibrate "$RUN/$n.config.yaml" --status 2>&1 | tail -n 2
  done
}
case "$stage" in
  start)
    cores=${2:?CORES, e.g. 12-15}
    jobs=$($PY -c "import sys; a, _, b = sys.argv[1].partition('-'); print(int(b or a) - int(a) + 1)" "$cores")
    if alive; then echo "chain already running (pid $(cat "$RUN/chain.pid"))"; exit 0; fi
    $PY - <<'PY' || exit 2  # the runs belong to the pinned pair (branch remake's toy/), not to the shipped one
import sys
from admitcheck.fingerprint import model_fingerprint
want = {"student": "e4c0c08427fd049e", "teacher": "1a8506f541b4fd06"}  # bench/results/numeric_pins.json, pinned
have = {s: model_fingerprint(f"toy/{s}")["weights"][:16] for s in want}
if have != want:
    sys.exit(f"toy/ is not the pinned toy pair ({have}): `git checkout remake -- toy` first (and `git checkout HEAD -- toy` after)")
PY
    for n in $NAMES; do prepare "$n" || exit 2; done
    $PY -c "import admitcheck; from admitcheck import numerics; import torch; print(numerics.in_effect())" \
      | tee "$RUN/numerics.txt"
    lscpu | grep -E "Model name|Flags" | cut -c1-400 > "$RUN/cpu.txt"
    chain=""; for n in $NAMES; do
      chain="$chain taskset -c $cores $PY -m admitcheck calibrate '$RUN/$n.config.yaml' --jobs $jobs --json > '$RUN/$n.json' 2> '$RUN/$n.log'; echo $n rc=\$?;"
    done
    rm -f "$RUN/chain.pid"
    setsid -f nohup bash -c "echo \$\$ > '$RUN/chain.pid'; $chain" > "$RUN/chain.log" 2>&1 < /dev/null
    for _ in $(seq 50); do [ -s "$RUN/chain.pid" ] && break; sleep 0.1; done
    echo "chain started (pid $(cat "$RUN/chain.pid"), cores $cores, jobs $jobs)"
    ;;
  rebuild)  # the pinned toy build on this host's CPU and torch, detached on one core: its weights digest against the
    # toy/ that travelled (the same bits on another CPU kind and torch version, or not): $RUN/rebuild.json
    core=${2:-0}
    setsid -f nohup taskset -c "$core" $PY - "$RUN/rebuild.json" > "$RUN/rebuild.log" 2>&1 < /dev/null <<'PY'
import json, platform, sys, time
import torch
import admitcheck  # noqa: F401  the pins
from admitcheck import numerics
from admitcheck.fingerprint import model_fingerprint
from admitcheck.pairs.toy import build_toy_pair
torch.set_num_threads(1)
t0 = time.perf_counter()
build_toy_pair("/tmp/toy_rebuild", seed=0, force=True)
seconds = time.perf_counter() - t0
digest = lambda d, s: model_fingerprint(f"{d}/{s}")["weights"][:16]
json.dump({"numerics": numerics.in_effect(), "torch": torch.__version__, "python": platform.python_version(),
           "build_seconds": round(seconds, 1),
           "rebuilt": {s: digest("/tmp/toy_rebuild", s) for s in ("student", "teacher")},
           "travelled": {s: digest("toy", s) for s in ("student", "teacher")}}, open(sys.argv[1], "w"), indent=1)
PY
    echo "rebuild started on core $core ($RUN/rebuild.log)"
    ;;
  poll)
    limit=${2:-300}; t0=$(date +%s)
    while :; do
      status; alive || break
      [ $(( $(date +%s) - t0 + EVERY )) -gt "$limit" ] && break
      sleep "$EVERY"
    done
    ;;
  status) status; exit 0 ;;
  stop)
    alive && kill -TERM -- "-$(cat "$RUN/chain.pid")"; sleep 5
    alive && kill -KILL -- "-$(cat "$RUN/chain.pid")"
    status
    ;;
  collect) ;;
  *) echo "unknown stage $stage" >&2; exit 2 ;;
esac
collect
