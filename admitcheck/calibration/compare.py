"""Compare two calibrations' budgets (e.g. OPD against RL on one pair): both budgets and their ratio, with intervals.

    cal_a, cal_b = load_calibration("calibrations/toy.yaml"), load_calibration("calibrations/toy_rl.yaml")
    cmp = compare_calibrations(cal_a, cal_b, load_seed_runs(cal_a), load_seed_runs(cal_b))  # shared_seeds's
    cmp.ratio, cmp.ratio_interval, cmp.method      # B_second / B_first and how its interval was formed
    cmp.correlation.r, cmp.tau_convention          # the shared seeds' correlation of the two log budgets; τ's rule

The ratio R = B_b / B_a, each budget at **its own calibration's τ** (its tolerance rule applied to its own baseline:
with the relative rule both are "the mismatch at which quality falls by the same share of its baseline", in each
objective's own quality units; `tau_convention` says which rules were compared). Its interval, in order of preference
(docs/compare.md says why, bench/compare_coverage.py checks it by simulation):

- "shared seeds (paired)": both ledgers lie beside their artifacts and the calibrations share ≥ MIN_SHARED_SEEDS
  training seeds, whose runs share data order, sampling uniforms, eval prompts, the noise draw and the measured x in
  both: the two budget estimates are correlated, Var(log B̂_b − log B̂_a) = Var_b + Var_a − 2 Cov. MOVER on the log
  scale for correlated estimates (Zou & Donner 2008; Zou 2008), from each budget's own interval [l, u] (the model's
  F-profile or the shape-free bracket: the intervals whose coverage the budget bench checks): with d = log B_b −
  log B_a, Δl = log B − log l, Δu = log u − log B,
  lower = d − √(Δl_b² + Δu_a² − 2r·Δl_b·Δu_a),  upper = d + √(Δu_b² + Δl_a² − 2r·Δu_b·Δl_a),
  r the delete-one-seed jackknife correlation of the two log estimates (`shared_seeds.seed_correlation`), shrunk to
  its one-sided R_CONFIDENCE Fisher-z bound (at most to 0) so that an r̂ inflated by chance buys no width.
- "independent (MOVER)": otherwise (a ledger absent, too few shared seeds, the jackknife undefined): r = 0, and a
  note says why.
- "bootstrap": artifacts written before the seed-effect model (`budget.method` unset), whose interval was the
  isotonic bootstrap: every pair (draw_b, draw_a) is a draw of R (independent calibrations).
- "bound": when either budget is only a bound (no level reached τ, or even the smallest exceeded it), R is bounded
  by the conservative ends, [l_b / u_a, u_b / l_a], and no point ratio is claimed beyond that.

An end of a budget interval at 0 or ∞ (open: the model would extrapolate, or the bracket found no level surely
below/above τ) makes the ratio's end on that side open too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from admitcheck.calibration.schema import CalibrationArtifact
from admitcheck.calibration.shared_seeds import (
    MIN_SHARED_SEEDS,
    R_CONFIDENCE,
    SeedCorrelation,
    SeedRuns,
    seed_correlation,
)
from admitcheck.errors import CalibrationError


@dataclass(frozen=True)
class BudgetSide:
    """One calibration's budget as the comparison uses it."""

    label: str  # the artifact's path or name
    objective: str  # recipe.loss
    value: float  # nats/token
    kind: str  # point | lower_bound | upper_bound
    interval: tuple[float, float]
    confidence: float
    tolerance: float  # τ, in that calibration's quality units
    draws: tuple[float, ...] | None  # bootstrap draws of B, when the artifact carries them


@dataclass(frozen=True)
class Comparison:
    first: BudgetSide
    second: BudgetSide
    ratio: float  # B_second / B_first (for "bound": the ratio of the two reported values, not an estimate)
    ratio_interval: tuple[float, float]
    confidence: float
    method: str  # "shared seeds (paired)" | "independent (MOVER)" | "bootstrap" | "bound"
    notes: tuple[str, ...]
    tau_convention: str = ""  # which τ each budget is read at (module docstring)
    correlation: SeedCorrelation | None = None  # the shared seeds' jackknife, when the ledgers gave it
    independent_interval: tuple[float, float] | None = None  # the interval as if independent (r = 0), beside it


