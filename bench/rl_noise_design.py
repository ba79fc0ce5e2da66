"""What an RL budget on SmolLM2 needs (issue 40: OPD and RL budgets each with hi/lo ≤ 3): the measured noise of the
GRPO calibration on the copying task, and by simulation the budget's hi/lo at that noise, at less noise and with more
runs.

    python bench/rl_noise_design.py --sims 30 --grids 10x_lower --truths power --scales 0.5 0.25 --caps 51 99 \
        --jobs 1 --out cells.json        # one of the commands behind bench/results/rl_noise_design.json (its "runs")
    python bench/rl_noise_design.py --sims 3 --grids shipped --scales 1 --caps 51   # a quick look (~10 s)
    python bench/rl_noise_design.py --batch-noise --out bench/results/rl_batch_noise.json   # the batch lever (below)
    python bench/rl_noise_design.py --lr-noise --out bench/results/rl_lr_noise.json         # the learning-rate lever
    python bench/rl_noise_design.py --variant lr5e-6 --sims 30 --grids shipped --truths power --scales 1 \
        --caps 51 99 [--down-cap]      # the lr-5e-6 calibration's noise (bench/results/rl_noise_design_lr5e-6.json)

Noise (from calibrations/smollm2_rl_copy.ledger.jsonl, one H100, 2026-12-06/07): the two-way fit quality = level
mean + seed effect + run noise (bench/budget_coverage.py `two_way_noise`), the baselines' sd, and the sd of the runs
that are all but unperturbed (k3 at the start below 0.0025, 10× under the config's lowest grid level: their
quality differences are the trajectory's noise, not the mismatch's cost), in units of τ.

Simulation: `design.simulate_protocol` (calibrate's rounds and design without the OPD runs) with the shipped config's
replicates, pairs per round, interval factor and confidence; runs carry a seed effect and their own noise at the
measured sds times `scale` (1: as measured; 0.5, 0.25: a protocol whose per-run noise is that much lower), truths
τ(x/B)^0.75 and τ(x/B)^2 with B log-uniform in [B̂/2, 2B̂] around the measured B̂ (the shipped calibration's
point), on two grids: the config's (7 levels, k3 0.005–0.25: B̂ lies below it) and one 10× lower (0.0005–0.025),
run caps 51 (the config's), 99 and 201. Per cell: coverage, median hi/lo, the share of calibrations with hi/lo ≤ 3,
mean runs.

`--batch-noise` (the first lever, measured): the 24-run grids (3 baselines, 7 levels × 3 pairs, the runs before the
ledger's first adaptive round) of the 4-prompt calibration and of examples/smollm2_calibrate_rl_copy_b128.yaml (16
prompts × 8 samples a step, else the same; calibrations/smollm2_rl_copy_b128.ledger.jsonl, one H100, 2026-12-07),
each read as above: the two-way run sd and seed-effect sd, the baselines, τ (the config's relative tolerance of its
own baseline quality), a pair's sd in its own τ and in the 4-prompt τ, the levels' mean cost (a level's run minus
its seed's baseline) in τ, the median seconds a run; the F test of the two run variances (two-sided) and the 95%
interval of their sd ratio. `--lr-noise` (the second lever, measured): the same for
examples/smollm2_calibrate_rl_copy_lr5e-6.yaml (lr 5e-6, else the 4-prompt config; one H100, 2026-12-07), and both
finished calibrations' budgets and model residual sd in τ. `--variant lr5e-6` simulates that calibration's own
noise and protocol; `--down-cap` runs the design with `design.DOWN_CAP` on (the same random numbers as without it).
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
NAME = "smollm2_rl_copy"
CONFIG = ROOT / "examples" / "smollm2_calibrate_rl_copy.yaml"
UNPERTURBED = 0.0025  # k3 at the start below which a run counts as unperturbed (the grid's lowest level / 2)


def measured(variant: str = "") -> dict:
    """The RL copy calibration's noise and its shipped protocol (`variant`: calibrations/smollm2_rl_copy_VARIANT's,
    its config examples/smollm2_calibrate_rl_copy_VARIANT.yaml)."""
    import yaml
    from budget_coverage import ledger_runs, log_x_spread, two_way_noise

    name = f"{NAME}_{variant}" if variant else NAME
    config = ROOT / "examples" / f"smollm2_calibrate_rl_copy_{variant}.yaml" if variant else CONFIG
    cfg = yaml.safe_load(config.read_text())
    cal = yaml.safe_load((ROOT / "calibrations" / f"{name}.yaml").read_text())
    rows = ledger_runs(name)
    run_sd, seed_sd, dof = two_way_noise(rows)
    base = [q for _, _, q, x in rows if x == 0]
    tau = float(cal["tolerance"]["value"])
    flat = [q for _, _, q, x in rows if x < UNPERTURBED]
    by: dict[str, list[float]] = {}
    for k, _, _, x in rows:
        if x > 0:
            by.setdefault(k, []).append(x)
    grid = sorted(float(np.mean(v)) for v in by.values())
    lv = cfg["levels"]
    return {
        "ledger": f"calibrations/{name}.ledger.jsonl",
        "runs": len(rows),
        "tau": tau,
        "baseline_mean": float(np.mean(base)),
        "baseline_sd": float(np.std(base, ddof=1)),
        "run_sd": run_sd,
        "seed_sd": seed_sd,
        "two_way_dof": dof,
        "unperturbed_runs": len(flat),
        "unperturbed_sd": float(np.std(flat, ddof=1)),
        "unperturbed_sd_tau": float(np.std(flat, ddof=1)) / tau,
        "pair_sd_tau": math.sqrt(2.0) * run_sd / tau,
        "levels_x": grid,
        "x_cv": log_x_spread(rows),
        "budget": float(cal["budget"]["value"]),
        "budget_interval": [float(v) for v in cal["budget"]["interval"]],
        "replicates": int(lv["replicates"]),
        "pairs_per_round": int(lv.get("pairs_per_round", 1)),
        "factor": float(lv["interval_factor"]),
        "max_runs": int(lv["max_runs"]),
        "relative": float(cfg["tolerance"]["relative"]),
        "confidence": float(cfg["confidence"]),
        "auto_noise": lv["auto_noise"],
    }


def grid_noise(name: str, config: Path) -> dict:
    """One calibration's 24-run grid (`--batch-noise`, `--lr-noise`): its noise, baselines, τ and level costs."""
    import yaml
    from budget_coverage import ledger_records, run_rows, two_way_noise

    cfg = yaml.safe_load(config.read_text())
    records = ledger_records(name, grid_only=True)  # read once: the rows and the runs' seconds
    rows = run_rows(records)
    run_sd, seed_sd, dof = two_way_noise(rows)
    base = {s: q for _, s, q, x in rows if x == 0}
    tau = float(cfg["tolerance"]["relative"]) * float(np.mean(list(base.values())))
    by: dict[str, list[tuple[float, float]]] = {}
    for k, s, q, x in rows:
        if x > 0:
            by.setdefault(k, []).append((x, q - base[s]))
    levels = sorted((float(np.mean([v[0] for v in p])), float(np.mean([v[1] for v in p])) / tau) for p in by.values())
    return {
        "ledger": f"calibrations/{name}.ledger.jsonl", "config": str(config.relative_to(ROOT)),
        "train_batch": int(cfg["train"]["batch_size"]), "runs": len(rows), "run_sd": run_sd, "seed_sd": seed_sd,
        "two_way_dof": dof, "baselines": sorted(base.values()), "baseline_mean": float(np.mean(list(base.values()))),
        "tau": tau, "pair_sd_tau": math.sqrt(2.0) * run_sd / tau,
        "level_x_and_cost_tau": [[x, c] for x, c in levels],
        "median_run_seconds": float(np.median([float(d["seconds"]) for d in records])),
    }  # fmt: skip


