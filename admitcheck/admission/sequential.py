"""Admission: the pure decision rule of a screen — look plan, the look, the verdict.

    from admitcheck.admission.sequential import Evidence, look, looks_plan, verdict
    plan = looks_plan(screen_config, num_prompts=512)   # LookPlan: plan.first, plan.most (batches), plan.looks (K)
    state = look(x, budget_interval=(0.01, 0.023), kappa=8.0, alpha=0.025)   # admit | reject | undecided
    v = verdict("fp8_kv", Evidence(state, values, intervals, 0.95, looks, probes, tokens, estimator="kl_exact",
                mismatch=x_hat, mismatch_interval=(lo, hi), capped_share=0.04), budget, "reject", predict_cost)
    v.decision, v.decided_by, v.error_control, v.mismatch_interval, v.margin, v.capped_share

The rule (docs/statistics.md has the error accounting). The mismatch is the calibration's functional
(`metrics.Functional`): the self-winsorized sequence mean of its estimator (kl_exact or k3), the same number the
budget's x is. After the batch that reaches probe.min_prompts and after every later one, two bettors that have
watched every sequence so far are asked (`metrics.betting_decides`, each at α = (1 − confidence)/2):

    ADMIT  when the capital against "x ≥ B_lo" has reached 1/α      REJECT when the capital against "x ≤ B_hi" has

[B_lo, B_hi] the budget's own interval (the calibration's bootstrap interval). The capital is a nonnegative
supermartingale under its null, so by Ville's inequality a wrong ADMIT needs the candidate's bettor to win against a
true null (≤ α over all looks together, whatever the stopping rule: no Bonferroni split) or the budget's lower bound
to miss (≤ (1 − c_B)/2): P(wrong ADMIT) ≤ α + (1 − c_B)/2, the same for REJECT. Bound-only budgets fit the same
rule: "lower_bound" (B ≥ b) has the interval (b, ∞) and never rejects by the bound; "upper_bound" (B ≤ b) has
(0, b) and never admits by it. Still undecided at probe.num_prompts: `marginal`; policy.undecided = reject rejects
it, `admit` lets the point estimate decide against B (marked error_control = False: nothing bounds that decision's
error). No look is held back for a heavy tail: the functional is bounded relative to itself, and what its cap leaves
out is reported beside every verdict (`capped_share`); `heavy_tail` flags a capped share above HEAVY_TAIL_SHARE.

`decided_by`: "candidate" or "budget" — whose uncertainty was the larger part of the gap between the point estimate
and the budget on the deciding side (for a marginal verdict: "budget" when the candidate's interval alone would have
decided against the point budget, else "candidate"); "policy" is never a value: error_control says that.
margin (nats/token, on the deciding side): ADMIT B_lo − upper; REJECT lower − B_hi; marginal: the side of the point
estimate, negative. The interval shown is the confidence sequence at the last look (`metrics.winsorized_bounds`).
Non-finite log-probs reject at once, with their count.

Pure: numbers, numpy arrays and dataclasses in, dataclasses out; no files, devices, torch or printing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np

from admitcheck.measurement.metrics import betting_decides
from admitcheck.measurement.metrics import sequential_confidence as confidence_per_look  # noqa: F401 (logs: α over gates)
from admitcheck.rollout.capacity import CapacitySummary

if TYPE_CHECKING:
    from admitcheck.calibration.curve import Budget
    from admitcheck.config import ScreenConfig
    from admitcheck.measurement.metrics import Functional
    from admitcheck.measurement.probe import ProbeRun

Decision = Literal["ADMIT", "REJECT"]
BudgetKind = Literal["point", "lower_bound", "upper_bound"]
Policy = Literal["reject", "admit"]  # policy.undecided: what a marginal verdict gets
# What the looks found so far: decided (admit, reject), not yet (undecided), or stopped by non-finite log-probs.
LookState = Literal["admit", "reject", "undecided", "nonfinite"]
HEAVY_TAIL_SHARE = 0.10  # a capped share above this is flagged `heavy_tail` beside the verdict (it blocks nothing)
KL_ESTIMATORS = ("kl_exact", "k3")  # the same KL(μ‖π): kl_exact (full rows) has far less variance


@dataclass(frozen=True)
class Verdict:
    """One candidate's admission decision and the evidence behind it (mismatch in nats/token)."""

    name: str
    decision: Decision
    marginal: bool  # undecided at probe.num_prompts: policy.undecided applied
    error_control: bool  # False when policy.undecided = admit decided (no bound stands behind the decision)
    decided_by: Literal["candidate", "budget"]  # whose uncertainty was the larger part of the gap (docstring)
    reason: str
    metric: str  # the budget's scale (the calibration's metric)
    estimator: str  # what measured it: kl_exact (full rows) or the metric itself
    mismatch: float  # the calibration's functional (metrics.Functional) over every probe, nats/token
    mismatch_interval: tuple[float, float]  # its confidence sequence at the last look (valid at every look)
    budget: float
    budget_interval: tuple[float, float]  # the calibration's; the rule compares with its ends
    budget_kind: BudgetKind
    margin: float  # on the deciding side (docstring), nats/token
    ratio_to_budget: float  # mismatch / budget
    top_share: float  # the largest sequence's share of the estimator's total
    tail_index: float  # Pareto k̂ of the estimator's per-sequence sums (metrics.pareto_k); −inf: no tail to fit
    heavy_tail: bool  # capped_share > HEAVY_TAIL_SHARE: the functional leaves a large part of the mean out
    quality_cost: float | None  # the calibration curve at the mismatch, nats/token; None when not finite
    quality_cost_interval: tuple[float, float] | None  # the curve at the interval ends (it is monotone)
    floor: float | None  # the floor engine's mismatch on the same estimator, first-look probes
    probes: int  # sequences measured
    tokens: int
    looks: int
    confidence_per_look: float  # the policy's confidence: a confidence sequence spends no α per look
    metrics: dict[str, float] = field(default_factory=dict)  # every metric over every probe (uncapped token means)
    metric_intervals: dict[str, tuple[float, float]] = field(default_factory=dict)  # one per metric, same level
    capacity: CapacitySummary | None = None  # the candidate's KV-cache capacity (`capacity.capacity_summary`)
    seconds: float = 0.0  # engine start + measurement (+ OPD steps for staleness)
    source: Literal["engine", "logs"] = "engine"
    capped_share: float = 0.0  # share of the estimator's sequence means above κ × mismatch (not counted)
    kappa: float = math.nan  # the functional's κ
    functional: str = ""  # metrics.Functional.describe()

    @property
    def admitted(self) -> bool:
        return self.decision == "ADMIT"

    @property
    def k3(self) -> float:
        return self.metrics.get("k3", math.nan)

    @property
    def k3_interval(self) -> tuple[float, float]:
        return tuple(self.metric_intervals.get("k3", (math.nan, math.nan)))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Evidence:
    """What one candidate's measurement found: the final metrics and the state of the sequential test."""

    state: LookState
    values: dict[str, float]  # every metric over all sequences measured (uncapped token means), nats/token
    intervals: dict[str, tuple[float, float]]  # their studentized-bootstrap intervals at `confidence` (descriptive)
    confidence: float  # two-sided; each bettor at α = (1 − confidence)/2, at every look
    looks: int  # looks taken
    probes: int  # sequences measured
    tokens: int
    max_looks: int = 1  # looks the plan allowed (> 1: the reason says "per look")
    nonfinite: int = 0  # non-finite log-probs on either side, masked tokens
    engine_nonfinite: int = 0  # of them on the engine (rollout) side
    estimator: str = "k3"  # the functional's estimator (a key of `values`)
    top_share: float = 0.0  # the largest sequence's share of the estimator's total
    tail_index: float = -math.inf  # Pareto k̂ of the estimator's per-sequence sums (metrics.pareto_k)
    mismatch: float = math.nan  # the functional's value, nats/token
    mismatch_interval: tuple[float, float] = (math.nan, math.nan)  # its confidence sequence at the last look
    capped_share: float = 0.0  # metrics.capped_share
    kappa: float = math.nan
    functional: str = ""

    @classmethod
    def of_run(
        cls, run: ProbeRun, functional: Functional, state: LookState, looks: int, max_looks: int, confidence: float
    ) -> Evidence:
        """A screen's evidence from its probe run (`probe.ProbeRun`): every metric with its interval at
        `confidence`, the functional's value and confidence sequence, the tail of its per-sequence sums."""
        m = run.metrics(confidence)
        fv = run.functional(functional, confidence)
        share, k = run.tail(fv.estimator)
        counts = dict(looks=looks, probes=run.num_sequences, tokens=run.num_tokens, max_looks=max_looks)
        bad = dict(nonfinite=run.nonfinite, engine_nonfinite=run.engine_nonfinite)
        value = dict(mismatch=fv.value, mismatch_interval=fv.interval, capped_share=fv.capped_share, kappa=fv.kappa)
        return cls(state, dict(m.values), dict(m.intervals), confidence, **counts, **bad, estimator=fv.estimator,
                   top_share=share, tail_index=k, **value, functional=functional.describe())  # fmt: skip


