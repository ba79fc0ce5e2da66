"""Mismatch during a run: each candidate screened at checkpoints of a calibration-protocol run (start, ¼, ½, end),
and the run-averaged x those checkpoints predict, set against the run-averaged budget (`budget.by_x["run"]`).

    traj = screen_trajectory(cfg, config_file="screen.yaml", out_dir="ckpts")   # fractions (0, .25, .5, 1)
    traj.points[1].step, traj.points[1].candidates["fp8_kv"].k3                # nats/token at step H/4
    traj.run_x["stale_1"].value, traj.run_x["stale_1"].position                # vs the run-averaged budget

The run is the calibration's baseline run (its recipe, base rollout and the baseline's replicate-0 seed), trained
`horizon` steps (default: `protocol.run_window`, the steps the run-averaged x averages; the recipe's `steps` shows
the whole run) with the student saved at each checkpoint (`<out_dir>/step-N`, an HF dir). Every checkpoint screen
measures all `probe.num_prompts` probes (one look: the prediction wants the estimate, not an early decision). A
rollout candidate at checkpoint c is a screen with `checkpoint` θc (the reference and its engine load θc). A
staleness-k candidate at c is the engine holding θc against the reference θc+k of the same run (both saved): what
the run's trainer sees at step c + k (a screen at the start weights instead trains k fresh steps from θ0,
`staleness.stale_reference`); where c + k passes the recipe's last step, c is moved back to it.

How the run-averaged x is predicted: the run's x is the mean over steps t = 0 … H−1 of the engine-vs-trainer k3
token mean of step t (`fit.run_x`); a checkpoint screen gives the same quantity (the verdict's uncapped k3,
a token mean) on the probe prompts at θc. x(t) is taken piecewise linear between the checkpoints and its mean over
the H steps is the prediction (the trapezoid rule: exact when x drifts linearly, and it needs no model of how x
moves). A staleness-k candidate's step t ≥ k is its screen at c = t − k; for t < k the engine still holds θ0 and the
gap grows from 0 (the run records 0 at t = 0): linear from 0 at t = 0 to the step-0 screen at t = k.

Not claimed: an interval on the prediction. Each checkpoint's verdict has its own (against the start budget); the
prediction's error has two parts no simulation here has tested — the probes' sampling noise, and the interpolation
(x bends between checkpoints: staleness decays fast early) plus probe prompts against train prompts.
`bench/screen_during_run.py` compares the prediction with the x_run the calibration's own runs measured.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Literal

import numpy as np

from admitcheck.admission.checkpoint import with_checkpoint
from admitcheck.admission.inputs import read_screen_inputs
from admitcheck.admission.run_x import against_run_budget
from admitcheck.admission.screen import screen
from admitcheck.admission.screen_report import Section
from admitcheck.calibration.levels import replicate_seed
from admitcheck.config import CandidateConfig, ScreenConfig
from admitcheck.errors import CalibrationError, ConfigError

FRACTIONS = (0.0, 0.25, 0.5, 1.0)  # start, ¼, ½, end of the horizon


class CheckpointMeasure(Section):
    """One candidate at one checkpoint (nats/token)."""

    k3: float  # uncapped token mean of k3 over the probes: the run-averaged x's quantity
    mismatch: float  # the calibration's functional (the verdict's scale, against the start budget)
    mismatch_interval: tuple[float, float]
    decision: str  # against the start budget
    probes: int
    seconds: float


class TrajectoryPoint(Section):
    step: int
    weights: str  # the dir measured (the start student, or `<out_dir>/step-N`)
    candidates: dict[str, CheckpointMeasure]


class RunX(Section):
    """A candidate's run-averaged x predicted from its checkpoints, against the run-averaged budget."""

    value: float  # nats/token
    budget: float | None  # B under the run-averaged x; None: the artifact has none (`budget.by_x_missing`)
    budget_interval: tuple[float, float] | None
    position: Literal["below", "within", "above", "no budget", "not finite"]  # against B_run's interval (a point)
    ratio_to_budget: float | None


