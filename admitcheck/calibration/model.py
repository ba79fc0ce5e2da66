# long module: one model (the seed-effect power law, its errors in variables and run-x share) and its two tests
"""The budget from one monotone model over every run, with seed effects: q = α_seed + τ·(x/B)^p (issue 34).

    m = fit_seed_power_law(seeds, x, quality, levels, tau=0.0204, confidence=0.95, level_log_se={"noise-2": 0.07})
    m.value, m.interval, m.exponent, m.residual_sd          # B (nats/token), its F-profile interval, p, σ̂
    m.lack_of_fit.p_value, m.accepted                       # the gate: the model against one mean per level

Every run of a calibration, baseline and level alike, is one observation: a level run of seed s at mismatch x has
quality q = α_s + τ·(x/B)^p + ε, the baseline run of seed s has q = α_s + ε. The seed effects α_s are fixed: they
absorb what a seed's runs share (data order, sampling uniforms, eval prompts), so the baseline run r, which every
level's replicate r is paired with, is one observation of α_r instead of a noise term repeated in every paired cost
(paired costs fitted as if independent covered 0.72 under an exact power law: review b4). τ is the tolerance (its
rule's plug-in: 5% of the baseline runs' mean; its own error, ≈ 1% of τ, is ignored); ε independent, one variance.
Least squares: for each exponent p on a grid the seed effects are profiled out exactly (within-seed demeaning), and
the cost scale u = τ·B^−p follows from (B, p), so the residual sum of squares RSS(B, p) is a quadratic in u.

The levels' x are measured (`level_log_se`: each level's standard error of its mean log x), and an error δ_l in a
level's log x moves its cost by p·δ_l of itself: at a steep curve's high levels (cost many τ) more than the run noise.
Errors in variables: δ_l ~ N(0, se_l²) is integrated out (linearized), a level-shared random cost of sd
p·cost_l·se_l on top of the run variance (the pure-error one, from one free mean per level), and the objective is
that Gaussian likelihood's −2 log L × σ² (`_x_error_objective`; the plain RSS when no se is given). Taking x as known
and widening the interval's ends in quadrature by z·se covered 0.918, P(B_lo > B) 0.0375, at 800 SmolLM2-protocol
calibrations of a cost ∝ x² truth; this fit 0.966 / 0.014, 0.986 / 0.009 gated on both tests (bench/results/).

The interval is the F-profile (likelihood-ratio) set {B : min_p RSS(B, p) − RSS_min ≤ F(1, dof; conf') · σ̂²} (RSS: the
objective above; conf': `profile_level`), σ̂² the residual sum of squares at the optimum over dof = runs − seeds − 2,
hulled (each end refined between grid points, `_crossing`); an end that leaves the levels' range (below the smallest
level's x or above the largest's) is open (0 or ∞): there the power law would extrapolate. The gate: an F test of the
model against the two-way model with one free mean per level (seed effects kept), `lack_of_fit`; with x errors, also the
power law fitted with each level's x as known (its own optimum), `lack_of_fit_x_known`. `accepted`: both p ≥
LACK_OF_FIT_ALPHA (the errors-in-variables residual is shrunk at high-cost levels, so that test alone passed steep fits
through a step; a refusal costs only width, so no Bonferroni split: docs/calibration.md, "The gate").
`baseline_spread_check`: an F test of the baseline runs' spread against the level runs' (pooled within levels), flagged
at p < 1% in the smaller tail.

Where a run's cost follows its own x and not only its level's (its replicate's actual mismatch; the toy RL calibration),
`run_log_dev` places run i at x_l·exp(λ·dev_i) and fits λ ∈ `X_SHARES` too (`ModelFit.x_run_share`); the
lack-of-fit tests are then against one free mean per level with each run scaled by its own x. `curve._run_x_tier`
uses it only where the level-x model fits but is refused for its run variance (docs/calibration.md).
Pure numpy (scipy.stats for the F quantiles).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

EXPONENTS = np.linspace(0.1, 3.0, 291)  # the grid of p (cost ∝ x^p), step 0.01 (refined: `_min_over_p`)
LOG_B_STEP = 0.01  # resolution of the profile over log B
REFINE_STEPS = 20  # the interval's ends: sub-steps between a grid point and the next (`_crossing`)
FINE_P = 20  # near the optimum and the ends, p on a grid this many times finer (`profile_fine`)
LOG_B_MARGIN = 3.0  # the profile is evaluated this far (in log x) beyond the levels' range
LACK_OF_FIT_ALPHA = 0.05  # the model is used when both lack-of-fit p-values (x with error, x known) are at least this
BASELINE_SPREAD_ALPHA = 0.01
X_SHARES = (0.0, 0.25, 0.5, 0.75, 1.0)  # the grid of λ (each run's own x share) the run-x model profiles over
PROFILE_SHARE = 0.6  # the profile's cutoff is F(1, dof) at 1 − this × (1 − confidence): `profile_level`


def profile_level(confidence: float) -> float:
    """The level of the F-profile's cutoff for a `confidence` interval: 0.97 for 0.95. At the SmolLM2 design's 16
    residual dof the nominal cutoff let the lower end lie above B in 3.75% of 800 calibrations on a linear truth
    (2.5% wanted; 1.75% with this one; 4.4% and 2.25% before the x-error term): the F approximation of a profile
    over a nonlinear B and p is skewed at this size (bench/results/budget_profile_cutoff.json)."""
    return 1.0 - PROFILE_SHARE * (
        1.0 - confidence
    )  # a baseline spread whose F-test p-value (its tail) is below this is flagged


@dataclass(frozen=True)
class LackOfFit:
    """F test of the model against one free mean per level (seed effects in both)."""

    f: float
    dof: tuple[int, int]  # (numerator, denominator)
    p_value: float  # 1.0 when the test has no degrees of freedom (fewer than 3 levels or no replication)

    def to_dict(self) -> dict[str, Any]:
        return {"f": self.f, "dof": list(self.dof), "p_value": self.p_value}


@dataclass(frozen=True)
class ModelFit:
    """The seed-effect power law fitted to every run (module docstring)."""

    value: float  # B̂, nats/token (inf: no rising trend)
    interval: tuple[float, float]  # F-profile interval, open ends 0 / inf
    exponent: float  # p̂
    tau: float  # the τ the model reaches at B
    residual_sd: float  # σ̂, quality units
    dof: int  # runs − seeds − 2
    runs: int
    seeds: int
    lack_of_fit: LackOfFit
    confidence: float
    x_log_se: float = 0.0  # the levels' log-x standard errors the fit integrated over (root mean square; 0: none)
    lack_of_fit_x_known: LackOfFit | None = None  # the same test of the x-as-known fit; None: no x error fitted
    x_run_share: float | None = None  # λ̂: the share of the replicates' log-x spread that is each run's own mismatch
    # (`run_log_dev`); None: every run at its level's x

    @property
    def accepted(self) -> bool:
        """Both lack-of-fit tests pass (module docstring: why both)."""
        tests = (self.lack_of_fit, self.lack_of_fit_x_known)
        return self.dof > 0 and all(t.p_value >= LACK_OF_FIT_ALPHA for t in tests if t is not None)

    def predict(self, x: Any) -> Any:
        """Fitted cost τ·(x/B)^p at mismatch x (nats/token); 0 at x = 0."""
        xa = np.asarray(x, dtype=np.float64)
        if not math.isfinite(self.value):
            out = np.zeros_like(xa)
        else:
            out = self.tau * np.power(np.clip(xa, 0.0, None) / self.value, self.exponent)
        return float(out) if out.ndim == 0 else out

    def to_dict(self) -> dict[str, Any]:
        return (
            {
                "form": "seed_power_law",
                "value": self.value,
                "interval": list(self.interval),
                "exponent": self.exponent,
                "tau": self.tau,
                "residual_sd": self.residual_sd,
                "dof": self.dof,
                "runs": self.runs,
                "seeds": self.seeds,
                "lack_of_fit": self.lack_of_fit.to_dict(),
                "accepted": self.accepted,
                "x_log_se": self.x_log_se,
            }
            | ({"lack_of_fit_x_known": self.lack_of_fit_x_known.to_dict()} if self.lack_of_fit_x_known else {})
            | ({"x_run_share": self.x_run_share} if self.x_run_share is not None else {})
        )


def _min_over_p(rss: np.ndarray) -> np.ndarray:
    """Row minima of RSS over the exponent grid (G, P), refined by a parabola through the grid minimum and its two
    neighbours: RSS is very sensitive to p where costs are many τ (a grid step alone made the interval too narrow)."""
    j0 = np.argmin(rss, axis=1)
    j = np.clip(j0, 1, rss.shape[1] - 2)
    r = np.arange(rss.shape[0])
    a, b, c = rss[r, j - 1], rss[r, j], rss[r, j + 1]
    curv = a - 2 * b + c
    interior = (j0 == j) & (curv > 0)  # the minimum is inside the grid: the parabola's vertex lies in [j − 1, j + 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        refined = np.where(interior, b - (c - a) ** 2 / (8 * curv), rss[r, j0])
    return np.clip(refined, 0.0, None)


def _profile_minimum(profile: np.ndarray, step: float = LOG_B_STEP) -> tuple[int, float, float]:
    """(grid index, minimum, its offset in log B) of a profile over the log-B grid: a parabola through the minimum
    and its neighbours refines both (the grid step is 1% of B)."""
    i = int(np.argmin(profile))
    rss_min, shift = float(profile[i]), 0.0
    if 0 < i < profile.size - 1:
        a, b, c = profile[i - 1], profile[i], profile[i + 1]
        if a - 2 * b + c > 0:
            rss_min = max(float(b - (c - a) ** 2 / (8 * (a - 2 * b + c))), 0.0)
            shift = step * float((a - c) / (2 * (a - 2 * b + c)))
    return i, rss_min, shift


def _crossing(profile_at, x0: float, points: np.ndarray, cut: float) -> float:
    """Where the profile crosses `cut` going out from the log-B value `x0` (inside) through the grid `points` in
    order: the profile (`profile_at`, p refined) on `REFINE_STEPS` sub-steps of each step, linear between the two that
    straddle the cut; a step whose far end is still inside (the coarse profile overestimated it) is walked past. At the
    grid alone an interval narrower than a step was one point, and B̂ (refined off the grid) could lie outside it."""
    prev = float(x0)
    for nxt in points:
        fine = np.linspace(prev, float(nxt), REFINE_STEPS + 1)
        prof = profile_at(fine)
        out = prof > cut
        if out.any():
            k = int(np.argmax(out))
            if k == 0:  # the start itself is out at this precision
                return prev
            w = (cut - prof[k - 1]) / (prof[k] - prof[k - 1])
            return float(fine[k - 1] + w * (fine[k] - fine[k - 1]))
        prev = float(nxt)
    return prev  # the grid's end: open (beyond the levels' range)


def _demean(v: np.ndarray, seed_idx: np.ndarray, n_seeds: int) -> np.ndarray:
    """v minus its seed's mean (the projection off the seed effects); v: (N,) or (N, K)."""
    counts = np.bincount(seed_idx, minlength=n_seeds).astype(np.float64)
    if v.ndim == 1:
        return v - (np.bincount(seed_idx, weights=v, minlength=n_seeds) / counts)[seed_idx]
    sums = np.zeros((n_seeds, v.shape[1]))
    np.add.at(sums, seed_idx, v)
    return v - (sums / counts[:, None])[seed_idx]


