"""Two calibrations that share training seeds: their runs keyed by seed, and the correlation of their budgets.

    runs_a, runs_b = load_seed_runs(cal_a), load_seed_runs(cal_b)   # from the ledgers beside the artifacts (or why not)
    c = seed_correlation(runs_a, runs_b)
    c.r, c.r_used, c.shared_seeds                                   # jackknife r of log B̂_a, log B̂_b; r as used

Replicate r of every level and of the baseline uses one training seed, and two calibrations of a pair made with one
protocol use the same seeds: a seed's runs share data order, sampling uniforms, the noise draw, the eval prompts and
the measured x in both. `seed_correlation` is the delete-one-seed jackknife over the union of both calibrations'
seeds: every run of seed s (its baseline run and its level runs) is removed from both, each budget's point estimator
is refitted (`SeedRuns.point`: the seed-effect model's B̂, or the isotonic crossing where the bracket made the budget;
the artifact's x, tolerance rule and looks), and the log pseudo-values are correlated; a seed that only one
calibration has moves only that one. `compare.compare_budgets` uses r (shrunk: `shrunk_correlation`) in MOVER for
correlated estimates; docs/compare.md says why this and not a paired bootstrap.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from admitcheck.calibration.curve import OFFSET_SHARE, LevelData, Tolerance, budget_of, estimate, fit_levels
from admitcheck.calibration.schema import RUN_X, CalibrationArtifact
from admitcheck.errors import AdmitcheckError

MIN_SHARED_SEEDS = 3  # fewer shared training seeds: no correlation worth estimating, the independent interval
R_CONFIDENCE = 0.8  # r used = the one-sided lower Fisher-z bound of r̂ at this level (shrunk at most to 0)


@dataclass(frozen=True)
class SeedCorrelation:
    """The delete-one-seed jackknife of two calibrations' log budget estimates (`seed_correlation`)."""

    r: float  # jackknife correlation of log B̂_first and log B̂_second
    r_used: float  # r shrunk to its one-sided R_CONFIDENCE Fisher-z bound (at most to 0): what the interval uses
    shared_seeds: int  # training seeds in both calibrations
    seeds: int  # in either
    log_se: tuple[float, float]  # jackknife standard errors of log B̂_first, log B̂_second (a diagnostic)
    points: tuple[float, float]  # the refitted point estimates on all runs (nats/token): the budgets, re-derived


@dataclass(frozen=True)
class SeedRuns:
    """One calibration's fitted runs keyed by training seed: what the shared-seed interval refits. `levels`: the
    fitted levels with x as the budget was fitted and `replicates` = each pair's training seed; `baseline`: training
    seed -> the baseline run's quality; `method`: which point estimator made the budget ("model": the seed-effect
    model's B̂; "bracket": the isotonic crossing)."""

    levels: tuple[LevelData, ...]
    baseline: Mapping[int, float]
    tolerance: Tolerance
    confidence: float
    looks: int
    method: str
    local_model: bool = False  # the budget is in the run-averaged x: its model is refitted locally (`curve.estimate`)

    @property
    def seeds(self) -> frozenset[int]:
        return frozenset(self.baseline)

    def without(self, seed: int) -> SeedRuns:
        """Every run of `seed` removed (its baseline and its level runs); a level left empty is dropped."""
        levels = []
        for lv in self.levels:
            kept = [(x, c, r) for x, c, r in zip(lv.x, lv.cost, lv.replicates or ()) if r != seed]
            if kept:
                levels.append(LevelData(lv.name, *(tuple(v) for v in zip(*kept))))
        base = {k: v for k, v in self.baseline.items() if k != seed}
        return replace(self, levels=tuple(levels), baseline=base)

    def point(self) -> float:
        """The budget's point estimator on these runs (nats/token): the model's B̂ or the isotonic crossing."""
        if self.method != "model":  # the isotonic crossing alone, as `curve.estimate` computes it (no model fit)
            tau = self.tolerance.of(float(np.mean(list(self.baseline.values()))))
            fit = fit_levels([np.mean(lv.x) for lv in self.levels], [np.mean(lv.cost) for lv in self.levels],
                             [len(lv.x) for lv in self.levels], OFFSET_SHARE * tau)  # fmt: skip
            return float(budget_of(fit, tau)[0])
        est = estimate(list(self.levels), dict(self.baseline), self.tolerance, n_boot=0,
                       confidence=self.confidence, looks=self.looks, local_model=self.local_model)  # fmt: skip
        return est.model.value if est.model is not None else math.nan


