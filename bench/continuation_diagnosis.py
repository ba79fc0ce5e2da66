"""Why the SmolLM2 calibration continued by adaptive rounds put B_lo above B (issue 38): B̂'s bias, its spread and
the misses at 21, 33 and 45 runs, per design, on the three calibrations' mean curve shifted along x
(bench/budget_coverage.py's smollm2_mean truth and SmolLM2 protocol with its measured noise).

    OMP_NUM_THREADS=1 nice -n 10 python bench/continuation_diagnosis.py --sims 400 \\
        --out bench/results/continuation_diagnosis.json

Each simulated calibration is run to each cap on the same random stream (a continuation to 45 runs begins with the
runs of the one stopped at 33, which begins with the shipped 21), once per design: `around` (pairs at the levels
nearest B/2 and 2B, the design before) and `local` (`design.LOCAL`: the levels that bracket B within B/2..2B).
Per (design, cap): coverage, P(B_lo > B) in all and where the model was used, the model's share, mean and sd of
log(B̂/B) where the model was used, and P(B_lo > B) and that bias per fifth of the drawn B (the largest B: the curve
as measured, unshifted).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def run(sims: int, designs, caps, seed: int) -> dict:
    from budget_coverage import SMOLLM2_TRUTHS, draw_truth, noise_and_range, protocols

    from admitcheck.calibration import design
    from admitcheck.calibration.curve import Tolerance

    proto = protocols()["smollm2"]
    tol = Tolerance(relative=proto["relative"])
    tau = tol.of(proto["baseline_mean"])
    sd, b_range = noise_and_range("smollm2", proto)
    recs = {(d, c): [] for d in designs for c in caps}  # (B, lo, hi, model B̂ or nan, model used)
    t0 = time.perf_counter()
    for d in designs:
        design.LOCAL = d == "local"
        rng = np.random.default_rng([seed, SMOLLM2_TRUTHS.index("smollm2_mean")])
        n = 0
        while n < sims:
            truth = draw_truth("smollm2_mean", proto, tau, b_range, rng)
            if truth is None:
                continue
            f, b = truth
            state = rng.bit_generator.state
            for c in caps:
                rng.bit_generator.state = state
                est, _ = design.simulate_protocol(
                    f, sd, proto["grid"], proto["baseline_mean"], proto["baseline_sd"], tol, rng,
                    replicates=proto["replicates"], factor=proto["factor"], max_runs=c, x_cv=proto["x_cv"],
                    confidence=proto["confidence"], pairs_per_round=proto["pairs_per_round"], seed_sd=proto["seed_sd"],
                )  # fmt: skip
                used = est.method == "model"
                recs[(d, c)].append((b, *est.budget.interval, est.model.value if est.model else math.nan, used))
            n += 1
    design.LOCAL = True
    rows = []
    for (d, c), r in recs.items():
        a = np.array(r, dtype=np.float64)  # (sims, 5)
        b, lo, hi, bhat, used = a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4] > 0
        log_err = np.log(bhat[used] / b[used])
        fifths = np.quantile(b, [0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
        by_b = []
        for k in range(5):
            m = (b >= fifths[k]) & (b <= fifths[k + 1])
            by_b.append({"budget_range": [float(fifths[k]), float(fifths[k + 1])],
                         "lower_above_truth": float(np.mean(lo[m] > b[m])), "model_used": float(np.mean(used[m])),
                         "mean_log_bhat_over_b": float(np.mean(np.log(bhat[m & used] / b[m & used])))})  # fmt: skip
        rows.append({"design": d, "max_runs": c, "sims": sims, "coverage": float(np.mean((lo <= b) & (b <= hi))),
                     "lower_above_truth": float(np.mean(lo > b)), "model_used": float(np.mean(used)),
                     "lower_above_truth_model_used": float(np.mean(lo[used] > b[used])),
                     "mean_log_bhat_over_b": float(np.mean(log_err)), "sd_log_bhat_over_b": float(np.std(log_err)),
                     "by_budget_fifth": by_b})  # fmt: skip
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "by_budget_fifth"}), flush=True)
    return {"truth": "smollm2_mean", "rows": rows, "seconds": round(time.perf_counter() - t0, 1)}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sims", type=int, default=400)
    ap.add_argument("--designs", nargs="+", default=["around", "local"], choices=["around", "local"])
    ap.add_argument("--caps", nargs="+", type=int, default=[21, 33, 45])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    result = run(a.sims, a.designs, a.caps, a.seed) | {"command": " ".join(["python", *sys.argv])}
    if a.out:
        a.out.write_text(json.dumps(result, indent=2) + "\n")
