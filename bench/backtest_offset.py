"""Why do a backtest's candidate costs sit above the calibration's curve? Two explanations checked from the ledgers
(issue 38; docs/smollm2.md): the backtest's replicate seeds (are their baselines better than the calibration's
mean, and do the calibration's own levels at those seeds sit above the curve?) and the machine the runs were made on
(the calibration's level runs against their baselines, grouped by the GPU of each; a run's GPU is read off its
`finished_at`: runs without one or finished before `--h200-before` were made on an H200, later ones on an H100 —
true of the SmolLM2 ledgers, docs/gpu_campaigns.md). With `--control-ledger`, the null control's backtest (the
calibration's own engine as a candidate): how far each of its runs is from the baseline it is paired with — zero
means neither the GPU's rounding nor the machine moves a run. And the backtest's residual against the curve by
replicate seed (each candidate run's paired cost minus the curve's cost at its own x; averaged per seed over the
candidates run at every seed, a t interval over the seeds, which share their baselines across candidates) and by
look. Prints and writes JSON; runs nothing.

    python bench/backtest_offset.py --calibration calibrations/smollm2.yaml \
        --backtest-ledger calibrations/smollm2.backtest.ledger.jsonl --h200-before 2026-12-06T05:00 \
        --control-ledger calibrations/smollm2.control.backtest.ledger.jsonl \
        --out bench/results/smollm2_backtest_offset_2026-12-06f.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admitcheck.calibration.artifact import load_calibration
from admitcheck.calibration.ledger import ledger_path, read_live

GPUS = ("H200", "H100")


def is_baseline(run) -> bool:
    return run.run_key.level.kind == "baseline"  # the record's key, typed


def summary(values: list[float]) -> dict:
    v = np.asarray(values, dtype=float)
    se = float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else None
    return {"n": len(v), "mean_tau": float(v.mean()) if len(v) else None, "se_tau": se}


def t_interval(values: list[float], confidence: float = 0.95) -> list[float]:
    v = np.asarray(values, dtype=float)
    half = stats.t.ppf(0.5 + confidence / 2, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v))
    return [float(v.mean() - half), float(v.mean() + half)]


def control(path: Path, base: dict, gpu) -> dict:
    """The null candidate's runs against the calibration's baselines at the same seeds (nats/token)."""
    _, runs = read_live(path)
    diffs = [r.quality - base[r.seed].quality for r in runs if not is_baseline(r) and r.seed in base]
    return {
        "runs": len(diffs),
        "bit_identical": sum(d == 0.0 for d in diffs),
        "max_abs_difference": float(max(abs(d) for d in diffs)) if diffs else None,
        "mean_difference": float(np.mean(diffs)) if diffs else None,
        "runs_by_gpu": {g: sum(gpu(r) == g for r in runs if not is_baseline(r)) for g in GPUS},
        "baselines_by_gpu": {
            g: sum(gpu(base[r.seed]) == g for r in runs if not is_baseline(r) and r.seed in base) for g in GPUS
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", type=Path, required=True)
    ap.add_argument("--backtest-ledger", type=Path, required=True)
    ap.add_argument("--h200-before", required=True, help="UTC time, e.g. 2026-12-06T05:00")
    ap.add_argument("--control-ledger", type=Path, help="the null control's backtest ledger")
    ap.add_argument("--look", type=int, default=4, help="pairs per look (the backtest's truth.step)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    cal = load_calibration(args.calibration)
    tau = cal.tolerance.value
    cut = dt.datetime.fromisoformat(args.h200_before).replace(tzinfo=dt.UTC).timestamp()

    def gpu(run) -> str:
        return "H200" if run.finished_at is None or run.finished_at < cut else "H100"

    _, runs = read_live(ledger_path(cal.path))
    base = {r.seed: r for r in runs if is_baseline(r)}
    levels = [r for r in runs if not is_baseline(r) and r.seed in base and r.mismatch is not None]

    def residual(r) -> float:  # observed paired cost − the curve's at the run's x, in τ
        return ((r.quality - base[r.seed].quality) - float(cal.predict_cost(r.mismatch))) / tau

    _, bt = read_live(args.backtest_ledger)
    seeds = sorted({r.seed for r in bt if is_baseline(r)})
    all_base = np.array([b.quality for b in base.values()])
    by_gpu = defaultdict(list)
    for r in levels:
        by_gpu[f"{gpu(r)} level, {gpu(base[r.seed])} baseline"].append(residual(r))
    result = {
        "tau": tau,
        "backtest_seeds": seeds,
        "baselines_at_backtest_seeds_minus_all_tau": float(
            (np.mean([base[s].quality for s in seeds if s in base]) - all_base.mean()) / tau
        ),
        "calibration_levels_residual_all": summary([residual(r) for r in levels]),
        "calibration_levels_residual_at_backtest_seeds": summary([residual(r) for r in levels if r.seed in seeds]),
        "calibration_levels_residual_by_gpu": {k: summary(v) for k, v in sorted(by_gpu.items())},
        "backtest_baselines_by_gpu": {g: sum(gpu(r) == g for r in bt if is_baseline(r)) for g in GPUS},
        "backtest_candidate_runs_by_gpu": {g: sum(gpu(r) == g for r in bt if not is_baseline(r)) for g in GPUS},
    }
    # by replicate seed. The candidates run at every seed (the balanced part: the same candidates at each seed) give
    # the offset with every seed weighted once: a t interval over the seeds' means (the seeds share baselines across
    # candidates, so they, not the candidates, are the independent units). Over all runs the seeds' means also mix
    # which candidates reached that seed (later seeds: only those the early looks left undecided), kept for reference.
    order = [r.seed for r in bt if is_baseline(r)]  # the replicate seeds in the backtest's order (its looks')
    runs_of = defaultdict(dict)  # candidate (its level key) -> seed -> residual in τ
    for r in bt:
        if not is_baseline(r) and r.seed in base and r.mismatch is not None:
            runs_of[str(r.run_key.level)][r.seed] = residual(r)
    full = [c for c in runs_of.values() if all(s in c for s in order)]
    if full:
        means = [float(np.mean([c[s] for c in full])) for s in order]
        result["residual_by_seed_balanced"] = {
            "candidates": len(full),
            "seeds": len(order),
            "mean_tau": float(np.mean(means)),
            "interval_tau": t_interval(means),
            "per_seed_tau": means,
        }
    mixed = [float(np.mean([c[s] for c in runs_of.values() if s in c])) for s in order]
    result["residual_by_seed_all_runs"] = {
        "runs": sum(map(len, runs_of.values())),
        "mean_tau": float(np.mean(mixed)),
        "interval_tau": t_interval(mixed),
        "note": "each seed's mean over the candidates that reached it: mixes seed and candidate effects",
    }
    # by look (`--look` seeds at a time, the truth rule's step): how good the baselines there are, and the residual
    # of the candidates run at every seed (lower quality is better: a negative baseline figure is a lucky seed, and a
    # paired cost measured against it runs high — a candidate settled at an early look inherits it)
    k = args.look
    result["by_look"] = [
        {
            "seeds": order[i : i + k],
            "baseline_minus_all_baselines_tau": float(
                (np.mean([base[s].quality for s in order[i : i + k]]) - all_base.mean()) / tau
            ),
            "residual_of_candidates_at_all_seeds_tau": (
                float(np.mean([c[s] for c in full for s in order[i : i + k]])) if full else None
            ),
        }
        for i in range(0, len(order), k)
    ]
    if args.control_ledger:
        result["null_control"] = control(args.control_ledger, base, gpu)
    result["command"] = "python bench/backtest_offset.py " + " ".join(sys.argv[1:])
    (args.out.write_text if args.out else print)(json.dumps(result, indent=2) + ("\n" if args.out else ""))


if __name__ == "__main__":
    main()
