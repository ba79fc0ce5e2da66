"""Why the run-averaged budget's interval missed B from above on a cost flat to B/3 and then linear (issue 40).

    OMP_NUM_THREADS=1 nice -n 5 python bench/run_x_diagnosis.py --sims 400 --out bench/results/run_x_diagnosis.json

bench/budget_coverage.py's SmolLM2 cell flat_then_rising (same seeds, same simulated calibrations) under four
protocols: the start x, the run x, and each with the other's grid or replicate log-x spread (x_cv) swapped in — which
of the two moves the coverage — and the run x with the estimator the run-averaged budget uses now (`local_model`: the
model refitted on the levels around B̂) against the all-level model it used before. Per variant: coverage, P(B_hi <
B), P(B_lo > B), how often the model made the budget, the model's median B̂ / B and sd of log B̂ / B, its median
upper half-width log(B_hi / B̂), P(B_hi < B) among the model's budgets, the fitted exponent, the level log-x
standard error the model integrated over; for the model's upper misses, where B sat among the levels and the
lack-of-fit p-values that let them through. Also the shipped ledgers' x_run / x_start per level (is the run-x
mapping near a power of the start x, or does a floor bend the curve?).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's admitcheck, not an installed one
sys.path.insert(0, str(ROOT / "bench"))

import budget_coverage as bc  # noqa: E402

TRUTH = "flat_then_rising"


def calibrations(proto: dict, sims: int, seed: int, local_model: bool) -> list[dict]:
    """`sims` simulated SmolLM2 calibrations of the truth, as bench/budget_coverage.py's cell draws them."""
    from admitcheck.calibration.curve import Tolerance
    from admitcheck.calibration.design import simulate_protocol

    rng = np.random.default_rng([seed, len("smollm2"), bc.SMOLLM2_TRUTHS.index(TRUTH)])
    tol = Tolerance(relative=proto["relative"])
    tau = tol.of(proto["baseline_mean"])
    sd, b_range = bc.noise_and_range("smollm2", proto)
    rows = []
    while len(rows) < sims:
        f, b = bc.draw_truth(TRUTH, proto, tau, b_range, rng)
        est, _ = simulate_protocol(
            f, sd, proto["grid"], proto["baseline_mean"], proto["baseline_sd"], tol, rng,
            replicates=proto["replicates"], factor=proto["factor"], max_runs=proto["max_runs"], x_cv=proto["x_cv"],
            n_boot=0, confidence=proto["confidence"], pairs_per_round=proto["pairs_per_round"],
            seed_sd=proto["seed_sd"], local_model=local_model,
        )  # fmt: skip
        m = est.model
        rows.append({
            "lo": est.budget.interval[0] / b, "hi": est.budget.interval[1] / b, "method": est.method,
            "value": est.budget.value / b, "exponent": m.exponent if m else None,
            "x_log_se": m.x_log_se if m else None, "position": int(sum(x < b for x in est.level_x)),
            "lack_of_fit_p": m.lack_of_fit.p_value if m else None,
        })  # fmt: skip
    return rows


def summary(rows: list[dict]) -> dict:
    n = len(rows)
    model = [r for r in rows if r["method"] == "model"]
    log_b = np.log([r["value"] for r in model])
    half = [math.log(r["hi"] / r["value"]) for r in model if math.isfinite(r["hi"])]
    misses = [r for r in model if r["hi"] < 1]
    return {
        "sims": n,
        "coverage": sum(r["lo"] <= 1 <= r["hi"] for r in rows) / n,
        "upper_below_truth": sum(r["hi"] < 1 for r in rows) / n,
        "lower_above_truth": sum(r["lo"] > 1 for r in rows) / n,
        "lower_end_zero": sum(r["lo"] == 0 for r in rows) / n,
        "model_used": len(model) / n,
        "model_median_b_over_truth": float(np.exp(np.median(log_b))),
        "model_sd_log_b": float(log_b.std()),
        "model_median_log_upper_half_width": float(np.median(half)),
        "model_upper_below_truth": len(misses) / len(model),
        "model_median_exponent": float(np.median([r["exponent"] for r in model])),
        "model_median_x_log_se": float(np.median([r["x_log_se"] for r in model])),
        "upper_misses_levels_below_b": {str(k): sum(r["position"] == k for r in misses) for k in range(7)},
        "upper_misses_median_exponent": float(np.median([r["exponent"] for r in misses])) if misses else None,
        "upper_misses_median_b_over_truth": float(np.median([r["value"] for r in misses])) if misses else None,
        "upper_misses_lack_of_fit_p_quartiles": (
            [float(v) for v in np.quantile([r["lack_of_fit_p"] for r in misses], [0.25, 0.5, 0.75])] if misses else None
        ),
    }


def run_x_mapping() -> dict:
    """x_run / x_start of each shipped ledger's noise levels (mean over replicates), ascending x_start."""
    out = {}
    for name in (*bc.SMOLLM2_LEDGERS, "toy"):
        by: dict[str, list[tuple[float, float]]] = {}
        for line in (ROOT / "calibrations" / f"{name}.ledger.jsonl").read_text().splitlines():
            d = json.loads(line)
            lv = json.loads(d["key"])["level"] if d.get("kind") == "run" else None
            if lv is None or lv["kind"] != "noise":
                continue
            by.setdefault(json.dumps(lv, sort_keys=True), []).append(
                (float(d["mismatch"]), float(np.mean(d["in_run_k3"][: bc.RUN_WINDOW])))
            )
        pts = sorted((float(np.mean([a for a, _ in v])), float(np.mean([b for _, b in v]))) for v in by.values())
        slope = float(np.polyfit(np.log([a for a, _ in pts]), np.log([b for _, b in pts]), 1)[0])
        out[name] = {"x_start": [a for a, _ in pts], "x_run_over_x_start": [b / a for a, b in pts],
                     "log_log_slope": slope}  # fmt: skip
    return out


def main(sims: int, seed: int) -> dict:
    protos = {}
    for x in ("start", "run"):
        bc.X = x
        protos[x] = bc.protocols()["smollm2"]
    start, run = protos["start"], protos["run"]
    variants = {
        "start x": (start, False),
        "run x, all-level model (before)": (run, False),
        "run x grid, start x_cv": (run | {"x_cv": start["x_cv"]}, False),
        "start x grid, run x_cv": (start | {"x_cv": run["x_cv"]}, False),
        "run x, local refit (now)": (run, True),
    }
    out = {"truth": TRUTH, "protocol": "smollm2", "x_cv": {"start": start["x_cv"], "run": run["x_cv"]}, "variants": {}}
    for name, (proto, local) in variants.items():
        out["variants"][name] = summary(calibrations(proto, sims, seed, local))
        print(name, json.dumps(out["variants"][name]), flush=True)
    out["run_x_mapping"] = run_x_mapping()
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sims", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    result = main(a.sims, a.seed)
    if a.out:
        a.out.write_text(json.dumps(result, indent=2))
