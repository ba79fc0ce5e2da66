"""Quality cost versus mismatch: a monotone "flat, then rising" curve, its budget, and a bootstrap (REFERENCE §3.3).

    fit = fit_curve(k3_per_run, quality_cost_per_run)      # x nats/token (> 0), y nats/token (may be < 0)
    tau = default_tolerance(baseline_qualities)             # nats/token
    b = bootstrap_budget(k3_per_run, quality_cost_per_run, tau, n_boot=500, seed=0)
    b.value, b.kind, b.interval                             # budget B (nats/token), "point" | bounds, 95% CI

The curve is the log-logistic (Hill) form, a sigmoid on the log-x axis with three parameters:

    cost(x) = plateau · expit(steepness · (log x − log x50))  =  plateau · (x/x50)^p / (1 + (x/x50)^p)

It is 0 as x → 0, non-decreasing for plateau ≥ 0 and p > 0, a power law plateau·(x/x50)^p below the knee and
saturating at `plateau` (a run cannot get worse than failing). When the data never saturate, plateau and x50 are
not identified separately but their power-law product is, so predictions and the budget stay stable. Fits are
weighted least squares with bounds: a vectorised grid over (log x50, p) with the plateau profiled out in closed
form picks the start, then `scipy.optimize.least_squares` refines the best two grid points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from scipy.optimize import least_squares
from scipy.special import expit, logit

_P_BOUNDS = (0.25, 10.0)  # steepness: a factor 10 in x multiplies the low-x cost by 10^0.25 … 10^10
_P_GRID = np.geomspace(0.3, 8.0, 12)  # start grid for the steepness
_U0_GRID_SIZE = 80  # start grid points for log x50 over its bounds
_EXTRAPOLATE = 10.0  # a budget may sit at most this factor above the largest observed mismatch


@dataclass(frozen=True)
class CurveFit:
    """A fitted quality-cost curve; x and y are the points it was fitted to (mismatch, cost; nats/token)."""

    form: str  # "log_logistic"
    params: dict[str, float]  # plateau (nats/token), x50 (nats/token), steepness (dimensionless)
    residual_std: float  # nats/token, weighted RMS residual with n − 3 degrees of freedom (nan when n ≤ 3)
    x: tuple[float, ...]
    y: tuple[float, ...]

    def predict(self, x: Any) -> Any:
        """Fitted cost at mismatch x (scalar or array, nats/token); 0 at x = 0."""
        c, x50, p = self.params["plateau"], self.params["x50"], self.params["steepness"]
        xa = np.asarray(x, dtype=np.float64)
        with np.errstate(divide="ignore"):
            out = c * expit(p * (np.log(xa) - math.log(x50)))
        return float(out) if out.ndim == 0 else out

    def inverse(self, cost: float) -> float:
        """Mismatch where the fitted cost reaches `cost`: 0 for cost ≤ 0, inf when cost ≥ plateau (never reached)."""
        c, x50, p = self.params["plateau"], self.params["x50"], self.params["steepness"]
        if cost <= 0:
            return 0.0
        if cost >= c:
            return math.inf
        return math.exp(math.log(x50) + float(logit(cost / c)) / p)


@dataclass(frozen=True)
class Budget:
    """Mismatch budget B (nats/token): where the fitted cost reaches the tolerance.

    kind "point": B is the crossing; "lower_bound": no level reached τ and the fit does not within 10× the largest
    level, so B ≥ value (the largest level); "upper_bound": even the smallest level costs more than τ, so B ≤ value.
    """

    value: float
    kind: Literal["point", "lower_bound", "upper_bound"]
    interval: tuple[float, float]  # bootstrap CI for a point; (value, inf) or (0, value) for bounds
    tolerance: float  # τ, nats/token
    extrapolated: bool = False  # the point lies above the largest observed level
    n_boot: int = 0


def _model(theta: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """θ = (plateau, log x50, p), u = log x (n,) -> cost (n,) and its Jacobian (n, 3)."""
    c, u0, p = theta
    s = expit(p * (u - u0))  # (n,)
    ds = s * (1.0 - s)  # (n,)
    return c * s, np.stack([s, -c * p * ds, c * (u - u0) * ds], axis=1)


def fit_curve(x: Any, y: Any, weights: Any = None) -> CurveFit:
    """Least-squares fit of the log-logistic curve to (mismatch x > 0, quality cost y); weights ∝ 1/variance."""
    xa = np.asarray(x, dtype=np.float64).ravel()  # (n,)
    ya = np.asarray(y, dtype=np.float64).ravel()  # (n,)
    w = np.ones_like(xa) if weights is None else np.asarray(weights, dtype=np.float64).ravel()  # (n,)
    if xa.shape != ya.shape or xa.shape != w.shape:
        raise ValueError("x, y and weights must have the same length")
    if not (np.all(xa > 0) and np.all(np.isfinite(xa)) and np.all(np.isfinite(ya))):
        raise ValueError("x must be finite and > 0, y finite")
    if xa.size < 3 or np.unique(xa).size < 2:
        raise ValueError("a curve needs at least 3 points at 2 or more distinct mismatch levels")
    u = np.log(xa)  # (n,)
    sw = np.sqrt(w)  # (n,)
    c_max = max(100.0 * float(np.max(np.abs(ya))), 1e-12)
    lower = np.array([0.0, u.min() - 3.0, _P_BOUNDS[0]])
    upper = np.array([c_max, u.max() + 8.0, _P_BOUNDS[1]])

    # Grid over (log x50, p) with the plateau profiled out: c* = Σ w y s / Σ w s², clipped to its bounds.
    u0_grid = np.linspace(lower[1], upper[1], _U0_GRID_SIZE)  # (G,)
    s = expit(_P_GRID[None, :, None] * (u[None, None, :] - u0_grid[:, None, None]))  # (G, P, n)
    c_star = np.clip((s * w * ya).sum(-1) / np.maximum((s * s * w).sum(-1), 1e-300), 0.0, c_max)  # (G, P)
    sse = ((c_star[..., None] * s - ya) ** 2 * w).sum(-1)  # (G, P)
    best = []
    starts = [np.unravel_index(flat, sse.shape) for flat in np.argsort(sse, axis=None)[:2]]
    if abs(starts[0][0] - starts[1][0]) <= 1 and abs(starts[0][1] - starts[1][1]) <= 1:
        starts = starts[:1]  # neighbouring grid cells: the same basin, one refinement is enough
    for g, q in starts:
        theta0 = np.clip([c_star[g, q], u0_grid[g], _P_GRID[q]], lower, upper)
        res = least_squares(
            lambda th: sw * (_model(th, u)[0] - ya),
            theta0,
            jac=lambda th: sw[:, None] * _model(th, u)[1],
            bounds=(lower, upper),
            x_scale=np.array([max(c_max / 100.0, 1e-12), 1.0, 1.0]),
            max_nfev=200,
        )
        best.append((float(np.sum(res.fun**2)), res.x))
    sse_best, (c, u0, p) = min(best, key=lambda b: b[0])
    dof = xa.size - 3
    return CurveFit(
        form="log_logistic",
        params={"plateau": float(c), "x50": float(math.exp(u0)), "steepness": float(p)},
        residual_std=math.sqrt(sse_best / dof) if dof > 0 else math.nan,
        x=tuple(float(v) for v in xa),
        y=tuple(float(v) for v in ya),
    )


def _levels(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct mismatch levels (ascending) and the mean cost at each."""
    levels, inv = np.unique(x, return_inverse=True)
    return levels, np.bincount(inv, weights=y) / np.bincount(inv)


