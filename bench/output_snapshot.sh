#!/usr/bin/env bash
# Outputs of the shipped commands on the toy pair (human and --json), wall-clock fields masked, written under DIR.
# Run it before and after a refactor that must not change behaviour, then `diff -r BEFORE AFTER` (issue 26). It
# ends by writing DIR/DONE.
# Uses the package of the checkout it lives in, on copies of examples/, calibrations/ and toy/ (nothing in the
# checkout is written). Re-fits the shipped toy, toy RL and toy backtest artifacts from their ledgers; where the
# adaptive design of this admitcheck asks for runs a ledger lacks, `calibrate` trains them (at b72b859 the toy asks
# for more: 18 new runs in the first 40 min on two busy cores), so compare two checkouts on the same ledgers.
# Run both checkouts from paths of one length: rich tables take the width of the paths they show.
#   bash bench/output_snapshot.sh /tmp/snap-before          # ~6 min on 2 quiet cores
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:?usage: bench/output_snapshot.sh DIR}")
rm -rf "$out" && mkdir -p "$out"
work=$(mktemp -d)
cp -r "$here/examples" "$here/calibrations" "$here/toy" "$work/" && mkdir -p "$work/reports"
cd "$work" || exit 2
export PYTHONPATH="$here" OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE COLUMNS=160 TERM=dumb NO_COLOR=1
py=${PYTHON:-$here/.venv/bin/python}
ac() {  # ac NAME ARGS...: stdout, stderr and the exit code of `admitcheck ARGS`
  local name=$1; shift
  "$py" -m admitcheck "$@" >"$out/$name.out" 2>"$out/$name.err"
  echo "rc=$?" >>"$out/$name.out"
}
for f in examples/*.yaml; do
  ac "validate_$(basename "$f" .yaml)" validate "$f"
  ac "validate_$(basename "$f" .yaml).json" validate "$f" --json
done
ac calibrate_toy calibrate examples/toy_calibrate.yaml
ac calibrate_toy.json calibrate examples/toy_calibrate.yaml --json
ac calibrate_toy_rl calibrate examples/toy_calibrate_rl.yaml --json
# The shipped backtest's report re-written (YAML, Markdown, PNG) from the shipped YAML, as a typed round trip.
"$py" - >"$out/backtest_rewrite.out" 2>"$out/backtest_rewrite.err" <<'PY'
import yaml
from admitcheck.admission import backtest as bt
src = "calibrations/toy.backtest.yaml"
loader = getattr(bt, "load_backtest", None)  # the typed loader, where there is one
report = loader(src) if loader else yaml.safe_load(open(src))
report = bt.write_backtest(report, "reports/backtest/toy.backtest.yaml")
try:  # the Markdown and chart beside it (written by the command since issue 26)
    from admitcheck.report import write_backtest_companions
except ImportError:  # before: write_backtest wrote them
    pass
else:
    write_backtest_companions(report)
PY
ac compare compare calibrations/toy.yaml calibrations/toy_rl.yaml
ac compare.json compare calibrations/toy.yaml calibrations/toy_rl.yaml --json
ac plan_toy plan examples/toy_plan.yaml --plot "$out/plan.png"
ac plan_toy.json plan examples/toy_plan.yaml --json
ac measure_toy measure examples/toy_measure.yaml --json
ac screen_toy screen examples/toy_screen.yaml --markdown "$out/screen.md" --junit "$out/screen.xml"
ac screen_toy.json screen examples/toy_screen.yaml --json
ac screen_staleness.json screen examples/toy_screen_staleness.yaml --json
ac screen_logs.json screen examples/toy_screen_logs.yaml --json
ac demo demo --reports "$work/reports/demo"
cp calibrations/*.yaml calibrations/*.png calibrations/*.md "$out/" 2>/dev/null
cp -r reports/demo "$out/demo_reports" 2>/dev/null
cp -r reports/backtest "$out/backtest_rewrite" 2>/dev/null
# Mask what depends on the clock or the machine: seconds, timestamps, temporary paths.
find "$out" -type f \( -name '*.out' -o -name '*.err' -o -name '*.yaml' -o -name '*.md' -o -name '*.xml' -o -name '*.json' \) \
  -exec sed -i -E \
    -e 's/((seconds|_s|time|created_at|elapsed|wall|cpu)["]?[:=] ?"?)[0-9][0-9.e:+T-]*/\1<t>/g' \
    -e 's/[0-9]+(\.[0-9]+)? ?(s|ms|min)\b/<t>\2/g' \
    -e 's/("seconds[a-z_]*": )[0-9][0-9.e+-]*/\1<t>/g' \
    -e 's/(│|\|)( +)[0-9]+\.[0-9]( +)(│|\|)( *)$/\1\2<t>\3\4\5/' \
    -e "s#$work#<work>#g" -e "s#$here#<repo>#g" -e "s#$out#<out>#g" {} +
rm -rf "$work"
touch "$out/DONE"
ls "$out" | wc -l