def lever(variant: str) -> dict:
    """The 4-prompt lr-1e-5 grid (`base`) beside a variant's (`variant`: calibrations/smollm2_rl_copy_VARIANT and
    examples/smollm2_calibrate_rl_copy_VARIANT.yaml): both grids' noise, the F test of their run variances
    (two-sided), the 95% interval of the sd ratio base/variant, the variant's pair sd in the base's τ."""
    from scipy import stats

    base = grid_noise(NAME, CONFIG)
    var = grid_noise(f"{NAME}_{variant}", ROOT / "examples" / f"smollm2_calibrate_rl_copy_{variant}.yaml")
    f = base["run_sd"] ** 2 / var["run_sd"] ** 2
    d1, d2 = base["two_way_dof"], var["two_way_dof"]
    p = 2 * min(stats.f.sf(f, d1, d2), stats.f.cdf(f, d1, d2))
    lo, hi = (math.sqrt(f / stats.f.ppf(q, d1, d2)) for q in (0.975, 0.025))
    return {"base": base, "variant": var, "run_sd_ratio": math.sqrt(f), "run_sd_ratio_95": [lo, hi],
            "variance_f_test_p": float(p),
            "pair_sd_tau_in_base_tau": math.sqrt(2.0) * var["run_sd"] / base["tau"]}  # fmt: skip


