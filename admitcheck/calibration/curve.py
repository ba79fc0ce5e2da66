# long module: one estimator: monotone fit, tau, budget inverse, the bootstrap re-running them
"""The budget from a calibration's paired runs: the seed-effect model, its gate, the shape-free bracket (issue 34).

    levels = [LevelData("noise-1", x=(1e-3, 1.1e-3), cost=(0.001, -0.002), replicates=(0, 1)), ...]
    est = estimate(levels, baseline={0: 0.43, 1: 0.44}, tolerance=Tolerance(relative=0.05))
    est.budget.value, est.budget.interval, est.method, est.method_reason   # nats/token; "model" or "bracket"
    est.model, est.bracket, est.spread_check, est.fit                      # the pieces; est.curve: the one used

Data: a level's replicate r is a pair of runs sharing every random number (data order, rollout uniforms, eval
seeds) — the level's run and the baseline's run r — and its cost is their quality difference; x is the level's
mismatch in that replicate. `estimate` turns the pairs back into runs (a level run's quality = its cost + its
baseline's) and fits **one model over every run** (`model.fit_seed_power_law`: quality = seed effect + τ·(x/B)^p,
the baseline = the seed effect, each level's x a measurement with its standard error; its F-profile interval),
which makes the budget when its gate passes (`_gate`: lack of fit, one run variance, B inside the levels' range);
where it fits but its level runs spread more than the baselines, the model with each run at its own x in part
(`_run_x_tier`: λ fitted; `RUN_X_TIER`, on since 2026-12-06) makes it if that passes the whole gate; with
`local_model` (the run-averaged budget's, `fit.fit_runs`), and for the tier's model, that model is refitted on the
levels around its B̂ (`_local_refit`), which must pass the gate too.
Otherwise the budget is the isotonic fit's crossing of τ (`fit_levels`, `budget_of`: pool-adjacent-violators on the
levels' mean costs, linear in log x on log(max(cost, 0) + δ) between levels, δ = OFFSET_SHARE · τ) with **the
shape-free bracket** as its interval (`level_bracket`: each level's own Student-t test, a fixed sequence from each
end, α split over the rounds looked at). The bracket is always computed and kept beside the model (a diagnostic).
Kinds of the isotonic budget:

- "point": the fitted cost crosses τ between two levels;
- "upper_bound" (below the smallest level): the fitted cost exceeds τ already at the smallest level;
- "lower_bound": no level reaches τ, B > the largest level.

τ is the user's quality goal: `relative` × the baseline runs' mean quality, or `absolute`. Noise never enters τ; it
enters the interval. `n_boot` > 0 adds the isotonic fit's bootstrap draws (resampled pairs and baselines, τ
re-estimated in each; deviations t-scaled): a diagnostic kept for budget ratios (`compare`), not the interval.
Pure numpy (scipy.stats for quantiles); deterministic given the seed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from admitcheck.calibration.model import (
    BASELINE_SPREAD_ALPHA,
    LACK_OF_FIT_ALPHA,
    ModelFit,
    SpreadCheck,
    baseline_spread_check,
    fit_seed_power_law,
)

BudgetKind = Literal["point", "lower_bound", "upper_bound"]


@dataclass(frozen=True)
class LevelData:
    """One level's replicate pairs: x (mismatch, nats/token) and paired quality cost (nats/token) per replicate."""

    name: str
    x: tuple[float, ...]
    cost: tuple[float, ...]
    replicates: tuple[int, ...] | None = None  # the replicate (baseline run) each pair shares; None: 0, 1, ...

    def __post_init__(self) -> None:
        if len(self.x) != len(self.cost) or not self.x:
            raise ValueError(f"level {self.name}: x and cost need the same, nonzero length")
        if self.replicates is not None and len(self.replicates) != len(self.x):
            raise ValueError(f"level {self.name}: one replicate per pair")


@dataclass(frozen=True)
class Tolerance:
    """τ: `relative` × mean baseline quality, or `absolute` (nats/token) when set."""

    relative: float = 0.05
    absolute: float | None = None

    def of(self, baseline_mean: float) -> float:
        return float(self.absolute) if self.absolute is not None else self.relative * abs(baseline_mean)

    def rule(self) -> str:
        if self.absolute is not None:
            return f"absolute: τ = {self.absolute:g} nats/token"
        return f"relative: τ = {self.relative:g} × baseline mean quality"


