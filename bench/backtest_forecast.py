"""Forecast of an unfinished backtest's truths: what the look rule is likely to say once the missing pairs are run.

Reads `admitcheck backtest CONFIG --status --json` (a file) and, for every candidate whose truth is not settled,
simulates its missing pairs (normal, mean: the candidate's cost so far, or the curve's prediction where it has < 2
pairs; sd: the pooled paired sd of the candidates with >= 4 pairs), then applies `truth.sequential_truth` with the
backtest config's truth rule. A planning figure (how many truths will end ambiguous, issue 38's <= 25%), not a result:
the runs decide.

    python bench/backtest_forecast.py bench/results/smollm2_backtest_status_2026-12-06.json \
        --config examples/smollm2_backtest.yaml --out bench/results/smollm2_backtest_forecast_2026-12-06.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admitcheck import io
from admitcheck.admission import truth
from admitcheck.config import BacktestConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("status", type=Path)
    ap.add_argument("--config", type=Path, required=True)
    ap.add_argument("--sims", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    st = json.loads(args.status.read_text())
    rule = io.load_config(args.config, BacktestConfig).truth
    tau, rows = st["tau"], st["rows"]
    sds = [np.std(r["paired_costs"], ddof=1) for r in rows if r["pairs"] >= 4]
    sd = float(np.sqrt(np.mean(np.square(sds))))
    rng = np.random.default_rng(args.seed)
    out_rows, expected = [], {"admit": 0.0, "reject": 0.0, "ambiguous": 0.0}
    for r in rows:
        if r["truth"]:
            expected[r["truth"]] += 1
            out_rows.append({"name": r["name"], "verdict": r["verdict"], "settled": r["truth"]})
            continue
        mu = r["cost"] if r["cost"] is not None else r["predicted_cost"]
        have = list(r["paired_costs"])
        labels: dict[str, int] = {}
        for _ in range(args.sims):
            diffs = have + list(mu + sd * rng.standard_normal(rule.max_replicates - len(have)))
            t, _ = truth.sequential_truth(diffs, tau, rule)
            labels[t.label] = labels.get(t.label, 0) + 1
        p = {k: v / args.sims for k, v in labels.items()}
        for k, v in p.items():
            expected[k] += v
        out_rows.append({"name": r["name"], "verdict": r["verdict"], "assumed_cost_over_tau": mu / tau, "p": p})
        print(
            f"{r['name']:20s} {r['verdict']:6s} cost {mu / tau:+.2f} τ: "
            + ", ".join(f"{k} {v:.2f}" for k, v in p.items())
        )
    result = {
        "command": f"python bench/backtest_forecast.py {args.status} --config {args.config} --sims {args.sims}",
        "pooled_paired_sd_over_tau": sd / tau,
        "candidates": len(rows),
        "expected": expected,
        "expected_ambiguous_fraction": expected["ambiguous"] / len(rows),
        "rows": out_rows,
    }
    print(f"expected: {json.dumps({k: round(v, 2) for k, v in expected.items()})}; ambiguous fraction "
          f"{result['expected_ambiguous_fraction']:.2f} (pooled paired sd {sd / tau:.2f} τ)")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
