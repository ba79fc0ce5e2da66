#!/usr/bin/env bash
# The toy re-make (issues 39, 34, 36, 40) on the device host's CPUs (CUDA hidden, the numeric pins on), DETACHED and
# resumable, beside whatever the GPU runs: the toy calibration under the lower-noise protocol, its backtest, its two
# reseeds and its RL counterpart. The runs need the toy pair built under the pins (toy/ since the re-make shipped:
# calibrations/toy*.yaml are its output); `start` refuses any other pair.
#
# Why there: the re-make is ~120 toy runs per calibration, ~250 for the backtest and ~60 for RL, at ~70 CPU-s each
# under the pins (docs/noise.md); the device host's 16 idle cores make it in about an hour of wall time where this
# project's 2-core machine needs most of a day. The runs are plain CPU work: what they compute does not depend on the GPU.
#
#   bash bench/toy_remake.sh start CORES      # e.g. start 8-15: one chain on those cores (taskset), jobs = their count,
#                                             # running NAMES in order (default: toy toy_backtest toy-seed1000
#                                             # toy-seed2000 toy_rl; the backtest needs toy's artifact, so after it)
#   CHAIN=b NAMES="toy-seed1000 toy-seed2000 toy_rl" bash bench/toy_remake.sh start 12-15   # a second chain beside
#   MAX_RUNS=18 bash bench/toy_remake.sh start 1   # calibrations only to the grid (a cap the ledger does not record)
#   bash bench/toy_remake.sh poll SECONDS     # progress of every chain, then $RUN into $OUT/toy_remake.tgz
#   bash bench/toy_remake.sh rebuild CORE     # the pinned toy build here: the same weights as toy/? ($RUN/rebuild.json)
#   bash bench/toy_remake.sh stop             # SIGTERM every chain (finished runs are in the ledgers), then collect
#
# The configs are bench/toy_remake/*.yaml (calibrate, backtest and the backtest's screen); each runs from a copy in $RUN
# (ignored by git, made by bench/toy_remake/prepare.py) whose paths are absolute and whose outputs, and the re-made
# artifacts it reads, are in $RUN, because every device call re-syncs the tracked files (a tracked ledger would be put
# back under a running campaign). Resuming across machines: commit the collected ledgers as
# bench/toy_remake/STEM.ledger.jsonl (STEM: the output's stem, e.g. toy.backtest) and `start` copies each one to $RUN
# when $RUN has none (only the missing runs are made). Here (2 cores), `nice -n 19 bash bench/toy_remake.sh start 0-1`
# from a worktree whose toy/ is branch remake's keeps the same chain going under other work.
set -uo pipefail
stage=${1:?stage: start CORES | rebuild CORE | poll SECONDS | status | stop | collect}
OUT=${OUT:-/tmp/out}
PY=${PY:-python3}
RUN=${RUN:-reports/toy_remake}
EVERY=${EVERY:-60}
NAMES=${NAMES:-toy toy_backtest toy-seed1000 toy-seed2000 toy_rl}  # run in this order by one chain
CHAIN=${CHAIN:-chain}  # several chains at once on other cores: CHAIN=b NAMES="toy_rl" ... start 8-15
mkdir -p "$OUT" "$RUN"
export PYTHONPATH=/tmp/site:$PWD OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES= ADMITCHECK_NUMERIC_PINS=on PYTHONUNBUFFERED=1