def _rss_of(design: np.ndarray, y: np.ndarray) -> tuple[float, int]:
    coef, _, rank, _ = np.linalg.lstsq(design, y, rcond=None)
    r = y - design @ coef
    return float(r @ r), int(rank)


def fit_seed_power_law(
    seeds: Any,
    x: Any,
    quality: Any,
    levels: Any,
    tau: float,
    confidence: float = 0.95,
    level_log_se: Mapping[str, float] | None = None,
    run_log_dev: Any = None,
) -> ModelFit:
    """The model fitted to every run: `seeds` (run's seed or replicate id), `x` (mismatch, 0 for a baseline run),
    `quality`, `levels` (level name per run: the lack-of-fit test's groups), `tau` (> 0, quality units),
    `level_log_se` (level name -> standard error of its log x: the levels' x are measured, `_x_error_terms`).

    `run_log_dev` (per run: its own log x minus `x`'s log, 0 for a baseline run): where a run's cost follows its own
    x in part, not only its level's. The model then places run i at x·exp(λ·dev_i) and fits λ too (profiled over
    `X_SHARES`, one more parameter): λ is the share of the replicates' log-x spread that is the run's actual mismatch,
    the rest (1 − λ) the probe's measurement error, so each level's x error shrinks to se_l·√(1 − λ). The lack-of-fit
    tests are then against one free mean per level with each run scaled by its own x, m_l·exp(p̂·λ̂·dev_i)
    (the power law is that model with m_l = τ(x_l/B)^p); with λ = 0 everything is the level-x model's."""
    from scipy import stats  # deferred: `validate` reads artifacts and must start fast

    if not tau > 0:
        raise ValueError(f"tolerance must be > 0, got {tau}")
    _, sidx = np.unique(np.asarray(seeds), return_inverse=True)
    xa, y = np.asarray(x, dtype=np.float64), np.asarray(quality, dtype=np.float64)
    lab = np.asarray(levels)
    pert = xa > 0
    if not pert.any():
        raise ValueError("no perturbed run to fit")
    n, s = y.size, int(sidx.max()) + 1
    shares: tuple[float | None, ...] = (None,)
    dev = np.zeros(n)
    if run_log_dev is not None:
        dev = np.where(pert, np.asarray(run_log_dev, dtype=np.float64), 0.0)
        shares = X_SHARES
    dof = n - s - 2 - (run_log_dev is not None)
    x_lo, x_hi = float(xa[pert].min()), float(xa[pert].max())
    lb = np.arange(math.log(x_lo) - LOG_B_MARGIN, math.log(x_hi) + LOG_B_MARGIN, LOG_B_STEP)  # (G,) log B
    u = tau * np.exp(-np.outer(lb, EXPONENTS))  # (G, P) cost scale τ·B^−p
    ry = _demean(y, sidx, s)  # (N,)
    lof_full = _pure_error(sidx, s, y, lab, pert)  # (RSS, dof) of one free mean per level
    s2_pure = lof_full[0] / lof_full[1] if lof_full[1] > 0 and lof_full[0] > 0 else math.nan
    se_all = {k: float(v) for k, v in (level_log_se or {}).items() if v > 0}
    with_error = math.isfinite(s2_pure)  # the errors-in-variables objective needs the pure-error variance

    def make_terms(exps: np.ndarray) -> list[tuple]:
        """Per λ: (x^p, its seed-demeaned form, ry·rg, rg·rg, the levels' log-x se) on the exponent grid `exps`."""
        out = []
        for lam in shares:
            share = 0.0 if lam is None else lam
            lx = np.log(np.where(pert, xa, 1.0)) + share * dev
            g = np.where(pert[:, None], np.exp(np.outer(lx, exps)), 0.0)  # (N, P) x^p
            rg = _demean(g, sidx, s)  # (N, P)
            se = {k: v * math.sqrt(1.0 - share) for k, v in se_all.items()} if share < 1.0 else {}
            out.append((g, rg, ry @ rg, np.einsum("np,np->p", rg, rg), se))
        return out

    def objective(tm: tuple, uu: np.ndarray, exps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(objective, its penalty, plain RSS), each (G', P), of one λ's terms at cost scales uu (G', P)."""
        g, rg, ryg, rgg, se = tm
        rss = float(ry @ ry) - 2 * uu * ryg + uu**2 * rgg  # RSS(B, p)
        if not (se and with_error):
            return rss, np.zeros_like(rss), rss
        obj, pen = _x_error_objective(g, sidx, s, lab, se, ry, rg, uu, s2_pure, exps)
        return obj, pen, rss

    terms = make_terms(EXPONENTS)

    def profile_fine(
        lbv: np.ndarray, plain: int | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The profile at the log-B values `lbv` with p on a grid `FINE_P` times finer around the coarse grid's
        optima there (a step of 0.01 in p is coarse where costs are many τ: the parabola through three grid points
        then misjudged the minimum by more than the profile's cut, and an interval of hi/lo ~1.01 covered 0.915 in
        simulation): (profile, and at each row's optimum: λ index, p, penalty). `plain`: the plain RSS of that λ
        index alone (the x-as-known fit's profile)."""
        pick = [plain] if plain is not None else list(range(len(terms)))
        col = 0 if plain is None else 2
        uu = tau * np.exp(-np.outer(lbv, EXPONENTS))
        j0 = np.concatenate([np.argmin(objective(terms[k], uu, EXPONENTS)[col], axis=1) for k in pick])
        jlo, jhi = max(int(j0.min()) - 1, 0), min(int(j0.max()) + 1, EXPONENTS.size - 1)
        exps = np.linspace(EXPONENTS[jlo], EXPONENTS[jhi], (jhi - jlo) * FINE_P + 1)
        uf = tau * np.exp(-np.outer(lbv, exps))
        fine_terms = make_terms(exps)
        per = [objective(fine_terms[k], uf, exps) for k in pick]
        if plain is not None:
            per = [(o[2], np.zeros_like(o[2]), o[2]) for o in per]
        mins = np.stack([_min_over_p(o[0]) for o in per])  # (Λ, G')
        kk = np.argmin(mins, axis=0)
        rows = np.arange(lbv.size)
        jj = np.array([int(np.argmin(per[k][0][r])) for r, k in zip(rows, kk)])
        pen = np.array([float(per[k][1][r, j]) for r, k, j in zip(rows, kk, jj)])
        return mins[kk, rows], np.asarray(pick)[kk], exps[jj], pen

    def refined_minimum(prof: np.ndarray, plain: int | None = None) -> tuple[int, float, float, tuple | None]:
        """(coarse index, minimum, its log B, and at it (λ index, p, penalty) or None at the grid's ends) of a coarse
        profile, refined on the finer grids (`profile_fine`) when the minimum is inside the grid."""
        i, mn, shift = _profile_minimum(prof)
        if not 0 < i < lb.size - 1:
            return i, mn, float(lb[i]) + shift, None
        fine_lb = np.linspace(lb[i - 1], lb[i + 1], 2 * FINE_P + 1)
        fp, kk, pp, pen = profile_fine(fine_lb, plain)
        m, mn, shift = _profile_minimum(fp, LOG_B_STEP / FINE_P)
        return i, mn, float(fine_lb[m]) + shift, (int(kk[m]), float(pp[m]), float(pen[m]))

    fits = []  # per λ: (objective, penalty, plain RSS (coarse) or None, se)
    for k in range(len(terms)):
        obj, penalty, rss = objective(terms[k], u, EXPONENTS)
        fits.append((obj, penalty, rss if terms[k][4] and with_error else None, terms[k][4]))
    per_share = np.stack([_min_over_p(f[0]) for f in fits])  # (Λ, G) min over p
    profile = per_share.min(axis=0)  # (G,) min over p (and λ)
    # B̂ and RSS_min: the profile's minimum (at the grid's top end: no rising trend, B̂ = ∞), refined inside the grid
    i, rss_min, lb_hat, at = refined_minimum(profile)
    if at is None:
        k = int(np.argmin(per_share[:, i]))
        j = int(np.argmin(fits[k][0][i]))
        p_hat, pen_hat = float(EXPONENTS[j]), float(fits[k][1][i, j])
    else:
        k, p_hat, pen_hat = at
    plain_rss, se = fits[k][2], fits[k][3]
    # the x-as-known fit's own optimum (plain RSS), for the second lack-of-fit test (module docstring)
    known_min = refined_minimum(_min_over_p(plain_rss), plain=k)[1] if plain_rss is not None else None
    lam_hat = shares[k]
    value = math.exp(lb_hat) if i < lb.size - 1 else math.inf
    fit_min = max(rss_min - pen_hat, 0.0)  # the residual sum of squares at the optimum
    s2 = fit_min / dof if dof > 0 else math.nan
    lo, hi = 0.0, math.inf
    cut = rss_min + stats.f.ppf(profile_level(confidence), 1, dof) * s2 if dof > 0 else math.inf
    if math.isfinite(cut):  # the coarse hull's ends, each refined and walked out between grid points (`_crossing`)
        inside = np.flatnonzero(profile <= cut)

        def end(idx: int | None, step: int) -> float:
            """The interval's end in direction `step`, from the coarse hull's end `idx` if it is inside at the finer
            p, else from B̂ (an interval narrower than a grid step)."""
            if idx is not None and profile_fine(lb[idx : idx + 1])[0][0] <= cut:
                x0, nxt = float(lb[idx]), idx + step
            else:
                x0 = lb_hat
                nxt = int(np.searchsorted(lb, lb_hat)) - 1 if step < 0 else int(np.searchsorted(lb, lb_hat, "right"))
            points = lb[nxt::-1] if step < 0 else lb[nxt:]
            return _crossing(lambda v: profile_fine(v)[0], x0, points if nxt >= 0 else lb[:0], cut)

        lo = math.exp(end(int(inside.min()) if inside.size else None, -1))
        hi = math.exp(end(int(inside.max()) if inside.size else None, 1))
    lo = 0.0 if lo < x_lo else lo  # below the smallest level: the power law would extrapolate
    hi = math.inf if hi > x_hi else hi
    scale = np.exp(p_hat * (lam_hat or 0.0) * dev)  # each run's cost against its level's, in the saturated model
    lof_x_known = lack_of_fit(sidx, s, y, lab, pert, known_min, dof, scale) if known_min is not None else None
    return ModelFit(
        value=value,
        interval=(lo, hi),
        exponent=p_hat,
        tau=float(tau),
        residual_sd=math.sqrt(s2) if dof > 0 else math.nan,
        dof=dof,
        runs=n,
        seeds=s,
        lack_of_fit=lack_of_fit(sidx, s, y, lab, pert, fit_min, dof, scale),
        confidence=confidence,
        x_log_se=float(np.sqrt(np.mean(np.square(list(se.values()))))) if se else 0.0,
        lack_of_fit_x_known=lof_x_known,
        x_run_share=lam_hat,
    )


def _pure_error(sidx, n_seeds, y, levels, pert) -> tuple[float, int]:
    """(RSS, dof) of seed effects + one free mean per level: the run variance free of the curve's shape."""
    names = sorted(set(levels[pert].tolist()))
    z = np.zeros((y.size, n_seeds))
    z[np.arange(y.size), sidx] = 1.0
    lv = np.stack([(levels == nm) & pert for nm in names], axis=1).astype(np.float64)
    rss_full, rank = _rss_of(np.c_[z, lv], y)
    return rss_full, y.size - rank


def _x_error_objective(g, sidx, n_seeds, levels, se, ry, rg, u, s2, exps=EXPONENTS) -> tuple[np.ndarray, np.ndarray]:
    """(G, P) twice: the objective that replaces RSS(B, p) when each level's log x is measured with standard error se_l
    (errors in variables): −2 log-likelihood × s2 of the runs with the level's true log x = measured + δ_l,
    δ_l ~ N(0, se_l²), linearized in δ (a run's cost τ(x e^δ / B)^p ≈ τ(x/B)^p (1 + p δ)) and integrated out: a
    level-shared random cost of sd p·cost_l·se_l on top of the run noise s2 (the pure-error variance). With
    H_p = seed-demeaned (run in level l)·x^p, M = H_p diag(se), MᵀM = V diag(e) Vᵀ, c = VᵀMᵀ(ry − u rg_p) and
    t = e (p u)² / s2 it is ‖P⊥(ry − u rg_p)‖² + Σ_k c_k² / (e_k (1 + t_k)) + s2 Σ_k log(1 + t_k): the part off
    span(H) is untouched, the part on it is shrunk (Woodbury), and the log-determinant keeps a steep curve from
    explaining every level by its x error (returned apart: the objective less it is the residual sum of squares
    that σ̂ and the lack-of-fit test read). Written so that no term grows like u² where a level's cost is huge."""
    names = sorted(se)
    ind = np.stack([levels == nm for nm in names], axis=1).astype(np.float64)  # (N, L)
    n, nl, npw = g.shape[0], len(names), g.shape[1]
    h = _demean((ind[:, :, None] * g[:, None, :]).reshape(n, -1), sidx, n_seeds).reshape(n, nl, npw)  # (N, L, P)
    root = np.array([se[nm] for nm in names])  # (L,) diag(se)
    mtm = np.einsum("nlp,nkp->plk", h, h) * root[None, :, None] * root[None, None, :]  # (P, L, L)
    e, v = np.linalg.eigh(mtm)  # (P, L), (P, L, L)
    a = np.einsum("plk,pl->pk", v, np.einsum("nlp,n->pl", h, ry) * root)  # (P, L) VᵀMᵀ ry
    b = np.einsum("plk,pl->pk", v, np.einsum("nlp,np->pl", h, rg) * root)  # (P, L) VᵀMᵀ rg_p
    live = e > 1e-12 * e.max(axis=1, keepdims=True)  # directions inside span(H)
    inv_e = np.where(live, 1.0 / np.where(live, e, 1.0), 0.0)
    ryy = float(ry @ ry)
    yy = ryy - np.sum(a**2 * inv_e, axis=1)  # (P,) ‖P⊥ ry‖²
    gg = np.einsum("np,np->p", rg, rg) - np.sum(b**2 * inv_e, axis=1)
    yg = ry @ rg - np.sum(a * b * inv_e, axis=1)
    small = gg <= 1e-10 * np.einsum("np,np->p", rg, rg)  # rg_p lies in span(H): no u² term (rounding only)
    gg, yg = np.where(small, 0.0, gg), np.where(small, 0.0, yg)
    t = np.where(live, e, 0.0)[None] * ((exps[None, :] * u) ** 2 / s2)[:, :, None]  # (G, P, L) e / λ
    c2 = (a[None] - u[:, :, None] * b[None]) ** 2
    with np.errstate(over="ignore", invalid="ignore"):
        on = np.sum(np.where(live[None], c2 * inv_e[None] / (1.0 + t), 0.0), axis=2)
        logdet = np.sum(np.log1p(t), axis=2)
    off = np.clip(yy[None] - 2 * u * yg[None] + u**2 * gg[None], 0.0, None)
    penalty = s2 * logdet
    return np.nan_to_num(off + on + penalty, nan=np.inf), np.nan_to_num(penalty, nan=np.inf)


def lack_of_fit(sidx, n_seeds, y, levels, pert, rss_model, dof_model, scale=None) -> LackOfFit:
    """F test of the model (RSS `rss_model`, `dof_model`) against seed effects + one free mean per level (`scale`:
    each run's multiplier of its level's mean, the run-x model's exp(p̂·λ̂·dev); None: 1)."""
    from scipy import stats

    names = sorted(set(levels[pert].tolist()))
    z = np.zeros((y.size, n_seeds))
    z[np.arange(y.size), sidx] = 1.0
    lv = np.stack([(levels == nm) & pert for nm in names], axis=1).astype(np.float64)
    if scale is not None:
        lv = lv * np.asarray(scale, dtype=np.float64)[:, None]
    rss_full, rank = _rss_of(np.c_[z, lv], y)
    dof_full = y.size - rank
    d1 = dof_model - dof_full
    if d1 <= 0 or dof_full <= 0 or rss_full <= 0:
        return LackOfFit(math.nan, (max(d1, 0), max(dof_full, 0)), 1.0)
    f = max(rss_model - rss_full, 0.0) / d1 / (rss_full / dof_full)
    return LackOfFit(float(f), (d1, dof_full), float(stats.f.sf(f, d1, dof_full)))


@dataclass(frozen=True)
class SpreadCheck:
    """The baseline runs' spread against the level runs' (pooled within levels): F = s²_baseline / s²_levels."""

    baseline_sd: float
    runs_sd: float
    f: float
    dof: tuple[int, int]
    p_value: float  # the tail the ratio lies in (small: implausibly small or large baseline spread)
    flagged: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline_sd": self.baseline_sd,
            "runs_sd": self.runs_sd,
            "f": self.f,
            "dof": list(self.dof),
            "p_value": self.p_value,
            "flagged": self.flagged,
            "rule": f"F test of the baseline runs' variance against the level runs' (pooled within levels); "
            f"flagged when the p-value of the tail the ratio lies in is < {BASELINE_SPREAD_ALPHA:g}",
        }


def baseline_spread_check(baseline: Any, level_runs: list[Any]) -> SpreadCheck | None:
    """`SpreadCheck` of the baseline qualities against the levels' run qualities (one array per level); None
    without two baselines or any level with two runs."""
    from scipy import stats

    b = np.asarray(baseline, dtype=np.float64)
    groups = [np.asarray(v, dtype=np.float64) for v in level_runs if len(v) > 1]
    if b.size < 2 or not groups:
        return None
    d_lv = sum(v.size - 1 for v in groups)
    s2_lv = sum(float(((v - v.mean()) ** 2).sum()) for v in groups) / d_lv
    s2_b = float(b.var(ddof=1))
    if not s2_lv > 0:
        return None
    f = s2_b / s2_lv
    cdf = float(stats.f.cdf(f, b.size - 1, d_lv))
    p = min(cdf, 1.0 - cdf)
    return SpreadCheck(math.sqrt(s2_b), math.sqrt(s2_lv), f, (b.size - 1, d_lv), p, p < BASELINE_SPREAD_ALPHA)
