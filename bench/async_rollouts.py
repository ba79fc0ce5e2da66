"""Wall time per OPD step on the CPU toy pair: staleness 1 simulated (`train.rollouts: sync`: each batch sampled at
the start of its step) against real asynchronous rollouts (`async`: batch t+1 sampled on a background thread while
step t trains). Both are the same run bit for bit (checked here: every loss, k3 and the final weights).

    python bench/async_rollouts.py                       # builds (or reuses) the toy pair in ./toy
    python bench/async_rollouts.py --steps 20 --repeats 2 --out bench/results/async_rollouts_toy.json

The toy calibration's recipe (examples/toy_calibrate.yaml: batch 128, 16 new tokens, pg) under a weight-noise level
(so every sync re-applies noise), 1 torch thread per thread (as calibration runs): sync uses one core, async two (the
trainer's and the engine's). `sync-2-threads` (sync with 2 intra-op threads) is the same two cores spent the other
way. A step's wall time is the time between consecutive `on_step` calls (async: its rollout phase is the part of
the sampling not hidden behind the step before); the first `--warmup` steps are not counted. Modes alternate within
each repeat so that a change in the machine's load hits all of them.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

MODES = {"sync": ("sync", 1), "async": ("async", 1), "sync-2-threads": ("sync", 2)}  # name: (rollouts, threads)
PHASES = ("rollout", "teacher", "backward", "sync")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--toy-dir", default="toy", help="toy pair dir (built when missing)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per run")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--repeats", type=int, default=2, help="runs per mode (alternating)")
    ap.add_argument("--staleness", type=int, default=1)
    ap.add_argument("--noise", type=float, default=0.01, help="relative weight-noise std of the rollout engine")
    ap.add_argument("--out", default=None, help="write the JSON record here")
    args = ap.parse_args(argv)

    import torch

    from admitcheck import io
    from admitcheck.calibration import opd
    from admitcheck.config import NoiseConfig, PairConfig, RolloutConfig, TrainConfig
    from admitcheck.pairs.load import load_pair_tokenizer, tokenize_prompts
    from admitcheck.pairs.toy import build_toy_pair
    from admitcheck.rollout.engines.hf import HFEngine

    toy = build_toy_pair(args.toy_dir)
    tokens = load_pair_tokenizer(PairConfig(student=toy.student_dir, teacher=toy.teacher_dir))
    student0 = io.load_causal_lm(toy.student_dir)
    teacher = io.load_causal_lm(toy.teacher_dir)
    prompt_ids = tokenize_prompts(tokens, io.read_prompts(toy.train_prompts))
    recipe = _toy_recipe()
    rollout = RolloutConfig(dtype="float32", noise=NoiseConfig(relative_std=args.noise, seed=0))
    load_before = os.getloadavg()

    def run(mode: str) -> dict:
        rollouts, threads = MODES[mode]
        torch.set_num_threads(threads)
        cfg = TrainConfig(prompts=toy.train_prompts, steps=args.warmup + args.steps, rollouts=rollouts, **recipe)
        student = copy.deepcopy(student0)
        engine = HFEngine(student, rollout, eos_token_id=tokens.eos_token_id, pad_token_id=tokens.pad_token_id)
        stamps = [time.perf_counter()]
        result = opd.train(student, teacher, engine, prompt_ids, cfg, staleness=args.staleness, seed=0,
                           on_step=lambda _k, _m: stamps.append(time.perf_counter()))  # fmt: skip
        engine.close()
        step_s = [b - a for a, b in itertools.pairwise(stamps)][args.warmup :]
        timed = result.steps[args.warmup :]
        return {
            "step_seconds": step_s,
            "phases": {p: statistics.median(getattr(s, f"seconds_{p}") for s in timed) for p in PHASES},
            "identity": [(s.loss, s.k3) for s in result.steps] + _weight_sums(student),
        }

    runs: dict[str, list[dict]] = {m: [] for m in MODES}
    for r in range(args.repeats):
        for mode in MODES if r % 2 == 0 else reversed(MODES):
            runs[mode].append(run(mode))
            print(f"repeat {r} {mode}: median step {statistics.median(runs[mode][-1]['step_seconds']):.3f} s",
                  file=sys.stderr)  # fmt: skip
    torch.set_num_threads(1)
    # sync and async (1 thread each) are the same run bit for bit; 2 intra-op threads round differently
    identical = all(x["identity"] == runs["sync"][0]["identity"] for m in ("sync", "async") for x in runs[m])
    summary = {}
    for mode, rs in runs.items():
        steps = [s for x in rs for s in x["step_seconds"]]
        summary[mode] = {
            "rollouts": MODES[mode][0],
            "torch_threads": MODES[mode][1],
            "median_step_seconds": round(statistics.median(steps), 4),
            "median_step_seconds_per_repeat": [round(statistics.median(x["step_seconds"]), 4) for x in rs],
            "median_phase_seconds": {p: round(statistics.median(x["phases"][p] for x in rs), 4) for p in PHASES},
        }
    base = summary["sync"]["median_step_seconds"]
    record = {
        "bench": "async_rollouts",
        "pair": "toy (CPU)",
        "recipe": recipe | {"staleness": args.staleness, "noise_relative_std": args.noise},
        "steps_timed_per_run": args.steps,
        "warmup_steps": args.warmup,
        "repeats": args.repeats,
        "sync_and_async_bit_identical": identical,
        "modes": summary,
        "speedup_async_vs_sync": round(base / summary["async"]["median_step_seconds"], 3),
        "speedup_sync_2_threads_vs_sync": round(base / summary["sync-2-threads"]["median_step_seconds"], 3),
        "machine": {
            "cpus": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
            "torch": torch.__version__,
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            "uptime_after": _uptime(),
            "note": "shared with other sessions: the load average counts their processes too",
        },
    }
    text = json.dumps(record, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return record


def _toy_recipe() -> dict:
    """The train recipe of examples/toy_calibrate.yaml, prompts aside (the bench times the shipped recipe)."""
    import yaml

    path = Path(__file__).resolve().parent.parent / "examples" / "toy_calibrate.yaml"
    train = yaml.safe_load(path.read_text())["train"]
    return {k: v for k, v in train.items() if k not in ("prompts", "steps")}


def _weight_sums(model) -> list[float]:
    return [float(p.detach().double().sum()) for p in model.parameters()]


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


if __name__ == "__main__":
    main(sys.argv[1:])
