"""Rounds that decide candidates (issue 38, `levels.decide`): where a calibration's next runs go when the user names
the candidates whose verdicts they need — their screened mismatch upper bounds — besides B's design points.

    nice -n 10 python bench/decide_design.py --sims 200 --out bench/results/decide_design.json
    python bench/decide_design.py --sims 20 --truths power             # a quick look

Each simulated calibration is `design.simulate_protocol` (calibrate's rounds and design without the OPD runs, the
runs' seed structure and noise measured from the shipped ledgers: bench/budget_coverage.py's `protocols`) run twice
on the same truth and the same random stream: once with the shipped design (`decide` empty: pairs at the levels
that bracket B within B/2..2B, `design.LOCAL`; bench/results/decide_design.json was made with the design before,
the levels nearest B/2 and 2B) and once with the candidates' mismatches as `decide`. Candidates sit at fixed
multiples of the true B (their screened upper bounds: a screen admits one when its upper bound is below B_lo, rejects
it when its lower bound is above B_hi; the bench takes the candidate's bound as exact, to isolate the calibration's
part).

Protocols: `toy` (examples/toy_calibrate.yaml as shipped: adaptive rounds up to its run cap) and `smollm2_45`
(examples/smollm2_calibrate.yaml's first 21 runs — 6 levels × 3 pairs + 3 baselines — continued to 45 runs, the cap
issue 36 sets for SmolLM2: the question is where the next 24 GPU runs go). Candidates: for SmolLM2 at 0.4, 0.55 and
0.7 × B (the FP8 weight recipes sit at 0.35–0.6 × the shipped B) and 1.6 × B; for the toy at 0.5, 0.8, 1.25, 2 × B.

Per (protocol, truth, design): the budget interval's coverage and P(B_lo > B) (the interval must stay valid under
either design), median hi/lo, and per candidate the share decided correctly (admitted below B, rejected above) and
decided wrongly (admitted above B, rejected below).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
CANDIDATES = {"toy": (0.5, 0.8, 1.25, 2.0), "smollm2_45": (0.4, 0.55, 0.7, 1.6)}
TRUTHS = ("power", "power2", "linear", "step", "smollm2_mean")


def one_cell(args: tuple) -> dict:
    from budget_coverage import SMOLLM2_TRUTHS, draw_truth, noise_and_range

    from admitcheck.calibration.curve import Tolerance
    from admitcheck.calibration.design import simulate_protocol

    name, shape, sims, seed, proto = args
    rng = np.random.default_rng([seed, len(name), SMOLLM2_TRUTHS.index(shape)])
    tol = Tolerance(relative=proto["relative"])
    tau = tol.of(proto["baseline_mean"])
    g, mult = proto["grid"], CANDIDATES[name]
    sd, b_range = noise_and_range(name.split("_")[0], proto)
    out = {d: {"cover": 0, "low": 0, "widths": [], "runs": [], "model": 0, "right": np.zeros(len(mult)),
               "wrong": np.zeros(len(mult))} for d in ("shipped", "decide")}  # fmt: skip
    n, t0 = 0, time.perf_counter()
    while n < sims:
        truth = draw_truth(shape, proto, tau, b_range, rng)
        if truth is None:
            continue
        f, b = truth
        cands = tuple(m * b for m in mult)
        state = rng.bit_generator.state  # both designs on the same random stream (common random numbers)
        for design, decide in (("shipped", ()), ("decide", cands)):
            rng.bit_generator.state = state
            est, used = simulate_protocol(
                f, sd, g, proto["baseline_mean"], proto["baseline_sd"], tol, rng,
                replicates=proto["replicates"], factor=proto["factor"], max_runs=proto["max_runs"],
                x_cv=proto["x_cv"], n_boot=0, confidence=proto["confidence"],
                pairs_per_round=proto["pairs_per_round"], seed_sd=proto["seed_sd"],
                x_real=float(proto.get("x_real", 0.0)),
                decide=decide,
            )  # fmt: skip
            lo, hi = est.budget.interval
            o = out[design]
            o["cover"] += lo <= b <= hi
            o["low"] += lo > b
            o["widths"].append(est.width_factor)
            o["runs"].append(used)
            o["model"] += est.method == "model"
            for i, u in enumerate(cands):
                admit, reject = u < lo, u > hi
                o["right"][i] += (admit and u < b) or (reject and u > b)
                o["wrong"][i] += (admit and u > b) or (reject and u < b)
        n += 1
    rows = []
    for design, o in out.items():
        rows.append({
            "protocol": name, "truth": shape, "design": design, "sims": n, "coverage": o["cover"] / n,
            "lower_above_truth": o["low"] / n, "model_used": o["model"] / n,
            "median_interval_factor": float(np.median(o["widths"])), "mean_runs": float(np.mean(o["runs"])),
            "candidates_x_over_b": list(mult), "decided_right": [float(v / n) for v in o["right"]],
            "decided_wrong": [float(v / n) for v in o["wrong"]], "seconds": round(time.perf_counter() - t0, 1),
        })  # fmt: skip
    return {"rows": rows}


def protocols() -> dict[str, dict]:
    from budget_coverage import protocols as shipped

    p = shipped()
    return {"toy": p["toy"], "smollm2_45": p["smollm2"] | {"max_runs": 45}}


def run(sims: int, names, truths, seed: int, jobs: int) -> dict:
    from concurrent.futures import ProcessPoolExecutor

    protos = protocols()
    work = [(n, t, sims, seed, protos[n]) for n in names for t in truths if t != "smollm2_mean" or n != "toy"]
    t0 = time.perf_counter()
    rows: list[dict] = []
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            for r in pool.map(one_cell, work):
                rows.extend(r["rows"])
    else:
        for w in work:
            rows.extend(one_cell(w)["rows"])
            print(json.dumps(rows[-2:]), flush=True)
    valid = all(r["coverage"] >= 0.93 and r["lower_above_truth"] <= 0.035 for r in rows if r["sims"] >= 200)
    return {"protocols": {n: protos[n] for n in names}, "rows": rows, "valid_both_designs": valid,
            "must_hold": "coverage >= 0.93 and P(B_lo > B) <= 0.035 in every cell with >= 200 sims, either design",
            "seconds": round(time.perf_counter() - t0, 1)}  # fmt: skip


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sims", type=int, default=200)
    ap.add_argument("--protocols", nargs="+", default=["smollm2_45", "toy"], choices=list(CANDIDATES))
    ap.add_argument("--truths", nargs="+", default=list(TRUTHS), choices=list(TRUTHS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    result = run(a.sims, a.protocols, a.truths, a.seed, a.jobs) | {"command": " ".join(sys.argv)}
    text = json.dumps(result, indent=2)
    if a.out:
        a.out.write_text(text + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "protocols"}, indent=None)[:4000])
