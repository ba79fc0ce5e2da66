"""Coverage of `compare`'s budget-ratio interval when two calibrations share training seeds (issue 40).

    nice -n 10 python bench/compare_coverage.py --sims 200 --out bench/results/compare_coverage.json
    python bench/compare_coverage.py --sims 10 --cells power/power:0.8          # a quick look
    nice -n 10 python bench/compare_coverage.py --sims 200 --second toy_rl --cells power/power:0.1 --out F  # OPD vs RL
    nice -n 5 python bench/compare_coverage.py --first smollm2_57 --second smollm2_rl_copy --sims 150 \
        --cells power/power:0.4 --out F         # the SmolLM2 pair (bench/results/compare_coverage_smollm2_rl.json)

`--first smollm2_57 --second smollm2_rl_copy`: A under the shipped SmolLM2 OPD protocol, B under the SmolLM2 RL
copy's (bench/budget_coverage.py's protocols of those names): each calibration's run noise, τ and the range its B is
drawn from are its own protocol's (`budget_coverage.noise_and_range`), λ its protocol's (0 where it has none, as
budget_coverage reads it), and since the two grids differ, a level's measured x is each calibration's own draw.

Each simulated comparison is two calibrations run side by side under the shipped toy protocol
(bench/budget_coverage.py's `protocols()["toy"]`: examples/toy_calibrate.yaml's grid, 3 pairs per level, rounds of 4
pairs, the run cap, the adaptive design of `design.plan_round`; the seed-effect sd and log-x spread measured on
calibrations/toy.yaml, one pair sd and the share λ of the log-x spread that is the run's own mismatch measured on the
three re-made toy calibrations — before 2026-12-05 the per-level sds of calibrations/toy.yaml and λ = 1), or with
`--second toy_rl` calibration B under the RL calibration's (its 60-run cap, baselines, pair sd, λ = 1: each RL run's
cost follows its own x; its budget then often comes from the gate's run-x tier, docs/calibration.md). Both calibrations
use the same training seeds r = 0, 1, …, and what a seed shares between them is simulated as the ledgers show it:
- the measured x of level `name`'s replicate r is identical in both (same engine, same noise draw, same probe at the
  start weights: calibrations/toy.yaml and toy_rl.yaml carry the same x at their common levels), and with the toy's
  real x the run's cost follows it in both;
- the seed effects, the baseline run noise and the level run noise of (name, r) are correlated between the two
  calibrations with correlation ρ (0, 0.4, 0.8; `measured()` gives the shipped pair's, for reference).

Truths: calibration A's cost reaches τ at B_A, B's at B_B, each log-uniform inside the grid (as budget_coverage's toy
cells), so the true ratio B_B / B_A is known; shapes from budget_coverage.true_cost. Each calibration's design adapts
to its own estimates (as two real `calibrate` runs would). Then `compare.compare_budgets` with the shared-seed
jackknife (`shared_seeds.seed_correlation` on the simulated runs keyed by seed) and without it (independent MOVER).

Per cell: sims, coverage of the true ratio by the paired interval (r shrunk as shipped), by the paired interval with
the raw jackknife r̂, and by the independent interval; P(lower end > R), P(upper end < R); median hi/lo of each (∞
when an end is open, as with the bracket); the share of open intervals; mean r̂; how often each budget came from the
model. Must hold: paired coverage ≥ 0.93 in every cell.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's admitcheck, not an installed one
sys.path.insert(0, str(ROOT / "bench"))

SHAPES = ("power/power", "power/sigmoid", "linear/power2")
RHOS = (0.0, 0.4, 0.8)


class Noise:
    """Standard normals keyed by what they stand for, correlated ρ between the two calibrations (k = 0, 1)."""

    def __init__(self, rng: np.random.Generator, rho: float) -> None:
        self.rng, self.rho = rng, rho
        self.shared: dict[tuple, float] = {}
        self.own: dict[tuple, float] = {}

    def _z(self, table: dict, key: tuple) -> float:
        if key not in table:
            table[key] = float(self.rng.standard_normal())
        return table[key]

    def corr(self, k: int, key: tuple) -> float:
        return math.sqrt(self.rho) * self._z(self.shared, key) + math.sqrt(1 - self.rho) * self._z(self.own, (k, *key))

    def same(self, key: tuple) -> float:  # identical in both calibrations
        return self._z(self.shared, ("same", *key))


def simulate_one(
    k: int, cost, proto: dict, noise: Noise, tol, rng: np.random.Generator, sd=None, shared_x: bool = True
):
    """One calibration under `proto` (design.simulate_protocol's loop, its draws from `noise`): (the estimate, its
    SeedRuns, runs used). `sd`: the paired-cost sd as a function of x (None: the toy's, from `proto`); `shared_x`:
    a level's measured x is the same draw in both calibrations (their grids are one: the same engine at the same
    level), else each calibration's own."""
    from admitcheck.calibration.curve import LevelData, estimate
    from admitcheck.calibration.design import actual_x, plan_round
    from admitcheck.calibration.shared_seeds import SeedRuns

    xs = list(proto["grid"])
    if sd is not None:
        noise_sd = sd
    elif "pair_sd" in proto:  # one pair sd once the x-driven part is off (budget_coverage.within_level_noise)
        noise_sd = lambda x: proto["pair_sd"]  # noqa: E731
    else:
        lx, lsd = np.log(proto["noise_x"]), proto["noise_sd"]
        noise_sd = lambda x: float(np.interp(math.log(x), lx, lsd))  # noqa: E731  paired sd, flat beyond the levels
    mu0, x_cv, seed_sd = proto["baseline_mean"], proto["x_cv"], proto["seed_sd"]
    lam = float(proto.get("x_real", 0.0))  # the share of the log-x spread that is the run's own mismatch
    e0 = noise_sd(xs[0]) / math.sqrt(2.0)
    base: list[float] = []
    targets = {f"level-{i}": x for i, x in enumerate(xs)}
    data: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for n in targets}

    def seed_of(r: int) -> None:
        while len(base) <= r:
            s = len(base)
            base.append(mu0 + seed_sd * noise.corr(k, ("seed", s)) + e0 * noise.corr(k, ("base", s)))

    def effect(r: int) -> float:
        return seed_sd * noise.corr(k, ("seed", r))

    def add(name: str) -> None:
        x, r = targets[name], len(data[name][1])
        seed_of(r)
        own = () if shared_x else (k,)
        d = x_cv * noise.same(("x", *own, name, r))  # the measured x: shared (same engine, noise draw and probe)
        xm = x * math.exp(d)
        # the run's actual x: λ of the spread (shared too: the same engine), as design.simulate_protocol draws it
        xc = actual_x(x, d, lam, x_cv, lambda: noise.same(("x_real", *own, name, r)))
        q = mu0 + cost(xc) + effect(r) + noise_sd(x) / math.sqrt(2.0) * noise.corr(k, ("run", name, r))
        data[name][0].append(xm)
        data[name][1].append(q - base[r])

    for n in targets:
        for _ in range(proto["replicates"]):
            add(n)
    runs = proto["replicates"] * (len(targets) + 1)
    rounds = 0
    while True:
        levels = [LevelData(n, tuple(data[n][0]), tuple(data[n][1])) for n in targets]
        est = estimate(levels, base, tol, n_boot=0, confidence=proto["confidence"], looks=rounds + 1)
        counts = {n: len(data[n][1]) for n in targets}
        plan = plan_round(est, counts, proto["factor"], 2, {n: float(np.mean(data[n][0])) for n in targets})
        new = [f"level-{len(targets) + j}" for j in range(len(plan.new_levels))]
        grown = {n: counts[n] + proto["pairs_per_round"] * (n in plan.replicates) for n in targets}
        grown |= {n: proto["replicates"] for n in new}
        new_base = max(max(grown.values()) - len(base), 0)
        more = sum(grown.values()) - sum(counts.values()) + new_base
        if plan.done or runs + more > proto["max_runs"]:
            break
        for n, t in zip(new, plan.new_levels):
            targets[n], data[n] = t, ([], [])
            for _ in range(proto["replicates"]):
                add(n)
        for n in plan.replicates:
            for _ in range(proto["pairs_per_round"]):
                add(n)
        seed_of(max(grown.values()) - 1)
        runs += more
        rounds += 1
    seed_levels = tuple(
        LevelData(n, tuple(data[n][0]), tuple(data[n][1]), tuple(range(len(data[n][1])))) for n in targets
    )
    runs_k = SeedRuns(seed_levels, dict(enumerate(base)), tol, proto["confidence"], rounds + 1, est.method)
    return est, runs_k, runs


