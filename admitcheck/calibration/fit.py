"""The fit of a calibration's runs: paired costs, the x chosen, the monotone fit and the budget, as a frozen `Fit`.

    placed = [PlacedRun(level, replicate, ledger.runs[key]), ...]     # each record where it sits
    f = fit_runs(config, levels, placed)
    f.estimate.budget, f.x, f.runs[0].quality_cost                     # the budget; the artifact's run entries

A run's paired cost is its quality minus the baseline's of the same replicate (same seed: common random numbers).
x is the start-weights mismatch or the run-averaged one (`run_x`); with `levels.x: auto` the evidence picks it: the
x under which the non-noise levels (staleness, rollout configs) fall closer to the curve of the noise levels
(`one_scale_score`). The fit itself is `curve.estimate`'s; under the run-averaged x its model budget is the model
refitted on the levels around B̂ (`curve.estimate`'s `local_model`: docs/calibration.md, "The run-averaged
intervals"). Records are never changed: every run's derived values are in its `schema.RunEntry`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from admitcheck.calibration.curve import OFFSET_SHARE, Estimate, LevelData, Tolerance, estimate, fit_levels
from admitcheck.calibration.levels import Level
from admitcheck.calibration.record import RunRecord
from admitcheck.calibration.schema import RUN_X, BudgetUnderX, LackOfFitEntry, RunEntry
from admitcheck.config import CalibrateConfig
from admitcheck.errors import CalibrationError


@dataclass(frozen=True)
class PlacedRun:
    """A ledger record where it sits in a calibration: its level and replicate (seed `levels.replicate_seed`)."""

    level: Level
    replicate: int
    record: RunRecord


@dataclass(frozen=True)
class Fit:
    """What `fit_runs` derives from the finished runs: the estimate under the chosen x, why that x, the budget under
    each x (`budget.by_x`), the baseline's quality per replicate, and every run as the artifact's entry."""

    estimate: Estimate
    x: str  # "start" | "run"
    x_reason: str
    by_x: dict[str, BudgetUnderX]
    by_x_missing: dict[str, str]  # an x with no budget, and why
    baseline: dict[int, float]  # replicate -> baseline quality
    runs: tuple[RunEntry, ...]  # in the order of the placed runs


def run_x(run: RunRecord, which: str, window: int) -> float:
    """A run's mismatch x: "start" (the probe measurement at the start weights, the config's metric) or "run" (the
    mean engine-vs-trainer k3 over the first `window` steps: `levels.run_window`), nats/token; floored at 1e-12 (log
    axis)."""
    if which == "start":
        return max(float(run.mismatch), 1e-12)
    if not run.in_run_k3:
        raise CalibrationError(f"run {run.key} carries no in_run_k3: it has no run-averaged x", field="in_run_k3")
    return max(float(np.mean(run.in_run_k3[:window])), 1e-12)


def run_x_missing(placed: list[PlacedRun], metric: str) -> str | None:
    """Why the runs have no run-averaged x (None: they have one): it is the engine-vs-trainer k3 of every training
    step (`RunRecord.in_run_k3`), which ledgers recorded before it lack; and only a k3 calibration has it."""
    if metric != "k3":
        return f"the run-averaged x is k3 and this calibration's metric is {metric}"
    lacking = [p for p in placed if p.level.kind != "baseline" and not p.record.in_run_k3]
    if lacking:
        return (
            f"{len(lacking)} of the ledger's level runs carry no in_run_k3 (recorded before it; first: "
            f"{lacking[0].level.name}, seed {lacking[0].record.seed}): no run-averaged x, so no run-averaged budget"
        )
    return None


def _lack_of_fit(t) -> LackOfFitEntry | None:
    """A `model.LackOfFit` as the artifact stores it (NaN F, a test without degrees of freedom, as None)."""
    if t is None:
        return None
    return LackOfFitEntry(f=t.f if math.isfinite(t.f) else None, dof=t.dof, p_value=t.p_value)


def budget_under_x(e: Estimate, score: dict[str, Any] | None) -> BudgetUnderX:
    """One x's budget with its interval, how it was made and the model's lack-of-fit verdict (`budget.by_x`)."""
    m = e.model
    return BudgetUnderX(
        value=e.budget.value,
        kind=e.budget.kind,
        interval=e.budget.interval,
        score=score,
        method=e.method,
        method_reason=e.method_reason,
        lack_of_fit=_lack_of_fit(m.lack_of_fit) if m is not None else None,
        lack_of_fit_x_known=_lack_of_fit(m.lack_of_fit_x_known) if m is not None else None,
        accepted=m.accepted if m is not None else None,
    )


def _level_data(
    config, levels: list[Level], placed: list[PlacedRun], costs: list[float], which: str, keep
) -> list[LevelData]:
    by = {lv.name: [(p, c) for p, c in zip(placed, costs) if p.level.name == lv.name] for lv in levels}
    return [
        LevelData(
            lv.name,
            tuple(run_x(p.record, which, config.levels.run_window) for p, _ in by[lv.name]),
            tuple(c for _, c in by[lv.name]),
            tuple(p.replicate for p, _ in by[lv.name]),
        )
        for lv in levels
        if lv.kind != "baseline" and keep(lv)
    ]


@dataclass(frozen=True)
class ScaleScore:
    """`one_scale_score`: how far the non-noise levels fall from the noise levels' curve under one x."""

    mean_z2: float  # mean squared z over the non-noise levels
    z: dict[str, float]  # level name -> (mean paired cost − curve) / its standard error

    def to_dict(self) -> dict[str, Any]:
        return {"mean_z2": self.mean_z2, "z": self.z}