@dataclass(frozen=True)
class MonotoneFit:
    """A non-decreasing cost curve through fitted points (x ascending, > 0); see the module docstring."""

    x: tuple[float, ...]  # level mismatch, nats/token, strictly increasing
    cost: tuple[float, ...]  # fitted (isotonic) cost at each x, non-decreasing, nats/token
    form: str = "isotonic"
    offset: float = 0.0  # δ of the interpolation, nats/token (0: linear in log x; artifacts before it)

    def _h(self, c: float) -> float:
        """log(max(c, 0) + δ): the scale on which a segment is linear in log x."""
        return math.log(max(c, 0.0) + self.offset)

    def _shape(self, a: float, b: float, t: float) -> float:
        """Share of the rise from a to b reached at t ∈ [0, 1] along log x: t itself when δ = 0 (linear in log x),
        else linear in log x on log(max(c, 0) + δ) — a power law where both costs are ≫ δ, a line where they are ≪ δ,
        and continuous in a and b however they compare with 0."""
        if not (self.offset > 0 and b > 0) or b <= a:
            return t
        ha, hb = self._h(a), self._h(b)
        return (math.exp(ha + t * (hb - ha)) - math.exp(ha)) / (math.exp(hb) - math.exp(ha))

    def predict(self, x: Any) -> Any:
        """Fitted cost at mismatch x (scalar or array, nats/token); 0 at x = 0."""
        xa = np.asarray(x, dtype=np.float64)
        out = np.vectorize(self._at, otypes=[np.float64])(xa) if xa.ndim else np.float64(self._at(float(xa)))
        return float(out) if np.ndim(out) == 0 else out

    def _at(self, x: float) -> float:
        """The curve at x, floored at 0 (a cost of 0 at x = 0 and fitted costs below 0 would not be monotone)."""
        return max(self._raw(x), 0.0)

    def _raw(self, x: float) -> float:
        xs, cs = self.x, self.cost
        if not x > 0:
            return 0.0
        if x <= xs[0]:
            return max(cs[0], 0.0) * x / xs[0] if x < xs[0] else cs[0]
        if x >= xs[-1]:
            return cs[-1]
        i = int(np.searchsorted(xs, x))  # xs[i-1] < x <= xs[i]
        t = (math.log(x) - math.log(xs[i - 1])) / (math.log(xs[i]) - math.log(xs[i - 1]))
        a, b = cs[i - 1], cs[i]
        return a + (b - a) * self._shape(a, b, t)

    def inverse(self, cost: float) -> float:
        """Smallest mismatch where the curve reaches `cost`: inf if it never does (flat above the largest level)."""
        xs, cs = self.x, self.cost
        if cost <= 0:
            return 0.0
        if cs[0] >= cost:  # on the segment from (0, 0) to the first point
            return xs[0] * cost / cs[0]
        i = next((j for j in range(1, len(xs)) if cs[j] >= cost), None)
        if i is None:
            return math.inf
        a, b = cs[i - 1], cs[i]
        la, lb = math.log(xs[i - 1]), math.log(xs[i])
        u = (cost - a) / (b - a)  # the share of the segment's rise
        if self.offset > 0 and b > 0:
            ea, eb = math.exp(self._h(a)), math.exp(self._h(b))
            t = (math.log(ea + u * (eb - ea)) - self._h(a)) / (self._h(b) - self._h(a))
        else:
            t = u
        return math.exp(la + t * (lb - la))

    def to_dict(self) -> dict[str, Any]:
        return {"form": self.form, "x": list(self.x), "cost": list(self.cost), "offset": self.offset}


@dataclass(frozen=True)
class CurveFit:
    """A schema-1 style log-logistic curve (plateau · expit(p (log x − log x50))), kept only to read such curves."""

    form: str
    plateau: float  # the cost the curve levels off at
    x50: float  # the mismatch at half the plateau, nats/token
    steepness: float  # the slope in log x

    def predict(self, x: Any) -> Any:
        from scipy.special import expit  # deferred: `validate` reads artifacts and must start fast

        c, x50, p = self.plateau, self.x50, self.steepness
        xa = np.asarray(x, dtype=np.float64)
        with np.errstate(divide="ignore"):
            out = c * expit(p * (np.log(xa) - math.log(x50)))
        return float(out) if out.ndim == 0 else out

    def inverse(self, cost: float) -> float:
        from scipy.special import logit

        c, x50, p = self.plateau, self.x50, self.steepness
        if cost <= 0:
            return 0.0
        return math.inf if cost >= c else math.exp(math.log(x50) + float(logit(cost / c)) / p)


@dataclass(frozen=True)
class Budget:
    """Mismatch budget B (nats/token) where the fitted cost reaches τ; kinds in the module docstring."""

    value: float
    kind: BudgetKind
    interval: tuple[float, float]  # bootstrap percentile interval; (value, inf) / (0, value) for bounds
    tolerance: float  # τ, nats/token
    extrapolated: bool = False  # kept for readers of older artifacts; the monotone fit never extrapolates
    n_boot: int = 0


