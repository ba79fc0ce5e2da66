"""Compare two calibrations' budgets (e.g. OPD against RL on one pair): both budgets and their ratio, with intervals.

    cmp = compare_calibrations(load_calibration("calibrations/toy.yaml"), load_calibration("calibrations/toy_rl.yaml"))
    cmp.ratio, cmp.ratio_interval, cmp.method      # B_second / B_first and how its interval was formed

The ratio R = B_b / B_a of two independent calibrations (their runs share no randomness with each other's bootstrap).
Its interval, in order of preference:
- "bootstrap": both artifacts carry their bootstrap draws of the budget (`budget.bootstrap.draws`); every pair
  (draw_b, draw_a) is a draw of R (independent calibrations), and the interval is the
  percentile interval of those ratios at the artifacts' confidence.
- "mover (approximate)": otherwise, MOVER on the log scale (Zou & Donner 2008, "method of variance estimates
  recovery"): with d = log B_b − log B_a and each budget's interval [l, u] read on the log scale,
  lower = d − √((log B_b − log l_b)² + (log u_a − log B_a)²),
  upper = d + √((log u_b − log B_b)² + (log B_a − log l_a)²).
  Exact when each interval is a normal interval on the log scale; otherwise approximate (tested by simulation in
  tests/test_compare.py), and the output says so.
- "bound": when either budget is only a bound (no level reached τ, or even the smallest exceeded it), R is bounded
  by the conservative ends, [l_b / u_a, u_b / l_a], and no point ratio is claimed beyond that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from admitcheck.calibration.schema import CalibrationArtifact
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
    method: str  # "bootstrap" | "mover (approximate)" | "bound"
    notes: tuple[str, ...]


def budget_side(cal: CalibrationArtifact, label: str | None = None) -> BudgetSide:
    """The budget of a calibration artifact (with its bootstrap draws when it carries them)."""
    b = cal.budget
    draws = tuple(cal.budget_draws()) or None
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
    b: float, interval_b: tuple[float, float], a: float, interval_a: tuple[float, float]
) -> tuple[float, float]:
    """MOVER interval for b / a from each estimate's interval (all > 0), formed on the log scale."""
    lb, ub = (math.log(v) for v in interval_b)
    la, ua = (math.log(v) for v in interval_a)
    d = math.log(b) - math.log(a)
    lower = d - math.hypot(math.log(b) - lb, ua - math.log(a))
    upper = d + math.hypot(ub - math.log(b), math.log(a) - la)
    return math.exp(lower), math.exp(upper)


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


def compare_budgets(first: BudgetSide, second: BudgetSide) -> Comparison:
    """Both budgets and R = B_second / B_first with its interval (see the module docstring)."""
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
        return Comparison(first, second, ratio, (lo, hi), confidence, "bound", tuple(notes))
    if first.draws and second.draws:
        interval = bootstrap_ratio_interval(second.draws, first.draws, confidence)
        return Comparison(first, second, ratio, interval, confidence, "bootstrap", tuple(notes))
    if min(*first.interval, *second.interval) <= 0:
        raise CalibrationError("a budget interval reaches 0: no ratio interval on the log scale", field="budget")
    notes.append(
        "no bootstrap draws in the artifacts (budget.bootstrap): the ratio interval is approximate, formed by MOVER "
        "on the log scale from the two budget intervals, taken as independent"
    )
    interval = mover_log_ratio(second.value, second.interval, first.value, first.interval)
    return Comparison(first, second, ratio, interval, confidence, "mover (approximate)", tuple(notes))


def compare_calibrations(cal_a: CalibrationArtifact, cal_b: CalibrationArtifact) -> Comparison:
    """The comparison of two loaded calibrations; refuses two whose mismatch scales differ (metric, protocol)."""
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
    result = compare_budgets(budget_side(cal_a), budget_side(cal_b))
    if cal_a.pair_fingerprint != cal_b.pair_fingerprint:
        extra = "the two calibrations are of different pairs (fingerprints differ)"
        result = Comparison(**{**result.__dict__, "notes": (*result.notes, extra)})
    return result


def level_rows(cal_a: CalibrationArtifact, cal_b: CalibrationArtifact) -> list[dict[str, Any]]:
    """Per level present in both: mean mismatch and mean cost in units of each calibration's τ (cost/τ > 1: over)."""

    def by_level(cal: CalibrationArtifact) -> dict[str, dict[str, float]]:
        out: dict[str, list[Any]] = {}
        for r in cal.runs:
            out.setdefault(r.level, []).append(r)
        tau = cal.tau
        return {
            k: {
                # baseline runs carry no mismatch (None): nan for that row
                "mismatch": float(np.mean([r.mismatch for r in rs if r.mismatch is not None] or [np.nan])),
                "cost_over_tau": float(np.mean([r.quality_cost for r in rs])) / tau,
                "runs": len(rs),
            }
            for k, rs in out.items()
        }

    a, b = by_level(cal_a), by_level(cal_b)
    return [{"level": k, "a": a[k], "b": b[k]} for k in a if k in b]