def budget_side(cal: CalibrationArtifact, label: str | None = None) -> BudgetSide:
    """The budget of a calibration artifact (with its bootstrap draws when it carries them)."""
    b = cal.budget
    # the isotonic bootstrap's draws were the interval only before the seed-effect model (budget.method unset); with
    # the model or the bracket they are of another estimator than the budget, and the ratio does not read them
    draws = (tuple(cal.budget_draws()) or None) if b.method is None else None
    return BudgetSide(
        label=label or str(cal.path or cal.name),
        objective=cal.recipe.loss,
        value=b.value,
        kind=b.kind,
        interval=(b.interval[0], b.interval[1]),
        confidence=b.confidence,
        tolerance=cal.tau,
        draws=draws,
    )


def mover_log_ratio(
    b: float, interval_b: tuple[float, float], a: float, interval_a: tuple[float, float], r: float = 0.0
) -> tuple[float, float]:
    """MOVER interval for b / a from each estimate's interval, formed on the log scale; `r`: the correlation of the
    two log estimates (Zou 2008; 0: independent). An interval end at 0 or ∞ makes the ratio's end on that side open."""

    def half(point: float, end: float) -> float:  # |log end − log point|, inf for an open end
        return abs(math.log(end) - math.log(point)) if 0 < end < math.inf else math.inf

    d = math.log(b) - math.log(a)
    lb, ub, la, ua = half(b, interval_b[0]), half(b, interval_b[1]), half(a, interval_a[0]), half(a, interval_a[1])

    def spread(u: float, v: float) -> float:
        return math.inf if math.isinf(u) or math.isinf(v) else math.sqrt(max(u * u + v * v - 2 * r * u * v, 0.0))

    lower, upper = spread(lb, ua), spread(ub, la)
    return (
        math.exp(d - lower) if math.isfinite(lower) else 0.0,
        math.exp(d + upper) if math.isfinite(upper) else math.inf,
    )


def bootstrap_ratio_interval(draws_b: Any, draws_a: Any, confidence: float) -> tuple[float, float]:
    """Percentile interval of draw_b / draw_a over all pairs of draws of two independent bootstraps."""
    db = np.asarray(draws_b, dtype=np.float64)  # (nb,)
    da = np.asarray(draws_a, dtype=np.float64)  # (na,)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = (db[:, None] / da[None, :]).ravel()  # (nb·na,)
    ratios = ratios[~np.isnan(ratios)]
    alpha = 1.0 - confidence
    lo, hi = np.quantile(ratios, [alpha / 2, 1 - alpha / 2], method="inverted_cdf")
    return float(lo), float(hi)


