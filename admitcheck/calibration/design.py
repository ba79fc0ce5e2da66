"""The calibration's design: which runs the next round adds, so that the rounds look for B (docs/calibration.md).

    plan = plan_round(est, replicates={"noise-2": 3, ...}, factor=2.0, min_decisive=2, level_x={"noise-2": 0.007})
    plan.replicates, plan.new_levels, plan.done      # more pairs here; new levels at these mismatches; stop
    est, runs = simulate_protocol(cost, sd, xs, 0.43, 0.013, Tolerance(), rng, seed_sd=0.009)   # synthetic runs

Pure: estimates in, plans out (`calibrate` runs them; `simulate_protocol` replays the rounds on simulated runs with
the ledgers' seed structure for the coverage bench, bench/budget_coverage.py, and tests). The design chooses where
runs go, not when to stop (`FIXED_RUNS`): under the model, pairs at the two levels that bracket B where they lie
within B/2..2B, else at the levels nearest B/2 and 2B and new levels there (and, with candidates to decide,
`levels.decide`, at the mismatches B's interval leaves undecided); under the bracket, at its levels. The estimator
itself is `curve`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from admitcheck.calibration.curve import Estimate, LevelData, Tolerance, estimate


def wanted_replicates(
    est: Estimate, replicates: dict[str, int], factor: float, min_decisive: int, decide: tuple[float, ...] = ()
) -> list[str]:
    """The levels that need another replicate pair: none once B is a point whose interval is narrower than `factor`
    (hi/lo) and every deciding level has ≥ `min_decisive` replicates; under the model, the levels nearest the design
    points (`design_points`: the levels that bracket B within B/2..2B, else B/2 and 2B, and the candidates'
    mismatches still inside B's interval); under the bracket, the levels that set or straddle its ends (for a bound:
    the two levels at that end of the grid)."""
    b = est.budget
    precise = b.kind == "point" and est.width_factor <= factor
    if not FIXED_RUNS and precise and all(replicates[n] >= min_decisive for n in est.decided_by):
        return []
    if est.method == "model" and b.kind == "point" and est.level_x:
        return list(dict.fromkeys(nearest_levels(est, design_points(est, decide))))
    if b.kind == "point":
        return list(est.decided_by)
    return list(est.names[:2] if b.kind == "upper_bound" else est.names[-2:])


# The number of runs is fixed before looking: the rounds choose where the runs go, never when to stop (the run cap
# does). Stopping once the interval was narrower than `levels.interval_factor` would pick the calibrations whose
# residual variance happened to be small (optional stopping: the profile interval assumes a fixed size).
FIXED_RUNS = True
AROUND = (0.5, 2.0)  # the model's farthest design points, × B: pairs there pin both the level and the power law's slope
LOCAL = True  # a level bracketing B̂ inside AROUND takes the pairs instead of B/2 or 2B (`design_points`; False: the
# design before, pairs at the levels nearest B/2 and 2B, kept for bench/budget_coverage.py --design around)
NEAR = 1.5  # a level within this factor of a design point takes its pairs; farther, a new level is placed there


def undecided(est: Estimate, decide: tuple[float, ...]) -> tuple[float, ...]:
    """The candidates' mismatches (nats/token: each one's screened upper bound, `levels.decide`) that B's interval
    does not yet decide: inside [B_lo, B_hi], where a screen could neither admit (upper bound < B_lo) nor reject."""
    lo, hi = est.budget.interval
    return tuple(u for u in decide if lo <= u <= hi)


def design_points(est: Estimate, decide: tuple[float, ...] = ()) -> tuple[float, ...]:
    """Where the model's next pairs go (nats/token): on each side of B̂ the nearest level when it lies within a factor
    2 (`LOCAL`; the level just below B̂ if it is at least B/2, else B/2, and the level just above if it is at most 2B,
    else 2B), and the candidates' mismatches B's interval leaves undecided — a pair there measures the cost at the
    mismatch whose side of τ the verdict needs (docs/calibration.md, "Candidates"). Two levels that bracket B pin the
    crossing by interpolation over the shortest span the grid offers; the power law is a local approximation, and
    pairs at B/2 and 2B of a curve that bends between them (the SmolLM2 mean curve flattens above B) moved B̂ up by
    ≈ 25% and put the interval's lower end above B in 5% of simulated SmolLM2 calibrations continued to 45 runs
    (docs/calibration.md, "Continuing a calibration"). The candidates are added to these points, not put in their
    place: pairs at the candidates alone (most sit below B) left B to the power law's extrapolation."""
    b = est.budget.value
    lo, hi = AROUND[0] * b, AROUND[1] * b
    if LOCAL:
        lo = max((x for x in est.level_x if lo <= x <= b), default=lo)
        hi = min((x for x in est.level_x if b <= x <= hi), default=hi)
    return (lo, hi, *undecided(est, decide))


