"""Time per OPD step on the toy pair, split into rollout, teacher scoring, backward (+ engine sync).

    python bench/opd_step.py                       # builds (or reuses) the toy pair in ./toy
    python bench/opd_step.py --toy-dir toy --steps 30 --batch-size 64 --threads 1 --loss pg

Prints a table (ms per step, share of the step) and then one JSON line. The first `--warmup` steps are run and
not timed. Mismatch is a weight-noise level (`--noise`, relative std) so the engine re-applies noise every sync.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--toy-dir", default="toy", help="toy pair dir (built when missing)")
    ap.add_argument("--steps", type=int, default=30, help="timed OPD steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--batch-size", type=int, default=None, help="rollouts per step (default: the toy config's)")
    ap.add_argument("--max-new-tokens", type=int, default=16, help="response cap, tokens")
    ap.add_argument("--loss", choices=("pg", "gkd_reverse_kl"), default="pg")
    ap.add_argument("--noise", type=float, default=0.01, help="relative weight-noise std of the rollout engine")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (calibration runs use 1)")
    args = ap.parse_args(argv)

    import torch

    from admitcheck import io
    from admitcheck.calibration import opd
    from admitcheck.config import NoiseConfig, PairConfig, RolloutConfig, TrainConfig
    from admitcheck.pairs.load import load_pair_tokenizer, tokenize_prompts
    from admitcheck.pairs.toy import build_toy_pair
    from admitcheck.rollout.engines.hf import HFEngine

    torch.set_num_threads(args.threads)
    toy = build_toy_pair(args.toy_dir)
    tokens = load_pair_tokenizer(PairConfig(student=toy.student_dir, teacher=toy.teacher_dir))
    student = io.load_causal_lm(toy.student_dir)
    teacher = io.load_causal_lm(toy.teacher_dir)
    prompt_ids = tokenize_prompts(tokens, io.read_prompts(toy.train_prompts))
    batch = args.batch_size or _default_batch()
    cfg = TrainConfig(
        prompts=toy.train_prompts,
        steps=args.warmup + args.steps,
        batch_size=batch,
        max_new_tokens=args.max_new_tokens,
        loss=args.loss,
    )
    rollout = RolloutConfig(dtype="float32", noise=NoiseConfig(relative_std=args.noise, seed=0))
    engine = HFEngine(student, rollout, eos_token_id=tokens.eos_token_id, pad_token_id=tokens.pad_token_id)
    t0 = time.perf_counter()
    result = opd.train(student, teacher, engine, prompt_ids, cfg, seed=0)
    wall = time.perf_counter() - t0
    timed = result.steps[args.warmup :]
    phases = ("rollout", "teacher", "backward", "sync")
    ms = {p: 1e3 * statistics.fmean(getattr(s, f"seconds_{p}") for s in timed) for p in phases}
    total = sum(ms.values())
    tokens_per_step = statistics.fmean(s.tokens for s in timed)

    print(f"OPD step on the toy pair: batch {batch}, loss {args.loss}, {args.threads} thread(s), {len(timed)} steps")
    print(f"{'phase':<10}{'ms/step':>10}{'share':>8}")
    for p in phases:
        print(f"{p:<10}{ms[p]:>10.1f}{ms[p] / total:>8.0%}")
    print(f"{'total':<10}{total:>10.1f}{1:>8.0%}   ({tokens_per_step:.0f} response tokens/step)")
    record = {
        "bench": "opd_step",
        "batch_size": batch,
        "loss": args.loss,
        "threads": args.threads,
        "steps": len(timed),
        "ms_per_step": {p: round(v, 2) for p, v in ms.items()} | {"total": round(total, 2)},
        "tokens_per_step": round(tokens_per_step, 1),
        "wall_seconds": round(wall, 2),
    }
    print(json.dumps(record))
    return record


def _default_batch() -> int:
    """The train batch of examples/toy_calibrate.yaml (so the bench times the shipped recipe)."""
    import yaml

    path = Path(__file__).resolve().parent.parent / "examples" / "toy_calibrate.yaml"
    try:
        return int(yaml.safe_load(path.read_text())["train"]["batch_size"])
    except (OSError, KeyError, TypeError, ValueError):
        return 32


if __name__ == "__main__":
    main(sys.argv[1:])
