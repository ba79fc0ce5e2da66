"""Time-to-quality measured against `admitcheck plan`'s prediction (issue 40): full OPD runs of the plan's candidates
and the sync baseline, paired by seed, with held-out evaluations every few steps, timed on the machine they run on.

    python bench/time_to_quality.py --config examples/smollm2_calibrate.yaml --plan bench/ttq/smollm2_plan.yaml \
        --every 5 --replicates 3 --jobs 1 --ledger bench/ttq/smollm2.ttq.ledger.jsonl \
        --out bench/results/h200_time_to_quality.json                       # one H200
    python bench/time_to_quality.py --config examples/toy_calibrate.yaml --plan bench/ttq/toy_plan.yaml --every 20 \
        --replicates 3 --jobs 1 --ledger bench/ttq/toy.ttq.ledger.jsonl --out bench/results/time_to_quality_toy_cpu.json

What is measured, per candidate of the plan config that names runnable runs (`staleness: k`, `rollout:` or
`relative_std:`; a candidate with only a `mismatch` has nothing to run and is listed as such):
- R replicate pairs on seeds of their own (replicates 2000 + r of the calibration's seed: no run in the calibration's
  or a backtest's ledger, so the prediction, made from those ledgers, has seen none of them; checked). Run r of a
  candidate and of the baseline share the seed: the data order, the sampling uniforms and the eval prompts. The
  calibration config's recipe and eval, with `eval.every` = --every and `eval.deferred` (the evaluations score weight
  snapshots after the last step, so none runs beside the asynchronous rollouts) and `train.rollouts: async`
  (staleness runs sample ahead on a background thread: the real overlap, bit-identical to the simulated staleness);
- per run: steps-to-target T (calibration.timing: the first step from which the interpolated learning curve stays
  ≤ the paired baseline's final quality + τ, τ the calibration's; quality as the calibration fits it: 1 − task reward
  for a GRPO recipe) and the training's wall seconds per step: the run's seconds less its setup, probe and evaluation
  seconds (the steps' phases leave out the in-run mismatch's device sync, where a GPU's queued optimizer kernels
  finish, so their sum is kept only as a diagnostic); time-to-quality = T × seconds per step;
- per candidate, over its pairs: the steps efficiency T_base/T_run (`timing.steps_efficiency`: 0 when the run never
  reaches the target), the step-time ratio, the speed-up two ways — per pair (T_base s_base)/(T s), and as plan
  forms it, mean efficiency / mean step-time ratio — and the mean time-to-quality in seconds (when every pair got
  there), each mean with a Student-t interval.

What is predicted: `plan` on the plan config (the calibration's ledgers), with its `rollout_share` and `step_seconds`
from a short pilot when the config leaves them out: --pilot-runs baseline seeds (replicates 1000 + r, neither the
calibration's nor the measured ones), each run for P = --pilot-steps and for 2P steps (a shortened recipe, one cheap
evaluation), in ledgers of their own; the difference of the two runs (the P steps between: the first steps' one-time
costs, e.g. CUDA graph capture, cancel) gives the seconds per step and the rollouts' share of them. A plan that gives
times in baseline steps (no pilot and no `step_seconds`) is refused: it cannot be set against seconds. A runnable
candidate without a `mismatch` gets the mean of its runs' start-weights probes (each run measures its x before it
trains, as `screen` does). The comparison: measured / predicted − 1 for the time-to-quality, the speed-up (plan's
form), the step-time ratio and the steps efficiency, each within ±15% or not (issue 40's must-hold), so that a miss
says whose it is.

Caveats the JSON repeats: the hf engine emulates FP8 / INT8 formats' numerics (its rollouts do not run FP8 kernels),
so a `rollout:` candidate with such a format is `wall_time: emulated`: its steps efficiency is compared, its times
and speed-up are not (they would set the emulation's speed against a kernel bench). Runs share the machine with
--jobs − 1 others: --jobs 1 times each alone. The ledgers resume (a killed bench re-runs only the missing runs);
the machine and --jobs of every call are kept beside the ledger (`<ledger>.calls.json`) and the JSON says when the
runs it reads were made under more than one. Timings on a shared machine vary with its load: the JSON's load
averages say how shared it was.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from admitcheck import io  # noqa: E402
from admitcheck.admission.plan import plan  # noqa: E402
from admitcheck.calibration.artifact import load_calibration  # noqa: E402
from admitcheck.calibration.campaign import Campaign, open_executor  # noqa: E402
from admitcheck.calibration.learning import load_runs  # noqa: E402
from admitcheck.calibration.ledger import Ledger, ledger_header  # noqa: E402
from admitcheck.calibration.levels import Level, replicate_seed  # noqa: E402
from admitcheck.calibration.record import RunRecord  # noqa: E402
from admitcheck.calibration.timing import LearningCurve, steps_efficiency, steps_to_target, summarize  # noqa: E402
from admitcheck.config import CalibrateConfig, PlanCandidate, PlanConfig, RolloutConfig  # noqa: E402
from admitcheck.report import json_safe  # noqa: E402

BASELINE = Level("baseline", "baseline")
TOLERANCE = 0.15  # issue 40: measured vs predicted within ±15%
PILOT_REPLICATES, MEASURED_REPLICATES = 1000, 2000  # the seeds' replicate offsets: none is a calibration's
SUFFIX = ".ledger.jsonl"


def arm_level(cand: PlanCandidate) -> Level | None:
    """The runs a plan candidate names, as a calibration level; None when it names only a mismatch."""
    if cand.staleness is not None:
        return Level(cand.name, "staleness", staleness=cand.staleness)
    if cand.rollout is not None:
        return Level(cand.name, "rollout", rollout=cand.rollout)
    if cand.relative_std is not None:
        return Level(cand.name, "noise", relative_std=cand.relative_std)
    return None


def emulated(rollout: RolloutConfig | None) -> bool:
    """True when the hf engine only emulates the rollout's number format (its speed is not that format's kernels')."""
    return rollout is not None and (rollout.weights is not None or rollout.kv_cache.dtype != "auto")