def nearest_levels(est: Estimate, points: tuple[float, ...]) -> list[str]:
    """The level nearest (in log x) each design point."""
    lx = np.log(np.asarray(est.level_x))
    return [est.names[int(np.argmin(np.abs(lx - math.log(p))))] for p in points]


@dataclass(frozen=True)
class RoundPlan:
    """What the next calibration round runs: one more replicate pair at `replicates`, and new levels at the target
    mismatches `new_levels` (nats/token; each gets the protocol's first replicates). Empty: precision reached."""

    replicates: tuple[str, ...] = ()
    new_levels: tuple[float, ...] = ()
    why: str = ""

    @property
    def done(self) -> bool:
        return not self.replicates and not self.new_levels


MIN_LEVEL_X = 1e-6  # nats/token: no level is added below this (below a BF16 engine's floor, nothing to learn there)
DOWN_WHILE = 0.5  # × τ: a level below the grid only while the isotonic fit at the smallest level is at least this
DOWN_CAP = False  # DOWN_WHILE's switch: off — safe under toy_rl and SmolLM2-69 but no gain seen (docs/calibration.md)
SPLIT_AFTER = 4  # replicates at both bracketing levels before a level between them is tried instead of more pairs


def plan_round(
    est: Estimate,
    replicates: dict[str, int],
    factor: float,
    min_decisive: int,
    level_x: dict[str, float],
    decide: tuple[float, ...] = (),
) -> RoundPlan:
    """The design that looks for B (docs/calibration.md): a budget whose interval reaches 0 gets a level below the
    smallest (2/3 decade down, or the grid's own step; with DOWN_CAP, only while the isotonic fit's cost at the
    smallest level is at least DOWN_WHILE·τ, `_looks_below`), since no replicate at the grid can tell B from 0; under
    the model, pairs at the levels nearest the design points (`design_points`: B's bracketing levels within B/2..2B,
    else B/2 and 2B, and the undecided candidates' mismatches `decide`) and new levels there when none is near; a
    bracketed point budget whose bracketing levels already have SPLIT_AFTER replicates each and are more than
    `factor` apart gets a level at their geometric mean; otherwise `wanted_replicates`. `level_x`: each level's mean
    x (nats/token)."""
    want = wanted_replicates(est, replicates, factor, min_decisive, decide)
    if not want:
        return RoundPlan()
    b = est.budget
    xs = sorted(level_x[n] for n in est.names)
    if b.interval[0] <= 0.0 and xs[0] > MIN_LEVEL_X and _looks_below(est):
        step = xs[1] / xs[0] if len(xs) > 1 and xs[1] > xs[0] else 10 ** (2 / 3)
        target = max(xs[0] / min(max(step, 2.0), 10.0), MIN_LEVEL_X)
        return RoundPlan(new_levels=(target,), why=f"the budget's interval reaches 0: a level below {xs[0]:.3g}")
    if est.method == "model" and b.kind == "point":  # concentrate at the design points; new levels when none is near
        candidates = undecided(est, decide)
        at = "B's design points and the undecided candidates' mismatches" if candidates else "B's design points"

        def far(points: tuple[float, ...]) -> list[float]:
            return [p for p in points if min(abs(math.log(p / x)) for x in xs) > math.log(NEAR)]

        # a candidate's level is placed at once (a pair far from it says little about its cost); B's points move with
        # B, so their levels wait until the nearest ones have SPLIT_AFTER pairs
        ready = all(replicates[n] >= SPLIT_AFTER for n in want)
        around = far(design_points(est)) if ready else []
        split = _split_gap(est, level_x, factor) if ready and not around else None
        if split is not None:
            return RoundPlan(new_levels=(split[0],), why=split[1])
        if far(candidates) or around:
            return RoundPlan(new_levels=tuple(around + far(candidates)), why=f"levels at {at} (the design points)")
        return RoundPlan(replicates=tuple(want), why=f"replicates at the levels nearest {at}")
    if b.kind == "point" and len(est.decided_by) == 2:
        lo_name, hi_name = sorted(est.decided_by, key=lambda n: level_x[n])
        x_lo, x_hi = level_x[lo_name], level_x[hi_name]
        if min(replicates[lo_name], replicates[hi_name]) >= SPLIT_AFTER and x_hi / x_lo > factor:
            target = math.sqrt(x_lo * x_hi)
            return RoundPlan(new_levels=(target,), why=f"a level between {lo_name} and {hi_name}")
    return RoundPlan(replicates=tuple(want), why="replicates at the levels that decide B")


