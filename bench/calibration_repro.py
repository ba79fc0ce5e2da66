"""Is the toy budget reproducible? Three calibrations with different top-level seeds, and the fit's coverage.

    python bench/calibration_repro.py toy      # 3 × `admitcheck calibrate examples/toy_calibrate.yaml --jobs 2`
    python bench/calibration_repro.py synthetic [--sims 200]   # coverage of the budget interval, known curve
    python bench/calibration_repro.py toy --seeds 1000 & …; python bench/calibration_repro.py summary  # in parallel

toy: seed 0 is the example config itself (it writes the shipped calibrations/toy.yaml); seeds 1000 and 2000 are
copies with only `seed` and `output` changed (reports/repro/). Each runs as its own CLI process with `--jobs 2`;
reported per seed: wall seconds, the load average before and after, the sum of per-run CPU seconds (the machine
is shared: wall time alone overstates the cost), runs, τ, B and its 95% interval. Must hold: every B within ±30%
of the three's median, and each interval covering the other two estimates. Writes reports/repro/summary.json.

synthetic: `design.simulate_protocol` (the adaptive protocol and its design, without OPD runs) under the shipped
protocol (examples/toy_calibrate.yaml) and the noise of the shipped calibrations/toy.yaml runs, for five true cost
shapes (linear, power 2, flat-then-rising, sigmoid, step) with B anywhere inside the grid: per truth, the fraction
of 95% intervals covering the true budget (must be ≥ 93%), how often the lower bound sits above it or at 0, the
median interval factor and the runs used. `--jobs N` runs the truths in parallel; bench/results/ holds the output.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's admitcheck, not an installed one
SEEDS = (0, 1000, 2000)


def toy(seeds: tuple[int, ...] = SEEDS) -> dict:
    out_dir = ROOT / "reports" / "repro"
    out_dir.mkdir(parents=True, exist_ok=True)
    example = ROOT / "examples" / "toy_calibrate.yaml"
    rows = []
    for seed in seeds:
        if seed == 0:
            config, artifact = example, ROOT / "calibrations" / "toy.yaml"
        else:
            data = yaml.safe_load(example.read_text())
            for section in ("pair", "probe", "train", "eval"):  # paths relative to examples/
                for key in ("student", "teacher", "prompts"):
                    if key in data[section]:
                        data[section][key] = str((example.parent / data[section][key]).resolve())
            artifact = out_dir / f"toy-seed{seed}.yaml"
            data |= {"seed": seed, "output": str(artifact)}
            config = out_dir / f"toy_calibrate_seed{seed}.yaml"
            config.write_text(yaml.safe_dump(data, sort_keys=False))
        load0 = os.getloadavg()
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "admitcheck", "calibrate", str(config), "--jobs", "2"]
        subprocess.run(cmd, cwd=ROOT, check=True, env=os.environ | {"OMP_NUM_THREADS": "1"})
        wall = time.perf_counter() - t0
        cal = yaml.safe_load(artifact.read_text())
        b = cal["budget"]
        rows.append({
            "seed": seed, "artifact": str(artifact.relative_to(ROOT)), "wall_s": round(wall, 1),
            "load_before": [round(v, 2) for v in load0], "load_after": [round(v, 2) for v in os.getloadavg()],
            "run_cpu_s": cal["provenance"].get("run_cpu_seconds"), "runs": len(cal["runs"]),
            "stopped": b.get("protocol", {}).get("stopped"), "tau": cal["tolerance"]["value"],
            "budget": b["value"], "kind": b["kind"], "interval": b["interval"], "x": b.get("x"),
        })  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
        (out_dir / f"row-seed{seed}.json").write_text(json.dumps(rows[-1]))
    return summarize(out_dir)


def summarize(out_dir: Path = ROOT / "reports" / "repro") -> dict:
    """The must-hold checks over every seed's row (`row-seed*.json`; seeds may run as separate processes)."""
    rows = sorted((json.loads(p.read_text()) for p in out_dir.glob("row-seed*.json")), key=lambda r: r["seed"])
    values = np.array([r["budget"] for r in rows])
    med = float(np.median(values))
    within = bool(np.all(np.abs(values / med - 1) <= 0.30))
    covers = all(
        r["interval"][0] <= o["budget"] <= r["interval"][1] for r in rows for o in rows if o is not r
    )  # each interval covers the other two estimates
    summary = {"rows": rows, "median": med, "max_rel_dev": float(np.max(np.abs(values / med - 1))),
               "within_30pct": within, "intervals_cover_others": covers}  # fmt: skip
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


TRUTHS = ("linear", "power2", "flat_then_rising", "sigmoid", "step")  # true cost shapes, each reaching τ at B


def true_cost(shape: str, tau: float, b: float):
    """cost(x) of a truth that reaches τ exactly at B (nats/token)."""
    from scipy.special import expit

    return {
        "linear": lambda x: tau * x / b,
        "power2": lambda x: tau * (x / b) ** 2,
        "flat_then_rising": lambda x: tau * max(0.0, x - b / 3) / (b - b / 3),  # zero up to B/3, then a line
        "sigmoid": lambda x: 2 * tau * float(expit(3 * (math.log(x) - math.log(b)))),
        "step": lambda x: 0.0 if x < b else 3 * tau,
    }[shape]