declare -A KIND
prepare() {  # $RUN/NAME.config.yaml (bench/toy_remake/prepare.py); a committed ledger seeds $RUN's when it has none
  local n=$1 out kind stem
  out=$($PY bench/toy_remake/prepare.py "bench/toy_remake/$n.yaml" "$RUN/$n.config.yaml") || return 2
  read -r kind stem <<< "$out"; KIND[$n]=$kind
  [ -z "$stem" ] || [ -f "$RUN/$stem.ledger.jsonl" ] || [ ! -f "bench/toy_remake/$stem.ledger.jsonl" ] \
    || cp "bench/toy_remake/$stem.ledger.jsonl" "$RUN/$stem.ledger.jsonl"
}
alive() { local c=${1:-$CHAIN}; [ -f "$RUN/$c.pid" ] && kill -0 "$(cat "$RUN/$c.pid")" 2>/dev/null; }
chains() { for f in "$RUN"/*.pid; do [ -f "$f" ] && basename "$f" .pid; done; }
collect() { tar czf "$OUT/toy_remake.tgz" "$RUN" 2>/dev/null; ls -la "$OUT"; }
status() {
  for c in $(chains); do
    echo "== $c: $(alive "$c" && echo running || echo stopped)"; tail -n 2 "$RUN/$c.log" 2>/dev/null | cut -c1-300
  done
  for f in "$RUN"/*.ledger.jsonl; do [ -f "$f" ] && echo "== $(basename "$f"): $(wc -l < "$f") lines"; done
  for f in "$RUN"/*.config.yaml; do  # a calibration's progress (a backtest has no --status: its ledger lines above)
    grep -q "^calibrate_config:\|^calibration:" "$f" && continue
    echo "== $(basename "$f" .config.yaml):"; $PY -m admitcheck calibrate "$f" --status 2>&1 | tail -n 2
  done
}
case "$stage" in
  start)
    cores=${2:?CORES, e.g. 12-15}
    jobs=$($PY -c "import sys; a, _, b = sys.argv[1].partition('-'); print(int(b or a) - int(a) + 1)" "$cores")
    if alive; then echo "$CHAIN already running (pid $(cat "$RUN/$CHAIN.pid"))"; exit 0; fi
    $PY - <<'PY' || exit 2  # the runs belong to the pinned pair (branch remake's toy/), not to the shipped one
import sys
from admitcheck.fingerprint import model_fingerprint
want = {"student": "e4c0c08427fd049e", "teacher": "1a8506f541b4fd06"}  # bench/results/numeric_pins.json, pinned
have = {s: model_fingerprint(f"toy/{s}")["weights"][:16] for s in want}
if have != want:
    sys.exit(f"toy/ is not the pinned toy pair ({have}): `git checkout remake -- toy` first (and `git checkout HEAD -- toy` after)")
PY
    for f in bench/toy_remake/*.yaml; do n=$(basename "$f" .yaml); prepare "$n" || exit 2; done  # all: a backtest reads the others
    $PY -c "import admitcheck; from admitcheck import numerics; import torch; print(numerics.in_effect())" \
      | tee "$RUN/numerics.txt"
    lscpu | grep -E "Model name|Flags" | cut -c1-400 > "$RUN/cpu.txt"
    chain=""; for n in $NAMES; do
      case "${KIND[$n]}" in
        calibrate|backtest) ;;
        *) echo "$n: a ${KIND[$n]} config is prepared, not run (NAMES lists calibrate and backtest configs)" >&2; exit 2 ;;
      esac
      chain="$chain taskset -c $cores $PY -m admitcheck ${KIND[$n]} '$RUN/$n.config.yaml' --jobs $jobs --json > '$RUN/$n.json' 2> '$RUN/$n.log'; echo $n rc=\$?;"
    done
    rm -f "$RUN/$CHAIN.pid"
    setsid -f nohup bash -c "echo \$\$ > '$RUN/$CHAIN.pid'; $chain" > "$RUN/$CHAIN.log" 2>&1 < /dev/null
    for _ in $(seq 50); do [ -s "$RUN/$CHAIN.pid" ] && break; sleep 0.1; done
    echo "$CHAIN started (pid $(cat "$RUN/$CHAIN.pid"), cores $cores, jobs $jobs: $NAMES)"
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
      status; any=0; for c in $(chains); do alive "$c" && any=1; done; [ $any = 1 ] || break
      [ $(( $(date +%s) - t0 + EVERY )) -gt "$limit" ] && break
      sleep "$EVERY"
    done
    ;;
  status) status; exit 0 ;;
  stop)  # every chain
    for c in $(chains); do alive "$c" && kill -TERM -- "-$(cat "$RUN/$c.pid")"; done; sleep 5
    for c in $(chains); do alive "$c" && kill -KILL -- "-$(cat "$RUN/$c.pid")"; done
    status
    ;;
  collect) ;;
  *) echo "unknown stage $stage" >&2; exit 2 ;;
esac
collect