def side(est, label: str):
    from admitcheck.calibration.compare import BudgetSide

    b = est.budget
    return BudgetSide(label, label, b.value, b.kind, tuple(b.interval), 0.95, est.tau, None)


def one_cell(
    shape_pair: str,
    rho: float,
    sims: int,
    seed: int,
    proto: dict,
    deadline: float | None,
    proto_b: dict | None = None,
    names: tuple[str, str] = ("toy", "toy"),
) -> dict:
    """One cell: calibration A under `proto`, B under `proto_b` (default the same), `names` their protocols'
    (bench/budget_coverage.py's): each calibration's τ, run noise and the range its B is drawn from are its own
    protocol's (`noise_and_range`); the measured x of a level is shared when the two grids are one."""
    from budget_coverage import noise_and_range, true_cost

    from admitcheck.calibration.compare import compare_budgets, mover_log_ratio
    from admitcheck.calibration.curve import Tolerance
    from admitcheck.calibration.shared_seeds import seed_correlation

    rng = np.random.default_rng([seed, SHAPES.index(shape_pair), round(10 * rho)])
    tols = [Tolerance(relative=p["relative"]) for p in (proto, proto_b or proto)]
    protos = (proto, proto_b or proto)
    sds, ranges = zip(*(noise_and_range(n, p) for n, p in zip(names, protos)))
    shared_x = list(protos[0]["grid"]) == list(protos[1]["grid"])
    shapes = shape_pair.split("/")
    rows = []
    t0 = time.perf_counter()
    while len(rows) < sims and (deadline is None or time.time() < deadline):
        bs = [math.exp(rng.uniform(math.log(ranges[k][0]), math.log(ranges[k][1]))) for k in range(len(shapes))]
        noise = Noise(rng, rho)
        out = [
            simulate_one(k, true_cost(s, tols[k].of(protos[k]["baseline_mean"]), b, protos[k]), protos[k], noise,
                         tols[k], rng, sds[k], shared_x)
            for k, (s, b) in enumerate(zip(shapes, bs))
        ]  # fmt: skip
        (ea, ra, _), (eb, rb, _) = out
        truth = bs[1] / bs[0]
        sa, sb = side(ea, "A"), side(eb, "B")
        indep = compare_budgets(sa, sb)
        try:
            c = seed_correlation(ra, rb)
        except ValueError:
            c = None
        paired = compare_budgets(sa, sb, c, "jackknife undefined") if c is not None else indep
        raw = paired.ratio_interval
        if c is not None and paired.method != "bound":
            raw = mover_log_ratio(sb.value, sb.interval, sa.value, sa.interval, c.r)
        rows.append({
            "truth": truth, "paired": paired.ratio_interval, "paired_raw_r": raw, "independent": indep.ratio_interval,
            "method": paired.method, "r": None if c is None else c.r, "r_used": None if c is None else c.r_used,
            "model": [ea.method == "model", eb.method == "model"],
        })  # fmt: skip
    n = len(rows)

    def stats(key: str) -> dict:
        lo = np.array([r[key][0] for r in rows])
        hi = np.array([r[key][1] for r in rows])
        t = np.array([r["truth"] for r in rows])
        with np.errstate(divide="ignore"):
            w = np.where((lo > 0) & np.isfinite(hi), hi / np.where(lo > 0, lo, 1.0), np.inf)
        return {
            "coverage": float(np.mean((lo <= t) & (t <= hi))),
            "lower_above_truth": float(np.mean(lo > t)),
            "upper_below_truth": float(np.mean(hi < t)),
            "median_hi_over_lo": float(np.median(w)),
            "open": float(np.mean(~np.isfinite(w))),
            "median_log_width_finite": float(np.median(np.log(w[np.isfinite(w)]))) if np.isfinite(w).any() else None,
        }

    rs = [r["r"] for r in rows if r["r"] is not None]
    return {
        "cell": f"{shape_pair} rho={rho}", "shapes": shape_pair, "rho": rho, "sims": n,
        "paired": stats("paired"), "paired_raw_r": stats("paired_raw_r"), "independent": stats("independent"),
        "mean_r": float(np.mean(rs)) if rs else None, "jackknife_failed": n - len(rs),
        "methods": {m: sum(r["method"] == m for r in rows) for m in {r["method"] for r in rows}},
        "model_used": [float(np.mean([r["model"][k] for r in rows])) if n else None for k in (0, 1)],
        "seconds": round(time.perf_counter() - t0, 1),
    }  # fmt: skip


