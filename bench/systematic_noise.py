"""Does systematic weight noise (one draw kept for the whole run, like FP8 rounding) cost more than fresh noise (a new
draw after every sync, what the calibration's levels use) at the same size? A paired experiment on the toy pair.

    python bench/systematic_noise.py --level noise-1 --jobs 2 --out bench/results/systematic_noise_toy.json

For every replicate r of the shipped calibrations/toy.yaml level LEVEL (σ, seed s_r), one more OPD run with the same
σ and seed and `systematic: true` (opd.train's redraw_noise=False) under examples/toy_calibrate.yaml's recipe; the
fresh-noise run and the baseline run of seed s_r come from the shipped ledger. Both perturbed runs start from the
same draw (noise step 0) with the same data order and sampling uniforms, so systematic − fresh is a paired
difference whose only cause is redrawing. Reported, in nats/token and in τ (the shipped τ): the paired costs
(run − baseline) of both, their difference with a t interval, and each run's in-run k3 (the engine-vs-trainer
mismatch the run saw). The shipped backtest found FP8 weights costing +0.41 τ more than fresh noise of the same k3.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def one(args: tuple) -> dict:
    import os

    os.chdir(ROOT)
    from admitcheck import io
    from admitcheck.calibration.levels import Level, run_task
    from admitcheck.config import CalibrateConfig

    cfg_path, sigma, seed = args
    config = io.load_config(cfg_path, CalibrateConfig)
    level = Level("systematic", "noise", relative_std=sigma, systematic=True)
    return run_task(config, str(cfg_path), level, seed).line()  # the ledger line (a dict)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--level", default="noise-1")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--replicates", type=int, default=None, help="only the first N replicates")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    cal = yaml.safe_load((ROOT / "calibrations" / "toy.yaml").read_text())
    tau = float(cal["tolerance"]["value"])
    sigma = next(float(lv["relative_std"]) for lv in cal["levels"] if lv["name"] == a.level)
    runs = [r for r in cal["runs"] if r["level"] == a.level]
    runs = sorted(runs, key=lambda r: r["replicate"])[: a.replicates]
    base = {r["seed"]: r for r in cal["runs"] if r["level"] == "baseline"}
    ledger = {}
    for line in (ROOT / "calibrations" / "toy.ledger.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("kind") == "run":
            ledger[rec["key"]] = rec
    cfg = ROOT / "examples" / "toy_calibrate.yaml"
    t0 = time.perf_counter()
    work = [(cfg, sigma, r["seed"]) for r in runs]
    with ProcessPoolExecutor(a.jobs) as pool:
        sys_runs = list(pool.map(one, work))
    rows = []
    for r, s in zip(runs, sys_runs):
        b = base[r["seed"]]
        fresh_key = next(k for k, v in ledger.items() if v["seed"] == r["seed"] and v.get("relative_std") == sigma)
        fresh = ledger[fresh_key]
        rows.append({"seed": r["seed"], "replicate": r["replicate"], "x_start": s["k3"], "x_start_fresh": fresh["k3"],
                     "in_run_k3_systematic": s["in_run_k3_mean"], "in_run_k3_fresh": fresh["in_run_k3_mean"],
                     "cost_systematic": s["quality"] - b["quality"], "cost_fresh": fresh["quality"] - b["quality"],
                     "cpu_seconds": s["cpu_seconds"]})  # fmt: skip
    d = np.array([r["cost_systematic"] - r["cost_fresh"] for r in rows])
    n = len(d)
    from scipy import stats

    half = float(stats.t.ppf(0.975, n - 1) * d.std(ddof=1) / math.sqrt(n)) if n > 1 else math.inf
    out = {
        "level": a.level, "relative_std": sigma, "tau": tau, "pairs": n,
        "cost_fresh_mean": float(np.mean([r["cost_fresh"] for r in rows])),
        "cost_systematic_mean": float(np.mean([r["cost_systematic"] for r in rows])),
        "difference_mean": float(d.mean()), "difference_interval": [float(d.mean() - half), float(d.mean() + half)],
        "difference_in_tau": float(d.mean() / tau),
        "difference_interval_in_tau": [float((d.mean() - half) / tau), float((d.mean() + half) / tau)],
        "in_run_k3_fresh_mean": float(np.mean([r["in_run_k3_fresh"] for r in rows])),
        "in_run_k3_systematic_mean": float(np.mean([r["in_run_k3_systematic"] for r in rows])),
        "rows": rows, "seconds": round(time.perf_counter() - t0, 1),
        "command": "python bench/systematic_noise.py " + " ".join(sys.argv[1:]),
    }  # fmt: skip
    text = json.dumps(out, indent=1)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