# ------------------------------------------------------------------------------------------------ the look plan


class LookPlan(NamedTuple):
    """A screen's look plan, in probe batches."""

    first: int  # batches measured before the first look (the batch that reaches probe.min_prompts)
    most: int  # batches at most (probe.num_prompts, or the prompts there are)
    looks: int  # looks K at most: one after the first-look batch and after every later one


def looks_plan(config: ScreenConfig, num_prompts: int) -> LookPlan:
    """The look plan for `num_prompts` available probe prompts."""
    bs = config.probe.batch_size
    max_batches = math.ceil(min(config.probe.num_prompts, num_prompts) / bs)
    first = min(math.ceil(config.probe.min_prompts / bs), max_batches)
    return LookPlan(first, max_batches, max_batches - first + 1)


def decision_estimator(metric: str, available: Any) -> str:
    """The estimator of a calibration without a stated functional (the budget's `metric`; kl_exact for the KL scale
    where full rows gave it): what `logs` and old reports name. A calibration's functional states its own."""
    if metric in KL_ESTIMATORS:
        return "kl_exact" if "kl_exact" in available else "k3"
    return metric


# ------------------------------------------------------------------------------------------------ one look


def budget_band(budget: Budget) -> tuple[float, float]:
    """[B_lo, B_hi] the rule compares with: the calibration's interval, widened to hold the value itself."""
    lo, hi = (float(x) for x in budget.interval)
    return min(lo, float(budget.value)), max(hi, float(budget.value))