def batch_noise() -> dict:
    """`--batch-noise`: the 4-prompt grid beside the 16-prompt one (module docstring)."""
    v = lever("b128")
    return {
        "batch_32": v["base"], "batch_128": v["variant"],
        "run_sd_ratio_32_over_128": v["run_sd_ratio"], "run_sd_ratio_95": v["run_sd_ratio_95"],
        "variance_f_test_p": v["variance_f_test_p"],
        "if_one_over_sqrt_batch": 2.0, "pair_sd_tau_128_in_tau_32": v["pair_sd_tau_in_base_tau"],
    }  # fmt: skip


def calibration_summary(name: str) -> dict:
    """A finished calibration's budget and its model's noise (calibrations/NAME.yaml): B, its interval and hi/lo, the
    runs, the model's residual sd (one run's noise once level and seed are fitted) in τ."""
    import yaml

    cal = yaml.safe_load((ROOT / "calibrations" / f"{name}.yaml").read_text())
    b, m = cal["budget"], cal["budget"]["model"]
    lo, hi = (float(v) for v in b["interval"])
    return {"calibration": f"calibrations/{name}.yaml", "lr": float(cal["recipe"]["lr"]), "runs": int(m["runs"]),
            "budget": float(b["value"]), "interval": [lo, hi], "hi_lo": hi / lo, "exponent": float(m["exponent"]),
            "tau": float(m["tau"]), "residual_sd": float(m["residual_sd"]),
            "residual_sd_tau": float(m["residual_sd"]) / float(m["tau"])}  # fmt: skip


def lr_noise() -> dict:
    """`--lr-noise`: the lr-1e-5 grid beside the lr-5e-6 one, and both finished calibrations (module docstring)."""
    v = lever("lr5e-6")
    return {
        "lr_1e-5": v["base"], "lr_5e-6": v["variant"],
        "run_sd_ratio_1e5_over_5e6": v["run_sd_ratio"], "run_sd_ratio_95": v["run_sd_ratio_95"],
        "variance_f_test_p": v["variance_f_test_p"], "pair_sd_tau_5e6_in_tau_1e5": v["pair_sd_tau_in_base_tau"],
        "calibrations": [calibration_summary(NAME), calibration_summary(f"{NAME}_lr5e-6")],
    }  # fmt: skip