def budget(fit: CurveFit, tolerance: float) -> Budget:
    """Where the fitted cost reaches τ, with the degenerate cases as explicit bounds (see `Budget`)."""
    if not tolerance > 0:
        raise ValueError(f"tolerance must be > 0 nats/token, got {tolerance}")
    levels, cost = _levels(np.asarray(fit.x), np.asarray(fit.y))
    if cost[0] > tolerance:
        return Budget(float(levels[0]), "upper_bound", (0.0, float(levels[0])), tolerance)
    b = fit.inverse(tolerance)
    if cost.max() < tolerance and not b <= _EXTRAPOLATE * levels[-1]:
        return Budget(float(levels[-1]), "lower_bound", (float(levels[-1]), math.inf), tolerance)
    if not math.isfinite(b):  # a level reached τ but the fit does not: the data bound B from below only
        below = float(levels[: int(np.argmax(cost > tolerance))][-1])
        return Budget(below, "lower_bound", (below, math.inf), tolerance)
    return Budget(b, "point", (b, b), tolerance, extrapolated=bool(b > levels[-1]))


def _order_stat_interval(values: np.ndarray, confidence: float) -> tuple[float, float]:
    """Percentile interval by order statistics (inf-safe: no interpolation between an inf and a number)."""
    v = np.sort(values)
    alpha = 1.0 - confidence
    lo = v[math.floor(alpha / 2 * (v.size - 1))]
    hi = v[math.ceil((1 - alpha / 2) * (v.size - 1))]
    return float(lo), float(hi)