def compare_budgets(
    first: BudgetSide, second: BudgetSide, correlation: SeedCorrelation | None = None, why_independent: str = ""
) -> Comparison:
    """Both budgets and R = B_second / B_first with its interval (see the module docstring): paired through
    `correlation` when given, else as independent calibrations (`why_independent`: the note saying why)."""
    notes = []
    confidence = min(first.confidence, second.confidence)
    if first.confidence != second.confidence:
        notes.append(
            f"the intervals have different confidence ({first.confidence:g}, {second.confidence:g}): "
            f"the ratio's is at most {confidence:g}"
        )
    ratio = second.value / first.value
    if first.kind != "point" or second.kind != "point":
        lo = second.interval[0] / first.interval[1] if first.interval[1] > 0 else 0.0
        hi = second.interval[1] / first.interval[0] if first.interval[0] > 0 else math.inf
        notes.append("a budget is only a bound, so the ratio is only bounded: [low_b / high_a, high_b / low_a]")
        return Comparison(first, second, ratio, (lo, hi), confidence, "bound", tuple(notes), correlation=correlation)
    independent = mover_log_ratio(second.value, second.interval, first.value, first.interval)
    if correlation is not None:
        c = correlation
        interval = mover_log_ratio(second.value, second.interval, first.value, first.interval, c.r_used)
        notes.append(
            f"{c.shared_seeds} shared training seeds ({c.seeds} in all): the two log budgets' delete-one-seed "
            f"jackknife correlation is r = {c.r:.2f} (used: {c.r_used:.2f}, its one-sided "
            f"{100 * R_CONFIDENCE:.0f}% lower Fisher-z bound, shrunk at most to 0); as if independent the interval "
            f"would be [{independent[0]:.3g}, {independent[1]:.3g}]"
        )
        return Comparison(first, second, ratio, interval, confidence, "shared seeds (paired)", tuple(notes),
                          correlation=c, independent_interval=independent)  # fmt: skip
    if first.draws and second.draws:
        interval = bootstrap_ratio_interval(second.draws, first.draws, confidence)
        notes.append("artifacts from before the seed-effect model: the ratio's interval is their isotonic bootstraps'")
        return Comparison(first, second, ratio, interval, confidence, "bootstrap", tuple(notes))
    notes.append(
        "the ratio interval takes the two calibrations as independent (MOVER on the log scale from the two budget "
        f"intervals){': ' + why_independent if why_independent else ''}"
    )
    return Comparison(first, second, ratio, independent, confidence, "independent (MOVER)", tuple(notes),
                      independent_interval=independent)  # fmt: skip


def tau_convention(cal_a: CalibrationArtifact, cal_b: CalibrationArtifact) -> str:
    """Which τ each budget is read at: always its own calibration's (its rule on its own baseline); said in words."""
    ta, tb = cal_a.tolerance, cal_b.tolerance
    units = (cal_a.quality.definition or "?", cal_b.quality.definition or "?")
    if ta.relative is not None and ta.absolute is None and ta.relative == tb.relative and tb.absolute is None:
        return (
            f"each budget at its own τ = {ta.relative:g} × its own baseline quality ({cal_a.tau:.3g} and "
            f"{cal_b.tau:.3g}, in each calibration's quality units): the ratio compares the mismatch each tolerates "
            "for the same relative quality loss"
        )
    return (
        f"each budget at its own τ ({ta.rule or ta.value!s}; {tb.rule or tb.value!s}; quality: {units[0]}; "
        f"{units[1]}): the τ rules differ, so the ratio compares budgets at different quality goals"
    )


OBJECTIVE_FIELDS = ("loss", "grpo")  # the recipe's objective and its own settings: what a comparison is meant to vary


def recipe_differences(cal_a: CalibrationArtifact, cal_b: CalibrationArtifact) -> list[str]:
    """The training-recipe fields two calibrations set differently, other than the objective (`OBJECTIVE_FIELDS`):
    one "field a vs b" each (a file by its name, a nested setting by its name alone). A budget is the recipe's, not
    the loss's: OPD at one learning rate against GRPO at another compares two recipes (docs/compare.md)."""
    da, db = cal_a.recipe.model_dump(), cal_b.recipe.model_dump()

    def shown(v: Any) -> str:
        return Path(v).name if isinstance(v, str) and "/" in v else f"{v:g}" if isinstance(v, float) else str(v)

    out = []
    for key in sorted(set(da) | set(db)):
        if key in OBJECTIVE_FIELDS or da.get(key) == db.get(key):
            continue
        a, b = da.get(key), db.get(key)
        if isinstance(a, dict) or isinstance(b, dict):
            out.append(key)
        else:  # two paths to files of one name (artifacts in other folders) are shown whole
            out.append(f"{key} {shown(a)} vs {shown(b)}" if shown(a) != shown(b) else f"{key} {a} vs {b}")
    return out