def shipped_protocol(x: str = "start") -> dict:
    """The protocol and the noise every figure is about: examples/toy_calibrate.yaml's grid, replicates, factor, run
    cap, tolerance and bootstrap; the paired-cost sd per level (interpolated in log x) and the sd of log x between
    replicates, from the shipped calibrations/toy.yaml's runs. `x`: "start" (the probe mismatch), or "run" (the
    runs' x_run, the grid scaled by the noise levels' median x_run / x_start)."""
    cfg = yaml.safe_load((ROOT / "examples" / "toy_calibrate.yaml").read_text())
    cal = yaml.safe_load((ROOT / "calibrations" / "toy.yaml").read_text())
    by: dict[str, list[tuple[float, float]]] = {}
    ratios = []
    for r in cal["runs"]:
        if r["level"].startswith("noise") and r.get("in_fit", True):
            by.setdefault(r["level"], []).append((float(r["mismatch" if x == "start" else "x_run"]),
                                                  float(r["quality_cost"])))  # fmt: skip
            ratios.append(float(r["x_run"]) / float(r["x_start"]))
    pts = sorted((float(np.mean([x for x, _ in v])), float(np.std([c for _, c in v], ddof=1)),
                  float(np.std(np.log([x for x, _ in v]), ddof=1))) for v in by.values() if len(v) > 1)  # fmt: skip
    auto, lv = cfg["levels"]["auto_noise"], cfg["levels"]
    scale = 1.0 if x == "start" else float(np.median(ratios))
    base = [float(r["quality"]) for r in cal["runs"] if r["level"] == "baseline"]
    return {
        "grid": [float(v) * scale for v in np.geomspace(auto["min_mismatch"], auto["max_mismatch"], auto["count"])],
        "replicates": int(lv["replicates"]), "factor": float(lv["interval_factor"]), "max_runs": int(lv["max_runs"]),
        "pairs_per_round": int(lv.get("pairs_per_round", 1)),
        "relative": float(cfg["tolerance"]["relative"]), "n_boot": int(cfg["bootstrap"]),
        "confidence": float(cfg["confidence"]),
        "noise_x": [p[0] for p in pts], "noise_sd": [p[1] for p in pts], "x_cv": float(np.median([p[2] for p in pts])),
        "baseline_mean": float(np.mean(base)), "baseline_sd": float(np.std(base, ddof=1)),
    }  # fmt: skip


def one_truth(args: tuple) -> dict:
    from admitcheck.calibration.curve import Tolerance
    from admitcheck.calibration.design import simulate_protocol

    shape, sims, seed, proto, n_boot = args
    rng = np.random.default_rng([seed, TRUTHS.index(shape)])
    tol = Tolerance(relative=proto["relative"])
    tau = tol.of(proto["baseline_mean"])
    lx, lsd = np.log(proto["noise_x"]), proto["noise_sd"]
    sd = lambda x: float(np.interp(math.log(x), lx, lsd))  # noqa: E731  flat beyond the measured levels
    g = proto["grid"]
    cover = low = zero = 0
    widths, runs = [], []
    for _ in range(sims):
        b = math.exp(rng.uniform(math.log(g[0] * 1.5), math.log(g[-1] / 1.5)))  # B anywhere inside the grid
        est, n = simulate_protocol(true_cost(shape, tau, b), sd, g, proto["baseline_mean"], proto["baseline_sd"],
                                   tol, rng, replicates=proto["replicates"], factor=proto["factor"],
                                   max_runs=proto["max_runs"], x_cv=proto["x_cv"], n_boot=n_boot,
                                   confidence=proto["confidence"],
                                   pairs_per_round=proto["pairs_per_round"])  # fmt: skip
        lo, hi = est.budget.interval
        cover += lo <= b <= hi
        low += lo > b
        zero += lo <= 0
        widths.append(est.width_factor)
        runs.append(n)
    return {"truth": shape, "sims": sims, "coverage": cover / sims, "lower_above_truth": low / sims,
            "lower_bound_zero": zero / sims, "median_interval_factor": float(np.median(widths)),
            "mean_runs": float(np.mean(runs))}  # fmt: skip


def synthetic(
    sims: int = 200, seed: int = 0, jobs: int = 1, n_boot: int | None = None, max_runs: int | None = None
) -> dict:
    """Coverage of the budget interval under the shipped protocol and noise, for every true shape (`TRUTHS`), B
    log-uniform inside the grid. Must hold: coverage ≥ 93% for every truth."""
    from concurrent.futures import ProcessPoolExecutor

    proto = shipped_protocol()
    if max_runs is not None:
        proto["max_runs"] = max_runs
    nb = n_boot or proto["n_boot"]
    t0 = time.perf_counter()
    work = [(shape, sims, seed, proto, nb) for shape in TRUTHS]
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            rows = list(pool.map(one_truth, work))
    else:
        rows = [one_truth(w) for w in work]
    out = {"protocol": proto, "n_boot": nb, "rows": rows, "ok": all(r["coverage"] >= 0.93 for r in rows),
           "seconds": round(time.perf_counter() - t0, 1)}  # fmt: skip
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["toy", "synthetic", "summary"])
    ap.add_argument("--sims", type=int, default=200)
    ap.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--max-runs", type=int, default=None, help="synthetic: another run cap than the shipped one")
    ap.add_argument("--out", type=Path, default=None, help="synthetic: also write the JSON here")
    ap.add_argument("--n-boot", type=int, default=None, help="synthetic: bootstrap resamples (default: the config's)")
    args = ap.parse_args()
    if args.what == "summary":
        result = summarize()
    elif args.what == "toy":
        result = toy(tuple(args.seeds))
    else:
        result = synthetic(args.sims, jobs=args.jobs, n_boot=args.n_boot, max_runs=args.max_runs)
        if args.out:
            args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
