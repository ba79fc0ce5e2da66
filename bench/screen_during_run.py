"""Screening during the run (issue 40) on the toy pair: what a screen costs against one calibration run, and x at
checkpoints of a calibration-protocol run against what the calibration's own runs measured.

    nice python bench/screen_during_run.py --out bench/results/screen_during_run_toy.json
    python bench/screen_during_run.py --skip-whole-run     # the run-window trajectory only (~2 min on 2 cores)

1. Cost, in this process, one torch thread: one calibration run (`levels.run_one`, the baseline level, models
   loaded first, as `calibrate` runs it: 200 OPD steps, the probe measurement and two evaluations) against
   `screen()` of one candidate at the start weights and at a checkpoint (everything `screen()` does: the inputs
   read and checked, reference, floor, sequential measurement), wall and process CPU seconds. Target ≤ 5%. Also the
   cold command (`python -m admitcheck screen`, a fresh interpreter importing torch and transformers).
2. Trajectory (`admission.trajectory.screen_trajectory`): fp8_kv, stale_1 and a noise candidate at σ of the
   calibration's level noise-2 (0.04399), screened at steps 0, H/4, H/2, H of the baseline run, H = the run window
   (20) and H = the whole run (200); the run-averaged x predicted from them against the x the calibration's runs of
   that level measured in the run (`in_run_k3`, the ledger: the same steps' mean, replicate 0 and all replicates).
   FP8 KV has no calibration level, so its prediction has nothing to compare with here.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's admitcheck, not an installed one

NOISE_STD = 0.04399  # the toy calibration's noise-2 level (calibrations/toy.yaml levels)


def screen_config(tmp: Path, names: list[str]):
    """examples/toy_screen.yaml with the chosen candidates (plus stale_1 and noise_2), written to `tmp`."""
    import yaml

    from admitcheck import io
    from admitcheck.config import ScreenConfig

    data = yaml.safe_load((ROOT / "examples" / "toy_screen.yaml").read_text())
    extra = [
        {"name": "stale_1", "staleness": 1},
        {"name": "noise_2", "rollout": {"engine": "hf", "dtype": "float32", "noise": {"relative_std": NOISE_STD}}},
    ]
    data["candidates"] = [c for c in data["candidates"] + extra if c["name"] in names]
    for key in ("pair",):
        data[key] = {k: str((ROOT / "examples" / v).resolve()) if k != "name" else v for k, v in data[key].items()}
    data["calibration"] = str(ROOT / "calibrations" / "toy.yaml")
    data["probe"]["prompts"] = str(ROOT / "toy" / "prompts" / "probe.jsonl")
    path = tmp / "screen.yaml"
    path.write_text(yaml.safe_dump(data))
    return io.load_config(path, ScreenConfig), path


def ledger_x_run(level: str, horizon: int) -> dict:
    """The level's runs' in-run x over the first `horizon` steps (the ledger's records, as `fit.run_x`)."""
    import numpy as np

    from admitcheck.calibration.artifact import load_calibration
    from admitcheck.calibration.levels import replicate_seed
    from admitcheck.calibration.refit import ledger_runs

    cal = load_calibration(ROOT / "calibrations" / "toy.yaml")
    _, _, placed = ledger_runs(cal)
    runs = [p for p in placed if p.level.name == level]
    seed0 = replicate_seed(cal.recipe.seed, 0)
    xs = [float(np.mean(p.record.in_run_k3[:horizon])) for p in runs]
    rep0 = [float(np.mean(p.record.in_run_k3[:horizon])) for p in runs if p.record.seed == seed0]
    return {"replicate_0": rep0[0] if rep0 else None, "mean": float(np.mean(xs)), "min": min(xs), "max": max(xs),
            "runs": len(xs)}  # fmt: skip


def timed(fn):
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def cost(cfg, path: Path, tmp: Path, names: list[str]) -> dict:
    """Part 1 (module docstring)."""
    from admitcheck import io
    from admitcheck.admission.checkpoint import with_checkpoint
    from admitcheck.admission.screen import screen
    from admitcheck.calibration.levels import Level, load_context, run_one
    from admitcheck.config import CalibrateConfig

    cal_cfg = io.load_config(ROOT / "examples" / "toy_calibrate.yaml", CalibrateConfig)
    ctx = load_context(cal_cfg)
    _, run_wall, run_cpu = timed(lambda: run_one(ctx, cal_cfg, Level("baseline", "baseline", 1), seed=0))
    # a checkpoint: the student after 5 steps of the run (saved by the trajectory's own trainer)
    from admitcheck.admission.inputs import read_screen_inputs
    from admitcheck.admission.trajectory import save_run_checkpoints

    saved, _, _ = save_run_checkpoints(read_screen_inputs(cfg, config_file=str(path)), [0, 5], tmp / "cost")
    out = {"calibration_run": {"wall_s": run_wall, "cpu_s": run_cpu, "steps": cal_cfg.train.steps}, "screens": []}
    for name in names:
        for at, c in (("start", cfg), ("checkpoint step 5", with_checkpoint(cfg, saved[5], 5))):
            rep, wall, cpu = timed(lambda c=c, n=name: screen(c, config_file=str(path), candidates=[n]))
            v = rep.verdicts[0]
            out["screens"].append({
                "candidate": name, "at": at, "wall_s": wall, "cpu_s": cpu, "probes": v.probes,
                "decision": v.decision, "ratio_wall": wall / run_wall, "ratio_cpu": cpu / run_cpu,
            })  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "admitcheck", "screen", str(path), "--candidate", names[0], "--json"]
    subprocess.run(cmd, cwd=ROOT, capture_output=True, env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
                                                             "PATH": "/usr/bin:/bin"})  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter() - t0
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    out["cold_command"] = {"candidate": names[0], "wall_s": wall, "cpu_s": cpu, "ratio_wall": wall / run_wall,
                           "ratio_cpu": cpu / run_cpu}  # fmt: skip
    return out


def trajectory(cfg, path: Path, tmp: Path, horizon: int) -> dict:
    """Part 2 at one horizon (module docstring)."""
    from admitcheck.admission.trajectory import screen_trajectory

    traj, wall, cpu = timed(lambda: screen_trajectory(cfg, config_file=str(path), out_dir=tmp / f"h{horizon}",
                                                      horizon=horizon))  # fmt: skip
    out = traj.model_dump(mode="json") | {"wall_s": wall, "cpu_s": cpu}
    out["measured_in_run"] = {"stale_1": ledger_x_run("stale-1", horizon), "noise_2": ledger_x_run("noise-2", horizon)}
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write the JSON result here")
    ap.add_argument("--skip-cost", action="store_true")
    ap.add_argument("--skip-whole-run", action="store_true", help="only the run-window trajectory")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="during_"))
    names = ["fp8_kv", "stale_1", "noise_2"]
    cfg, path = screen_config(tmp, names)
    out: dict = {"pair": "toy", "calibration": "calibrations/toy.yaml", "threads": 1,
                 "probe": cfg.probe.model_dump(exclude={"prompts"})}  # fmt: skip
    if not args.skip_cost:
        out["cost"] = cost(cfg, path, tmp, ["fp8_kv", "noise_2"])
        print(json.dumps(out["cost"], indent=1), flush=True)
    out["trajectory_run_window"] = trajectory(cfg, path, tmp, 20)
    print(json.dumps(out["trajectory_run_window"]["run_x"], indent=1), flush=True)
    if not args.skip_whole_run:
        out["trajectory_whole_run"] = trajectory(cfg, path, tmp, 200)
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