def timed_config(config: CalibrateConfig, every: int) -> CalibrateConfig:
    """The calibration's recipe with learning curves that do not touch the steps' clock: eval every `every` steps,
    deferred to the run's end, and staleness runs sampling ahead for real."""
    return config.model_copy(update={
        "eval": config.eval.model_copy(update={"every": every, "deferred": True}),
        "train": config.train.model_copy(update={"rollouts": "async"}),
    })  # fmt: skip


def pilot_config(config: CalibrateConfig, steps: int) -> CalibrateConfig:
    """A baseline recipe shortened to `steps` steps with one cheap evaluation: only its step timings are used."""
    small = {"every": 0, "num_prompts": min(config.eval.num_prompts, config.eval.batch_size), "samples": 1}
    return config.model_copy(update={
        "train": config.train.model_copy(update={"steps": steps}),
        "eval": config.eval.model_copy(update=small),
    })  # fmt: skip


def train_seconds(rec: RunRecord) -> float:
    """The run's training wall seconds: all of it but setup, the mismatch probe and the evaluations."""
    return rec.seconds - sum(v or 0.0 for v in (rec.seconds_setup, rec.seconds_probe, rec.seconds_evaluation))


def step_seconds(rec: RunRecord) -> float:
    return train_seconds(rec) / rec.steps


def ledger_named(ledger: Path, part: str) -> Path:
    return ledger.with_name(ledger.name.removesuffix(SUFFIX) + f".{part}{SUFFIX}")


def run_campaign(config: CalibrateConfig, config_file: str, ledger_file: Path, wanted: list, jobs: int) -> Campaign:
    ledger_file.parent.mkdir(parents=True, exist_ok=True)
    ledger = Ledger.open(ledger_file, ledger_header(config))
    runner = open_executor(config.resources, jobs=jobs, executor="local", ray_address=None)

    def show(label: str, done: int, total: int) -> None:
        print(f"{label}: {done}/{total}", file=sys.stderr, flush=True)

    campaign = Campaign(config, config_file, ledger, runner, show)
    try:
        campaign.run_round(wanted, ledger_file.name.removesuffix(SUFFIX))
    finally:
        runner.close()
    return campaign