def is_heavy(capped: Any) -> Any:
    """True where the functional leaves more than HEAVY_TAIL_SHARE of the estimator's total out (informational)."""
    with np.errstate(invalid="ignore"):
        return np.asarray(capped) > HEAVY_TAIL_SHARE


def look_states(x: Any, budget_interval: tuple[float, float], kappa: float, alpha: float) -> Any:
    """Vectorised look: (k, m) rows of sequence means in probe order -> "admit" | "reject" | "undecided" per row.

    ADMIT: the bettor against "x ≥ B_lo" has reached 1/α; REJECT: the one against "x ≤ B_hi" has (module
    docstring). B_lo ≤ 0 never admits; an infinite B_hi never rejects."""
    xs = np.atleast_2d(np.asarray(x, dtype=np.float64))  # (k, m)
    b_lo, b_hi = budget_interval
    k = xs.shape[0]
    admit = betting_decides(xs, b_lo, kappa, alpha, "below") if b_lo > 0 else np.zeros(k, bool)
    reject = betting_decides(xs, b_hi, kappa, alpha, "above") if math.isfinite(b_hi) else np.zeros(k, bool)
    return np.where(admit, "admit", np.where(reject, "reject", "undecided")).astype(object)


def look(x: Any, budget_interval: tuple[float, float], kappa: float, alpha: float) -> str:
    """One look at the sequence means measured so far (module docstring)."""
    return str(look_states(np.asarray(x, dtype=np.float64)[None], budget_interval, kappa, alpha)[0])


# ------------------------------------------------------------------------------------------------ the verdict


def ratio_to_budget(mismatch: float, threshold: float) -> float:
    """mismatch / threshold; inf for a threshold of 0."""
    return mismatch / threshold if threshold > 0 else math.inf


