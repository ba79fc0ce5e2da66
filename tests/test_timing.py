"""calibration.timing: time-to-quality on synthetic learning curves (closed forms; the cases that must not count)."""

from __future__ import annotations

import math

import pytest

from admitcheck.calibration.timing import (
    Efficiency,
    LearningCurve,
    interpolate,
    pool,
    steps_efficiency,
    steps_to_target,
    summarize,
)


def curve(*points: tuple[float, float]) -> LearningCurve:
    return LearningCurve(tuple(p[0] for p in points), tuple(p[1] for p in points))


def test_first_crossing_is_interpolated_linearly():
    c = curve((0, 2.0), (100, 1.0), (200, 0.4))
    assert steps_to_target(c, 1.0) == pytest.approx(100.0)
    assert steps_to_target(c, 0.7) == pytest.approx(150.0)  # halfway between 1.0 and 0.4
    assert steps_to_target(c, 2.5) == 0.0  # already there at the first evaluation


def test_docstring_example():
    run = LearningCurve((0, 50, 100, 200), (2.17, 1.10, 0.60, 0.42))
    assert steps_to_target(run, 0.43) == pytest.approx(100 + 0.17 / 0.18 * 100)


def test_a_dip_that_rises_back_does_not_count():
    """Below the target at step 100, back above it at 150: reached only after the last time above it."""
    c = curve((0, 2.0), (100, 0.3), (150, 0.6), (200, 0.4))
    assert steps_to_target(c, 0.5) == pytest.approx(150 + (0.6 - 0.5) / (0.6 - 0.4) * 50)  # 175, not ~83
    # and a dip followed by an end above the target never reaches it
    assert steps_to_target(curve((0, 2.0), (100, 0.3), (200, 0.6)), 0.5) is None


def test_never_reaching_is_none_and_efficiency_zero():
    base = curve((0, 2.0), (100, 0.8), (200, 0.40))
    bad = curve((0, 2.0), (100, 0.9), (200, 0.50))  # ends 0.10 above the baseline, τ = 0.02
    assert steps_to_target(bad, base.final + 0.02) is None
    assert steps_efficiency(bad, base, 0.02) == 0.0
    e = summarize([0.0, 0.0, 0.0])
    assert e.mean == 0.0 and e.reached == 0 and math.isinf(e.steps_ratio)


def test_efficiency_of_a_slower_run():
    """The level learns at half the speed along the same path: T_run = 2 T_base, efficiency 0.5."""
    base = curve((0, 2.0), (100, 0.4), (200, 0.4))
    slow = curve((0, 2.0), (100, 1.2), (200, 0.4))
    tau = 0.16  # target 0.56: base at step 90, slow at 180
    assert steps_to_target(base, 0.56) == pytest.approx(90.0)
    assert steps_to_target(slow, 0.56) == pytest.approx(180.0)
    assert steps_efficiency(slow, base, tau) == pytest.approx(0.5)
    assert steps_efficiency(base, base, tau) == 1.0


def test_summary_interval_is_student_t_and_clipped_at_zero():
    e = summarize([1.0, 0.8, 0.9])
    # mean 0.9, sd 0.1, t_{0.975, 2} = 4.3027
    assert e.mean == pytest.approx(0.9)
    assert e.interval[1] - e.mean == pytest.approx(4.302653 * 0.1 / math.sqrt(3), rel=1e-5)
    assert summarize([0.0, 1.0]).interval[0] == 0.0
    one = summarize([0.7])
    assert one.n == 1 and math.isnan(one.interval[0])


def test_interpolation_reads_like_the_budget_curve():
    a = Efficiency(0.9, (0.8, 1.0), 3, 3)
    b = Efficiency(0.5, (0.3, 0.7), 3, 2)
    levels = [(1e-2, b), (1e-3, a)]  # any order
    mid = interpolate(levels, math.sqrt(1e-3 * 1e-2))  # geometric middle: halfway in log x
    assert mid.mean == pytest.approx(0.7) and mid.interval == pytest.approx((0.55, 0.85))
    assert interpolate(levels, 1.0) == b  # flat above the largest level
    low = interpolate(levels, 5e-4)  # linear in x from (0, 1) to the smallest level
    assert low.mean == pytest.approx(0.95) and low.interval == pytest.approx((0.9, 1.0))
    assert interpolate(levels, 0.0).mean == 1.0


def test_from_evals_sorts_and_rejects_bad_curves():
    c = LearningCurve.from_evals([[200, 0.4, 0.7], [0, 2.1, 0.1]])
    assert c.steps == (0.0, 200.0) and c.final == 0.4
    rl = LearningCurve.from_evals([[0, 2.1, 0.25], [100, 0.9, 0.75]], task_error=True)  # GRPO: 1 − accuracy
    assert rl.quality == (0.75, 0.25)
    with pytest.raises(ValueError):
        LearningCurve.from_evals([[0, 2.1, None]], task_error=True)
    with pytest.raises(ValueError):
        LearningCurve((0, 0), (1.0, 2.0))
    with pytest.raises(ValueError):
        LearningCurve((0,), (math.nan,))


def test_pooling_makes_efficiency_non_increasing_in_x():
    a, b, c = summarize([0.5, 0.6]), summarize([0.9, 1.0, 0.95]), summarize([0.2, 0.1])
    pooled = pool([(3e-3, b), (1e-3, a), (1e-2, c)])
    assert [x for x, _ in pooled] == [1e-3, 3e-3, 1e-2]
    (_, pa), (_, pb), (_, pc) = pooled
    assert pa == pb and pa.n == 5 and pa.mean == pytest.approx((0.5 + 0.6 + 0.9 + 1.0 + 0.95) / 5)
    assert pc == c  # already below: not pooled
    assert [e.mean for _, e in pooled] == sorted((e.mean for _, e in pooled), reverse=True)
