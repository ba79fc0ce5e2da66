"""Time-to-quality of OPD runs from their held-out learning curves (docs/plan.md). Pure: numbers in, numbers out.

    base = LearningCurve((0, 50, 100, 200), (2.17, 0.90, 0.50, 0.41))   # steps; quality, nats/token, lower better
    run = LearningCurve((0, 50, 100, 200), (2.17, 1.10, 0.60, 0.42))
    target = base.final + tau                                              # the baseline's final quality + τ
    steps_to_target(run, target)          # 194.4: first step from which the interpolated curve stays ≤ target
    steps_efficiency(run, base, tau)      # T_base / T_run of one replicate pair (0.0 when the run never gets there)
    eff = summarize([1.0, 0.93, 0.97], confidence=0.95)      # Efficiency: mean, Student-t interval over replicates
    interpolate([(1e-3, eff1), (1e-2, eff2)], 3e-3)           # at a mismatch between levels, as the budget curve

The smoothed curve is the linear interpolation between the evaluations (no running minimum, no monotone fit): a run
that dips below the target and rises back above it has not reached it, and a late rise — what too much mismatch
does to a run — must not be pooled away. "Reaches and stays": the first step after the last evaluation above the
target, interpolated between that evaluation and the next. A run whose final evaluation is above the target never
reaches it (None). Each evaluation is already a mean over the eval set's responses with the same eval seeds in every
run; the remaining noise is in the interval over replicates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LearningCurve:
    """Held-out quality (nats/token, lower is better) at the steps it was evaluated, steps strictly increasing."""

    steps: tuple[float, ...]
    quality: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.steps) != len(self.quality) or not self.steps:
            raise ValueError("a learning curve needs steps and quality of the same, nonzero length")
        if any(b <= a for a, b in zip(self.steps, self.steps[1:])):
            raise ValueError(f"learning-curve steps must be strictly increasing, got {self.steps}")
        if not all(math.isfinite(q) for q in self.quality):
            raise ValueError("learning-curve quality must be finite")

    @classmethod
    def from_evals(cls, evals: Sequence[Sequence[float | None]], task_error: bool = False) -> LearningCurve:
        """From a run record's `evals`: [[step, reverse KL, accuracy], ...] (a step evaluated twice keeps its
        last); `task_error`: quality is 1 − accuracy instead (a GRPO calibration's quality, `opd.quality_value`)."""
        if task_error and any(e[2] is None for e in evals):
            raise ValueError("task-error curves need the evaluations' accuracy")
        by_step = {float(e[0]): 1.0 - float(e[2]) if task_error else float(e[1]) for e in evals}
        steps = tuple(sorted(by_step))
        return cls(steps, tuple(by_step[s] for s in steps))

    @property
    def final(self) -> float:
        return self.quality[-1]

    def at(self, step: float | np.ndarray) -> np.ndarray:
        """The smoothed curve (linear between evaluations, flat outside them) at `step`."""
        return np.interp(step, self.steps, self.quality)


def steps_to_target(curve: LearningCurve, target: float) -> float | None:
    """First step from which the interpolated curve stays ≤ `target` to the run's end (fractional: interpolated
    between evaluations); None when the last evaluation is above the target (the run never reaches it)."""
    q, s = curve.quality, curve.steps
    if q[-1] > target:
        return None
    above = [i for i, v in enumerate(q) if v > target]
    if not above:
        return float(s[0])  # already there at the first evaluation
    j = above[-1]  # q[j] > target ≥ q[j + 1]
    return float(s[j] + (q[j] - target) / (q[j] - q[j + 1]) * (s[j + 1] - s[j]))


def steps_efficiency(run: LearningCurve, baseline: LearningCurve, tau: float) -> float:
    """T_baseline / T_run for one replicate pair, target = the baseline's final quality + τ: 1 = as many steps as the
    baseline, 0.5 = twice as many, 0 = the run never reaches the target (its time-to-quality is infinite)."""
    if not tau >= 0:
        raise ValueError(f"τ must be ≥ 0, got {tau}")
    target = baseline.final + tau
    t_base = steps_to_target(baseline, target)
    t_run = steps_to_target(run, target)
    assert t_base is not None  # the baseline ends at target − τ ≤ target
    if t_run is None:
        return 0.0
    if t_run == 0.0:
        return 1.0 if t_base == 0.0 else math.inf
    return t_base / t_run


@dataclass(frozen=True)
class Efficiency:
    """Steps efficiency T_baseline / T_run over replicate pairs: the mean and its Student-t interval (clipped at 0;
    NaN with one replicate), how many pairs, and how many of them reached the target at all."""

    mean: float
    interval: tuple[float, float]
    n: int
    reached: int
    values: tuple[float, ...] = ()  # the pairs' efficiencies (empty for an interpolated one)

    @property
    def steps_ratio(self) -> float:
        """T_run / T_baseline of the mean efficiency (inf when no pair reached the target)."""
        return 1.0 / self.mean if self.mean > 0 else math.inf

    def to_dict(self) -> dict[str, object]:
        return {"mean": self.mean, "interval": list(self.interval), "n": self.n, "reached": self.reached}


def summarize(values: Sequence[float], confidence: float = 0.95) -> Efficiency:
    """Mean efficiency over replicate pairs with a two-sided Student-t interval. The mean of T_base/T_run (not of
    T_run/T_base) is finite when some pairs never reach the target, which then count as 0 rather than ∞."""
    from scipy.stats import t as student_t  # deferred: scipy is slow to import

    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        raise ValueError("no replicate pairs to summarize")
    if not np.all(np.isfinite(v)):
        raise ValueError("efficiencies must be finite")
    mean = float(v.mean())
    if v.size < 2:
        lo = hi = math.nan
    else:
        half = float(student_t.ppf(0.5 + confidence / 2, v.size - 1)) * float(v.std(ddof=1)) / math.sqrt(v.size)
        lo, hi = max(mean - half, 0.0), mean + half
    return Efficiency(mean, (lo, hi), int(v.size), int(np.count_nonzero(v > 0)), tuple(float(e) for e in v))


def pool(levels: Sequence[tuple[float, Efficiency]], confidence: float = 0.95) -> list[tuple[float, Efficiency]]:
    """Levels (x, efficiency) sorted by x with non-increasing efficiency, as the budget curve pools cost
    (`curve.isotonic`): adjacent levels whose means rise with x are pooled (pool-adjacent-violators, weighted by
    pairs) and every level of a block gets the efficiency of all the block's pairs together (mean, interval)."""
    blocks: list[tuple[list[float], list[float]]] = []  # (xs, pair values)
    for x, e in sorted(levels, key=lambda t: t[0]):
        blocks.append(([float(x)], list(e.values)))
        while len(blocks) > 1 and np.mean(blocks[-2][1]) < np.mean(blocks[-1][1]):
            xs2, v2 = blocks.pop()
            xs1, v1 = blocks.pop()
            blocks.append((xs1 + xs2, v1 + v2))
    out = []
    for xs, v in blocks:
        e = summarize(v, confidence)
        out += [(x, e) for x in xs]
    return out


def interpolate(levels: Sequence[tuple[float, Efficiency]], x: float) -> Efficiency:
    """Efficiency at mismatch x (nats/token) from levels (x, efficiency), read the way the budget curve reads cost
    (`curve.MonotoneFit`): linear in log x between the two levels around x (mean and interval ends alike), linear
    in x from the baseline's exact 1 at x = 0 to the smallest level below it, flat above the largest. n and reached
    are the nearer level's. No level: ValueError."""
    pts = sorted((float(lx), e) for lx, e in levels)
    if not pts:
        raise ValueError("no levels to interpolate between")
    if not x > 0:
        return Efficiency(1.0, (1.0, 1.0), pts[0][1].n, pts[0][1].n)
    if x >= pts[-1][0]:
        return pts[-1][1]
    if x <= pts[0][0]:
        x1, e1 = pts[0]
        w = x / x1
        one = Efficiency(1.0, (1.0, 1.0), e1.n, e1.n)
        return _mix(one, e1, w, e1)
    i = next(k for k, (lx, _) in enumerate(pts) if lx >= x)
    (xa, ea), (xb, eb) = pts[i - 1], pts[i]
    w = (math.log(x) - math.log(xa)) / (math.log(xb) - math.log(xa))
    return _mix(ea, eb, w, ea if w < 0.5 else eb)


def _mix(a: Efficiency, b: Efficiency, w: float, near: Efficiency) -> Efficiency:
    """(1 − w)·a + w·b, mean and interval ends alike."""
    lo = (1 - w) * a.interval[0] + w * b.interval[0]
    hi = (1 - w) * a.interval[1] + w * b.interval[1]
    return Efficiency((1 - w) * a.mean + w * b.mean, (lo, hi), near.n, near.reached)


def mean_curve(curves: Sequence[LearningCurve], grid: np.ndarray) -> np.ndarray:
    """The replicates' smoothed curves averaged on a step grid (for plots)."""
    return np.mean([c.at(grid) for c in curves], axis=0)
