"""admitcheck.calibration.compare and `admitcheck compare`: the budget ratio's interval keeps its level (simulated
coverage), bounds
stay bounds, and two calibrations on different mismatch scales are refused.

Coverage tolerances: with n simulated comparisons at a nominal 95%, the Monte-Carlo sd of the observed coverage is
√(0.95·0.05/n); the bands below are ±4 sd around 0.95 (a false failure has probability ~6e-5 per test), widened
only where the test says why.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from admitcheck.calibration.artifact import load_calibration
from admitcheck.calibration.compare import BudgetSide, compare_budgets, compare_calibrations, mover_log_ratio
from admitcheck.calibration.curve import LevelData, Tolerance, estimate
from admitcheck.calibration.shared_seeds import SeedRuns, load_seed_runs, seed_correlation
from admitcheck.cli import app
from tests.test_cli import assert_user_error

Z95 = 1.959963984540054
ROOT = Path(__file__).resolve().parents[1]


def _side(value: float, interval: tuple[float, float], kind: str = "point", draws=None) -> BudgetSide:
    return BudgetSide("x", "pg", value, kind, interval, 0.95, 0.03, None if draws is None else tuple(draws))


def _band(n: int) -> tuple[float, float]:
    sd = math.sqrt(0.95 * 0.05 / n)
    return 0.95 - 4 * sd, 0.95 + 4 * sd


def test_mover_ratio_interval_covers_at_its_level_for_log_normal_budgets() -> None:
    """Each budget's interval an exact 95% interval on the log scale (different widths): the ratio's must cover the
    true ratio 95% of the time (MOVER is exact here)."""
    rng = np.random.default_rng(0)
    n, true_a, true_b, sa, sb = 4000, 0.016, 0.004, 0.25, 0.6
    hits = 0
    for _ in range(n):
        a = true_a * math.exp(sa * rng.standard_normal())
        b = true_b * math.exp(sb * rng.standard_normal())
        ia = (a * math.exp(-Z95 * sa), a * math.exp(Z95 * sa))
        ib = (b * math.exp(-Z95 * sb), b * math.exp(Z95 * sb))
        lo, hi = compare_budgets(_side(a, ia), _side(b, ib)).ratio_interval
        hits += lo <= true_b / true_a <= hi
    lo_band, hi_band = _band(n)
    assert lo_band <= hits / n <= hi_band, hits / n


def test_mover_ratio_interval_keeps_its_level_for_skewed_budgets() -> None:
    """Log-budget errors skewed (standardised Gamma(4), skewness 1), each interval exact and asymmetric: MOVER is
    only approximate here; it must still cover within [0.93, 0.97] (a failure means the
    approximation broke, not noise, since the ±4 sd Monte-Carlo band alone is ±0.014). Measured: 0.9475."""
    rng = np.random.default_rng(1)
    n, k, true_a, true_b, sa, sb = 4000, 4.0, 0.016, 0.004, 0.3, 0.5
    q_lo, q_hi = np.quantile((rng.gamma(k, size=400_000) - k) / math.sqrt(k), [0.025, 0.975])
    hits = 0
    for _ in range(n):
        ea, eb = (rng.gamma(k, size=2) - k) / math.sqrt(k)
        a, b = true_a * math.exp(sa * ea), true_b * math.exp(sb * eb)
        ia = (a * math.exp(-sa * q_hi), a * math.exp(-sa * q_lo))  # the exact pivot interval of log B_a
        ib = (b * math.exp(-sb * q_hi), b * math.exp(-sb * q_lo))
        lo, hi = compare_budgets(_side(a, ia), _side(b, ib)).ratio_interval
        hits += lo <= true_b / true_a <= hi
    assert 0.93 <= hits / n <= 0.97, hits / n


def test_bootstrap_draws_ratio_interval_covers_at_its_level() -> None:
    """Artifacts carrying bootstrap draws (here an exact parametric bootstrap: draws spread like the estimate): the
    percentile interval of all draw ratios covers the true ratio at 95%. 200 draws per side add a small Monte-Carlo
    error to each interval's ends, so the band is ±4 sd of n = 1500 plus 0.01 on the low side."""
    rng = np.random.default_rng(2)
    n, true_a, true_b, sa, sb = 1500, 0.016, 0.004, 0.25, 0.6
    hits = 0
    for _ in range(n):
        a = true_a * math.exp(sa * rng.standard_normal())
        b = true_b * math.exp(sb * rng.standard_normal())
        da, db = a * np.exp(sa * rng.standard_normal(200)), b * np.exp(sb * rng.standard_normal(200))
        cmp = compare_budgets(_side(a, (a / 2, 2 * a), draws=da), _side(b, (b / 2, 2 * b), draws=db))
        assert cmp.method == "bootstrap"
        hits += cmp.ratio_interval[0] <= true_b / true_a <= cmp.ratio_interval[1]
    lo_band, hi_band = _band(n)
    assert lo_band - 0.01 <= hits / n <= hi_band, hits / n