class Trajectory(Section):
    calibration: str
    horizon: int  # steps the prediction averages (the run window by default)
    run_window: int | None  # the artifact's `protocol.run_window`
    seed: int  # the baseline run's (replicate 0)
    points: list[TrajectoryPoint]
    run_x: dict[str, RunX]
    seconds_training: float
    seconds_screens: float
    rule: str = (
        "x(t) piecewise linear between checkpoints (k3 token mean on the probes), averaged over steps 0..H-1; "
        "staleness k: the screen at c = t - k, linear from 0 for t < k; no interval (module docstring)"
    )


def checkpoint_steps(horizon: int, fractions: tuple[float, ...] = FRACTIONS) -> list[int]:
    """The checkpoint steps round(f · horizon), sorted and unique; 0 and `horizon` must be among them (the
    prediction interpolates between checkpoints, it does not extrapolate)."""
    if horizon < 1:
        raise ConfigError(f"the horizon is {horizon} steps: it must be ≥ 1", field="--horizon")
    if any(not 0.0 <= f <= 1.0 for f in fractions):
        raise ConfigError(f"fractions must lie in [0, 1], got {list(fractions)}", field="fractions")
    steps = sorted({round(f * horizon) for f in fractions})
    if steps[0] != 0 or steps[-1] != horizon:
        raise ConfigError("fractions must include 0 and 1 (the start and the end of the horizon)", field="fractions")
    return steps


def run_average(steps: list[int], values: list[float], horizon: int, staleness: int = 0) -> float:
    """The mean over t = 0 … horizon−1 of x(t), x piecewise linear through (step, value) (module docstring);
    staleness k: x(t) = the value interpolated at t − k for t ≥ k, linear from 0 to the step-0 value for t < k."""
    t = np.arange(horizon, dtype=np.float64)
    at = np.interp(np.maximum(t - staleness, 0.0), steps, values)
    if staleness:
        at = np.where(t < staleness, values[0] * t / staleness, at)
    return float(at.mean())


def save_run_checkpoints(inputs, steps: list[int], out_dir: Path) -> tuple[dict[int, Path], int, float]:
    """The calibration's baseline run trained to max(steps), the student saved at every step in `steps` but 0
    (`<out_dir>/step-N`; step 0 is the pair's student). Returns (step -> dir, the run's seed, seconds)."""
    from admitcheck import io
    from admitcheck.calibration.grpo import train_prompts
    from admitcheck.calibration.opd import cast_parameters, train
    from admitcheck.rollout.engines.hf import HFEngine

    cal, pair = inputs.calibration, inputs.pair
    recipe = cal.recipe
    path = cal.train_prompts()
    cfg = recipe.train_config(str(path))
    ids, task = train_prompts(io.read_prompts(path, field="recipe.prompts"), pair.tokens, cfg, file=str(path))
    last = max(steps)
    if last > cfg.steps:
        raise ConfigError(f"checkpoint step {last} is beyond the recipe's {cfg.steps} steps", field="--horizon")
    seed = replicate_seed(recipe.seed, 0)  # every level's replicate 0, the baseline's included
    device = inputs.config.reference.device
    student = cast_parameters(copy.deepcopy(pair.student("float32", device)), "float32")  # the shared one untouched
    tokens = pair.tokens
    engine = HFEngine(student, recipe.rollout, eos_token_id=tokens.eos_token_id, pad_token_id=tokens.pad_token_id)
    saved: dict[int, Path] = {0: Path(inputs.config.pair.student)}
    out_dir.mkdir(parents=True, exist_ok=True)

    def save(step: int, model) -> None:
        if step in steps and step > 0:
            d = out_dir / f"step-{step}"
            model.save_pretrained(d)
            saved[step] = d

    t0 = time.perf_counter()
    try:
        train(student, pair.teacher("float32", device), engine, ids, cfg, seed=seed, on_step=save, stop_after=last,
              task=task)  # fmt: skip
    finally:
        engine.close()
    return saved, seed, time.perf_counter() - t0


