"""The statistics of a backtest: a candidate's true quality cost from paired full runs, and how verdicts agree.

    looks = look_counts(TruthConfig(replicates=4, step=4, max_replicates=8))   # [4, 8]
    t = truth_at([0.004, -0.01, 0.012, 0.001], tau=0.021, confidence=confidence_per_look(0.95, len(looks)))
    t.label                     # "admit" (interval below τ), "reject" (above), "undecided" (straddles τ)
    agreement(["ADMIT", "REJECT"], ["admit", "ambiguous"])    # counts, fraction, Clopper–Pearson interval

A candidate's cost is the mean over replicates r of its paired difference d_r = quality(candidate run r) −
quality(baseline run r): both runs share the seed of replicate r (data order, sampling uniforms, eval seeds), so d_r
is free of the seed-to-seed spread of the quality itself. Its interval is Student's t over the d_r at the per-look
level 1 − α/L (Bonferroni over the L looks of `look_counts`): after each look the truth is "admit" when the
interval's upper end is ≤ τ (the calibration's tolerance: ADMIT should have been given), "reject" when its lower end
is > τ, and else more pairs are run; still straddling τ at `max_replicates` it is "ambiguous", and counts neither for
nor against the verdict. `tests/test_truth.py` checks by simulation that the wrong-side rate stays ≤ α/2.

A family's residual (observed cost − the calibration curve's prediction at the candidate's measured mismatch) is the
evidence for or against "one scale for all sources"; its interval combines the candidates' standard errors (normal,
conditional on the curve: the curve's own uncertainty is not in it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from scipy import stats

from admitcheck.config import TruthConfig
from admitcheck.measurement.metrics import sequential_confidence

Label = Literal["admit", "reject", "undecided", "ambiguous"]


def look_counts(truth: TruthConfig) -> list[int]:
    """Pairs at each look: replicates, replicates + step, …, and max_replicates last."""
    counts = list(range(truth.replicates, truth.max_replicates + 1, truth.step))
    return counts if counts[-1] == truth.max_replicates else [*counts, truth.max_replicates]


def confidence_per_look(confidence: float, looks: int) -> float:
    """Two-sided level of each look's interval: the error α = 1 − confidence spent evenly over the looks (at least
    one), `metrics.sequential_confidence` as a screen's looks."""
    return sequential_confidence(confidence, max(looks, 1))


@dataclass(frozen=True)
class Truth:
    """A candidate's observed quality cost from n paired runs, and what it says the verdict should have been."""

    label: Label
    cost: float  # mean paired difference, nats/token (quality is lower-is-better: > 0 is worse than baseline)
    interval: tuple[float, float]  # Student's t at the per-look level
    sd: float  # of the paired differences
    n: int  # pairs
    confidence: float  # per look

    @property
    def decided(self) -> bool:
        return self.label in ("admit", "reject")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"interval": list(self.interval)}


def truth_at(diffs: Sequence[float], tau: float, confidence: float) -> Truth:
    """The truth after one look at the paired differences `diffs` (≥ 2) against the tolerance τ."""
    d = np.asarray(diffs, dtype=np.float64)
    n = int(d.size)
    if n < 2:
        raise ValueError("a truth needs at least 2 paired runs")
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    lo, hi = mean - half, mean + half
    label: Label = "admit" if hi <= tau else "reject" if lo > tau else "undecided"
    return Truth(label, mean, (lo, hi), sd, n, confidence)