def run_pilot(config: CalibrateConfig, config_file: str, ledger: Path, steps: int, runs: int, jobs: int) -> dict:
    """The baseline's steady-state step: each pilot seed run for `steps` and for 2 × `steps` steps (the same first
    steps: one seed, one data order); the difference over the `steps` steps between — the first steps' one-time
    costs (CUDA graph capture, allocator warm-up, caches) cancel."""
    seeds = [replicate_seed(config.seed, PILOT_REPLICATES + r) for r in range(runs)]
    recs = {}
    for n in (steps, 2 * steps):
        pc = run_campaign(pilot_config(config, n), config_file, ledger_named(ledger, f"pilot{n}"),
                          [(BASELINE, s) for s in seeds], jobs)  # fmt: skip
        recs[n] = [pc.record(BASELINE, s) for s in seeds]
    per_step, share = [], []
    for short, long in zip(recs[steps], recs[2 * steps]):
        wall = (train_seconds(long) - train_seconds(short)) / steps
        rollout = (long.seconds_by_phase.get("rollout", 0.0) - short.seconds_by_phase.get("rollout", 0.0)) / steps
        per_step.append(wall)
        share.append(rollout / wall)
    return {
        "steps": [steps, 2 * steps],
        "seeds": seeds,
        "seconds_per_step": statistics.mean(per_step),
        "seconds_per_step_each": per_step,
        "rollout_share": statistics.mean(share),
        "first_steps_seconds_per_step": statistics.mean(step_seconds(r) for r in recs[steps]),  # warm-up included
    }


def _mean_interval(values: list[float], confidence: float) -> dict:
    s = summarize(values, confidence)
    return {"mean": s.mean, "interval": list(s.interval), "n": len(values)}


def curve_of(rec: RunRecord, task_error: bool) -> LearningCurve:
    return LearningCurve.from_evals(rec.evals, task_error=task_error)


def measure_arm(campaign: Campaign, level: Level, seeds: list[int], tau: float, confidence: float,
                task_error: bool) -> dict:  # fmt: skip
    """The arm's pairs (module docstring): per pair and summarized."""
    pairs, eff, speed, ratio, ttq = [], [], [], [], []
    for seed in seeds:
        base, run = campaign.record(BASELINE, seed), campaign.record(level, seed)
        base_curve, run_curve = curve_of(base, task_error), curve_of(run, task_error)
        target = base_curve.final + tau
        t_base, t_run = steps_to_target(base_curve, target), steps_to_target(run_curve, target)
        s_base, s_run = step_seconds(base), step_seconds(run)
        e = steps_efficiency(run_curve, base_curve, tau)
        pairs.append({
            "seed": seed, "target": target, "baseline_final": base_curve.final, "final": run_curve.final,
            "steps_to_target": t_run, "baseline_steps_to_target": t_base, "steps_efficiency": e,
            "seconds_per_step": s_run, "baseline_seconds_per_step": s_base,
            "phase_seconds_per_step": {k: v / run.steps for k, v in run.seconds_by_phase.items()},
            "time_to_quality_s": t_run * s_run if t_run is not None else None,
            "baseline_time_to_quality_s": t_base * s_base if t_base is not None else None,
        })  # fmt: skip
        eff.append(e)
        ratio.append(s_run / s_base)
        speed.append(e * s_base / s_run)  # (T_base s_base) / (T s); 0 when the run never gets there
        if t_run is not None:
            ttq.append(t_run * s_run)
    reached = sum(p["steps_to_target"] is not None for p in pairs)
    eff_s, ratio_s = _mean_interval(eff, confidence), _mean_interval(ratio, confidence)
    return {
        "pairs": pairs,
        "pairs_reached": f"{reached}/{len(pairs)}",
        "steps_efficiency": eff_s,
        "step_time_ratio": ratio_s,
        "speedup_per_pair": _mean_interval(speed, confidence),
        "speedup": eff_s["mean"] / ratio_s["mean"],  # plan's form: mean efficiency / step-time ratio
        "time_to_quality_s": _mean_interval(ttq, confidence) if len(ttq) == len(pairs) else None,  # all reached
    }