def compare_calibrations(
    cal_a: CalibrationArtifact,
    cal_b: CalibrationArtifact,
    runs_a: SeedRuns | str | None = None,
    runs_b: SeedRuns | str | None = None,
) -> Comparison:
    """The comparison of two loaded calibrations; refuses two whose mismatch scales differ (metric, protocol).
    `runs_a`, `runs_b` (`shared_seeds.load_seed_runs`: the runs, or why not): with both, the shared-seed interval."""
    if cal_a.metric != cal_b.metric:
        raise CalibrationError(
            f"the calibrations measure different metrics ({cal_a.metric}, {cal_b.metric}): their budgets are on "
            "different scales",
            file=str(cal_b.path),
            field="metric",
        )
    pa, pb = cal_a.protocol.flat(), cal_b.protocol.flat()
    for key in sorted(set(pa) | set(pb)):
        if pa.get(key) != pb.get(key):
            raise CalibrationError(
                f"the calibrations measure mismatch differently ({key}: {pa.get(key)!r} vs {pb.get(key)!r}): "
                "their budgets are not on one scale",
                file=str(cal_b.path),
                field=key,
            )
    correlation, why = None, ""
    if runs_a is None or runs_b is None:
        why = "no ledgers were read"
    elif isinstance(runs_a, str) or isinstance(runs_b, str):
        why = "; ".join(v for v in (runs_a, runs_b) if isinstance(v, str))
    elif len(runs_a.seeds & runs_b.seeds) < MIN_SHARED_SEEDS:
        why = f"{len(runs_a.seeds & runs_b.seeds)} shared training seeds (fewer than {MIN_SHARED_SEEDS})"
    else:
        try:
            correlation = seed_correlation(runs_a, runs_b)
        except ValueError as e:
            why = str(e)
    result = compare_budgets(budget_side(cal_a), budget_side(cal_b), correlation, why)
    extra = []
    if correlation is not None:
        for cal, v in zip((cal_a, cal_b), correlation.points):
            if abs(math.log(v / cal.budget.value)) > 0.01:
                extra.append(f"{cal.path or cal.name}: its ledger refits to B = {v:.3g}, the artifact says "
                             f"{cal.budget.value:.3g} (re-fit it: bench/refit_shipped.py)")  # fmt: skip
    if cal_a.pair_fingerprint != cal_b.pair_fingerprint:
        extra.append("the two calibrations are of different pairs (fingerprints differ)")
    differ = recipe_differences(cal_a, cal_b)
    if differ:
        extra.append(f"the recipes differ beyond the objective ({'; '.join(differ)}): the ratio compares the two "
                     "recipes, not the two objectives alone")  # fmt: skip
    return Comparison(
        **{**result.__dict__, "notes": (*result.notes, *extra), "tau_convention": tau_convention(cal_a, cal_b)}
    )


@dataclass(frozen=True)
class LevelMeans:
    """One calibration's runs of one level: means over its runs."""

    mismatch: float  # nats/token; nan for the baseline (its runs carry none)
    cost_over_tau: float  # mean quality cost in units of the calibration's τ (> 1: over)
    runs: int


@dataclass(frozen=True)
class LevelRow:
    """A level both calibrations ran, side by side (`compare --json`'s `levels`: `asdict`)."""

    level: str
    a: LevelMeans
    b: LevelMeans


def level_rows(cal_a: CalibrationArtifact, cal_b: CalibrationArtifact) -> list[LevelRow]:
    """Per level present in both: mean mismatch and mean cost in units of each calibration's τ (cost/τ > 1: over)."""

    def by_level(cal: CalibrationArtifact) -> dict[str, LevelMeans]:
        out: dict[str, list[Any]] = {}
        for r in cal.runs:
            out.setdefault(r.level, []).append(r)
        tau = cal.tau
        return {
            k: LevelMeans(
                # baseline runs carry no mismatch (None): nan for that row
                mismatch=float(np.mean([r.mismatch for r in rs if r.mismatch is not None] or [np.nan])),
                cost_over_tau=float(np.mean([r.quality_cost for r in rs])) / tau,
                runs=len(rs),
            )
            for k, rs in out.items()
        }

    a, b = by_level(cal_a), by_level(cal_b)
    return [LevelRow(k, a[k], b[k]) for k in a if k in b]