def test_a_bound_gives_a_bounded_ratio() -> None:
    cmp = compare_budgets(_side(0.01, (0.005, 0.02)), _side(1.0, (1.0, math.inf), kind="lower_bound"))
    assert cmp.method == "bound" and cmp.ratio_interval == (1.0 / 0.02, math.inf)
    cmp = compare_budgets(_side(0.01, (0.005, 0.02)), _side(1e-4, (0.0, 1e-4), kind="upper_bound"))
    assert cmp.ratio_interval == (0.0, 1e-4 / 0.005)


# ------------------------------------------------------------------------------------------- shared seeds (#40)


def test_mover_with_correlation_narrows_and_open_ends_stay_open() -> None:
    """r = 0 is the independent MOVER; r > 0 narrows it (Var of a difference of positively correlated estimates);
    an interval end at 0 or ∞ makes the ratio's end on that side open."""
    ind = mover_log_ratio(0.004, (0.002, 0.008), 0.01, (0.005, 0.02))
    assert ind == pytest.approx(mover_log_ratio(0.004, (0.002, 0.008), 0.01, (0.005, 0.02), r=0.0))
    assert ind[0] == pytest.approx(0.4 * math.exp(-math.log(2) * math.sqrt(2)))
    lo, hi = mover_log_ratio(0.004, (0.002, 0.008), 0.01, (0.005, 0.02), r=0.9)
    assert ind[0] < lo < 0.4 < hi < ind[1]
    assert mover_log_ratio(0.004, (0.002, 0.008), 0.01, (0.005, 0.02), r=1.0) == pytest.approx((0.4, 0.4))
    assert mover_log_ratio(0.004, (0.0, 0.008), 0.01, (0.005, 0.02), r=0.5)[0] == 0.0
    assert mover_log_ratio(0.004, (0.002, 0.008), 0.01, (0.0, 0.02), r=0.5)[1] == math.inf


def _planted_runs(rng, x_scale: float, quality_noise, seeds: int = 8) -> SeedRuns:
    """A power-law calibration (q = seed effect + τ(x/B)^0.75 + noise, B = 0.005 × x_scale) whose run noise is
    `quality_noise` (seeds × 5 levels + baseline), its x the grid × x_scale: calibrations sharing `quality_noise`
    share every seed's randomness."""
    grid = (0.001, 0.0025, 0.005, 0.01, 0.025)
    tau, b = 0.02, 0.005
    effect = 0.01 * quality_noise[:, 0]
    base = {s: 0.4 + effect[s] + 0.01 * quality_noise[s, 1] for s in range(seeds)}
    levels = []
    for j, x in enumerate(grid):
        cost = [
            tau * (x / b) ** 0.75 + effect[s] + 0.01 * quality_noise[s, 2 + j] - (base[s] - 0.4) for s in range(seeds)
        ]
        levels.append(LevelData(f"noise-{j}", tuple([x * x_scale] * seeds), tuple(cost), tuple(range(seeds))))
    return SeedRuns(tuple(levels), base, Tolerance(absolute=tau), 0.95, 1, "model")


def _side_of(runs: SeedRuns, label: str) -> BudgetSide:
    est = estimate(list(runs.levels), dict(runs.baseline), runs.tolerance, confidence=0.95)
    assert est.method == "model", est.method_reason
    return BudgetSide(label, label, est.budget.value, "point", est.budget.interval, 0.95, est.tau, None)


