"""Coverage of the budget interval (issue 34): the shipped toy and SmolLM2 protocols, their measured noise, truths.

    nice -n 10 python bench/budget_coverage.py --sims 200 --out bench/results/budget_coverage.json
    python bench/budget_coverage.py --sims 20 --protocols smollm2 --truths power step      # a quick look
    nice -n 10 python bench/budget_coverage.py --x run --jobs 2 --out bench/results/budget_coverage_run_x.json

Each simulated calibration is `design.simulate_protocol`: calibrate's rounds and design without the OPD runs, on
simulated *runs* with the ledgers' structure — seed r's baseline run and every level's run r share a seed effect
(the shared-baseline structure), each run adds its own noise — then `curve.estimate` (the seed-effect power law
gated by its lack-of-fit test, else the shape-free bracket) exactly as `calibrate` calls it.

Protocols (`protocols()`), each read from the shipped files:
- toy: examples/toy_calibrate.yaml's grid, replicates, pairs per round, interval factor and run cap (adaptive rounds,
  ≤ 120 runs); the log-x spread of calibrations/toy.yaml's runs (`calibration_repro.shipped_protocol`); the
  seed-effect sd from a two-way (seed + level) fit of its ledger; and, measured over the three re-made toy
  calibrations (`within_level_noise`), the share λ of the replicates' log-x spread that is the run's own mismatch
  (0.49: its cost follows it) and one pair sd once that part is off (0.0173; the levels' sds are one sd, Bartlett
  p 0.57–0.89). Before 2026-12-05 the toy cells drew each level's sd from the primary ledger's per-level sds and
  made every run's cost follow its own x in full, which counted the top level's x-driven spread twice
  (docs/calibration.md, "Why the gate refused the model").
- toy_rl: the toy protocol with examples/toy_calibrate_rl.yaml's 60-run cap and calibrations/toy_rl's baselines,
  seed-effect sd, λ (1: its runs' cost follows their own x) and pair sd.
- toy_160, toy_200, toy_240: the toy protocol with its run cap raised (what hi/lo ≤ 2, the config's stop, needs on
  this noise: issue 36).
- smollm2: examples/smollm2_calibrate.yaml (6 levels × 3 pairs + 3 baselines, max_runs 21: no adaptive round); the
  levels at the mean x of the three shipped SmolLM2 calibrations; run sd, seed-effect sd and log-x spread pooled from
  their three ledgers (two-way fits).
- smollm2_rl_copy (issue 40): calibrations/smollm2_rl_copy's protocol, examples/smollm2_calibrate_rl_copy.yaml's grid
  (7 levels, k3 0.005–0.25), 3 replicates, 3 pairs a round, factor 1.5, the 51-run cap, and the noise its ledger
  measured (`rl_noise_design.measured`: two-way run sd and seed-effect sd, ~4 τ a run); each run's cost follows its
  own x (λ = 1); B log-uniform in [B̂/2, 2B̂] around the shipped B̂, which lies below the grid as the real one did
  (flat_beyond_grid is left out: with B below the grid it never crosses τ at B). smollm2_rl_copy_lower10: the same
  with the config's grid 10× lower (B inside it). smollm2_rl_copy_lr5e-6 (and _201): the same built from
  calibrations/smollm2_rl_copy_lr5e-6 (`rl_noise_design.measured("lr5e-6")`: half the learning rate, B̂ inside the
  grid, so flat_beyond_grid is a truth here) at its 51 runs and at the 201 its config now caps; _301 (`RL_CAPS`): the
  cap raised to where the real ledger's continuation reaches hi/lo 3 (bench/smollm2_continuation.py). Start x only.

Truths (each reaches τ at B; B log-uniform inside the grid, for SmolLM2 between its 2nd and 5th level): power
τ(x/B)^0.75 (the model), linear, power2, flat_then_rising, sigmoid, step (3τ above B), slow_crossing
τ(1 + 0.1 ln(x/B)) floored at 0, flat_beyond_grid (power 0.75 held flat outside the grid), and for SmolLM2 the three
calibrations' mean level costs interpolated in log x and shifted along x (smollm2_mean, flat beyond the grid).
`--x run` reads the same protocols in the run-averaged x (`budget.by_x.run`): the levels at their runs' mean in-run
k3 over the first 20 steps and its spread between replicates (about a third of the start x's), the toy's configured
grid scaled by the noise levels' median x_run / x_start. Per cell: coverage, P(B_lo > B), P(B_hi < B), how often
the model was used, median hi/lo, mean runs. Under `--x run` the estimator is the run-averaged budget's
(`curve.estimate(local_model=True)`: the model refitted on the levels around B̂, as `fit.fit_runs` makes
`budget.by_x.run`). Must hold: coverage ≥ 0.93 and P(B_lo > B) ≤ 0.035 in every cell
with ≥ 200 sims. `tally` gives every cell's figures, with the boundary: P(B_lo ≥ 1.05 B) (a config whose mismatch
is known exactly and sits 5% over the true budget is ADMITted: `screen` admits when the mismatch's upper bound is under
B_lo) and P(B_hi ≤ B / 1.05) (one 5% under it REJECTed even with its mismatch known).

`--work F` runs the cells in chunks of `--chunk` calibrations, one simulated calibration a JSON line in F, resumable (a
second start skips the chunks F has; a device call's end loses at most the chunks in flight); a chunk's draws are
seeded by (seed, truth, chunk), so the protocols of one start share their draws (common random numbers):

    python bench/budget_coverage.py --protocols smollm2_rl_copy --truths power linear power2 flat_then_rising \
        sigmoid step slow_crossing --sims 200 --jobs 2 --work reports/rl_coverage.jsonl \
        --out bench/results/rl_coverage.json          # nice -n 10 on 2 cores: ~56 min
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
sys.path.insert(0, str(ROOT))  # this checkout's admitcheck, not an installed one
sys.path.insert(0, str(ROOT / "bench"))
SMOLLM2_LEDGERS = ("smollm2", "smollm2-seed1000", "smollm2-seed2000")
TRUTHS = ("power", "linear", "power2", "flat_then_rising", "sigmoid", "step", "slow_crossing", "flat_beyond_grid")
SMOLLM2_TRUTHS = (*TRUTHS, "smollm2_mean")


X = "start"  # the x the protocols are read in: "start" or "run" (`--x run`: the run-averaged budget's x)
RUN_WINDOW = 20  # the shipped calibrations' protocol.run_window (steps the run-averaged x averages)


def ledger_records(name: str, grid_only: bool = False) -> list[dict]:
    """A shipped ledger's run records (calibrations/NAME.ledger.jsonl); `grid_only`: those written before its first
    adaptive round (the config's grid)."""
    lines = [json.loads(x) for x in (ROOT / "calibrations" / f"{name}.ledger.jsonl").read_text().splitlines()]
    end = next((i for i, d in enumerate(lines) if d.get("kind") == "round"), len(lines)) if grid_only else len(lines)
    return [d for d in lines[:end] if d.get("kind") == "run"]


def ledger_runs(name: str, grid_only: bool = False) -> list[tuple[str, int, float, float]]:
    """(level key, seed, quality, x) of a shipped ledger's baseline and noise runs (`ledger_records`, `run_rows`)."""
    return run_rows(ledger_records(name, grid_only))


def run_rows(records: list[dict]) -> list[tuple[str, int, float, float]]:
    """(level key, seed, quality, x) of the baseline and noise runs among ledger run records; x is the start mismatch,
    or with `X = "run"` the mean in-run k3 over the first RUN_WINDOW steps (`fit.run_x`)."""
    out = []
    for d in records:
        lv = json.loads(d["key"])["level"]
        if lv["kind"] in ("baseline", "noise"):
            start = float(d["mismatch"]) if lv["kind"] != "baseline" else 0.0
            x = (
                0.0
                if lv["kind"] == "baseline"
                else (start if X == "start" else float(np.mean(d["in_run_k3"][:RUN_WINDOW])))
            )
            out.append((json.dumps(lv, sort_keys=True), int(d["seed"]), float(d["quality"]), x))
    return out


def two_way_noise(rows: list[tuple[str, int, float, float]]) -> tuple[float, float, int]:
    """(run sd, seed-effect sd, residual dof) of quality = level mean + seed effect + noise (least squares)."""
    levs, seeds = sorted({r[0] for r in rows}), sorted({r[1] for r in rows})
    a = np.zeros((len(rows), len(levs) + len(seeds)))
    for i, (lv, s, _, _) in enumerate(rows):
        a[i, levs.index(lv)] = a[i, len(levs) + seeds.index(s)] = 1.0
    y = np.array([r[2] for r in rows])
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    res = y - a @ coef
    dof = len(rows) - int(np.linalg.matrix_rank(a))
    run_sd = math.sqrt(float(res @ res) / dof)
    eff = coef[len(levs) :]
    per = np.array([sum(r[1] == s for r in rows) for s in seeds])
    seed_var = float(np.var(eff, ddof=1)) - run_sd**2 * float(np.mean(1.0 / per))  # minus the effects' own noise
    return run_sd, math.sqrt(max(seed_var, 0.0)), dof


def log_x_spread(rows) -> float:
    by: dict[str, list[float]] = {}
    for lv, _, _, x in rows:
        if x > 0:
            by.setdefault(lv, []).append(x)
    return float(np.median([np.std(np.log(v), ddof=1) for v in by.values() if len(v) > 1]))


def within_level_noise(names: tuple[str, ...]) -> dict:
    """The run noise of shipped calibrations as the simulation needs it, measured from their runs (issue 34's
    follow-up, docs/calibration.md "Why the gate refused the model"): within each level, a pair's cost deviation
    from the level's mean z_i regressed on D_i = p̂·c̄_l·(log x_i − mean log x), pooled over the levels with ≥ 2
    pairs and over `names` (p̂ each calibration's model exponent, c̄_l the level's mean cost, floored at 0): the slope
    is λ, the share of the log-x spread between replicates that is the run's actual mismatch (1: a run's cost follows
    its own x; 0: the spread is the probe's measurement error of the level's x). What is left once λ·D is taken
    off is the pairs' own noise: its sd pooled, and Bartlett's test of one sd over the levels (per calibration)."""
    import yaml
    from scipy import stats

    zs, ds, bart, dof = [], [], {}, 0
    for name in names:
        cal = yaml.safe_load((ROOT / "calibrations" / f"{name}.yaml").read_text())
        p_hat = float(cal["budget"]["model"]["exponent"])
        rows = ledger_runs(name)
        base = {s: q for _, s, q, x in rows if x == 0}
        by: dict[str, list[tuple[float, float]]] = {}
        for lv, s, q, x in rows:
            if x > 0 and s in base:
                by.setdefault(lv, []).append((x, q - base[s]))
        groups = []
        for v in by.values():
            if len(v) < 2:
                continue
            lx, c = np.log([t[0] for t in v]), np.array([t[1] for t in v])
            zs.append(c - c.mean())
            ds.append(p_hat * max(float(c.mean()), 0.0) * (lx - lx.mean()))
            groups.append(len(zs) - 1)
            dof += len(v) - 1
        bart[name] = groups
    z, d = np.concatenate(zs), np.concatenate(ds)
    beta = float(d @ z / (d @ d))
    lam = min(max(beta, 0.0), 1.0)
    res = [zz - lam * dd for zz, dd in zip(zs, ds)]
    s2 = float(sum(r @ r for r in res)) / (dof - 1)
    se = math.sqrt(float(sum(r @ r for r in [zz - beta * dd for zz, dd in zip(zs, ds)])) / (dof - 1) / float(d @ d))
    return {
        "calibrations": list(names),
        "x_real_share": lam,
        "x_real_slope": beta,
        "x_real_slope_se": se,
        "pair_sd": math.sqrt(s2),
        "pair_sd_dof": dof - 1,
        "one_sd_bartlett_p": {
            n: float(stats.bartlett(*[res[i] for i in g]).pvalue) for n, g in bart.items() if len(g) > 1
        },
        "one_sd_bartlett_p_before": {
            n: float(stats.bartlett(*[zs[i] for i in g]).pvalue) for n, g in bart.items() if len(g) > 1
        },
    }


TOY_LEDGERS = ("toy", "toy-seed1000", "toy-seed2000")
TOY_CAPS = (160, 200, 240)
RL_CAPS = (301,)  # the lr-5e-6 RL protocol's raised caps


def protocols() -> dict[str, dict]:
    """The shipped protocols with their measured noise (module docstring)."""
    import yaml
    from calibration_repro import shipped_protocol

    toy = shipped_protocol(X)
    toy_run_sd, toy_seed_sd, toy_dof = two_way_noise(ledger_runs("toy"))
    # within a level, a toy run's cost follows its own x in part (λ ≈ 0.5 over the three re-made calibrations): the
    # pairs' own noise is one sd over the levels once that part is taken off (`within_level_noise`)
    noise = within_level_noise(TOY_LEDGERS)
    toy |= {"seed_sd": toy_seed_sd, "two_way_run_sd": toy_run_sd, "two_way_dof": toy_dof, "b_range": "inside grid",
            "x_real": noise["x_real_share"], "pair_sd": noise["pair_sd"], "noise": noise}  # fmt: skip
    # the RL calibration: the toy's grid and design, examples/toy_calibrate_rl.yaml's run cap, calibrations/toy_rl's
    # runs (its tolerance is 5% of its own baseline reward-free quality: the same reverse KL, another recipe)
    rl_cfg = yaml.safe_load((ROOT / "examples" / "toy_calibrate_rl.yaml").read_text())
    rl_noise = within_level_noise(("toy_rl",))
    rl_run_sd, rl_seed_sd, rl_dof = two_way_noise(ledger_runs("toy_rl"))
    rl_base = [q for _, _, q, x in ledger_runs("toy_rl") if x == 0]
    toy_rl = toy | {
        "max_runs": int(rl_cfg["levels"]["max_runs"]),
        "seed_sd": rl_seed_sd, "two_way_run_sd": rl_run_sd, "two_way_dof": rl_dof,
        "baseline_mean": float(np.mean(rl_base)), "baseline_sd": float(np.std(rl_base, ddof=1)),
        "x_real": rl_noise["x_real_share"], "pair_sd": rl_noise["pair_sd"], "noise": rl_noise,
    }  # fmt: skip
    cfg = yaml.safe_load((ROOT / "examples" / "smollm2_calibrate.yaml").read_text())
    lv = cfg["levels"]
    rows = [ledger_runs(n) for n in SMOLLM2_LEDGERS]
    noise = [two_way_noise(r) for r in rows]
    dof = sum(d for _, _, d in noise)
    run_sd = math.sqrt(sum(s**2 * d for s, _, d in noise) / dof)
    seed_sd = math.sqrt(sum(s**2 for _, s, _ in noise) / len(noise))
    grid, cost, base = [], [], []
    n_grid = int(lv["auto_noise"]["count"])
    for r in rows:
        b = {s: q for k, s, q, x in r if x == 0}
        by: dict[str, list[tuple[float, float]]] = {}
        for k, s, q, x in r:
            if x > 0 and (k in by or len(by) < n_grid):  # the grid's levels: run first; a continuation's added ones not
                by.setdefault(k, []).append((x, q - b[s]))
        pts = sorted((float(np.mean([p[0] for p in v])), float(np.mean([p[1] for p in v]))) for v in by.values())
        grid.append([p[0] for p in pts])
        cost.append([p[1] for p in pts])
        base.extend(b.values())
    smol = {
        "grid": [float(v) for v in np.mean(grid, axis=0)],
        "mean_cost": [float(v) for v in np.mean(cost, axis=0)],
        "replicates": int(lv["replicates"]),
        "factor": float(lv["interval_factor"]),
        "max_runs": int(lv["replicates"]) * (n_grid + 1),  # the grid alone (21), as first shipped; continuations below
        "pairs_per_round": int(lv.get("pairs_per_round", 1)),
        "relative": float(cfg["tolerance"]["relative"]),
        "confidence": float(cfg["confidence"]),
        "run_sd": run_sd,
        "seed_sd": seed_sd,
        "seed_correlation": seed_sd**2 / (seed_sd**2 + run_sd**2),
        "x_cv": float(np.median([log_x_spread(r) for r in rows])),
        "baseline_mean": float(np.mean(base)),
        "baseline_sd": math.sqrt(seed_sd**2 + run_sd**2),
        "b_range": "between the 2nd and 5th level",
    }
    # the SmolLM2 calibration continued past its grid's 21 runs by adaptive rounds: to 45 (issue 38's run budget), to
    # 57 (the cap of the shipped continuation, 2026-12-06: it stopped at 51) and to 69 (the config's cap now)
    out = {"toy": toy, "toy_rl": toy_rl, "smollm2": smol} | {
        f"smollm2_{n}": smol | {"max_runs": n} for n in (45, 57, 69)
    }
    # the toy protocol at higher run caps: how many runs its hi/lo <= 2 (issue 36) needs on the measured noise
    out |= {f"toy_{n}": toy | {"max_runs": n} for n in TOY_CAPS}
    if X == "start":  # its grid is the config's start-x targets
        from rl_noise_design import measured

        m = measured()  # the ledger and config read once, the grid lowered for the second
        out |= {"smollm2_rl_copy": rl_copy_protocol(m), "smollm2_rl_copy_lower10": rl_copy_protocol(m, 10.0)}
        lr = rl_copy_protocol(measured("lr5e-6"))  # half the learning rate: its 51 runs, and the 201 its config asks
        out |= {"smollm2_rl_copy_lr5e-6": lr | {"max_runs": 51}, "smollm2_rl_copy_lr5e-6_201": lr | {"max_runs": 201}}
        # the cap raised past 201, where the real ledger's continuation reaches hi/lo 3 (bench/smollm2_continuation.py)
        out |= {f"smollm2_rl_copy_lr5e-6_{n}": lr | {"max_runs": n} for n in RL_CAPS}
    return {k: v | {"x": X} for k, v in out.items()}  # the x travels with the protocol (a --jobs worker's X is not set)


def rl_copy_protocol(m: dict | None = None, lower: float = 1.0) -> dict:
    """calibrations/smollm2_rl_copy's protocol and measured noise (module docstring; `m`: `rl_noise_design.measured()`,
    read here when not given), the config's grid targets (`lower` > 1: the same grid that many times lower)."""
    from admitcheck.calibration.levels import auto_noise_targets
    from admitcheck.config import AutoNoiseLevels

    if m is None:
        from rl_noise_design import measured

        m = measured()
    auto = AutoNoiseLevels(**m["auto_noise"])
    lo, hi = auto.min_mismatch / lower, auto.max_mismatch / lower
    auto = auto.model_copy(update={"min_mismatch": lo, "max_mismatch": hi})
    return m | {
        "grid": auto_noise_targets(auto), "grid_lowered": lower, "x_real": 1.0,
        "baseline_sd_measured": m["baseline_sd"], "baseline_sd": math.sqrt(m["seed_sd"] ** 2 + m["run_sd"] ** 2),
        "b_range": "[B̂/2, 2B̂] around the shipped B̂ (below the grid)", "b_bounds": [m["budget"] / 2, m["budget"] * 2],
    }  # fmt: skip


def true_cost(shape: str, tau: float, b: float, proto: dict):
    """cost(x) of a truth that reaches τ exactly at B (nats/token)."""
    from calibration_repro import true_cost as classic

    g0, g1 = proto["grid"][0], proto["grid"][-1]
    if shape == "power":
        return lambda x: tau * (x / b) ** 0.75
    if shape == "step":
        return lambda x: 0.0 if x < b else 3 * tau
    if shape == "slow_crossing":
        return lambda x: tau * max(0.0, 1.0 + 0.1 * math.log(x / b))
    if shape == "flat_beyond_grid":
        return lambda x: tau * (min(max(x, g0), g1) / b) ** 0.75
    return classic(shape, tau, b)


def smollm2_mean_truth(proto: dict, tau: float, rng: np.random.Generator):
    """The three SmolLM2 calibrations' mean level costs, interpolated in log x (flat beyond the grid), shifted along
    x by s log-uniform in [0.9, 4] (review b2): (cost, B)."""
    s = math.exp(rng.uniform(math.log(0.9), math.log(4.0)))
    lg, c = np.log(proto["grid"]), proto["mean_cost"]
    lx = np.linspace(math.log(1e-3), math.log(2.0), 20001)
    curve = np.interp(lx + math.log(s), lg, c)
    if not (curve >= tau).any():
        return None, None
    b = math.exp(lx[np.argmax(curve >= tau)])
    return (lambda x: float(np.interp(math.log(x) + math.log(s), lg, c))), b


def noise_and_range(name: str, proto: dict):
    """(paired-cost sd as a function of x, the range B is drawn from) of a protocol: the toy's measured sd per level
    (flat beyond the levels) and B inside the grid; SmolLM2's pooled run sd and B between its 2nd and 5th level; the RL
    copy's run sd and B in [B̂/2, 2B̂]."""
    g = proto["grid"]
    if name.startswith("smollm2_rl_copy"):  # one pair sd; B around the shipped B̂
        return (lambda x: math.sqrt(2.0) * proto["run_sd"]), tuple(proto["b_bounds"])
    if name.startswith("toy"):
        if "pair_sd" in proto:  # one sd once the x-driven part is taken off (`within_level_noise`)
            return (lambda x: proto["pair_sd"]), (g[0] * 1.5, g[-1] / 1.5)
        lx, lsd = np.log(proto["noise_x"]), proto["noise_sd"]
        return (lambda x: float(np.interp(math.log(x), lx, lsd))), (g[0] * 1.5, g[-1] / 1.5)
    return (lambda x: math.sqrt(2.0) * proto["run_sd"]), (g[1], g[4])


def draw_truth(shape: str, proto: dict, tau: float, b_range: tuple[float, float], rng: np.random.Generator):
    """One truth of `shape` (cost, B): B log-uniform in `b_range`, or the SmolLM2 mean curve shifted; None when the
    shifted curve never reaches τ (draw again)."""
    if shape == "smollm2_mean":
        f, b = smollm2_mean_truth(proto, tau, rng)
        return None if f is None else (f, b)
    b = math.exp(rng.uniform(math.log(b_range[0]), math.log(b_range[1])))
    return true_cost(shape, tau, b, proto), b


def one_cell(args: tuple) -> dict:
    """One cell: (protocol name, truth, sims, seed, protocol[, local[, run-x tier[, down cap]]]). `local` (the design,
    `design.LOCAL`), the tier (`curve.RUN_X_TIER`) and the downward cap (`design.DOWN_CAP`) travel with the cell (None:
    as shipped): a --jobs worker started by spawn or forkserver (Python 3.14's default on Linux) does not inherit the
    parent's module state; all are restored after the cell."""
    from admitcheck.calibration import curve, design

    name, shape, sims, seed, proto, *opt = args
    opt += [None] * (3 - len(opt))
    before = design.LOCAL, curve.RUN_X_TIER, design.DOWN_CAP
    design.LOCAL = before[0] if opt[0] is None else opt[0]
    curve.RUN_X_TIER = before[1] if opt[1] is None else opt[1]
    design.DOWN_CAP = before[2] if opt[2] is None else opt[2]
    try:
        return _one_cell(name, shape, sims, seed, proto) | {"run_x_tier": curve.RUN_X_TIER, "down_cap": design.DOWN_CAP}
    finally:
        design.LOCAL, curve.RUN_X_TIER, design.DOWN_CAP = before


def calibrate_once(cost, proto: dict, sd, tol, rng: np.random.Generator):
    """One simulated calibration of `proto` on the cost curve `cost`: (the estimate, runs used)."""
    from admitcheck.calibration.design import simulate_protocol

    return simulate_protocol(
        cost, sd, proto["grid"], proto["baseline_mean"], proto["baseline_sd"], tol, rng,
        replicates=proto["replicates"], factor=proto["factor"], max_runs=proto["max_runs"], x_cv=proto["x_cv"],
        n_boot=0, confidence=proto["confidence"], pairs_per_round=proto["pairs_per_round"],
        seed_sd=proto["seed_sd"], x_real=float(proto.get("x_real", 0.0)), local_model=proto.get("x") == "run",
    )  # fmt: skip


def simulate(truth, proto: dict, sd, tol, rng: np.random.Generator) -> dict:
    """One simulated calibration of `proto` on `truth` (cost, B): its record (B, the interval, method, runs)."""
    f, b = truth
    t0 = time.perf_counter()
    est, used_runs = calibrate_once(f, proto, sd, tol, rng)
    lo, hi = (float(v) for v in est.budget.interval)
    return {"b": b, "lo": lo, "hi": hi, "method": est.method, "runs": int(used_runs),
            "seconds": round(time.perf_counter() - t0, 2)}  # fmt: skip


BOUNDARY = 1.05  # the boundary case: a config 5% over (or under) the true budget


def tally(records: list[dict]) -> dict:
    """The figures of simulated calibrations (records of `simulate`; module docstring): coverage of B, P(B_lo > B),
    P(B_hi < B), the boundary P(B_lo ≥ 1.05 B) and P(B_hi ≤ B / 1.05), the share of finite intervals, the median
    hi/lo (∞ when an end is 0 or ∞) and the share ≤ 2, the model's share, mean runs."""
    n = len(records)
    widths = [r["hi"] / r["lo"] if r["lo"] > 0 and math.isfinite(r["hi"]) else math.inf for r in records]
    return {
        "sims": n,
        "coverage": sum(r["lo"] <= r["b"] <= r["hi"] for r in records) / n,
        "lower_above_truth": sum(r["lo"] > r["b"] for r in records) / n,
        "upper_below_truth": sum(r["hi"] < r["b"] for r in records) / n,
        f"admit_at_{BOUNDARY}B": sum(r["lo"] >= BOUNDARY * r["b"] for r in records) / n,
        f"reject_at_{2 - BOUNDARY:.2f}B": sum(r["hi"] <= r["b"] / BOUNDARY for r in records) / n,
        "finite": sum(math.isfinite(r["hi"]) for r in records) / n,
        "model_used": sum(r["method"] == "model" for r in records) / n,
        "median_interval_factor": float(np.median(widths)),
        "interval_factor_at_most_2": sum(w <= 2.0 for w in widths) / n,
        "mean_runs": float(np.mean([r["runs"] for r in records])),
    }


def _one_cell(name: str, shape: str, sims: int, seed: int, proto: dict) -> dict:
    from admitcheck.calibration import design
    from admitcheck.calibration.curve import Tolerance

    rng = np.random.default_rng([seed, len(name), SMOLLM2_TRUTHS.index(shape)])
    tol = Tolerance(relative=proto["relative"])
    tau = tol.of(proto["baseline_mean"])
    sd, b_range = noise_and_range(name, proto)
    records = []
    t0 = time.perf_counter()
    while len(records) < sims:
        truth = draw_truth(shape, proto, tau, b_range, rng)
        if truth is not None:
            records.append(simulate(truth, proto, sd, tol, rng))
    return {"protocol": name, "truth": shape, **tally(records), "design": "local" if design.LOCAL else "around",
            "seconds": round(time.perf_counter() - t0, 1)}  # fmt: skip


def one_chunk(args: tuple) -> list[dict]:
    """`n` simulated calibrations of one (protocol, truth), chunk `index` (`--work`): (name, truth, index, n, seed,
    protocol). Seeded by (seed, truth, chunk): the protocols of one start share their draws."""
    from admitcheck.calibration.curve import Tolerance

    name, shape, index, n, seed, proto = args
    rng = np.random.default_rng([seed, SMOLLM2_TRUTHS.index(shape), index])
    tol = Tolerance(relative=proto["relative"])
    tau = tol.of(proto["baseline_mean"])
    sd, b_range = noise_and_range(name, proto)
    out: list[dict] = []
    while len(out) < n:
        truth = draw_truth(shape, proto, tau, b_range, rng)
        if truth is not None:
            out.append({"protocol": name, "truth": shape, "chunk": index, "i": len(out)}
                       | simulate(truth, proto, sd, tol, rng))  # fmt: skip
    return out


def run_chunked(sims: int, names, truths, seed: int, jobs: int, work: Path, size: int) -> dict:
    """`run` in chunks of `size`, one calibration a line in `work` (resumed: the chunks it holds are not redone)."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    protos = protocols()
    cells = [(n, t) for n in names for t in (truths or (SMOLLM2_TRUTHS if n.startswith("smollm2") else TRUTHS))
             if t != "smollm2_mean" or n.startswith("smollm2")]  # fmt: skip
    want = {i: min(size, sims - i * size) for i in range(math.ceil(sims / size))}
    have: dict[tuple, dict] = {}
    if work.exists():
        for line in work.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                have[(r["protocol"], r["truth"], r["chunk"], r["i"])] = r  # a chunk redone: its last
    done = {(n, t, i) for n, t in cells for i, k in want.items() if all((n, t, i, j) in have for j in range(k))}
    records = [r for key, r in have.items() if key[:3] in done and key[3] < want[key[2]]]
    todo = [(n, t, i, k, seed, protos[n]) for i, k in want.items() for n, t in cells if (n, t, i) not in done]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(jobs) as pool:
        for f in as_completed([pool.submit(one_chunk, w) for w in todo]):
            got = f.result()
            records.extend(got)
            with work.open("a") as fh:
                fh.writelines(json.dumps(x) + "\n" for x in got)
            print(f"{got[0]['protocol']} {got[0]['truth']} chunk {got[0]['chunk']} ({len(records)} calibrations)",
                  flush=True)  # fmt: skip
    rows = [{"protocol": n, "truth": t, **tally(r)} for n, t in cells
            if (r := [x for x in records if x["protocol"] == n and x["truth"] == t])]  # fmt: skip
    ok = all(r["coverage"] >= 0.93 and r["lower_above_truth"] <= 0.035 for r in rows)
    return {"x": X, "protocols": {n: protos[n] for n in names}, "rows": rows, "must_hold": "coverage >= 0.93 and "
            "P(B_lo > B) <= 0.035 in every cell", "ok": ok, "seconds_this_start": round(time.perf_counter() - t0, 1),
            "work": str(work), "chunk": size, "seed": seed}  # fmt: skip


def run(
    sims: int,
    names=("toy", "smollm2"),
    truths=None,
    seed: int = 0,
    jobs: int = 1,
    local: bool = True,
    tier=None,
    down_cap=None,
) -> dict:
    """Every cell of `names` × truths; `tier`, `down_cap` None: `curve.RUN_X_TIER`, `design.DOWN_CAP` as shipped,
    else on or off."""
    from concurrent.futures import ProcessPoolExecutor

    protos = protocols()
    work = [
        (n, t, sims, seed, protos[n], local, tier, down_cap)
        for n in names
        for t in (truths or (SMOLLM2_TRUTHS if n.startswith("smollm2") else TRUTHS))
        if t != "smollm2_mean" or n.startswith("smollm2")
    ]
    t0 = time.perf_counter()
    if jobs > 1:  # each row printed as its cell ends (a run stopped midway keeps the finished cells in its log)
        from concurrent.futures import as_completed

        with ProcessPoolExecutor(jobs) as pool:
            futures = [pool.submit(one_cell, w) for w in work]
            for f in as_completed(futures):
                print(json.dumps(f.result()), flush=True)
        rows = [f.result() for f in futures]
    else:
        rows = []
        for w in work:
            rows.append(one_cell(w))
            print(json.dumps(rows[-1]), flush=True)
    ok = all(r["coverage"] >= 0.93 and r["lower_above_truth"] <= 0.035 for r in rows)
    return {"x": X, "protocols": {n: protos[n] for n in names}, "rows": rows, "must_hold": "coverage >= 0.93 and "
            "P(B_lo > B) <= 0.035 in every cell", "ok": ok, "seconds": round(time.perf_counter() - t0, 1)}  # fmt: skip


def cutoff_check(sims: int = 800, seed: int = 11) -> dict:
    """Why the profile's cutoff is F's 0.97 point for a 95% interval (`model.profile_level`): the SmolLM2 protocol on
    a linear and a power2 truth at the nominal cutoff (PROFILE_SHARE 1) and at the shipped one."""
    from admitcheck.calibration import model

    proto = protocols()["smollm2"]
    rows = []
    for share in (1.0, model.PROFILE_SHARE):
        old, model.PROFILE_SHARE = model.PROFILE_SHARE, share
        try:
            for truth in ("linear", "power2"):
                rows.append(one_cell(("smollm2", truth, sims, seed, proto)) | {"profile_share": share})
                print(json.dumps(rows[-1]), flush=True)
        finally:
            model.PROFILE_SHARE = old
    return {"rows": rows, "rule": "profile cutoff F(1, dof) at 1 − share × (1 − 0.95)"}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sims", type=int, default=200)
    ap.add_argument(
        "--protocols",
        nargs="+",
        default=["toy", "smollm2"],
        choices=[
            "toy",
            "toy_rl",
            *(f"toy_{n}" for n in TOY_CAPS),
            "smollm2",
            "smollm2_45",
            "smollm2_57",
            "smollm2_69",
            "smollm2_rl_copy",
            "smollm2_rl_copy_lower10",
            "smollm2_rl_copy_lr5e-6",
            "smollm2_rl_copy_lr5e-6_201",
            *(f"smollm2_rl_copy_lr5e-6_{n}" for n in RL_CAPS),
        ],
    )
    ap.add_argument(
        "--design",
        choices=["local", "around"],
        default="local",
        help="the model's design points: the levels bracketing B within B/2..2B (shipped), or B/2 and 2B",
    )
    ap.add_argument("--truths", nargs="+", default=None)
    ap.add_argument(
        "--x",
        choices=["start", "run"],
        default="start",
        help="the x the protocols' levels and their spread are read in (run: the run-averaged budget's)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--run-x-tier", choices=["on", "off"], default=None, help="run-x tier (default: shipped)")
    ap.add_argument(
        "--down-cap",
        choices=["on", "off"],
        default=None,
        help="the design's downward cap, design.DOWN_CAP (default: shipped)",
    )
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--work", type=Path, default=None, help="JSON lines, one calibration each (resumed if present)")
    ap.add_argument("--chunk", type=int, default=10, help="calibrations per work item (with --work)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--cutoff-check", action="store_true", help="the profile cutoff's check (800 sims, SmolLM2)")
    a = ap.parse_args()
    X = a.x  # module global: read by ledger_runs and protocols (and, through fork, by --jobs workers)
    if a.design == "around":
        from admitcheck.calibration import design

        design.LOCAL = False  # in this process (the cutoff check); each cell of `run` sets it from its own task
    if a.cutoff_check:
        result = cutoff_check()
        if a.out:
            a.out.write_text(json.dumps(result, indent=2))
        raise SystemExit(0)
    tier = None if a.run_x_tier is None else a.run_x_tier == "on"
    down = None if a.down_cap is None else a.down_cap == "on"
    if a.work:
        if (tier, down, a.design) != (None, None, "local"):
            ap.error("--work runs the shipped design (no --design around, --run-x-tier, --down-cap)")
        result = run_chunked(a.sims, tuple(a.protocols), a.truths, a.seed, a.jobs, a.work, a.chunk)
        result["command"] = "python bench/budget_coverage.py " + " ".join(sys.argv[1:])
    else:
        result = run(
            a.sims, tuple(a.protocols), a.truths, a.seed, a.jobs, local=a.design == "local", tier=tier, down_cap=down
        )
    if a.out:
        a.out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "protocols"}, indent=2))
