"""Is the toy budget reproducible? Three calibrations with different top-level seeds, and the fit's coverage.

    python bench/calibration_repro.py toy      # 3 × `admitcheck calibrate examples/toy_calibrate.yaml --jobs 2`
    python bench/calibration_repro.py synthetic [--sims 200]   # coverage of the budget interval, known curve
    python bench/calibration_repro.py toy --seeds 1000 & …; python bench/calibration_repro.py summary  # in parallel

toy: seed 0 is the example config itself (it writes the shipped calibrations/toy.yaml); seeds 1000 and 2000 are
copies with only `seed` and `output` changed (reports/repro/). Each runs as its own CLI process with `--jobs 2`;
reported per seed: wall seconds, the load average before and after, the sum of per-run CPU seconds (the machine
is shared: wall time alone overstates the cost), runs, τ, B and its 95% interval. Must hold: every B within ±30%
of the three's median, and each interval covering the other two estimates. Writes reports/repro/summary.json.

synthetic: `curve.simulate_protocol` (the adaptive protocol without OPD runs) on a known power-law cost curve
with noise growing with x, 200 calibrations: the fraction whose 95% interval covers the true budget (must be
≥ 90%), with the runs used and the median interval factor.
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


def synthetic(sims: int = 200, seed: int = 0) -> dict:
    from admitcheck.calibration.curve import Tolerance, simulate_protocol

    # A toy-like truth: cost = 0.5·(x/0.1)^1 nats/token, paired noise 0.004·(1 + √(x/0.01)), baseline 0.43 ± 0.013,
    # levels every half decade over 1e-3 … 0.3, τ = 5% of the baseline mean → true B = 0.1·τ/0.5.
    rng = np.random.default_rng(seed)
    xs = np.geomspace(1e-3, 0.3, 6)
    tol = Tolerance(relative=0.05)
    true_b = 0.1 * tol.of(0.43) / 0.5
    cover, runs, widths = 0, [], []
    for _ in range(sims):
        est, n = simulate_protocol(
            lambda x: 0.5 * (x / 0.1), lambda x: 0.004 * (1 + math.sqrt(x / 0.01)), xs, 0.43, 0.013, tol, rng
        )
        lo, hi = est.budget.interval
        cover += lo <= true_b <= hi
        runs.append(n)
        widths.append(est.width_factor)
    out = {"sims": sims, "true_budget": true_b, "coverage": cover / sims, "mean_runs": float(np.mean(runs)),
           "median_interval_factor": float(np.median(widths))}  # fmt: skip
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["toy", "synthetic", "summary"])
    ap.add_argument("--sims", type=int, default=200)
    ap.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    args = ap.parse_args()
    if args.what == "summary":
        result = summarize()
    else:
        result = toy(tuple(args.seeds)) if args.what == "toy" else synthetic(args.sims)
    print(json.dumps(result, indent=2))