def ruling(evidence: Evidence, budget: Budget, policy: Policy) -> tuple[Decision, bool, bool, str, str, float]:
    """(decision, marginal, error_control, decided_by, reason, margin) from the final state of the test."""
    e, b = evidence, float(budget.value)
    b_lo, b_hi = budget_band(budget)
    m, (lo, hi) = e.mismatch, e.mismatch_interval
    at = f"at {e.confidence:.4g}" + (", valid at every look" if e.max_looks > 1 else "")
    name = f"{e.estimator} (κ {e.kappa:g})"
    below = m < b
    # the candidate's and the budget's half-widths on the side of the point estimate
    cand_w, budget_w = (hi - m, b - b_lo) if below else (m - lo, b_hi - b)
    by = "budget" if budget_w > cand_w else "candidate"
    if e.state == "nonfinite":
        reason = (
            f"engine produced {e.engine_nonfinite} non-finite log-probs"
            if e.engine_nonfinite
            else f"the reference gives {e.nonfinite} sampled tokens zero probability or non-finite log-probs "
            "(the mismatch is infinite: the candidate samples outside the reference's support)"
        )
        return "REJECT", False, True, "candidate", reason, math.inf
    heavy = (
        f"; heavy tail: {e.capped_share:.0%} of {e.estimator} lies above the cap κ × {m:.3g} and is not counted "
        f"(top sequence {e.top_share:.0%}, k̂ {e.tail_index:.2f}; the uncapped mean is in the metrics)"
        if is_heavy(e.capped_share)
        else ""
    )
    if e.state == "admit":
        reason = f"{name} upper bound {hi:.3g} < budget lower bound {b_lo:.3g} {at}{heavy}"
        return "ADMIT", False, True, by, reason, b_lo - hi
    if e.state == "reject":
        reason = f"{name} lower bound {lo:.3g} > budget upper bound {b_hi:.3g} {at}{heavy}"
        if budget.kind == "upper_bound":
            reason += " (the budget is only known to be ≤ it)"
        return "REJECT", False, True, by, reason, lo - b_hi
    # marginal: whose uncertainty kept it undecided
    by = "budget" if (hi < b or lo > b) else "candidate"
    why = {
        "budget": f"[{lo:.3g}, {hi:.3g}] {at} is clear of the budget {b:.3g} but not of its interval "
        f"[{b_lo:.3g}, {b_hi:.3g}] (the budget's uncertainty)",
        "candidate": f"[{lo:.3g}, {hi:.3g}] {at} still contains the budget {b:.3g} after {e.probes} probes",
    }[by]
    margin = (b_lo - hi) if below else (lo - b_hi)
    if policy == "admit":
        decision: Decision = "ADMIT" if below else "REJECT"
        tail = f"policy.undecided = admit: the point estimate decides, NO ERROR CONTROL{heavy}"
        side = "below" if below else "above"
        return decision, True, False, by, f"marginal: {why}; {name} {m:.3g} is {side} {b:.3g}; {tail}", margin
    reason = f"marginal: {why}; policy.undecided = reject{heavy}"
    return "REJECT", True, True, by, reason, margin


def predicted_cost(
    predict: Callable[[float], float], m: float, lo: float, hi: float
) -> tuple[float | None, tuple[float, float] | None]:
    """The calibration curve at m and at the interval ends (monotone curve); None where m is not finite."""
    if not math.isfinite(m):
        return None, None
    cost = [float(predict(max(x, 0.0))) for x in (m, lo if math.isfinite(lo) else 0.0)]
    return cost[0], ((cost[1], float(predict(hi))) if math.isfinite(hi) else None)


def verdict(
    name: str,
    evidence: Evidence,
    budget: Budget,
    policy: Policy,
    predict_cost: Callable[[float], float],
    *,
    metric: str = "k3",
    floor: float | None = None,
    capacity: CapacitySummary | None = None,
    seconds: float = 0.0,
    source: Literal["engine", "logs"] = "engine",
) -> Verdict:
    """The Verdict of one candidate: the ruling, the interval, margin, ratio and predicted quality cost."""
    decision, marginal, control, by, reason, margin = ruling(evidence, budget, policy)
    m = evidence.mismatch
    lo, hi = evidence.mismatch_interval
    cost, cost_interval = predicted_cost(predict_cost, m, lo, hi)
    return Verdict(
        name=name,
        decision=decision,
        marginal=marginal,
        error_control=control,
        decided_by=by,  # type: ignore[arg-type]
        reason=reason,
        metric=metric,
        estimator=evidence.estimator,
        mismatch=m,
        mismatch_interval=(lo, hi),
        budget=float(budget.value),
        budget_interval=tuple(float(x) for x in budget.interval),
        budget_kind=budget.kind,
        margin=margin,
        ratio_to_budget=ratio_to_budget(m, float(budget.value)),
        top_share=evidence.top_share,
        tail_index=evidence.tail_index,
        heavy_tail=bool(is_heavy(evidence.capped_share)),
        quality_cost=cost,
        quality_cost_interval=cost_interval,
        floor=floor,
        probes=evidence.probes,
        tokens=evidence.tokens,
        looks=evidence.looks,
        confidence_per_look=evidence.confidence,
        metrics=dict(evidence.values),
        metric_intervals=dict(evidence.intervals),
        capacity=capacity,
        seconds=seconds,
        source=source,
        capped_share=evidence.capped_share,
        kappa=evidence.kappa,
        functional=evidence.functional,
    )