def test_shared_seed_interval_is_narrower_on_a_planted_correlated_pair_and_contains_the_truth() -> None:
    """B's runs are A's (same seeds, the same noise up to a small own part) at 3× the mismatch: the true ratio is 3,
    the two log budgets are almost perfectly correlated, so the paired interval must be much narrower than the
    independent one and still contain 3 (the independent one takes all of both budgets' width)."""
    rng = np.random.default_rng(4)
    shared = rng.standard_normal((8, 7))
    runs_a = _planted_runs(rng, 1.0, shared)
    runs_b = _planted_runs(rng, 3.0, shared + 0.1 * rng.standard_normal((8, 7)))
    corr = seed_correlation(runs_a, runs_b)
    assert corr.r > 0.9 and corr.r_used > 0.5 and corr.shared_seeds == 8
    assert corr.points[0] == pytest.approx(_side_of(runs_a, "a").value)
    cmp = compare_budgets(_side_of(runs_a, "a"), _side_of(runs_b, "b"), corr)
    assert cmp.method == "shared seeds (paired)"
    lo, hi = cmp.ratio_interval
    ilo, ihi = cmp.independent_interval
    assert lo <= 3.0 <= hi, cmp.ratio_interval
    assert hi / lo < 0.6 * (ihi / ilo), (cmp.ratio_interval, cmp.independent_interval)
    # independent seeds: nothing shared, the jackknife finds (about) no correlation and the width stays
    runs_c = _planted_runs(rng, 3.0, rng.standard_normal((8, 7)))
    assert seed_correlation(runs_a, runs_c).r_used < 0.5


def test_without_ledgers_compare_falls_back_to_the_independent_interval_and_says_why(tmp_path) -> None:
    """An artifact copied away from its ledger: the ratio's interval is the independent one, the note says so, and
    the τ convention is stated."""
    a = tmp_path / "toy.yaml"
    a.write_text((ROOT / "calibrations" / "toy.yaml").read_text())
    cal_a, cal_b = load_calibration(a), load_calibration(ROOT / "calibrations" / "toy_rl.yaml")
    runs_a = load_seed_runs(cal_a)
    assert isinstance(runs_a, str) and "ledger" in runs_a
    cmp = compare_calibrations(cal_a, cal_b, runs_a, load_seed_runs(cal_b))
    assert cmp.method == "independent (MOVER)" and cmp.correlation is None
    assert any("as independent" in n and "no ledger" in n for n in cmp.notes), cmp.notes
    assert "own τ" in cmp.tau_convention and "0.05" in cmp.tau_convention
    assert cmp.ratio_interval == cmp.independent_interval


# ------------------------------------------------------------------------------------------------ the command


def _artifact(tmp_path: Path, name: str, **changes) -> Path:
    data = yaml.safe_load((ROOT / "calibrations" / "toy.yaml").read_text())  # a current-schema artifact
    for dotted, value in changes.items():
        d = data
        *head, last = dotted.split("__")
        for k in head:
            d = d[k]
        d[last] = value
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.slow
def test_compare_command_prints_both_budgets_and_the_ratio(tmp_path) -> None:
    a = _artifact(tmp_path, "a", recipe__loss="pg", budget__bootstrap={})  # no draws: the MOVER path
    b = _artifact(tmp_path, "b", recipe__loss="grpo", budget__value=0.004, budget__interval=[0.002, 0.008],
                  budget__bootstrap={})  # fmt: skip
    result = CliRunner().invoke(app, ["compare", str(a), str(b)])
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())  # rich wraps at the runner's width
    assert "budget ratio grpo / pg" in flat and "(independent (MOVER))" in flat and "no ledger" in flat
    result = CliRunner().invoke(app, ["compare", str(a), str(b), "--json"])
    out = json.loads(result.output)
    assert out["ratio"] == pytest.approx(0.004 / yaml.safe_load(a.read_text())["budget"]["value"])
    assert out["ratio_interval"][0] < out["ratio"] < out["ratio_interval"][1]
    assert out["method"] == "independent (MOVER)" and "own τ" in out["tau_convention"]
    assert "τ: each budget at its own τ" in flat


