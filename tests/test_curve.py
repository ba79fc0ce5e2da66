"""admitcheck.calibration.curve: the isotonic fit, τ from the quality goal, budget kinds, the shape-free bracket and the
gate between it and the model (the model itself: tests/test_budget_model.py; where the next runs go and the
protocol's coverage: tests/test_design.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from admitcheck.calibration.curve import (
    LevelData,
    MonotoneFit,
    Tolerance,
    budget_of,
    estimate,
    fit_levels,
    isotonic,
)

XS = np.geomspace(1e-3, 0.1, 5)  # level mismatches, nats/token (the toy protocol's grid)


def levels_from(costs: list[list[float]], xs=XS) -> list[LevelData]:
    return [LevelData(f"noise-{i + 1}", (float(x),) * len(c), tuple(c)) for i, (x, c) in enumerate(zip(xs, costs))]


def test_isotonic_pools_adjacent_violators() -> None:
    assert isotonic([1.0, 3.0, 2.0, 4.0], [1, 1, 1, 1]).tolist() == [1.0, 2.5, 2.5, 4.0]
    assert isotonic([3.0, 1.0], [1, 3]).tolist() == [1.5, 1.5]  # weighted by replicates
    y = np.random.default_rng(0).normal(size=50)
    assert np.all(np.diff(isotonic(y, np.ones(50))) >= 0)


def test_curve_is_monotone_linear_in_log_x_and_inverts() -> None:
    fit = fit_levels(XS, 0.01 * np.log(XS / 1e-4), [2] * 5)  # cost linear in log x: exact between the points
    grid = np.geomspace(1e-5, 1, 300)
    pred = fit.predict(grid)
    assert np.all(np.diff(pred) >= 0) and fit.predict(0.0) == 0.0
    inside = grid[(grid >= XS[0]) & (grid <= XS[-1])]
    np.testing.assert_allclose(fit.predict(inside), 0.01 * np.log(inside / 1e-4), rtol=1e-12)
    for c in (0.001, 0.03, 0.06):
        assert fit.predict(fit.inverse(c)) == pytest.approx(c, rel=1e-12)
    assert math.isinf(fit.inverse(1.0))  # flat above the largest level: never reaches it


def test_budget_moves_continuously_when_a_fitted_cost_crosses_zero() -> None:
    """The review's case (issue #21, point 1): with a power law between positive points and a line otherwise,
    B was 0.0110 at a = 0 and 0.0276 at a = 1e-9. One rule for every sign: B is continuous in a."""
    xs = (0.001, 0.005, 0.03, 0.21)
    tau = 0.0211
    budgets = [budget_of(MonotoneFit(xs, (-0.003, a, 0.048, 0.158)), tau)[0] for a in (-1e-9, 0.0, 1e-9, 1e-6)]
    assert max(budgets) / min(budgets) < 1.0001
    b = np.array(
        [budget_of(MonotoneFit(xs, (-0.003, a, 0.048, 0.158)), tau)[0] for a in np.linspace(-0.003, 0.02, 200)]
    )
    assert np.all(np.abs(np.diff(np.log(b))) < 0.05)  # no jumps along a


def test_budget_kinds() -> None:
    tau = 0.05
    value, kind, idx = budget_of(MonotoneFit(tuple(XS), (0.0, 0.01, 0.04, 0.2, 0.5)), tau)
    assert kind == "point" and idx == (2, 3) and XS[2] < value < XS[3]
    assert budget_of(MonotoneFit(tuple(XS), (0.0, 0.0, 0.01, 0.02, 0.03)), tau)[1] == "lower_bound"
    value, kind, _ = budget_of(MonotoneFit(tuple(XS), (0.1, 0.2, 0.3, 0.4, 0.5)), tau)
    assert kind == "upper_bound" and value == XS[0]  # below the smallest level


def test_one_noisy_small_level_cannot_collapse_the_budget() -> None:
    """The seed-0 failure of schema 1: the smallest level cost +0.031 > τ once, the next two −0.012 and +0.014.
    Pooled with its neighbours it no longer sets B ("below the smallest level" needs the pooled evidence)."""
    est = estimate(levels_from([[0.031, 0.029], [-0.012, -0.010], [0.014, 0.012], [0.06, 0.07], [0.3, 0.32]]),
                   [0.43, 0.44], Tolerance(relative=0.0627), n_boot=200)  # fmt: skip
    value, kind = est.isotonic
    assert kind == "point" and value > XS[2]
    assert est.budget.interval[0] <= est.budget.value <= est.budget.interval[1]


def test_tau_is_the_quality_goal_not_the_noise() -> None:
    quiet = estimate(levels_from([[0.0, 0.0], [0.01, 0.01], [0.03, 0.03], [0.1, 0.1], [0.3, 0.3]]), [1.0, 1.0],
                     Tolerance(relative=0.05), n_boot=100)  # fmt: skip
    noisy = estimate(levels_from([[0.0, 0.0], [0.01, 0.01], [0.03, 0.03], [0.1, 0.1], [0.3, 0.3]]), [0.8, 1.2],
                     Tolerance(relative=0.05), n_boot=100)  # fmt: skip
    assert quiet.tau == noisy.tau == pytest.approx(0.05)  # same baseline mean: same τ, whatever its spread
    assert np.std(noisy.draws) > np.std(quiet.draws)  # the spread goes into the isotonic bootstrap (τ resampled)
    assert estimate(levels_from([[0.0] * 2] * 5), [1.0, 2.0], Tolerance(absolute=0.02), n_boot=50).tau == 0.02


def test_bootstrap_is_deterministic_and_stores_its_draws() -> None:
    lv = levels_from([[0.0, 0.002], [0.01, 0.02], [0.03, 0.05], [0.1, 0.14], [0.3, 0.35]])
    a = estimate(lv, [0.43, 0.45], Tolerance(), n_boot=200, seed=7)
    assert a == estimate(lv, [0.43, 0.45], Tolerance(), n_boot=200, seed=7)
    assert estimate(lv, [0.43, 0.45], Tolerance(), n_boot=200, seed=8).draws != a.draws
    assert len(a.draws) == 200 and a.budget.interval[0] <= a.budget.value <= a.budget.interval[1]
    assert estimate(lv, [0.43, 0.45], Tolerance(), n_boot=0).draws == ()  # the draws are a diagnostic: optional


def test_a_step_is_refused_by_the_model_and_gets_the_shape_free_bracket() -> None:
    """A step between two levels, nearly without noise: no power law fits it (the lack-of-fit gate refuses the
    model), and the budget's interval is the bracket (the last level of the walk up that is surely below τ, the last
    of the walk down that is surely above)."""
    est = estimate(levels_from([[0.0, 0.0005], [0.0, 0.0005], [0.08, 0.0805], [0.08, 0.0805], [0.08, 0.0805]]),
                   [0.43, 0.43], Tolerance(), n_boot=200)  # fmt: skip
    assert est.method == "bracket" and "lack of fit" in est.method_reason
    assert est.budget.interval == pytest.approx((XS[1], XS[2]))
    assert est.budget.kind == "point" and XS[1] < est.budget.value < XS[2]
    assert est.bracket is not None and (est.bracket.below, est.bracket.above) == ("noise-2", "noise-3")
