"""What pairing by seed buys (issue 36): per calibration level, is a level run's quality correlated with the baseline
run of its seed, and how does the paired estimate of its cost compare with one against the mean of *all* baselines?

For each level of a calibration ledger with ≥ `--min-pairs` seeds that also have a baseline run: the sd of its runs
(σL) and of those baselines (σB), their correlation ρ (95% by Fisher's z), the paired-cost sd per pair
sd(L − B) (what the calibration and the backtest's truth rule use), and for a candidate of n runs the variance of its
cost estimate two ways: paired, sd(L − B)²/n, and against all N baselines of the ledger, σL²/n + σB_all²/N (independent
when ρ = 0). Their ratio at n = 4 and 12 (the backtest's looks), with a 95% percentile bootstrap over the level's
seeds (pairs resampled together, the ledger's other baselines resampled with them). All in τ (the calibration's
tolerance). A ratio below 1 says the unpaired estimate is the tighter one. Reads ledgers only; runs nothing.

    python bench/pairing_value.py --calibration calibrations/smollm2.yaml --out bench/results/pairing_value_smollm2.json
    python bench/pairing_value.py --calibration calibrations/toy.yaml --out bench/results/pairing_value_toy.json
    python bench/pairing_value.py --calibration calibrations/smollm2.yaml \
        --backtest-ledger calibrations/smollm2.backtest.ledger.jsonl \
        --out bench/results/pairing_value_smollm2_backtest.json

With `--backtest-ledger`, the levels are a backtest's candidates (its runs), the baselines still the calibration's.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admitcheck.calibration.artifact import load_calibration
from admitcheck.calibration.ledger import ledger_path, read_live

LOOKS = (4, 12)


def variances(lv: np.ndarray, bs: np.ndarray, all_b: np.ndarray, n: int) -> tuple[float, float]:
    """(paired, against all baselines) variance of an n-run cost estimate from these samples. The candidate's n
    seeds are among the N baselines, so the mean of n level runs and the mean of all N baselines share n pairs:
    var = σL²/n + σB²/N − 2·cov(L, B)/N (each shared pair contributes cov/(nN), n of them)."""
    cov = float(np.cov(lv, bs, ddof=1)[0, 1])
    paired = float(np.var(lv - bs, ddof=1) / n)
    return paired, float(np.var(lv, ddof=1) / n + np.var(all_b, ddof=1) / len(all_b) - 2 * cov / len(all_b))


def level_figures(lv: np.ndarray, bs: np.ndarray, others: np.ndarray, tau: float, rng, boots: int) -> dict:
    all_b = np.concatenate([bs, others])
    r = float(np.corrcoef(lv, bs)[0, 1])
    z, half = np.arctanh(r), 1.96 / np.sqrt(len(lv) - 3)
    out = {
        "pairs": len(lv),
        "baselines_all": len(all_b),
        "level_sd_tau": float(lv.std(ddof=1) / tau),
        "baseline_sd_tau": float(bs.std(ddof=1) / tau),
        "correlation": r,
        "correlation_ci95": [float(np.tanh(z - half)), float(np.tanh(z + half))],
        "paired_sd_per_pair_tau": float((lv - bs).std(ddof=1) / tau),
    }
    for n in LOOKS:
        paired, unpaired = variances(lv, bs, all_b, n)
        ratios = []
        for _ in range(boots):
            i = rng.integers(0, len(lv), len(lv))
            j = rng.integers(0, len(others), len(others)) if len(others) else np.arange(0)
            p, u = variances(lv[i], bs[i], np.concatenate([bs[i], others[j]]), n)
            if p > 0:  # a resample of one pair repeated has no spread: skipped
                ratios.append(u / p)
        out[f"n{n}"] = {
            "paired_sd_tau": float(np.sqrt(paired) / tau),
            "all_baselines_sd_tau": float(np.sqrt(unpaired) / tau),
            "variance_ratio": unpaired / paired,
            "variance_ratio_ci95": [float(np.quantile(ratios, 0.025)), float(np.quantile(ratios, 0.975))],
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", type=Path, required=True)
    ap.add_argument("--backtest-ledger", type=Path, help="take the levels from a backtest's ledger")
    ap.add_argument("--min-pairs", type=int, default=6, help="at least 4 (Fisher's z)")
    ap.add_argument("--bootstrap", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.min_pairs < 4:
        ap.error("--min-pairs must be at least 4")
    cal = load_calibration(args.calibration)
    tau = cal.tolerance.value
    _, runs = read_live(ledger_path(cal.path))
    base = {r.seed: r.quality for r in runs if r.run_key.level.kind == "baseline"}
    if args.backtest_ledger:
        _, runs = read_live(args.backtest_ledger)
    by_level = defaultdict(dict)
    for r in runs:
        if r.run_key.level.kind != "baseline" and r.seed in base and r.mismatch is not None:
            by_level[json.dumps(r.run_key.level.dump(), sort_keys=True)][r.seed] = (r.quality, r.mismatch)
    rng = np.random.default_rng(args.seed)
    levels = []
    for key, seeds in sorted(by_level.items(), key=lambda kv: np.median([m for _, m in kv[1].values()])):
        if len(seeds) < args.min_pairs:
            continue
        order = sorted(seeds)
        lv = np.array([seeds[s][0] for s in order])
        bs = np.array([base[s] for s in order])
        others = np.array([q for s, q in base.items() if s not in seeds])
        fig = level_figures(lv, bs, others, tau, rng, args.bootstrap)
        levels.append({"level": json.loads(key), "x_median": float(np.median([m for _, m in seeds.values()]))} | fig)
    pooled_r = [lvl["correlation"] for lvl in levels]
    result = {
        "calibration": str(args.calibration),
        "tau": tau,
        "backtest_ledger": str(args.backtest_ledger) if args.backtest_ledger else None,
        "baselines": len(base),
        "levels": levels,
        "correlation_median": float(np.median(pooled_r)) if pooled_r else None,
        **{
            f"variance_ratio_n{n}_median": float(np.median([lvl[f"n{n}"]["variance_ratio"] for lvl in levels]))
            for n in LOOKS
        },
        "command": "python bench/pairing_value.py " + " ".join(sys.argv[1:]),
    }
    (args.out.write_text if args.out else print)(json.dumps(result, indent=2) + ("\n" if args.out else ""))


if __name__ == "__main__":
    main()