def shrunk_correlation(r: float, n: int, level: float = R_CONFIDENCE) -> float:
    """r's one-sided lower Fisher-z bound at `level` from n seeds, shrunk at most to 0 (a negative r̂ is kept): a
    smaller r widens the ratio's interval, so an r̂ inflated by chance buys no width."""
    from scipy.stats import norm

    if n <= 3 or not math.isfinite(r):
        return min(r, 0.0) if math.isfinite(r) else 0.0
    z = math.atanh(max(min(r, 0.999999), -0.999999)) - float(norm.ppf(level)) / math.sqrt(n - 3)
    return max(math.tanh(z), min(r, 0.0))


def seed_correlation(first: SeedRuns, second: SeedRuns) -> SeedCorrelation:
    """The delete-one-seed jackknife over the union of both calibrations' seeds (module docstring); ValueError when
    a refitted point is not a positive finite number (no log)."""
    seeds = sorted(first.seeds | second.seeds)
    full = (first.point(), second.point())
    pseudo = np.empty((len(seeds), 2))  # (S, 2) log B̂ with seed s's runs removed
    for i, s in enumerate(seeds):
        for k, runs in enumerate((first, second)):
            pseudo[i, k] = math.log(runs.without(s).point()) if s in runs.seeds else math.log(full[k])
    if not (np.all(np.isfinite(pseudo)) and all(0 < v < math.inf for v in full)):
        raise ValueError("a refitted budget is 0 or infinite with a seed left out: no log-scale jackknife")
    dev = pseudo - pseudo.mean(axis=0)  # (S, 2)
    n = len(seeds)
    cov = (n - 1) / n * dev.T @ dev  # (2, 2) the jackknife covariance of the two log estimates
    se = np.sqrt(np.diag(cov))
    r = float(cov[0, 1] / (se[0] * se[1])) if se[0] > 0 and se[1] > 0 else 0.0
    shared = len(first.seeds & second.seeds)
    return SeedCorrelation(r, shrunk_correlation(r, shared), shared, n, (float(se[0]), float(se[1])), full)


def load_seed_runs(cal: CalibrationArtifact) -> SeedRuns | str:
    """The calibration's fitted runs from the ledger beside it (`refit.ledger_runs`), keyed by training seed, or why
    not (a sentence: no ledger, a run missing from it)."""
    from admitcheck.calibration.refit import ledger_runs

    if cal.path is None:
        return "the artifact has no path, so no ledger beside it"
    try:
        config, _, placed = ledger_runs(cal)
    except AdmitcheckError as e:
        return f"{cal.path.name}: {e}"
    return seed_runs(placed, cal, config.levels.run_window,
                     Tolerance(config.tolerance.relative, config.tolerance.absolute), config.confidence)  # fmt: skip


def seed_runs(placed: list[Any], cal: CalibrationArtifact, window: int, tol: Tolerance, confidence: float) -> SeedRuns:
    """`SeedRuns` of placed runs (`fit.PlacedRun`): each run at its training seed, x as `cal`'s budget was fitted."""
    from admitcheck.calibration.fit import run_x

    base = {int(p.record.seed): float(p.record.quality) for p in placed if p.level.kind == "baseline"}
    by: dict[str, list[tuple[float, float, int]]] = {}
    for p in placed:
        if p.level.kind == "baseline" or not p.level.fit:
            continue
        s = int(p.record.seed)
        by.setdefault(p.level.name, []).append((run_x(p.record, cal.budget.x, window), p.record.quality - base[s], s))
    levels = tuple(LevelData(n, *(tuple(c) for c in zip(*v))) for n, v in by.items())
    looks = (cal.budget.protocol.rounds if cal.budget.protocol is not None else 0) + 1
    return SeedRuns(levels, base, tol, confidence, looks, cal.budget.method or "bracket", cal.budget.x == RUN_X)