def _looks_below(est: Estimate) -> bool:
    """Whether B may lie below the grid's smallest level: the isotonic fit's cost there (the smallest level's mean
    pooled with the next ones' where they violate monotonicity) is at least DOWN_WHILE·τ. An interval that reaches 0
    while the curve costs less than that at the smallest level is the noise's, not the grid's: a level farther down
    costs less still, its pairs look like the smallest level's, and what the interval lacks is replicates near B̂
    (the rounds' other rules). Found on the toy RL calibration re-run with seed 1000 (docs/rl.md; ~1 τ of noise per
    pair): its rounds added five levels each ×4 lower, k3 1.6e-4 down to 1e-6, 15 of its 60 runs; replayed from its
    ledger, the fit there was 0.87 τ at round 0 (a level down), then 0.35, 0.42, 0.45, 0.09 τ at the rounds that
    added the next four. Always True while DOWN_CAP is off (the design before): the cap changes the rounds of most
    simulated calibrations of every protocol, so it waits on their coverage re-run."""
    return not DOWN_CAP or (bool(est.fit.cost) and est.fit.cost[0] >= DOWN_WHILE * est.tau)


def _split_gap(est: Estimate, level_x: dict[str, float], factor: float) -> tuple[float, str] | None:
    """A level at the geometric mean of the two levels that bracket the model's B̂ when they lie more than `factor`
    apart (the precision asked for): between them B̂ is the power law's interpolation, and a curve that is not one
    (a step) can cross τ anywhere in the gap while the model's lack-of-fit tests see nothing. Found by the coverage
    bench under the re-made toy protocol's measured noise: the design kept its pairs at k3 0.022 and 0.098 (a ×4.3
    gap; B/2 and 2B each had a level within NEAR), and on a step the model's lower end lay above B in 9% of 200
    calibrations (docs/calibration.md, "A design that looks for B"). None: no such gap."""
    b = est.budget.value
    xs = sorted((level_x[n], n) for n in est.names)
    below = [v for v in xs if v[0] <= b]
    above = [v for v in xs if v[0] > b]
    if not below or not above or above[0][0] / below[-1][0] <= factor:
        return None
    (x_lo, lo_name), (x_hi, hi_name) = below[-1], above[0]
    return math.sqrt(x_lo * x_hi), f"a level between {lo_name} and {hi_name} (×{x_hi / x_lo:.2g} apart around B̂)"


def actual_x(x: float, d: float, share: float, x_cv: float, normal: Callable[[], float]) -> float:
    """A simulated run's actual mismatch, given its level's x and its measured log-x deviation d ~ N(0, x_cv²):
    x·exp(r), r = λd + √(λ(1 − λ))·x_cv·N (λ = `share`), so that E[r | d] = λd and var r = λ·x_cv². `normal` draws N
    (called only for 0 < λ < 1, so a stream of draws is used as before). λ 0: the level's x; 1: the measured x."""
    lam = float(share)
    if lam >= 1.0:
        return x * math.exp(d)
    if lam > 0.0:
        return x * math.exp(lam * d + math.sqrt(lam * (1.0 - lam)) * x_cv * normal())
    return x


