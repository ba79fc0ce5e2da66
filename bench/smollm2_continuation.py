"""A SmolLM2 calibration continued, simulated from its own ledger: what the next GPU runs can give its budget. Made for
the shipped OPD calibration's first 21 runs (issue 38: 0.138 [0.0685, 0.232] ×3.39 then) and used since for the
lr-5e-6 RL calibration's 153 runs (issue 40: how its 201-run cap will likely end).

    OMP_NUM_THREADS=1 nice -n 10 python bench/smollm2_continuation.py --sims 200 --runs 21 \\
        --out bench/results/smollm2_continuation.json
    python bench/smollm2_continuation.py --sims 20 --designs local --runs 21   # a quick look
    python bench/smollm2_continuation.py --protocol smollm2_rl_copy_lr5e-6_201 --runs 153 --rounds 19 \\
        --max-runs 201 --designs local --truths fit --sims 200        # the RL calibration from its --budget-so-far

`--runs N`: the ledger's first N run records (default all; the OPD figures below were made from its first 21, before
it was continued); `--rounds R`: the rounds they are through (`admitcheck calibrate CONFIG --budget-so-far` says
"through round R"; default 1, as the OPD figures were made), so that each fit spends the bracket's α as calibrate's
would (looks R + 1, then one more a round); `--protocol`: bench/budget_coverage.py's protocol whose ledger, noise
and cap are used.

Each simulated continuation starts from the ledger's first N runs as they are (the OPD one: 6 levels × 3 pairs + 3
baselines, their measured x and qualities; a replicate's seed effect is its seed's, `levels.replicate_seed`) and runs
calibrate's rounds (`design.plan_round`, 3 pairs per wanted level a round, `levels.interval_factor` 1.5, the run cap
`--max-runs`) on simulated runs: a new run of seed r at x has quality a_r + cost(x) + e, e ~ N(0, run sd), with the
protocol's run sd and seed-effect sd (bench/budget_coverage.py's `protocols`: for OPD pooled from the three SmolLM2
ledgers); a_r of a ledger's seed is its runs' mean quality less the fitted cost (the plug-in seed effect), a new
seed's a_r the baselines' mean plus N(0, seed sd), its baseline run a_r + e. A new run's x is its level's target
times exp(x_cv·N), its cost taken at the protocol's actual x (`design.actual_x`; x_real 1 for RL: a run's cost
follows its own measured x). Truths for the new runs: `fit`, the ledger's model as fitted (OPD at 21 runs: B 0.138,
exponent 0.68), and, for a protocol with a mean curve, `mean_curve`, the three OPD calibrations' mean level costs
interpolated in log x, flat beyond the grid (B 0.139). Per (truth, design: `local` = `design.LOCAL`, the shipped
design; `around` = pairs at the levels nearest B/2 and 2B): the median hi/lo at the cap, P(hi/lo ≤ 2), how often the
model is used, and whether the interval holds the truth's B (a conditional figure: one calibration's data, not a
coverage).
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


def shipped_runs(name: str = "smollm2", runs: int | None = None) -> tuple[dict, list[float]]:
    """calibrations/NAME.ledger.jsonl (its first `runs` run records) as {level: ([x], [paired cost], [replicate])} and
    the baselines by replicate (a replicate's seed: `levels.replicate_seed` of the config's seed 0)."""
    from budget_coverage import ledger_records, run_rows

    from admitcheck.calibration.levels import replicate_seed

    rows = run_rows(ledger_records(name)[:runs])
    base = {s: q for _, s, q, x in rows if x == 0}
    seeds = [replicate_seed(0, r) for r in range(len(base))]
    assert set(seeds) == set(base), "the baselines are not replicates 0..n-1 of seed 0"
    out: dict[str, tuple[list[float], list[float], list[int]]] = {}
    for k, s, q, x in rows:
        if x > 0:
            v = out.setdefault(k, ([], [], []))
            v[0].append(x)
            v[1].append(q - base[s])
            v[2].append(seeds.index(s))
    ordered = sorted(out.values(), key=lambda v: float(np.mean(v[0])))
    return {f"level-{i}": v for i, v in enumerate(ordered)}, [base[s] for s in seeds]


def levels_of(data: dict):
    from admitcheck.calibration.curve import LevelData

    return [LevelData(n, tuple(v[0]), tuple(v[1]), replicates=tuple(v[2])) for n, v in data.items()]


def continue_once(data0, base0, cost, proto, tol, rng, max_runs: int, rounds0: int = 1):
    """One continuation to `max_runs` (module docstring) of a ledger through `rounds0` rounds: (estimate, runs)."""
    from admitcheck.calibration.curve import estimate
    from admitcheck.calibration.design import actual_x, plan_round

    data = {n: (list(v[0]), list(v[1]), list(v[2])) for n, v in data0.items()}
    base = list(base0)
    est0 = estimate(levels_of(data), base, tol)
    fitted = est0.model.predict
    # plug-in seed effects of the shipped seeds: their runs' mean quality less the fitted cost (baseline: cost 0)
    effect = [float(np.mean([base[r]] + [c + base[r] - fitted(x) for v in data.values()
                                         for x, c, rr in zip(*v) if rr == r])) for r in range(len(base))]  # fmt: skip
    run_sd, seed_sd, mu0 = proto["run_sd"], proto["seed_sd"], float(np.mean(base0))
    targets = {n: float(np.exp(np.mean(np.log(v[0])))) for n, v in data.items()}

    def seed_of(r: int) -> None:
        while len(base) <= r:
            effect.append(mu0 + seed_sd * float(rng.standard_normal()))
            base.append(effect[-1] + run_sd * float(rng.standard_normal()))

    def add(name: str, r: int) -> None:
        seed_of(r)
        d = proto["x_cv"] * float(rng.standard_normal())
        xm = targets[name] * math.exp(d)
        xc = actual_x(
            targets[name], d, float(proto.get("x_real") or 0.0), proto["x_cv"], lambda: float(rng.standard_normal())
        )
        q = effect[r] + cost(xc) + run_sd * float(rng.standard_normal())
        data[name][0].append(xm)
        data[name][1].append(q - base[r])
        data[name][2].append(r)

    runs = sum(len(v[1]) for v in data.values()) + len(base)
    rounds = rounds0  # the ledger's rounds were looked at
    while True:
        est = estimate(levels_of(data), base, tol, confidence=proto["confidence"], looks=rounds + 1)
        counts = {n: len(v[1]) for n, v in data.items()}
        level_x = {n: float(np.mean(v[0])) for n, v in data.items()}
        plan = plan_round(est, counts, proto["factor"], 2, level_x)
        k = proto["pairs_per_round"]
        new = [f"level-{len(data) + j}" for j in range(len(plan.new_levels))]
        grown = {n: counts[n] + k * (n in plan.replicates) for n in data} | {n: proto["replicates"] for n in new}
        cost_runs = sum(grown.values()) - sum(counts.values()) + max(max(grown.values()) - len(base), 0)
        if plan.done or runs + cost_runs > max_runs:
            return est, runs
        for n, t in zip(new, plan.new_levels):
            targets[n], data[n] = t, ([], [], [])
            for r in range(proto["replicates"]):
                add(n, r)
        for n in plan.replicates:
            for j in range(k):
                add(n, counts[n] + j)
        seed_of(max(grown.values()) - 1)
        runs += cost_runs
        rounds += 1


def truths(proto, est0) -> dict:
    fit = {"fit": (est0.model.predict, est0.model.value)}
    if proto.get("mean_cost") is None:
        return fit
    lg, c = np.log(proto["grid"]), proto["mean_cost"]
    tau = est0.tau
    k = int(np.argmax(np.asarray(c) >= tau))
    b_mean = math.exp(lg[k - 1] + (tau - c[k - 1]) / (c[k] - c[k - 1]) * (lg[k] - lg[k - 1]))
    return fit | {"mean_curve": ((lambda x: float(np.interp(math.log(x), lg, c))), b_mean)}


def run(sims: int, designs, names, seed: int, max_runs: int, protocol: str = "smollm2", runs: int | None = None,
        rounds0: int = 1) -> dict:  # fmt: skip
    from budget_coverage import protocols

    from admitcheck.calibration import design
    from admitcheck.calibration.curve import Tolerance, estimate

    proto = protocols()[protocol]
    tol = Tolerance(relative=proto["relative"])
    ledger = Path(proto.get("ledger", "calibrations/smollm2.ledger.jsonl")).name.removesuffix(".ledger.jsonl")
    data0, base0 = shipped_runs(ledger, runs)
    est0 = estimate(levels_of(data0), base0, tol, confidence=proto["confidence"], looks=rounds0 + 1)
    rows = []
    missing = set(names) - set(truths(proto, est0))
    if missing:
        raise SystemExit(f"--truths {' '.join(sorted(missing))}: {protocol} has no mean curve (use --truths fit)")
    for name in names:
        cost, b = truths(proto, est0)[name]
        for d in designs:
            design.LOCAL = d == "local"
            rng = np.random.default_rng([seed, len(name)])  # the same seed, not the same draws: each design
            # draws as many values as its rounds need, so after the first calibration the designs see other truths
            # and noise (unpaired; docs/calibration.md, "Continuing a calibration")
            w, used, held, runs, t0 = [], 0, 0, [], time.perf_counter()
            for _ in range(sims):
                est, n = continue_once(data0, base0, cost, proto, tol, rng, max_runs, rounds0)
                w.append(est.width_factor)
                used += est.method == "model"
                held += est.budget.interval[0] <= b <= est.budget.interval[1]
                runs.append(n)
            w = np.asarray(w)
            rows.append({"truth": name, "true_budget": b, "design": d, "sims": sims, "max_runs": max_runs,
                         "median_interval_factor": float(np.median(w)),
                         "interval_factor_at_most_2": float(np.mean(w <= 2)),
                         "interval_factor_at_most_3": float(np.mean(w <= 3)),
                         "interval_factor_quartiles": [float(v) for v in np.quantile(w, [0.25, 0.75])],
                         "model_used": used / sims, "holds_true_budget": held / sims, "mean_runs": float(np.mean(runs)),
                         "seconds": round(time.perf_counter() - t0, 1)})  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
    design.LOCAL = True
    start = {"budget": est0.budget.value, "interval": list(est0.budget.interval), "factor": est0.width_factor,
             "exponent": est0.model.exponent, "runs": sum(len(v[1]) for v in data0.values()) + len(base0),
             "rounds": rounds0, "protocol": protocol}  # fmt: skip
    return {"start": start, "rows": rows}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sims", type=int, default=400)
    ap.add_argument("--designs", nargs="+", default=["local", "around"], choices=["local", "around"])
    ap.add_argument("--truths", nargs="+", default=["fit", "mean_curve"], choices=["fit", "mean_curve"])
    ap.add_argument("--max-runs", type=int, default=45)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--protocol", default="smollm2", help="bench/budget_coverage.py's protocol (its ledger and noise)")
    ap.add_argument("--runs", type=int, default=None, help="the ledger's first N run records (default: all)")
    ap.add_argument("--rounds", type=int, default=1, help="the rounds those runs are through (module docstring)")
    a = ap.parse_args()
    result = run(a.sims, a.designs, a.truths, a.seed, a.max_runs, a.protocol, a.runs, a.rounds)
    result |= {"seed": a.seed, "command": " ".join(["python", *sys.argv])}
    if a.out:
        a.out.write_text(json.dumps(result, indent=2) + "\n")