def screen_trajectory(
    config: ScreenConfig,
    *,
    out_dir: str | Path,
    config_file: str | None = None,
    candidates: list[str] | None = None,
    fractions: tuple[float, ...] = FRACTIONS,
    horizon: int | None = None,
) -> Trajectory:
    """Each chosen candidate screened at the checkpoints of a calibration-protocol run, and its run-averaged x
    predicted against the run-averaged budget (module docstring). `horizon`: steps (default the artifact's
    `protocol.run_window`); `out_dir`: where the checkpoints are saved."""
    if config.checkpoint is not None or config.source != "engine":
        field = "checkpoint" if config.checkpoint is not None else "source"
        raise ConfigError(
            "a trajectory screens an engine at the run's own checkpoints: unset checkpoint, and source must be engine",
            file=config_file,
            field=field,
        )
    inputs = read_screen_inputs(config, config_file=config_file, candidates=candidates)
    cal = inputs.calibration
    window = cal.protocol.run_window
    if horizon is None and window is None:
        raise CalibrationError(f"{cal.path} states no protocol.run_window: pass a horizon", field="protocol.run_window")
    horizon = int(horizon if horizon is not None else window)
    steps = checkpoint_steps(horizon, fractions)
    stale = {c.name: c.staleness for c in inputs.chosen if c.staleness is not None}
    total = cal.recipe.steps

    def stale_at(step: int, k: int) -> int:  # the engine's checkpoint: θc+k must exist (the run's last step at most)
        return max(min(step, total - k), 0)

    needed = sorted(
        set(steps) | {s2 for s in steps for k in stale.values() for s2 in (stale_at(s, k), stale_at(s, k) + k)}
    )
    saved, seed, train_s = save_run_checkpoints(inputs, needed, Path(out_dir))

    from admitcheck.rollout.floor import floor_rollout

    base = floor_rollout(cal.recipe.rollout, config.reference)  # the engine of a stale candidate: θc as trained
    t0 = time.perf_counter()
    points = []
    for step in steps:
        cands = [c for c in inputs.chosen if c.staleness is None]
        measured: dict[str, CheckpointMeasure] = {}
        runs = [(cands, saved[step])] if cands else []
        for name, k in stale.items():  # θc in the engine, θc+k the reference: one screen per staleness
            c = stale_at(step, k)
            held = base.model_copy(update={"weights_from": str(saved[c])})
            runs.append(([CandidateConfig(name=name, rollout=held)], saved[c + k]))
        for chosen, at in runs:
            data = config.model_dump() | {"candidates": [c.model_dump() for c in chosen]}
            data["probe"] |= {"min_prompts": config.probe.num_prompts}  # every probe: an estimate, not an early stop
            cfg = ScreenConfig.model_validate(data)
            if at != Path(config.pair.student):
                cfg = with_checkpoint(cfg, at, step)
            report = screen(cfg, config_file=config_file)
            for v in report.verdicts:
                measured[v.name] = CheckpointMeasure(
                    k3=v.k3,
                    mismatch=v.mismatch,
                    mismatch_interval=v.mismatch_interval,
                    decision=v.decision,
                    probes=v.probes,
                    seconds=v.seconds,
                )
        points.append(TrajectoryPoint(step=step, weights=str(saved[step]), candidates=measured))
    run_x = {}
    for c in inputs.chosen:
        value = run_average(steps, [p.candidates[c.name].k3 for p in points], horizon, c.staleness or 0)
        run_x[c.name] = RunX(value=value, **against_run_budget(value, cal.budget.run_averaged))
    return Trajectory(
        calibration=str(cal.path),
        horizon=horizon,
        run_window=window,
        seed=seed,
        points=points,
        run_x=run_x,
        seconds_training=train_s,
        seconds_screens=time.perf_counter() - t0,
    )