def simulate_protocol(
    true_cost: Any,  # callable x -> cost (nats/token)
    noise_sd: Any,  # callable x -> sd of one paired cost (nats/token) near the grid's smallest level
    xs: Any,  # level mismatches of the initial grid (nats/token)
    baseline_quality: float,
    baseline_sd: float,
    tolerance: Tolerance,
    rng: np.random.Generator,
    *,
    replicates: int = 2,
    factor: float = 2.0,
    min_decisive: int = 2,
    max_runs: int = 40,
    x_cv: float = 0.05,
    n_boot: int = 0,
    confidence: float = 0.95,
    pairs_per_round: int = 1,
    seed_sd: float | None = None,
    x_real: float = 0.0,
    decide: tuple[float, ...] = (),
    local_model: bool = False,
) -> tuple[Estimate, int]:
    """One synthetic calibration under the adaptive protocol (`calibrate`'s rounds and `plan_round`'s design,
    without the OPD runs): (the estimate, runs used). Runs, not paired costs, are simulated, with the structure the
    ledgers show: seed r's baseline run has quality μ0 + s_r + e and a level run at x has μ0 + cost(x) + s_r + e(x),
    s_r ~ N(0, seed_sd) shared by every run of seed r (the shared-baseline structure: every level's pair r contains
    the same baseline run), e(x) ~ N(0, noise_sd(x)/√2) (so that a pair near the smallest level has sd noise_sd),
    the baseline's e with noise_sd(xs[0])/√2; seed_sd None: what makes a baseline run's sd `baseline_sd`. A
    replicate's measured x ~ x·exp(d), d ~ N(0, x_cv²); `x_real` (λ in [0, 1]) is the share of d's variance that is
    the run's actual mismatch, at which its cost is evaluated, the rest the probe's measurement error: the run's
    actual x is x·exp(r), r = λd + √(λ(1 − λ))·x_cv·N, so that E[r | d] = λd (0: the level's x is measured with
    error; 1 (or True): a run's cost follows its own measured x; the re-made toy ledgers: λ ≈ 0.5, RL ≈ 1,
    bench/budget_coverage.py `within_level_noise`). `decide`: the candidates' mismatches the rounds decide
    (`levels.decide`). `local_model`: the estimator's (`curve.estimate`; the run-averaged budget's). Stops as
    `calibrate` does: precision reached, or the next round would pass `max_runs`; the estimate's bracket spends α
    over the rounds looked at."""
    xs = [float(x) for x in xs]
    e0 = noise_sd(xs[0]) / math.sqrt(2.0)
    s_sd = math.sqrt(max(baseline_sd**2 - e0**2, 0.0)) if seed_sd is None else float(seed_sd)
    effects: list[float] = []  # s_r, per replicate
    base: list[float] = []  # baseline run quality per replicate
    targets: dict[str, float] = {f"level-{i}": x for i, x in enumerate(xs)}
    data: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for n in targets}  # (x, paired cost) per pair

    def seed_of(r: int) -> None:
        while len(effects) <= r:
            effects.append(s_sd * float(rng.standard_normal()))
            base.append(baseline_quality + effects[-1] + e0 * float(rng.standard_normal()))

    def add(name: str) -> None:
        x, r = targets[name], len(data[name][1])
        seed_of(r)
        d = x_cv * float(rng.standard_normal())
        xm = x * math.exp(d)
        xc = actual_x(x, d, x_real, x_cv, lambda: float(rng.standard_normal()))
        q = baseline_quality + true_cost(xc) + effects[r] + noise_sd(x) / math.sqrt(2.0) * float(rng.standard_normal())
        data[name][0].append(xm)
        data[name][1].append(q - base[r])

    for n in targets:
        for _ in range(replicates):
            add(n)
    runs = replicates * (len(targets) + 1)
    seed = int(rng.integers(2**31))
    rounds = 0
    while True:
        levels = [LevelData(n, tuple(data[n][0]), tuple(data[n][1])) for n in targets]
        est = estimate(levels, base, tolerance, n_boot=n_boot, seed=seed, confidence=confidence, looks=rounds + 1,
                       local_model=local_model)  # fmt: skip
        counts = {n: len(data[n][1]) for n in targets}
        plan = plan_round(est, counts, factor, min_decisive, {n: float(np.mean(data[n][0])) for n in targets}, decide)
        new = [f"level-{len(targets) + j}" for j in range(len(plan.new_levels))]
        grown = {n: counts[n] + pairs_per_round * (n in plan.replicates) for n in targets}
        grown |= {n: replicates for n in new}
        new_base = max(max(grown.values()) - len(base), 0)
        cost = sum(grown.values()) - sum(counts.values()) + new_base
        if plan.done or runs + cost > max_runs:
            return est, runs
        for n, t in zip(new, plan.new_levels):
            targets[n], data[n] = t, ([], [])
            for _ in range(replicates):
                add(n)
        for n in plan.replicates:
            for _ in range(pairs_per_round):
                add(n)
        seed_of(max(grown.values()) - 1)  # as many baseline runs as the most replicated level
        runs += cost
        rounds += 1