def isotonic(y: Any, w: Any) -> np.ndarray:
    """Weighted least-squares non-decreasing fit of y (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [value, weight, count]
    for yi, wi in zip(np.asarray(y, dtype=np.float64), np.asarray(w, dtype=np.float64)):
        blocks.append([float(yi), float(wi), 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            v2, w2, n2 = blocks.pop()
            v1, w1, n1 = blocks.pop()
            blocks.append([(v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, n1 + n2])
    return np.concatenate([np.full(int(n), v) for v, _, n in blocks])


OFFSET_SHARE = 0.1  # δ = this × τ: the interpolation is a power law well above δ, linear in log x well below it


def fit_levels(x: Any, mean_cost: Any, n: Any, offset: float = 0.0) -> MonotoneFit:
    """The monotone fit of level means (x ascending after sorting; equal x merged by weight); `offset`: δ."""
    xa, ya, na = (np.asarray(v, dtype=np.float64) for v in (x, mean_cost, n))
    if not (np.all(xa > 0) and np.all(np.isfinite(xa)) and np.all(np.isfinite(ya))):
        raise ValueError("level mismatch must be finite and > 0, costs finite")
    ux, inv = np.unique(xa, return_inverse=True)
    wy = np.bincount(inv, weights=ya * na) / np.bincount(inv, weights=na)
    cost = tuple(float(v) for v in isotonic(wy, np.bincount(inv, na)))
    return MonotoneFit(tuple(float(v) for v in ux), cost, offset=float(offset))


def budget_of(fit: MonotoneFit, tau: float) -> tuple[float, BudgetKind, tuple[int, ...]]:
    """(B, kind, indices of the fitted points that decided it) for threshold τ."""
    if not tau > 0:
        raise ValueError(f"tolerance must be > 0 nats/token, got {tau}")
    cs = fit.cost
    above = [i for i, c in enumerate(cs) if c > tau]
    if not above:
        return fit.x[-1], "lower_bound", (len(cs) - 1,)
    i = above[0]
    if i == 0:
        return fit.x[0], "upper_bound", (0,)
    return fit.inverse(tau), "point", (i - 1, i)


def _percentile_interval(values: np.ndarray, confidence: float) -> tuple[float, float]:
    """Percentile interval by order statistics (inf-safe: no interpolation between an inf and a number)."""
    v = np.sort(values)
    alpha = 1.0 - confidence
    return float(v[math.floor(alpha / 2 * (v.size - 1))]), float(v[math.ceil((1 - alpha / 2) * (v.size - 1))])


def _spread(n: int, dof: int, confidence: float) -> float:
    """Scale of resampled deviations about a level's mean with n replicates: √(n/(n−1)) (unbiased variance) ×
    t_dof/z at the interval's level, dof pooled over all levels (Σ (nᵢ − 1)): a percentile interval of a mean of few
    replicates is then as wide as its t interval. (A plain bootstrap of 2–3 replicates covered ~70% in simulation;
    the level's own dof, t₁ = 12.7 for two replicates, blew a far level's spread up ninefold.)"""
    from scipy.stats import norm  # deferred: `validate` reads artifacts and must start fast
    from scipy.stats import t as student_t

    if n < 2:
        return 1.0
    q = 0.5 + confidence / 2
    return math.sqrt(n / (n - 1)) * float(student_t.ppf(q, max(dof, 1)) / norm.ppf(q))


def _resample(v: np.ndarray, idx: np.ndarray, spread: float) -> np.ndarray:
    """Replicates resampled by `idx`, their deviations about the mean scaled by `spread` (`_spread`)."""
    m = v.mean()
    return m + spread * (v[idx] - m)


@dataclass(frozen=True)
class Bracket:
    """The shape-free bracket (`level_bracket`): B lies in [lo, hi] for any non-decreasing cost curve."""

    interval: tuple[float, float]  # nats/token; 0 / inf where no level is surely below / above τ
    below: str | None  # the level whose x sets the lower end (the last of the walk up), None: 0
    above: str | None  # the level whose x sets the upper end (the last of the walk down), None: inf
    level_alpha: float  # one-sided level of each level's test (α/2 over the looks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "interval": list(self.interval),
            "below": self.below,
            "above": self.above,
            "level_alpha": self.level_alpha,
            "rule": "walk up from the smallest level while each is surely below τ, down from the largest while each "
            "is surely above (fixed sequence); a level is surely below when the one-sided Student-t bound (its own "
            "n − 1 degrees of freedom) of its mean paired cost minus τ's share of its pairs' baselines is < 0; "
            "the end is that level's x, widened by its own spread",
        }


def level_bracket(
    xs: list[np.ndarray],
    zs: list[np.ndarray],
    names: tuple[str, ...],
    confidence: float,
    looks: int = 1,
) -> Bracket:
    """The budget's shape-free bracket from per-level Student-t tests, each with its own n − 1 degrees of freedom, in
    a fixed sequence. xs, zs: per level (ascending mean x), the pairs' x and z = paired cost − τ's share (relative
    τ: `relative` × the pair's baseline quality, so that E z = true cost − true τ; absolute: τ). Walking up from the
    smallest level while each is surely below τ (one-sided bound at α/2/looks) stops at the first that is not; B is
    above the last one's x. The first wrong "surely below" needs a level with true cost ≥ τ, i.e. the first such
    level in the walk, so the lower end errs with probability ≤ α/2 for any non-decreasing curve (review b1/c1: a
    union over all levels with pooled dof gave 8.5–11%). `looks`: the rounds whose estimates the design looked at
    (Bonferroni over them). The x end: the level's geometric-mean x moved by its own log-x spread at the same
    level."""
    from scipy.stats import norm
    from scipy.stats import t as student_t

    a = (1.0 - confidence) / 2.0 / max(looks, 1)
    below, above, x_lo, x_hi = [], [], [], []
    for x, z in zip(xs, zs):
        n = z.size
        lx = np.log(x)
        sx = float(lx.std(ddof=1)) / math.sqrt(n) if n > 1 else 0.0
        x_lo.append(math.exp(lx.mean() - norm.ppf(1 - a) * sx))
        x_hi.append(math.exp(lx.mean() + norm.ppf(1 - a) * sx))
        if n < 2:
            below.append(False)
            above.append(False)
            continue
        half = float(student_t.ppf(1 - a, n - 1)) * float(z.std(ddof=1)) / math.sqrt(n)
        below.append(float(z.mean()) + half < 0)
        above.append(float(z.mean()) - half > 0)
    k = 0
    while k < len(below) and below[k]:
        k += 1
    j = len(above) - 1
    while j >= 0 and above[j]:
        j -= 1
    lo, lo_by = (x_lo[k - 1], names[k - 1]) if k > 0 else (0.0, None)
    hi, hi_by = (x_hi[j + 1], names[j + 1]) if j + 1 < len(above) else (math.inf, None)
    return Bracket((float(lo), float(hi)), lo_by, hi_by, a)


Method = Literal["model", "bracket"]


@dataclass(frozen=True)
class Estimate:
    """Everything `estimate` derives: the budget (from the model, or the bracket when the model is refused), the
    model, the bracket, the isotonic fit, τ, the levels' means and intervals."""

    fit: MonotoneFit  # the isotonic fit of the level means (the curve when the model is refused)
    tau: float
    baseline_mean: float
    budget: Budget
    draws: tuple[float, ...]  # bootstrap B of the isotonic fit (0 = below the smallest level, inf = above)
    decided_by: tuple[str, ...]  # the levels whose x bracket B (the model's) or set the bracket's ends
    level_means: tuple[float, ...]  # mean paired cost per level (ascending x)
    level_intervals: tuple[tuple[float, float], ...]  # Student-t interval of each level's mean cost (own dof)
    names: tuple[str, ...]  # level names (ascending x)
    method: Method = "bracket"
    method_reason: str = ""
    model: ModelFit | None = None  # the model that made the budget, or was refused (`local_model`: the local refit)
    model_all_levels: ModelFit | None = None  # the model on every level (the gate's first test); = model unless local
    bracket: Bracket | None = None
    isotonic: tuple[float, BudgetKind] = (math.nan, "point")  # the isotonic fit's B and kind
    spread_check: SpreadCheck | None = None
    level_x: tuple[float, ...] = ()  # geometric-mean x per level (ascending)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def width_factor(self) -> float:
        """hi / lo of the budget interval (inf when either end is 0 or ∞)."""
        lo, hi = self.budget.interval
        return hi / lo if lo > 0 and math.isfinite(hi) else math.inf

    @property
    def curve(self) -> Any:
        """The curve the budget was read from: the model when it was used, else the isotonic fit."""
        return self.model if self.method == "model" else self.fit


def _baseline_map(baseline: Any) -> dict[int, float]:
    if isinstance(baseline, Mapping):
        return {int(k): float(v) for k, v in baseline.items()}
    return {i: float(v) for i, v in enumerate(np.asarray(baseline, dtype=np.float64).ravel())}


def estimate(
    levels: list[LevelData],
    baseline: Any,
    tolerance: Tolerance,
    *,
    n_boot: int = 0,
    seed: int = 0,
    confidence: float = 0.95,
    looks: int = 1,
    local_model: bool = False,
) -> Estimate:
    """The budget from every run (module docstring). `baseline`: the baseline runs' qualities by replicate (a
    sequence indexed by replicate, or a mapping); a level's pair i is replicate `LevelData.replicates[i]` (default
    i). `looks`: how many rounds' estimates the design looked at (the bracket's Bonferroni). `n_boot` > 0 adds the
    isotonic fit's bootstrap draws (a diagnostic kept for budget ratios, `compare`). `local_model`: where the model
    passes its gate on every level, its budget is the model refitted on the levels around B̂ (`_local_refit`; the
    run-averaged budget's, `fit.fit_runs`)."""
    if not levels:
        raise ValueError("no levels to fit")
    base = _baseline_map(baseline)
    bvals = np.array(list(base.values()), dtype=np.float64)  # (R,) nats/token
    if bvals.size == 0 and tolerance.absolute is None:
        raise ValueError("a relative tolerance needs baseline qualities")
    order = np.argsort([float(np.mean(lv.x)) for lv in levels], kind="stable")
    levels = [levels[i] for i in order]
    xs = [np.asarray(lv.x, dtype=np.float64) for lv in levels]
    ys = [np.asarray(lv.cost, dtype=np.float64) for lv in levels]
    reps = [
        np.asarray(lv.replicates if lv.replicates is not None else range(len(lv.x)), dtype=np.int64) for lv in levels
    ]
    names = tuple(lv.name for lv in levels)
    ns = np.array([y.size for y in ys], dtype=np.float64)
    base_mean = float(bvals.mean()) if bvals.size else math.nan
    tau = tolerance.of(base_mean)
    if not tau > 0:
        raise ValueError(f"tolerance must be > 0 nats/token, got {tau}")
    fit = fit_levels([x.mean() for x in xs], [y.mean() for y in ys], ns, OFFSET_SHARE * tau)
    iso_value, iso_kind, idx = budget_of(fit, tau)
    level_x = tuple(float(np.exp(np.log(x).mean())) for x in xs)

    # every run as one observation (replicate, x, quality, level): a level run's quality is its cost + its baseline's,
    # its x the level's geometric-mean x (a replicate's own x carries the probe's measurement noise), whose standard
    # error the model integrates over (`_level_log_se`)
    paired = all(int(r) in base for rr in reps for r in rr)
    model = spread = None
    dev = [np.log(x) - np.log(x).mean() for x in xs]
    runs = _Runs(base, bvals, level_x, ys, reps, names, _level_log_se(xs, names), tau, confidence, dev)
    if paired and bvals.size:
        model, spread = runs.model(range(len(names)))
    # the bracket: z = paired cost − τ's share of the pair (relative: relative × its baseline's quality)
    if tolerance.absolute is None and paired:
        zs = [y - tolerance.relative * np.array([abs(base[int(r)]) for r in rr]) for y, rr in zip(ys, reps)]
    else:
        zs = [y - tau for y in ys]
    bracket = level_bracket(xs, zs, names, confidence, looks)

    method, reason = _gate(model, spread, level_x)
    run_x_tier = False
    if RUN_X_TIER and method == "bracket" and _spread_only(model, spread) and any(np.ptp(d) > 0 for d in dev if d.size):
        model, spread, method, reason = _run_x_tier(runs, model, spread, reason)
        run_x_tier = method == "model"
    model_all_levels = model
    if (local_model or run_x_tier) and method == "model":  # the tier's runs at their own x: nothing down-weights
        # the high-cost levels either (`_run_x_tier`), so its budget is the local refit's as the run-averaged one's
        assert model is not None
        model, method, reason = _local_refit(runs, model, reason)
    if method == "model":
        assert model is not None
        value, kind, interval = model.value, "point", model.interval
        k = int(np.searchsorted(np.asarray(level_x), value))
        decided = tuple(names[i] for i in (k - 1, k) if 0 <= i < len(names))
    else:
        value, kind, interval = iso_value, iso_kind, bracket.interval
        decided = tuple(n for n in (bracket.below, bracket.above) if n is not None) or tuple(names[i] for i in idx)
    draws = _bootstrap(xs, ys, bvals, tolerance, ns, n_boot, seed, confidence) if n_boot > 0 else np.empty(0)
    lv_int = tuple(_t_interval(y, confidence) for y in ys)
    return Estimate(
        fit=fit,
        tau=tau,
        baseline_mean=base_mean,
        budget=Budget(float(value), kind, (float(interval[0]), float(interval[1])), tau, n_boot=n_boot),
        draws=tuple(float(v) for v in draws),
        decided_by=decided,
        level_means=tuple(float(y.mean()) for y in ys),
        level_intervals=lv_int,
        names=names,
        method=method,
        method_reason=reason,
        model=model,
        model_all_levels=model_all_levels,
        bracket=bracket,
        isotonic=(float(iso_value), iso_kind),
        spread_check=spread,
        level_x=level_x,
    )


def _gate(model: ModelFit | None, spread: SpreadCheck | None, level_x: tuple[float, ...]) -> tuple[Method, str]:
    """Is the model used? Only where it has degrees of freedom, passes both lack-of-fit tests (x with its error and x
    as known: `model.ModelFit.accepted`, whose docstring says why both), its one run variance is plausible (the
    baseline runs' spread against the level runs', `model.baseline_spread_check`), and it puts B inside the levels'
    range (beyond it the power law would extrapolate); else the bracket, with the reason."""
    if model is None:
        return "bracket", "the model needs every level pair's baseline run"
    lof, known = model.lack_of_fit, model.lack_of_fit_x_known
    if model.dof <= 0:
        return "bracket", f"the model has no residual degrees of freedom ({model.runs} runs, {model.seeds} seeds)"
    if not model.accepted:
        failed = [(t, what) for t, what in ((lof, ""), (known, " (x as known)")) if t and t.p_value < LACK_OF_FIT_ALPHA]
        return "bracket", "lack of fit: the power law with seed effects against one mean per level, " + "; ".join(
            f"F({t.dof[0]}, {t.dof[1]}) = {t.f:.2f}, p = {t.p_value:.3g} < {LACK_OF_FIT_ALPHA:g}{what}"
            for t, what in failed
        )
    if spread is not None and spread.flagged:
        return "bracket", (
            f"the model assumes one run variance, but the baseline runs' sd {spread.baseline_sd:.3g} is implausible "
            f"against the level runs' {spread.runs_sd:.3g} (F test p = {spread.p_value:.2g} < "
            f"{BASELINE_SPREAD_ALPHA:g}; model residual sd {model.residual_sd:.3g})"
        )
    if not level_x[0] <= model.value <= level_x[-1]:
        return "bracket", (
            f"the model's B {model.value:.3g} lies outside the levels' range [{level_x[0]:.3g}, {level_x[-1]:.3g}]"
            f" (residual sd {model.residual_sd:.3g}): it would extrapolate"
        )
    known_p = f"; x as known p = {known.p_value:.3g}" if known is not None else ""
    return "model", (
        f"the power law with seed effects fits (lack of fit F({lof.dof[0]}, {lof.dof[1]}) = {lof.f:.2f}, "
        f"p = {lof.p_value:.3g}{known_p}; each ≥ {LACK_OF_FIT_ALPHA:g}) and puts B inside the levels' range"
    )


@dataclass(frozen=True)
class _Runs:
    """Every run of a calibration as the model sees it (`estimate`): the baselines, and each level's pairs at the
    level's geometric-mean x (ascending), its log-x standard error pooled over every level; `dev`: each pair's own
    log x minus its level's mean (the run-x model's)."""

    base: dict[int, float]
    bvals: np.ndarray  # (R,) baseline qualities
    level_x: tuple[float, ...]
    ys: list[np.ndarray]  # per level, paired costs
    reps: list[np.ndarray]  # per level, each pair's replicate
    names: tuple[str, ...]
    log_se: dict[str, float]
    tau: float
    confidence: float
    dev: list[np.ndarray] = field(default_factory=list)  # per level, each pair's log x − the level's mean log x

    def model(self, keep: Any, run_x: bool = False) -> tuple[ModelFit, SpreadCheck | None]:
        """The seed-effect model and the baseline spread check on the levels `keep` (indices) and every baseline;
        `run_x`: each run at its own x in part (`model.fit_seed_power_law`'s run_log_dev), and the spread check on
        the level runs less their fitted cost, so that it compares the runs' own noise with the baselines'."""
        keep = list(keep)
        base, ys, reps = self.base, self.ys, self.reps
        seeds = list(base) + [int(r) for i in keep for r in reps[i]]
        xrun = [0.0] * len(base) + [self.level_x[i] for i in keep for _ in ys[i]]  # each run at its level's x
        q = list(self.bvals) + [float(c) + base[int(r)] for i in keep for c, r in zip(ys[i], reps[i])]
        lab = ["baseline"] * len(base) + [self.names[i] for i in keep for _ in ys[i]]
        se = {self.names[i]: self.log_se[self.names[i]] for i in keep if self.names[i] in self.log_se}
        dev = [0.0] * len(base) + [float(d) for i in keep for d in self.dev[i]] if run_x else None
        model = fit_seed_power_law(seeds, xrun, q, lab, self.tau, self.confidence, se, dev)
        runs = [ys[i] + np.array([base[int(r)] for r in reps[i]]) for i in keep]
        if run_x and model.x_run_share is not None:
            share = model.x_run_share
            runs = [r - model.predict(self.level_x[i] * np.exp(share * self.dev[i])) for r, i in zip(runs, keep)]
        return model, baseline_spread_check(self.bvals, runs)


LOCAL_SPAN = 2.0  # the local refit's levels: those within this factor of B̂ (the design's span, `design.AROUND`)
LOCAL_BEYOND = 2  # ... and this many levels beyond each end of the span (as far as the grid goes)


def local_levels(level_x: tuple[float, ...], b: float) -> list[int]:
    """The levels (indices, ascending x) the local refit keeps: those within LOCAL_SPAN of b (with none there, the
    two that bracket it), the span where the design puts its pairs (`design.design_points`), and LOCAL_BEYOND levels
    beyond each end, which pin the power law's slope across it. Measured on the SmolLM2 protocol (run x, 200
    calibrations of a cost flat to B/3 and then linear, 100 of the power law): with one level beyond each end the
    coverage was 0.975 but half the power law's intervals reached 0 at the bottom (all levels: a quarter); with two,
    0.970 and 0.30; levels within a factor 4 and none beyond, 0.970 and 0.34."""
    lx = np.asarray(level_x)
    inside = [i for i, x in enumerate(lx) if b / LOCAL_SPAN <= x <= b * LOCAL_SPAN]
    if not inside:
        k = int(np.searchsorted(lx, b))
        inside = [i for i in (k - 1, k) if 0 <= i < lx.size]
    return list(range(max(min(inside) - LOCAL_BEYOND, 0), min(max(inside) + LOCAL_BEYOND, lx.size - 1) + 1))


RUN_X_TIER = True  # the gate's run-x tier (`_run_x_tier`): on since 2026-12-06, its coverage shown under every protocol


def _spread_only(model: ModelFit | None, spread: SpreadCheck | None) -> bool:
    """The level-x model was refused for its run variance alone: both lack-of-fit tests pass (`ModelFit.accepted`)
    and the baseline runs' spread is implausible against the level runs' (`SpreadCheck.flagged`)."""
    return model is not None and model.accepted and spread is not None and spread.flagged


def _run_x_tier(
    runs: _Runs, model: ModelFit, spread: SpreadCheck | None, reason: str
) -> tuple[ModelFit, SpreadCheck | None, Method, str]:
    """The second tier of the gate: the level-x model fits the curve but its level runs spread more than the
    baselines. Where a run's cost follows its own x (its replicate's actual mismatch, not only its level's), the
    level runs' spread holds p·cost·(its x's spread): at a steep curve's high-cost levels many times the run noise
    (the toy RL calibration: slope 1.18 ± 0.18 of 1; docs/calibration.md, "Why the gate refused the model"). The
    run-x model (`_Runs.model(run_x=True)`: λ, the share of the spread that is real, fitted) takes that part
    off; it makes the budget where it passes the whole gate itself, on the runs less their fitted cost. Otherwise
    the level-x model's refusal stands, with both reasons. Only a spread refusal gets here: a lack of fit is a shape
    the power law misses, which each run's own x cannot mend. (model, spread check, method, reason).

    **On** (`RUN_X_TIER`, since 2026-12-06). It was off after its first coverage run: under the toy RL protocol's
    measured noise (bench/results/budget_coverage_toy_rl.json) its interval covered 0.835 on power2 (degenerate
    intervals: the profile's grids were coarser than the fit's precision at λ̂ = 1) and 0.80 on flat_then_rising
    (B̂ ≈ 0.7 B: with exact per-run x nothing down-weights the high-cost levels, as with the run-averaged x before its
    local refit). Both mended (`model.profile_fine`; its model refitted around B̂ in `estimate`), it covers 0.94–1.00
    with P(B_lo > B) ≤ 0.02 in every truth of all four shipped protocols (200 simulated calibrations a cell):
    toy_rl 0.940–1.000 (bench/results/budget_coverage_toy_rl_mended.json), toy 0.955–1.000
    (budget_coverage_toy_tier_mended.json), SmolLM2's 21-run grid 0.955–1.000
    (budget_coverage_smollm2_tier_mended.json) and its 57-run continuation 0.970–1.000
    (budget_coverage_smollm2_57_tier.json)."""
    alt, alt_spread = runs.model(range(len(runs.names)), run_x=True)
    method, why = _gate(alt, alt_spread, runs.level_x)
    lam = f"λ̂ = {alt.x_run_share:g}" if alt.x_run_share is not None else "λ not fitted"
    if method == "model":
        return (
            alt,
            alt_spread,
            "model",
            (
                f"each run at its own x ({lam} of the replicates' log-x spread is the run's own mismatch): {why}; "
                f"at the levels' x: {reason}"
            ),
        )
    return model, spread, "bracket", f"{reason}; with each run at its own x ({lam}): {why}"


def _local_refit(runs: _Runs, model: ModelFit, reason: str) -> tuple[ModelFit, Method, str]:
    """The model refitted on the levels around its B̂ (`local_levels`), every baseline kept: (the model that makes the
    budget, method, reason). The power law is a local description: fitted over every level, the levels far above B
    (costs many τ, where a curve that bends has another slope) set p̂ and B̂ for all. Where the x error is small —
    the run-averaged x's replicate spread is a third of the start x's — nothing down-weights them, and on a cost
    flat to B/3 and then linear the all-level B̂ sat 10% low (median) and its interval's upper end below B in 11% of
    SmolLM2-protocol calibrations (docs/calibration.md, "The run-averaged intervals"). The all-level model's gate
    has passed (its lack-of-fit tests see the whole curve: a local fit of three levels passes a step); the refit
    must pass its own gate too, else the bracket. Fewer than three levels, or every level: the all-level model."""
    keep = local_levels(runs.level_x, model.value) if math.isfinite(model.value) else []
    if len(keep) < 3 or len(keep) == len(runs.names):
        return model, "model", reason
    local, spread = runs.model(keep, run_x=model.x_run_share is not None)
    span = f"the levels {runs.names[keep[0]]}..{runs.names[keep[-1]]} around B̂ {model.value:.3g}"
    method, why = _gate(local, spread, tuple(runs.level_x[i] for i in keep))
    if method != "model":
        return local, "bracket", f"every level: {reason}; refitted on {span}, refused: {why}"
    return local, "model", f"refitted on {span} ({why}); on every level: {reason}"


def _level_log_se(xs: list[np.ndarray], names: tuple[str, ...]) -> dict[str, float]:
    """Each level's standard error of its log x (the model's errors in variables): the within-level sd of log x,
    pooled over the levels, over √n of the level's runs; {} without replicated x."""
    d = sum(x.size - 1 for x in xs)
    if d <= 0:
        return {}
    s2 = sum(float(((np.log(x) - np.log(x).mean()) ** 2).sum()) for x in xs) / d
    return {n: math.sqrt(s2 / x.size) for n, x in zip(names, xs)}


def _t_interval(y: np.ndarray, confidence: float) -> tuple[float, float]:
    """Student-t interval of a level's mean paired cost (own n − 1 dof); the mean twice with one pair."""
    from scipy.stats import t as student_t

    m = float(y.mean())
    if y.size < 2:
        return (m, m)
    h = float(student_t.ppf(0.5 + confidence / 2, y.size - 1)) * float(y.std(ddof=1)) / math.sqrt(y.size)
    return (m - h, m + h)


def _bootstrap(xs, ys, base, tolerance, ns, n_boot, seed, confidence) -> np.ndarray:
    """The isotonic fit's B over `n_boot` resamples of each level's pairs and the baseline (deviations t-scaled with
    the pooled dof; x with its own spread): 0 below the smallest level, inf above the largest. A diagnostic (budget
    ratios between artifacts); the budget's interval is the model's or the bracket's."""
    rng = np.random.default_rng(seed)
    dof = sum(y.size - 1 for y in ys) + max(base.size - 1, 0)
    spreads = [_spread(y.size, dof, confidence) for y in ys]
    base_spread = _spread(base.size, dof, confidence)
    draws = np.empty(n_boot)  # (n_boot,) nats/token
    for i in range(n_boot):
        xl, yl = [], []
        for x, y, k in zip(xs, ys, spreads):
            j = rng.integers(0, y.size, size=y.size)
            xl.append(np.exp(_resample(np.log(x), j, _spread(x.size, 10**6, confidence))))
            yl.append(_resample(y, j, k))
        b = _resample(base, rng.integers(0, base.size, size=base.size), base_spread) if base.size else base
        tb = tolerance.of(float(b.mean()) if b.size else math.nan)
        if not tb > 0:
            draws[i] = math.inf
            continue
        fb = fit_levels([x.mean() for x in xl], [y.mean() for y in yl], ns, OFFSET_SHARE * tb)
        vb, kb, _ = budget_of(fb, tb)
        draws[i] = 0.0 if kb == "upper_bound" else (math.inf if kb == "lower_bound" else vb)
    return draws