def compare(measured: float | None, predicted: float | None) -> dict:
    if measured is None or predicted is None or not predicted or predicted != predicted:
        return {"measured": measured, "predicted": predicted, "relative_error": None, "within_15pct": None}
    err = measured / predicted - 1.0
    return {"measured": measured, "predicted": predicted, "relative_error": err, "within_15pct": abs(err) <= TOLERANCE}


def record_call(ledger: Path, jobs: int) -> list[dict]:
    """This call's machine and --jobs appended beside the ledger; every call's so far (the runs may span them)."""
    path = ledger.with_name(ledger.name.removesuffix(SUFFIX) + ".calls.json")
    calls = json.loads(path.read_text()) if path.exists() else []
    calls.append(_machine() | {"jobs": jobs, "at": time.strftime("%Y-%m-%dT%H:%M:%S")})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(calls, indent=1) + "\n")
    return calls


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="the calibration's calibrate config (recipe, eval, pair, seed)")
    ap.add_argument("--plan", required=True, help="a plan config against that calibration: its candidates are run")
    ap.add_argument("--every", type=int, required=True, help="eval.every of the measured runs, steps")
    ap.add_argument("--replicates", type=int, default=3, help="replicate pairs per candidate (issue 40: >= 3)")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once (1: each timed alone)")
    ap.add_argument("--ledger", required=True, type=Path, help=f"the measured runs' ledger, NAME{SUFFIX} (resumable)")
    ap.add_argument("--pilot-steps", type=int, default=16, help="P: pilot runs of P and 2P steps (0: no pilot)")
    ap.add_argument("--pilot-runs", type=int, default=2, help="pilot baseline runs")
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.every < 1 or args.replicates < 2 or args.jobs < 1 or args.pilot_steps < 0 or args.pilot_runs < 1:
        ap.error("--every >= 1, --replicates >= 2, --jobs >= 1, --pilot-steps >= 0 and --pilot-runs >= 1")
    if not args.ledger.name.endswith(SUFFIX) or args.ledger.name == SUFFIX:
        ap.error(f"--ledger: a file named NAME{SUFFIX} (the pilots' ledgers are named after it), got {args.ledger}")

    config = io.load_config(args.config, CalibrateConfig)
    plan_cfg = io.load_config(args.plan, PlanConfig)
    cal = load_calibration(plan_cfg.calibration)
    task_error = cal.recipe.loss == "grpo"  # quality as the calibration fits it (plan's curves: learning.py)
    arms = [(c, arm_level(c)) for c in plan_cfg.candidates]
    runnable = [(c, lv) for c, lv in arms if lv is not None]
    if not runnable:
        ap.error(f"{args.plan}: no candidate names runs (staleness, rollout or relative_std)")
    seeds = [replicate_seed(config.seed, MEASURED_REPLICATES + r) for r in range(args.replicates)]
    _, plan_runs = load_runs(cal, plan_cfg.ledgers, args.plan)
    seen = sorted({r.seed for r in plan_runs} & set(seeds))
    if seen:  # the prediction's own runs would be replayed: an in-sample check
        ap.error(f"seeds {seen} have runs in the plan's ledgers: the measured runs must be new ones")
    if args.pilot_steps == 0 and plan_cfg.step_seconds is None:
        ap.error("--pilot-steps 0 needs step_seconds in the plan config: plan's times are in steps without it")
    calls = record_call(args.ledger, args.jobs)
    t_start, load_before = time.perf_counter(), _load()

    pilot = None
    if args.pilot_steps and (plan_cfg.rollout_share is None or plan_cfg.step_seconds is None):
        pilot = run_pilot(config, args.config, args.ledger, args.pilot_steps, args.pilot_runs, args.jobs)
        update = {}
        if plan_cfg.rollout_share is None:
            update["rollout_share"] = pilot["rollout_share"]
        if plan_cfg.step_seconds is None:
            update["step_seconds"] = pilot["seconds_per_step"]
        plan_cfg = plan_cfg.model_copy(update=update)
    wanted = [(lv, s) for lv in [BASELINE] + [lv for _, lv in runnable] for s in seeds]
    campaign = run_campaign(timed_config(config, args.every), args.config, args.ledger, wanted, args.jobs)
    # a runnable candidate without a mismatch gets its runs' own: the start-weights probe each run made before it
    # trained (what `screen` measures), nothing of how the run went
    probed = {c.name: statistics.mean(campaign.record(lv, s).mismatch for s in seeds) for c, lv in runnable}
    plan_cfg = plan_cfg.model_copy(update={"candidates": [
        c if c.mismatch is not None or c.name not in probed else c.model_copy(update={"mismatch": probed[c.name]})
        for c in plan_cfg.candidates]})  # fmt: skip
    predicted = plan(plan_cfg, config_file=args.plan)
    assert predicted.time_unit == "s", predicted.time_unit  # refused above otherwise
    rows = {r.name: r for r in predicted.rows}

    out_arms = {}
    for cand, level in arms:
        row = rows.get(cand.name)
        emul = level is not None and emulated(level.rollout)
        entry = {"runs": level is not None, "level": level.spec().dump() if level else None,
                 "wall_time": None if level is None else "emulated" if emul else "real",
                 "predicted": None if row is None else {
                     "source": row.source, "x": row.x, "steps_efficiency": row.efficiency.mean,
                     "steps_efficiency_interval": list(row.efficiency.interval),
                     "step_time_ratio": row.step_time_ratio, "step_time_from": row.step_time_from,
                     "speedup": row.speedup, "speedup_interval": list(row.speedup_interval),
                     "time_to_quality_s": row.time_to_quality,
                     "time_to_quality_interval": list(row.time_to_quality_interval)}}  # fmt: skip
        if level is not None:
            m = measure_arm(campaign, level, seeds, cal.tau, args.confidence, task_error)
            entry["measured"] = m
            p = entry["predicted"] or {}
            timed = not emul  # an emulated format's wall time is not comparable with a kernel bench's prediction
            entry["comparison"] = {
                "time_to_quality": compare((m["time_to_quality_s"] or {}).get("mean") if timed else None,
                                           p.get("time_to_quality_s")),
                "speedup": compare(m["speedup"] if timed else None, p.get("speedup")),
                "step_time_ratio": compare(m["step_time_ratio"]["mean"] if timed else None, p.get("step_time_ratio")),
                "steps_efficiency": compare(m["steps_efficiency"]["mean"], p.get("steps_efficiency")),
            }  # fmt: skip
        out_arms[cand.name] = entry

    base_recs = [campaign.record(BASELINE, s) for s in seeds]
    mixed = len({json.dumps({k: v for k, v in c.items() if k != "at"}, sort_keys=True) for c in calls}) > 1
    base_curves = [curve_of(r, task_error) for r in base_recs]
    base_t = [steps_to_target(c, c.final + cal.tau) for c in base_curves]
    record = {
        "bench": "time_to_quality",
        "config": args.config,
        "plan": args.plan,
        "calibration": plan_cfg.calibration,
        "tau": cal.tau,
        "quality": "1 - task reward" if task_error else "reverse KL, nats/token",
        "every": args.every,
        "replicates": args.replicates,
        "seeds": seeds,
        "ledger": str(args.ledger),
        "pilot": pilot,
        "plan_rollout_share": predicted.rollout_share,
        "plan_step_seconds": plan_cfg.step_seconds,
        "plan_warnings": predicted.warnings,
        "plan_baseline_steps_to_target": predicted.calibration.baseline_steps_to_target,
        "baseline": {
            "steps_to_target": base_t,
            "seconds_per_step": [step_seconds(r) for r in base_recs],
            "time_to_quality_s": [t * step_seconds(r) if t is not None else None for t, r in zip(base_t, base_recs)],
            "predicted_time_to_quality_s": rows["baseline"].time_to_quality if "baseline" in rows else None,
        },
        "candidates": out_arms,
        "calls": calls,  # every call's machine and --jobs: the runs were made under these
        "mixed_calls": mixed,  # made under more than one machine or --jobs
        "wall_s_this_call": round(time.perf_counter() - t_start, 1),
        "load_average_this_call": [load_before, _load()],
    }
    text = json.dumps(json_safe(record), indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return record


def _load() -> list[float] | None:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def _machine() -> dict:
    info = {"processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "gpu": None}
    try:
        import torch

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return info


if __name__ == "__main__":
    main(sys.argv[1:])