def sequential_truth(diffs: Sequence[float], tau: float, truth: TruthConfig) -> tuple[Truth | None, int | None]:
    """(the truth, None) once the pairs run so far (in replicate order) settle it, else (None, the pairs the next
    look needs). Looks at each of `look_counts` in order; the first decided look is the truth; undecided at
    `max_replicates`, it is "ambiguous"."""
    counts = look_counts(truth)
    level = confidence_per_look(truth.confidence, len(counts))
    t = None
    for n in counts:
        if len(diffs) < n:
            return None, n
        t = truth_at(diffs[:n], tau, level)
        if t.decided:
            return t, None
    assert t is not None
    return Truth("ambiguous", t.cost, t.interval, t.sd, t.n, t.confidence), None


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval for k successes of n (coverage ≥ confidence for every p)."""
    if n == 0:
        return (0.0, 1.0)
    a = 1 - confidence
    lo = 0.0 if k == 0 else float(stats.beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi


def agrees(decision: str, label: str) -> bool | None:
    """Whether a verdict (ADMIT/REJECT) matches a truth; None when the truth is not decided."""
    if label not in ("admit", "reject"):
        return None
    return (decision == "ADMIT") == (label == "admit")


def agreement(decisions: Sequence[str], labels: Sequence[str], confidence: float = 0.95) -> dict[str, Any]:
    """Agreement of verdicts with decided truths: counts, fraction and its Clopper–Pearson interval, and the
    confusion matrix {verdict: {truth: count}} over every candidate (ambiguous truths included, counted apart)."""
    confusion = {v: {t: 0 for t in ("admit", "reject", "ambiguous")} for v in ("ADMIT", "REJECT")}
    agree = disagree = 0
    for decision, label in zip(decisions, labels, strict=True):
        confusion[decision]["ambiguous" if label not in ("admit", "reject") else label] += 1
        a = agrees(decision, label)
        agree += a is True
        disagree += a is False
    n = agree + disagree
    return {
        "decided_truths": n,
        "ambiguous": len(labels) - n,
        "agree": agree,
        "disagree": disagree,
        "fraction": agree / n if n else None,
        "interval": list(clopper_pearson(agree, n, confidence)),
        "confidence": confidence,
        "confusion": confusion,
    }


def family_residual(
    paired_costs: Sequence[Sequence[float]], predicted: Sequence[float], confidence: float = 0.95
) -> dict[str, Any]:
    """A source family's mean residual (observed − predicted cost, averaged over its candidates) and its interval.

    `paired_costs[c][i]`: candidate c's paired cost at the i-th replicate seed (a truth's pairs are the leading
    replicate seeds, the same for every candidate); `predicted[c]`: the curve's cost at its mismatch. Every candidate
    is paired with the same baseline run at seed i, so the baseline's own noise is in all of their costs at that seed:
    the candidates are not independent, the seeds are. The interval treats the seeds as clusters: the family mean is
    linear in the costs (weight 1/(K n_c) each), its variance the bias-reduced cluster sandwich (CR2, Bell & McCaffrey
    2002: each residual d_ci − d̄_c scaled by 1/√(1 − 1/n_c), the leverage of its candidate's mean) and Student's t
    with the Satterthwaite degrees of freedom of that sandwich under independent errors (Imbens & Kolesár 2016) — few
    seeds, and candidates with unequal pairs, leave fewer than seeds − 1. With one candidate it is that candidate's own
    t interval; with equal pairs, the t interval of the per-seed family mean. Conditional on the curve (its own
    uncertainty is not in it). Coverage under the shipped protocol, three shapes: bench/family_residual_coverage.py."""
    costs = [np.asarray(c, dtype=np.float64) for c in paired_costs]
    if not costs or len(costs) != len(predicted):
        raise ValueError("one predicted cost per candidate, at least one candidate")
    if min(c.size for c in costs) < 2:
        raise ValueError("a family residual needs at least 2 pairs per candidate")
    k, m = len(costs), max(c.size for c in costs)
    residuals = np.array([c.mean() for c in costs]) - np.asarray(predicted, dtype=np.float64)
    mean = float(residuals.mean())
    # the observations (candidate c, seed i), the projection on the candidates' means, the mean's weights
    cand = np.concatenate([np.full(c.size, j) for j, c in enumerate(costs)])
    seed = np.concatenate([np.arange(c.size) for c in costs])
    n = np.array([c.size for c in costs], dtype=np.float64)[cand]
    d = np.concatenate(costs)
    resid_maker = np.eye(d.size) - (cand[:, None] == cand[None, :]) / n[None, :]  # I − H (symmetric)
    weight = 1.0 / (k * n) / np.sqrt(1.0 - 1.0 / n)  # ℓ, scaled by the CR2 adjustment of each observation
    q = np.stack([resid_maker[:, seed == i] @ weight[seed == i] for i in range(m)], axis=1)  # V = Σ_i (q_i · d)²
    variance = float(np.sum((q.T @ d) ** 2))
    g = q.T @ q
    df = float(np.trace(g) ** 2 / np.trace(g @ g))
    s = float(np.sqrt(variance))
    half = float(stats.t.ppf(0.5 + confidence / 2, df)) * s
    return {"candidates": k, "mean": mean, "interval": [mean - half, mean + half], "se": s}
