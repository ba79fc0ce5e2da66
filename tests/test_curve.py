"""admitcheck.curve: parameter recovery, budget consistency, degenerate cases, bootstrap."""

from __future__ import annotations

import math

import numpy as np
import pytest

from admitcheck.curve import Budget, CurveFit, bootstrap_budget, budget, default_tolerance, fit_curve

TRUE = {"plateau": 0.5, "x50": 0.05, "steepness": 2.0}  # nats/token, nats/token, dimensionless


def true_cost(x: np.ndarray) -> np.ndarray:
    return TRUE["plateau"] * (x / TRUE["x50"]) ** TRUE["steepness"] / (1 + (x / TRUE["x50"]) ** TRUE["steepness"])


def true_budget(tau: float) -> float:
    return TRUE["x50"] * (tau / (TRUE["plateau"] - tau)) ** (1 / TRUE["steepness"])


def synthetic(noise: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """4 baseline-like seeds at 1e-5, 12 levels over 1e-4…1, plus a second seed at 6 of them (22 runs)."""
    rng = np.random.default_rng(seed)
    levels = np.geomspace(1e-4, 1.0, 12)
    x = np.concatenate([[1e-5] * 4, levels, levels[4:10]])  # (n,) nats/token
    return x, true_cost(x) + noise * rng.normal(size=x.size)


def test_recovers_known_parameters() -> None:
    x, y = synthetic(noise=0.003)
    fit = fit_curve(x, y)
    assert fit.form == "log_logistic"
    for k, want in TRUE.items():
        assert fit.params[k] == pytest.approx(want, rel=0.05), k
    assert fit.residual_std == pytest.approx(0.003, rel=0.5)
    exact = fit_curve(x, true_cost(x))  # noiseless: essentially exact
    for k, want in TRUE.items():
        assert exact.params[k] == pytest.approx(want, rel=1e-5), k


def test_budget_is_consistent_with_predict() -> None:
    x, y = synthetic(noise=0.003)
    fit = fit_curve(x, y)
    for tau in (0.01, 0.05, 0.2):
        b = budget(fit, tau)
        assert b.kind == "point" and not b.extrapolated
        assert fit.predict(b.value) == pytest.approx(tau, rel=1e-9)
        assert b.value == pytest.approx(true_budget(tau), rel=0.1)


def test_fitted_curve_is_monotone_and_flat_at_small_x() -> None:
    rng = np.random.default_rng(3)
    x = np.geomspace(1e-4, 1.0, 15)
    y = np.where(x < 0.01, 0.0, 0.3) + 0.05 * rng.normal(size=x.size)  # noisy, non-monotone points
    fit = fit_curve(x, y)
    grid = np.geomspace(1e-6, 10.0, 500)
    pred = fit.predict(grid)  # (500,)
    assert np.all(np.diff(pred) >= 0)
    assert pred[0] < 1e-3 and pred[-1] > 0.2
    assert isinstance(fit.predict(0.01), float) and fit.predict(0.0) == 0.0


def test_inverse_edges() -> None:
    fit = CurveFit("log_logistic", dict(TRUE), math.nan, (1.0,), (0.0,))
    assert fit.inverse(0.0) == 0.0 and fit.inverse(-1.0) == 0.0
    assert fit.inverse(0.5) == math.inf and fit.inverse(0.7) == math.inf
    assert fit.inverse(0.25) == pytest.approx(TRUE["x50"])  # half the plateau at x50


def test_no_level_above_tolerance_is_a_lower_bound() -> None:
    rng = np.random.default_rng(1)
    x = np.geomspace(1e-4, 1e-2, 8)
    y = 0.002 * rng.normal(size=x.size)  # flat: no level costs anything
    b = bootstrap_budget(x, y, tolerance=0.05)
    assert (b.kind, b.value, b.interval) == ("lower_bound", x.max(), (x.max(), math.inf))


def test_every_level_above_tolerance_is_an_upper_bound() -> None:
    x = np.geomspace(1e-2, 1.0, 6)
    y = 0.2 + 0.1 * np.log10(x / 1e-2)  # even the smallest level costs 0.2 > τ
    b = budget(fit_curve(x, y), tolerance=0.05)
    assert (b.kind, b.value, b.interval) == ("upper_bound", x.min(), (0.0, x.min()))


def test_extrapolated_point_within_ten_times_the_largest_level() -> None:
    x = np.geomspace(1e-4, 0.02, 8)  # the knee is beyond the data, the rise is visible
    y = true_cost(x)
    b = budget(fit_curve(x, y), tolerance=0.1)  # the highest level costs 0.069 < τ
    assert b.kind == "point" and b.extrapolated and x.max() < b.value < 10 * x.max()
    assert b.value == pytest.approx(true_budget(0.1), rel=1e-3)


def test_bootstrap_contains_truth_and_is_deterministic() -> None:
    x, y = synthetic(noise=0.01, seed=2)
    tau = 0.05
    b = bootstrap_budget(x, y, tau, n_boot=200, seed=7)
    assert isinstance(b, Budget) and b.kind == "point" and b.n_boot == 200
    lo, hi = b.interval
    assert lo < b.value < hi
    assert lo <= true_budget(tau) <= hi
    assert bootstrap_budget(x, y, tau, n_boot=200, seed=7) == b
    assert bootstrap_budget(x, y, tau, n_boot=200, seed=8).interval != b.interval


def test_bootstrap_groups_and_weights() -> None:
    x, y = synthetic(noise=0.01, seed=4)
    groups = np.round(np.log10(x), 6)  # the same levels, named differently
    a = bootstrap_budget(x, y, 0.05, n_boot=50, seed=0)
    b = bootstrap_budget(x, y, 0.05, groups=groups, n_boot=50, seed=0)
    assert a == b
    w = np.ones_like(x)
    y_out = y.copy()
    y_out[5] += 5.0  # an outlier with zero weight changes nothing
    w[5] = 0.0
    assert fit_curve(x, y_out, w).params == pytest.approx(fit_curve(np.delete(x, 5), np.delete(y, 5)).params, rel=1e-3)


def test_default_tolerance() -> None:
    q = np.array([1.0, 1.1, 0.9, 1.0])  # baseline qualities, nats/token
    assert default_tolerance(q) == pytest.approx(2 * np.std(q, ddof=1))  # seed noise dominates 5% of 1.0
    assert default_tolerance([1.0, 1.001]) == pytest.approx(0.05 * 1.0005)  # relative tolerance dominates
    assert default_tolerance([2.0]) == pytest.approx(0.1)  # one seed: no std
    with pytest.raises(ValueError):
        default_tolerance([])


def test_fit_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        fit_curve([0.0, 0.1, 0.2], [0.0, 0.1, 0.2])  # x must be > 0
    with pytest.raises(ValueError):
        fit_curve([0.1, 0.1, 0.1], [0.0, 0.1, 0.2])  # one level
    with pytest.raises(ValueError):
        fit_curve([0.1, 0.2], [0.0, 0.1])  # too few points