def one_scale_score(config, levels, placed, costs, which: str, tol: Tolerance) -> ScaleScore | None:
    """How far the non-noise levels (staleness, rollout configs; fitted or held out) fall from the curve fitted on
    the noise levels alone, under x = `which`: mean squared z = (mean paired cost − curve) / its standard error."""
    noise = _level_data(config, levels, placed, costs, which, lambda lv: lv.kind == "noise" and lv.fit)
    others = _level_data(config, levels, placed, costs, which, lambda lv: lv.kind != "noise")
    if len(noise) < 2 or not others:
        return None
    tau = tol.of(float(np.mean([p.record.quality for p in placed if p.level.name == "baseline"])))
    fit = fit_levels(
        [np.mean(d.x) for d in noise],
        [np.mean(d.cost) for d in noise],
        [len(d.x) for d in noise],
        OFFSET_SHARE * tau if tau > 0 else 0.0,
    )
    z = {}
    for d in others:
        c = np.asarray(d.cost)
        se = max(float(c.std(ddof=1)) / math.sqrt(c.size) if c.size > 1 else 0.0, 1e-6)
        z[d.name] = (float(c.mean()) - float(fit.predict(float(np.mean(d.x))))) / se
    return ScaleScore(float(np.mean([v * v for v in z.values()])), z)


def fit_runs(config: CalibrateConfig, levels: list[Level], placed: list[PlacedRun], looks: int = 1) -> Fit:
    """Paired costs, τ, x chosen, the monotone fit and the budget with its bootstrap, from the finished runs.

    Every run's entry carries its quality_cost (paired: its quality minus its baseline replicate's), x_start, x_run,
    fit_x and predicted_cost; levels with fit false (held-out checks) are not fitted, only compared. `looks`: the
    rounds whose estimates the design looked at (`curve.estimate`)."""
    base = {p.replicate: p.record.quality for p in placed if p.level.kind == "baseline"}
    costs = [p.record.quality - base[p.replicate] for p in placed]
    tol = Tolerance(config.tolerance.relative, config.tolerance.absolute)
    missing = run_x_missing(placed, config.metric)
    choices = ["start"] if missing else ["start", "run"]
    scores = {w: one_scale_score(config, levels, placed, costs, w, tol) for w in choices}
    if config.levels.x != "auto":
        which, reason = config.levels.x, "set in the config (levels.x)"
        if which == "run" and missing:
            raise CalibrationError(f"levels.x is run, but {missing}: set levels.x start", field="levels.x")
    elif all(scores[w] is not None for w in choices) and len(choices) == 2:
        which = min(choices, key=lambda w: scores[w].mean_z2)
        reason = (
            "the non-noise levels fall closer to the noise curve (mean squared z "
            + ", ".join(f"{w} {scores[w].mean_z2:.3g}" for w in choices)
            + ")"
        )
    else:
        which = "start"
        reason = "no non-noise level to compare sources with: the start-weights x (what screens measure)"

    def under(w: str, data: list) -> Estimate:  # the budget fitted under x = w (the run x's model refitted near B̂)
        return estimate(data, base, tol, n_boot=config.bootstrap, seed=config.seed, confidence=config.confidence,
                        looks=looks, local_model=w == RUN_X)  # fmt: skip

    fitted_levels = _level_data(config, levels, placed, costs, which, lambda lv: lv.fit)
    if not fitted_levels:
        raise CalibrationError("no fitted level: nothing to fit", field="levels")
    est = under(which, fitted_levels)
    alt = {}
    for w in choices:  # the budget under each x, for the report
        e = est if w == which else under(w, _level_data(config, levels, placed, costs, w, lambda lv: lv.fit))
        alt[w] = budget_under_x(e, scores[w].to_dict() if scores[w] is not None else None)
    entries = tuple(_entry(config, p, c, which, est, has_run=not missing) for p, c in zip(placed, costs))
    return Fit(est, which, reason, alt, {"run": missing} if missing else {}, base, entries)


def _entry(config: CalibrateConfig, p: PlacedRun, cost: float, which: str, est: Estimate, has_run: bool) -> RunEntry:
    """A run's artifact entry: its record's kept measurements, its place, and the fit's x and costs."""
    r, lv = p.record, p.level
    if lv.kind == "baseline":  # paired with itself: cost 0 by construction, x not measured
        x_start = x_run = fit_x = None
        predicted = 0.0
    else:
        x_start = run_x(r, "start", config.levels.run_window)
        x_run = run_x(r, "run", config.levels.run_window) if has_run else None
        fit_x = x_start if which == "start" else x_run
        predicted = float(est.curve.predict(fit_x))
    return RunEntry(
        level=lv.name,
        kind=lv.kind,
        replicate=p.replicate,
        in_fit=lv.fit,
        x_start=x_start,
        x_run=x_run,
        fit_x=fit_x,
        quality_cost=cost,
        predicted_cost=predicted,
        **r.measurements(),
    )