def one_cell(args: tuple) -> dict:
    from admitcheck.calibration import design
    from admitcheck.calibration.curve import Tolerance
    from admitcheck.calibration.design import simulate_protocol

    m, grid_name, grid, shape, scale, cap, sims, seed, down_cap = args
    design.DOWN_CAP = down_cap  # this worker's design (`--down-cap`)
    rng = np.random.default_rng([seed, int(scale * 100), cap, len(grid_name), len(shape)])
    tol = Tolerance(relative=m["relative"])
    tau = tol.of(m["baseline_mean"])
    pair_sd = math.sqrt(2.0) * m["run_sd"] * scale
    seed_sd = m["seed_sd"] * scale
    base_sd = math.sqrt(seed_sd**2 + (pair_sd / math.sqrt(2.0)) ** 2)
    p = {"power": 0.75, "power2": 2.0}[shape]
    cover = within3 = 0
    widths, runs = [], []
    t0 = time.perf_counter()
    for _ in range(sims):
        b = math.exp(rng.uniform(math.log(m["budget"] / 2), math.log(m["budget"] * 2)))
        est, used = simulate_protocol(
            lambda x, b=b: tau * (x / b) ** p, lambda x: pair_sd, grid, m["baseline_mean"], base_sd, tol, rng,
            replicates=m["replicates"], factor=m["factor"], max_runs=cap, x_cv=m["x_cv"], n_boot=0,
            confidence=m["confidence"], pairs_per_round=m["pairs_per_round"], seed_sd=seed_sd, x_real=1.0,
        )  # fmt: skip
        lo, hi = est.budget.interval
        cover += lo <= b <= hi
        w = est.width_factor
        widths.append(w)
        within3 += w <= 3.0
        runs.append(used)
    return {"grid": grid_name, "truth": shape, "noise_scale": scale, "max_runs": cap, "sims": sims,
            "coverage": cover / sims, "median_hi_lo": float(np.median(widths)), "hi_lo_at_most_3": within3 / sims,
            "mean_runs": float(np.mean(runs)), "seconds": round(time.perf_counter() - t0, 1),
            **({"down_cap": True} if down_cap else {})}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sims", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--scales", type=float, nargs="+", default=[1.0, 0.5, 0.25])
    ap.add_argument("--caps", type=int, nargs="+", default=[51, 99, 201])
    ap.add_argument("--grids", nargs="+", default=["shipped", "10x_lower"], choices=["shipped", "10x_lower"])
    ap.add_argument("--truths", nargs="+", default=["power", "power2"], choices=["power", "power2"])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument(
        "--down-cap",
        action="store_true",
        help="the design with `design.DOWN_CAP` on (no level below "
        "the grid while the isotonic cost at its smallest level is under DOWN_WHILE·τ)",
    )
    ap.add_argument("--variant", default="", help="simulate calibrations/smollm2_rl_copy_VARIANT's noise (lr5e-6)")
    ap.add_argument("--batch-noise", action="store_true", help="the 4- and 16-prompt grids' noise (no simulation)")
    ap.add_argument("--lr-noise", action="store_true", help="the lr 1e-5 and 5e-6 grids' noise (no simulation)")
    a = ap.parse_args()
    if a.batch_noise or a.lr_noise:
        out = (batch_noise() if a.batch_noise else lr_noise()) | {
            "command": "python bench/rl_noise_design.py " + " ".join(sys.argv[1:])
        }
        print(json.dumps(out, indent=1))
        if a.out:
            a.out.write_text(json.dumps(out, indent=1) + "\n")
        return
    from concurrent.futures import ProcessPoolExecutor

    from admitcheck.calibration.levels import auto_noise_targets
    from admitcheck.config import AutoNoiseLevels

    m = measured(a.variant)
    an = m["auto_noise"]
    shipped = AutoNoiseLevels(**an)
    lo, hi = shipped.min_mismatch / 10, shipped.max_mismatch / 10
    lower = shipped.model_copy(update={"min_mismatch": lo, "max_mismatch": hi})
    grids = {"shipped": auto_noise_targets(shipped), "10x_lower": auto_noise_targets(lower)}
    work = [
        (m, g, grids[g], t, s, c, a.sims, a.seed, a.down_cap)
        for g in a.grids
        for t in a.truths
        for s in a.scales
        for c in a.caps
    ]
    t0 = time.perf_counter()
    rows = []
    with ProcessPoolExecutor(a.jobs) as pool:
        for r in pool.map(one_cell, work):
            print(json.dumps(r), flush=True)
            rows.append(r)
    out = {"measured": m, "grids": grids, "rows": rows, "seconds": round(time.perf_counter() - t0, 1),
           "command": "python bench/rl_noise_design.py " + " ".join(sys.argv[1:])}  # fmt: skip
    if a.out:
        a.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