@pytest.mark.slow
def test_compare_refuses_budgets_on_different_scales(tmp_path) -> None:
    a = _artifact(tmp_path, "a")
    b = _artifact(tmp_path, "b", protocol__probe__max_new_tokens=32)
    assert_user_error(CliRunner().invoke(app, ["compare", str(a), str(b)]), "max_new_tokens")


@pytest.mark.slow
def test_compare_command_prints_a_bound_as_a_bound(tmp_path) -> None:
    a = _artifact(tmp_path, "a", budget__kind="upper_bound", budget__value=1e-4, budget__interval=[0.0, 1e-4])
    b = _artifact(tmp_path, "b")
    result = CliRunner().invoke(app, ["compare", str(a), str(b)])
    flat = " ".join(result.output.split())
    assert result.exit_code == 0 and "(bound)" in flat and "[low_b / high_a, high_b / low_a]" in flat, flat


@pytest.mark.slow
def test_compare_pairs_the_shipped_toy_calibrations_by_their_shared_seeds() -> None:
    """calibrations/toy.yaml and toy_rl.yaml share 11 training seeds and both ledgers are shipped: the paired
    interval, with the jackknife's refits reproducing both artifacts' budgets."""
    cal_a, cal_b = (load_calibration(ROOT / "calibrations" / f"{n}.yaml") for n in ("toy", "toy_rl"))
    cmp = compare_calibrations(cal_a, cal_b, load_seed_runs(cal_a), load_seed_runs(cal_b))
    assert cmp.method == "shared seeds (paired)" and cmp.correlation.shared_seeds == 11
    assert cmp.correlation.points == pytest.approx((cal_a.budget.value, cal_b.budget.value))
    assert cmp.ratio == pytest.approx(cal_b.budget.value / cal_a.budget.value)
    lo, hi = cmp.ratio_interval
    quoted = f"{cmp.ratio:.2g}, 95% interval [{lo:.2g}, {hi:.2g}]"
    assert quoted == "0.084, 95% interval [0, 0.33]"  # what README and docs/compare.md say; re-made artifact -> update
    assert quoted in " ".join((ROOT / "README.md").read_text().split())
    assert "**ratio GRPO / OPD = 0.084, 95% interval [0, 0.33]**" in " ".join(
        (ROOT / "docs" / "compare.md").read_text().split()
    )


def test_compare_notes_recipes_that_differ_beyond_the_objective() -> None:
    """A budget is its whole recipe's: two calibrations whose recipes differ in more than the loss (the SmolLM2 OPD
    one and the lr-5e-6 GRPO one on the copying task) get a note naming each differing field; the toy OPD and RL
    calibrations, which differ only in the objective, get none. docs/compare.md quotes the note."""
    from admitcheck.calibration.compare import recipe_differences

    opd, rl = (load_calibration(ROOT / "calibrations" / f"{n}.yaml") for n in ("smollm2", "smollm2_rl_copy_lr5e-6"))
    assert recipe_differences(opd, rl) == ["lr 1e-05 vs 5e-06", "prompts train.jsonl vs copy_train.jsonl"]
    cmp = compare_calibrations(opd, rl)
    (note,) = [n for n in cmp.notes if "recipes differ" in n]
    quoted = f"the recipes differ beyond the objective ({'; '.join(recipe_differences(opd, rl))})"
    assert note.startswith(quoted) and quoted in " ".join((ROOT / "docs" / "compare.md").read_text().split())
    paired = compare_calibrations(opd, rl, load_seed_runs(opd), load_seed_runs(rl))
    lo, hi = paired.ratio_interval
    assert paired.correlation.shared_seeds == 18
    shared, r = paired.correlation.shared_seeds, paired.correlation.r
    assert (f"**GRPO / OPD = {paired.ratio:.2g}, 95% interval [{lo:.3g}, {hi:.3g}]** ({shared} shared seeds, "
            f"jackknife r {r:.2f}") in " ".join((ROOT / "docs" / "rl.md").read_text().split())  # fmt: skip
    toy, toy_rl = (load_calibration(ROOT / "calibrations" / f"{n}.yaml") for n in ("toy", "toy_rl"))
    assert recipe_differences(toy, toy_rl) == []
    assert not any("recipes differ" in n for n in compare_calibrations(toy, toy_rl).notes)
