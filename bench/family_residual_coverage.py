"""Coverage of a backtest's family residual interval under the shipped protocol: candidates share their baselines.

A backtest pairs every candidate's run at replicate seed i with the one baseline run at seed i, so the baseline's own
noise enters every candidate's paired cost at that seed: the candidates' residuals are correlated, and a family's mean
residual carries one draw of the baselines. This simulates the protocol (K candidates of a family, each with its
truth's pairs n_c over the leading replicate seeds, one baseline per seed; a seed effect shared by a seed's runs; the
per-run noise in three shapes) with the curve right (true residual 0), and counts how often each interval covers 0:

- "independent" (the backtest's interval before 2026-12-06): normal, se = sqrt(Σ se_c²)/K, se_c = sd_c/√n_c;
- "by seed" (`admission.truth.family_residual` now): the seeds are the independent units (clusters), a sandwich
  variance over seeds and Student's t with (seeds − 1) degrees of freedom.

    python bench/family_residual_coverage.py --sims 4000 --out bench/results/family_residual_coverage.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admitcheck.admission.truth import family_residual

# the families' truth sizes (pairs per candidate) of the shipped toy backtest (calibrations/toy.backtest.yaml) and the
# SmolLM2 protocol's looks (4, 8, 12)
LAYOUTS = {
    "toy fp8_weights": [16, 16, 16, 16, 8],
    "toy noise": [16, 16, 4, 4, 4],
    "toy staleness": [16, 4, 4],
    "toy combination": [4, 4],
    "toy dtype (one candidate)": [8],
    "smollm2 4 x 4": [4, 4, 4, 4],
    "smollm2 mixed": [4, 8, 12],
}


def noise(rng: np.random.Generator, shape: str, size) -> np.ndarray:
    """Unit-variance, mean-zero draws of `shape`."""
    if shape == "normal":
        return rng.standard_normal(size)
    if shape == "student_t3":
        return rng.standard_t(3, size) / np.sqrt(3.0)
    if shape == "lognormal":  # skewed: exp(N(0, 1)) centred and scaled
        s = 1.0
        x = rng.lognormal(0.0, s, size)
        return (x - np.exp(s**2 / 2)) / np.sqrt((np.exp(s**2) - 1) * np.exp(s**2))
    raise ValueError(shape)


def old_interval(costs: list[np.ndarray], predicted: np.ndarray, confidence: float) -> tuple[float, float]:
    r = np.array([c.mean() for c in costs]) - predicted
    se = np.array([c.std(ddof=1) / np.sqrt(c.size) for c in costs])
    s = np.sqrt(np.sum(se**2)) / r.size
    z = stats.norm.ppf(0.5 + confidence / 2)
    return r.mean() - z * s, r.mean() + z * s


def simulate(layout, shape, sims, rng, sd_run=1.0, sd_seed=1.0, sd_base_ratio=1.0, confidence=0.95):
    """Coverage of 0 by both intervals. Runs: quality = seed effect (shared by a seed's runs, cancels in a pair) +
    own noise (sd_run; the baseline's sd_run × sd_base_ratio, shared by every candidate at that seed)."""
    n_max = max(layout)
    k = len(layout)
    cover = {"independent": 0, "by seed": 0}
    width = {"independent": [], "by seed": []}
    true_cost = rng.uniform(0, 2, k)  # candidates' costs: any; the curve predicts them exactly
    for _ in range(sims):
        seed_fx = sd_seed * noise(rng, shape, n_max)
        base = seed_fx + sd_run * sd_base_ratio * noise(rng, shape, n_max)
        costs = []
        for c, n in enumerate(layout):
            runs = true_cost[c] + seed_fx[:n] + sd_run * noise(rng, shape, n)
            costs.append(runs - base[:n])
        for name, (lo, hi) in (
            ("independent", old_interval(costs, true_cost, confidence)),
            ("by seed", tuple(family_residual(costs, true_cost, confidence)["interval"])),
        ):
            cover[name] += lo <= 0.0 <= hi
            width[name].append(hi - lo)
    return {k_: cover[k_] / sims for k_ in cover}, {k_: float(np.median(width[k_])) for k_ in width}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("bench/results/family_residual_coverage.json"))
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    cells = []
    for layout_name, layout in LAYOUTS.items():
        for shape in ("normal", "student_t3", "lognormal"):
            for ratio in (0.0, 1.0):  # baselines without own noise (independent candidates), and as noisy as a run
                cov, wid = simulate(layout, shape, args.sims, rng, sd_base_ratio=ratio)
                cells.append({"layout": layout_name, "pairs": layout, "shape": shape, "baseline_sd_ratio": ratio,
                              "coverage": cov, "median_width": wid})  # fmt: skip
                print(f"{layout_name:28s} {shape:10s} base {ratio:.0f}: independent {cov['independent']:.3f} "
                      f"by seed {cov['by seed']:.3f}  width ×{wid['by seed'] / wid['independent']:.2f}")  # fmt: skip
    se = float(np.sqrt(0.95 * 0.05 / args.sims))
    shared = [c for c in cells if c["baseline_sd_ratio"] > 0]
    summary = {
        name: {"min_coverage_shared_baselines": min(c["coverage"][name] for c in shared),
               "min_coverage_all": min(c["coverage"][name] for c in cells)}
        for name in ("independent", "by seed")
    }  # fmt: skip
    out = {
        "command": f"python bench/family_residual_coverage.py --sims {args.sims} --seed {args.seed}",
        "nominal": 0.95,
        "monte_carlo_se": se,
        "summary": summary,
        "cells": cells,
        "seconds": time.perf_counter() - t0,
        "machine": platform.processor() or platform.machine(),
    }
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
