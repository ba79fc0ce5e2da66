"""admitcheck truth: the statistics of a backtest, checked by exact computation and by simulation.

The truth rule's promise: a candidate whose true cost is above τ is labelled "admit" (and one at or below τ
"reject") at most α/2 of the time, whatever the number of looks (Bonferroni). Clopper–Pearson covers at least its
level for every p (exact sums). A family's residual interval covers the true mean residual at its level.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from admitcheck.admission.truth import (
    agreement,
    agrees,
    clopper_pearson,
    confidence_per_look,
    family_residual,
    look_counts,
    sequential_truth,
    truth_at,
)
from admitcheck.config import TruthConfig


@pytest.mark.parametrize(
    ("replicates", "step", "maximum", "looks"),
    [(4, 4, 8, [4, 8]), (4, 4, 16, [4, 8, 12, 16]), (2, 3, 7, [2, 5, 7]), (3, 1, 3, [3])],
)
def test_look_counts(replicates, step, maximum, looks) -> None:
    assert look_counts(TruthConfig(replicates=replicates, step=step, max_replicates=maximum)) == looks


def test_truth_at_is_students_t_interval() -> None:
    d = [0.01, -0.02, 0.03, 0.005, 0.012]
    t = truth_at(d, tau=0.05, confidence=0.9)
    lo, hi = stats.t.interval(0.9, len(d) - 1, loc=np.mean(d), scale=stats.sem(d))
    assert t.interval == pytest.approx((lo, hi)) and t.cost == pytest.approx(np.mean(d)) and t.n == 5
    assert t.label == "admit"  # hi < τ
    assert truth_at(d, tau=np.mean(d), confidence=0.9).label == "undecided"
    assert truth_at(d, tau=lo - 1e-9, confidence=0.9).label == "reject"


def test_sequential_truth_asks_for_the_next_look_then_settles() -> None:
    rule = TruthConfig(replicates=2, step=2, max_replicates=4)
    noisy = [0.0, 0.1]  # straddles τ = 0.04 at the first look
    assert sequential_truth(noisy, 0.04, rule) == (None, 4)
    final, nxt = sequential_truth([0.0, 0.1, 0.0, 0.1], 0.04, rule)
    assert nxt is None and final.label == "ambiguous" and final.n == 4
    assert final.confidence == pytest.approx(confidence_per_look(0.95, 2)) == pytest.approx(0.975)
    decided, nxt = sequential_truth([0.001, 0.002, 0.5, 0.5], 0.04, rule)  # decided at the first look
    assert nxt is None and decided.label == "admit" and decided.n == 2


def _wrong_side_rate(mu: float, tau: float, noise, rule: TruthConfig, sims: int, seed: int) -> tuple[float, float]:
    """(share labelled admit, share labelled reject) of `sims` candidates of true cost mu (paired noise `noise`)."""
    rng = np.random.default_rng(seed)
    n = rule.max_replicates
    admit = reject = 0
    for _ in range(sims):
        d = mu + noise(rng, n)
        t, _ = sequential_truth(list(d), tau, rule)
        admit += t.label == "admit"
        reject += t.label == "reject"
    return admit / sims, reject / sims


NORMAL = lambda rng, n: rng.normal(0.0, 0.02, n)  # noqa: E731 - the toy's paired-cost sd is about 0.02
HEAVY = lambda rng, n: 0.02 * rng.standard_t(3, n) / np.sqrt(3.0)  # noqa: E731 - same sd, Student-t(3) tails
RULE = TruthConfig(replicates=4, step=4, max_replicates=16)  # the shipped toy backtest's rule


@pytest.mark.slow
@pytest.mark.parametrize("noise", [NORMAL, HEAVY], ids=["normal", "t3"])
def test_wrong_side_rate_is_at_most_half_alpha(noise) -> None:
    """At the boundary (true cost = τ, and just above it) each wrong label happens ≤ α/2 = 2.5% of the time."""
    sims, tau = 4000, 0.021
    margin = 3 * np.sqrt(0.025 * 0.975 / sims)  # Monte Carlo error
    _, wrong_reject = _wrong_side_rate(tau, tau, noise, RULE, sims, seed=1)  # cost = τ: admit is right
    wrong_admit, _ = _wrong_side_rate(tau + 1e-6, tau, noise, RULE, sims, seed=2)  # cost > τ: reject is right
    assert wrong_reject <= 0.025 + margin and wrong_admit <= 0.025 + margin, (wrong_reject, wrong_admit)


def test_far_from_tau_the_truth_is_decided_at_the_first_look() -> None:
    admit, reject = _wrong_side_rate(-0.05, 0.021, NORMAL, RULE, 400, seed=3)
    assert admit > 0.95 and reject == 0


@pytest.mark.parametrize("n", [5, 11, 19, 40])
def test_clopper_pearson_covers_for_every_p(n) -> None:
    """Exact coverage (sum of binomial probabilities of the k whose interval holds p) ≥ 95% on a grid of p."""
    intervals = [clopper_pearson(k, n, 0.95) for k in range(n + 1)]
    for p in np.linspace(0.001, 0.999, 199):
        cover = sum(stats.binom.pmf(k, n, p) for k, (lo, hi) in enumerate(intervals) if lo <= p <= hi)
        assert cover >= 0.95 - 1e-9, (n, p, cover)


def test_family_residual_interval_covers_under_shared_baselines() -> None:
    """The shipped protocol: every candidate's cost at seed i is its run minus the one baseline run of seed i (as
    noisy as a run), so a family's candidates share the baselines' noise; their pairs differ (the toy backtest's noise
    family: 16, 16, 4, 4, 4). The by-seed interval covers the true residual (0) at 95% for normal and Student-t(3)
    noise (bench/family_residual_coverage.py: every layout, three shapes; the interval it replaced: as low as 0.75)."""
    rng = np.random.default_rng(4)
    sims, layout = 3000, [16, 16, 4, 4, 4]
    for shape in ("normal", "t3"):
        covered = 0
        for _ in range(sims):
            draw = (lambda n: rng.standard_normal(n)) if shape == "normal" else (
                lambda n: rng.standard_t(3, n) / np.sqrt(3))  # fmt: skip
            seed_fx, base_noise = draw(16), draw(16)
            costs = [0.7 * j + seed_fx[:n] + draw(n) - (seed_fx[:n] + base_noise[:n]) for j, n in enumerate(layout)]
            lo, hi = family_residual(costs, [0.7 * j for j in range(len(layout))])["interval"]
            covered += lo <= 0.0 <= hi
        assert covered / sims >= 0.95 - 3 * np.sqrt(0.95 * 0.05 / sims), (shape, covered / sims)


def test_family_residual_of_one_candidate_is_its_t_interval() -> None:
    x = np.array([0.1, 0.3, -0.2, 0.5, 0.0])
    f = family_residual([x], [0.05])
    half = stats.t.ppf(0.975, 4) * x.std(ddof=1) / np.sqrt(5)
    assert f["mean"] == pytest.approx(x.mean() - 0.05)
    assert f["interval"] == pytest.approx([x.mean() - 0.05 - half, x.mean() - 0.05 + half])
    # equal pairs: the t interval of the per-seed family mean (n − 1 degrees of freedom)
    a, b = np.array([0.1, 0.2, 0.3, 0.4]), np.array([0.3, 0.1, 0.0, 0.2])
    e = (a + b) / 2
    g = family_residual([a, b], [0.0, 0.0])
    assert g["interval"][0] == pytest.approx(e.mean() - stats.t.ppf(0.975, 3) * e.std(ddof=1) / 2)
    with pytest.raises(ValueError):
        family_residual([[0.1]], [0.0])


def test_agreement_counts_and_ambiguous_truths() -> None:
    a = agreement(["ADMIT", "REJECT", "REJECT", "ADMIT"], ["admit", "admit", "ambiguous", "reject"])
    assert (a["agree"], a["disagree"], a["ambiguous"], a["decided_truths"]) == (1, 2, 1, 3)
    assert a["fraction"] == pytest.approx(1 / 3)
    assert a["confusion"]["REJECT"] == {"admit": 1, "reject": 0, "ambiguous": 1}
    assert agrees("ADMIT", "ambiguous") is None and agrees("REJECT", "reject") is True
    assert agreement([], [])["fraction"] is None