CALIBRATION = {"toy": "toy", "toy_rl": "toy_rl", "smollm2_57": "smollm2", "smollm2_rl_copy": "smollm2_rl_copy"}


def measured(names: tuple[str, str] = ("toy", "toy_rl")) -> dict:
    """The shipped pair's seed correlation, for reference: the correlation between the two calibrations' two-way
    (seed + level) residuals of the runs they share (same level name, same training seed; None under 3), and the
    compare command's jackknife r of their budgets."""
    from admitcheck.calibration.artifact import load_calibration
    from admitcheck.calibration.shared_seeds import load_seed_runs, seed_correlation

    def resid(cal) -> dict[tuple[str, int], float]:
        runs = [r for r in cal.runs if r.in_fit or r.kind == "baseline"]
        levs, seeds = sorted({r.level for r in runs}), sorted({r.seed for r in runs})
        a = np.zeros((len(runs), len(levs) + len(seeds)))
        for i, r in enumerate(runs):
            a[i, levs.index(r.level)] = a[i, len(levs) + seeds.index(r.seed)] = 1.0
        y = np.array([r.quality for r in runs])
        coef, *_ = np.linalg.lstsq(a, y, rcond=None)
        return {(r.level, r.seed): float(v) for r, v in zip(runs, y - a @ coef)}

    cals = [load_calibration(ROOT / "calibrations" / f"{n}.yaml") for n in names]
    ra, rb = (resid(c) for c in cals)
    keys = sorted(set(ra) & set(rb))
    va, vb = np.array([ra[k] for k in keys]), np.array([rb[k] for k in keys])
    from scipy import stats

    c = seed_correlation(*(load_seed_runs(cal) for cal in cals))
    few = len(keys) < 3
    return {
        "calibrations": [f"calibrations/{n}.yaml" for n in names],
        "matched_runs": len(keys),
        "residual_correlation_pearson": None if few else float(np.corrcoef(va, vb)[0, 1]),
        "residual_correlation_spearman": None if few else float(stats.spearmanr(va, vb).statistic),
        "jackknife_r_of_log_budgets": c.r,
        "shared_seeds": c.shared_seeds,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sims", type=int, default=200)
    ap.add_argument("--cells", nargs="+", default=None, help="shape/shape:rho, e.g. power/power:0.8")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stop-at", default=None, help="UTC HH:MM: no new simulation starts after it (the cell in "
                    "progress is written with the sims it has)")  # fmt: skip
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--first", default="toy", choices=["toy", "smollm2_57"], help="calibration A's protocol "
                    "(budget_coverage.protocols(); smollm2_57: the shipped SmolLM2 OPD calibration's)")  # fmt: skip
    ap.add_argument("--second", default="toy", choices=["toy", "toy_rl", "smollm2_rl_copy"], help="calibration B's "
                    "protocol (budget_coverage.protocols(); toy_rl: the RL calibration's noise, its runs' cost "
                    "following their own x; smollm2_rl_copy: the SmolLM2 RL copy calibration's)")  # fmt: skip
    a = ap.parse_args()
    from budget_coverage import protocols

    protos = protocols()
    proto, proto_b = protos[a.first], protos[a.second]
    deadline = None
    if a.stop_at:
        now = datetime.datetime.now(datetime.timezone.utc)
        hh, mm = (int(v) for v in a.stop_at.split(":"))
        deadline = now.replace(hour=hh, minute=mm, second=0, microsecond=0).timestamp()
    if a.cells:
        cells = [(c.split(":")[0], float(c.split(":")[1])) for c in a.cells]
    else:
        cells = [(s, r) for s in SHAPES for r in RHOS]
    pair = (CALIBRATION[a.first], CALIBRATION[a.second] if a.second != "toy" else "toy_rl")
    result = {"protocol": f"A: {a.first}, B: {a.second} (bench/budget_coverage.py protocols())",
              "measured": measured(pair),
              "rows": [],
              "must_hold": "paired coverage >= 0.93 in every cell", "command": " ".join(sys.argv)}  # fmt: skip
    print(json.dumps(result["measured"]), flush=True)
    for shape_pair, rho in cells:
        if deadline is not None and time.time() >= deadline:
            break
        row = one_cell(shape_pair, rho, a.sims, a.seed, proto, deadline, proto_b, (a.first, a.second))
        result["rows"].append(row)
        result["ok"] = all(r["paired"]["coverage"] >= 0.93 for r in result["rows"])
        print(json.dumps(row), flush=True)
        if a.out:
            a.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