def bootstrap_budget(
    x: Any,
    y: Any,
    tolerance: float,
    groups: Any = None,
    n_boot: int = 500,
    seed: int = 0,
    confidence: float = 0.95,
    weights: Any = None,
) -> Budget:
    """Budget with a percentile bootstrap interval over runs, stratified by level (deterministic given seed).

    Each level (`groups`, default: distinct x) keeps its number of runs: a level with several runs (seeds) is
    resampled with replacement; a level with one run gets its fitted cost plus a residual drawn from the fit's
    pooled residuals (inflated by √(n/(n−3))), since resampling a single run would give it no spread at all.
    """
    xa = np.asarray(x, dtype=np.float64).ravel()  # (n,)
    ya = np.asarray(y, dtype=np.float64).ravel()  # (n,)
    wa = np.ones_like(xa) if weights is None else np.asarray(weights, dtype=np.float64).ravel()  # (n,)
    fit = fit_curve(xa, ya, wa)
    point = budget(fit, tolerance)
    if point.kind != "point" or n_boot <= 0:
        return point
    fitted = fit.predict(xa)  # (n,)
    resid = ya - fitted  # (n,)
    resid = (resid - resid.mean()) * (math.sqrt(xa.size / (xa.size - 3)) if xa.size > 3 else 1.0)
    _, group_ids = np.unique(xa if groups is None else np.asarray(groups), return_inverse=True)
    members = [np.flatnonzero(group_ids == g) for g in range(group_ids.max() + 1)]
    rng = np.random.default_rng(seed)
    boots = np.empty(n_boot)  # (n_boot,) nats/token
    for i in range(n_boot):
        idx = np.concatenate([rng.choice(m, size=m.size) if m.size > 1 else m for m in members])  # (n,)
        single = np.concatenate([np.full(m.size, m.size == 1) for m in members])  # (n,)
        yb = np.where(single, fitted[idx] + rng.choice(resid, size=idx.size), ya[idx])  # (n,)
        boots[i] = fit_curve(xa[idx], yb, wa[idx]).inverse(tolerance)
    return Budget(
        point.value,
        "point",
        _order_stat_interval(boots, confidence),
        tolerance,
        extrapolated=point.extrapolated,
        n_boot=n_boot,
    )


def default_tolerance(baseline_qualities: Any, relative: float = 0.05, seed_std_multiple: float = 2.0) -> float:
    """τ = max(relative · |mean baseline quality|, multiple · baseline seed std (ddof 1; 0 with one seed))."""
    q = np.asarray(baseline_qualities, dtype=np.float64).ravel()  # (seeds,) nats/token
    if q.size == 0:
        raise ValueError("default_tolerance needs at least one baseline quality")
    std = float(q.std(ddof=1)) if q.size > 1 else 0.0
    return max(relative * abs(float(q.mean())), seed_std_multiple * std)
