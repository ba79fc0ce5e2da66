"""Admission: the pure decision rule of a screen — look plan, per-look confidence, decision interval, verdict.

    from admitcheck.admission import Evidence, confidence_per_look, look, looks_plan, verdict
    first, most, max_looks = looks_plan(screen_config, num_prompts=512)  # batches: before the 1st look, at most; K
    conf = confidence_per_look(0.95, max_looks)                          # 1 − α/K (Bonferroni)
    state = look(k3, lo, hi, threshold=0.05, budget_kind="point")        # admit | reject | undecided | unresolvable
    v = verdict("fp8_kv", Evidence(state, values, intervals, conf, looks, probes, tokens), budget, "reject")
    v.decision, v.marginal, v.reason, v.margin, v.ratio_to_budget

Sequential test (REFERENCE §3.4). After the batch that reaches probe.min_prompts and after every later one, the k3
interval over all sequences so far is compared with the threshold: upper bound below → ADMIT, lower bound above →
REJECT. The repeated looks are paid for by spending α evenly over the K looks the probe settings allow (Bonferroni,
`metrics.sequential_confidence`): each look uses level 1 − α/K, so the chance that any look errs is ≤ α whatever
the stopping rule; the reported k3 interval has that per-look level. Still undecided at probe.num_prompts: the
verdict is `marginal`, the point estimate gives the leaning, and policy.undecided applies: `reject` (default)
rejects every marginal verdict; `admit` lets the point estimate decide (k3 < threshold → ADMIT), so nothing is
admitted with k3 above the budget.

Threshold by budget kind (`curve.Budget`): "point" → B. "lower_bound" (no calibrated level reached τ: B ≥ b) → b,
conservatively: only mismatch inside the calibrated range is admitted, and a rejection says B may be larger.
"upper_bound" (even the smallest level cost more than τ: B ≤ b) → b for rejections; an interval below b cannot be
admitted by the bounds (B is unknown below b), so sampling stops there and the verdict is marginal.
margin = threshold − k3 upper bound (nats/token; > 0: the whole interval is under it); ratio_to_budget = k3 / threshold.
Non-finite log-probs reject at once, with their count.

Pure: numbers and dataclasses in, dataclasses out; no files, devices, torch or printing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from admitcheck.metrics import decide, sequential_confidence

if TYPE_CHECKING:
    from admitcheck.config import ScreenConfig
    from admitcheck.curve import Budget

Decision = Literal["ADMIT", "REJECT"]
BudgetKind = Literal["point", "lower_bound", "upper_bound"]
Policy = Literal["reject", "admit"]  # policy.undecided: what a marginal verdict gets
# What the looks found so far: decided (admit, reject), not yet (undecided), never by the bounds (unresolvable:
# an upper-bound budget and an interval below it), or stopped by non-finite log-probs (nonfinite).
LookState = Literal["admit", "reject", "undecided", "unresolvable", "nonfinite"]


@dataclass(frozen=True)
class Verdict:
    """One candidate's admission decision and the evidence behind it (mismatch k3 in nats/token)."""

    name: str
    decision: Decision
    marginal: bool  # undecided at probe.num_prompts (or by a bound-only budget): policy.undecided applied
    reason: str
    k3: float
    k3_interval: tuple[float, float]  # at confidence_per_look
    budget: float  # the threshold compared with (module docstring: bound-only budgets)
    budget_interval: tuple[float, float]
    budget_kind: BudgetKind
    margin: float  # budget − k3 upper bound, nats/token
    ratio_to_budget: float  # k3 / budget
    quality_cost: float | None  # the calibration curve at k3, nats/token; None when k3 is not finite
    quality_cost_interval: tuple[float, float] | None  # the curve at the k3 interval ends (it is monotone)
    floor_k3: float | None  # the engine in the reference's configuration on the first-look probes
    probes: int  # sequences measured
    tokens: int
    looks: int
    confidence_per_look: float
    metrics: dict[str, float] = field(default_factory=dict)
    metric_intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    capacity: dict[str, Any] | None = None  # `capacity.kv_capacity` of the candidate, ratio_vs_bf16 first
    seconds: float = 0.0  # engine start + measurement (+ OPD steps for staleness)
    source: Literal["engine", "logs"] = "engine"

    @property
    def admitted(self) -> bool:
        return self.decision == "ADMIT"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Evidence:
    """What one candidate's measurement found: the final metrics and the state of the sequential test."""

    state: LookState
    values: dict[str, float]  # every metric over all sequences measured; "k3" required, nats/token
    intervals: dict[str, tuple[float, float]]  # symmetric intervals at `confidence` (metrics.ratio_interval)
    confidence: float  # per look
    looks: int  # looks taken
    probes: int  # sequences measured
    tokens: int
    max_looks: int = 1  # looks the plan allowed (> 1: the reason says "per look")
    nonfinite: int = 0  # non-finite log-probs on either side, masked tokens
    engine_nonfinite: int = 0  # of them on the engine (rollout) side


# ------------------------------------------------------------------------------------------------ the look plan


def looks_plan(config: ScreenConfig, num_prompts: int) -> tuple[int, int, int]:
    """(batches before the first look, batches at most, looks K) for `num_prompts` available probe prompts."""
    bs = config.probe.batch_size
    max_batches = math.ceil(min(config.probe.num_prompts, num_prompts) / bs)
    first = min(math.ceil(config.probe.min_prompts / bs), max_batches)
    return first, max_batches, max_batches - first + 1


def confidence_per_look(confidence: float, max_looks: int) -> float:
    """The level of each look's interval when the screen looks at most `max_looks` times (α spent evenly)."""
    return sequential_confidence(confidence, max_looks)


# ------------------------------------------------------------------------------------------------ one look


def decision_interval(k3: float, lo: float, hi: float) -> tuple[float, float]:
    """The k3 interval on the log scale from the symmetric one (delta method: se(log k3) = se / k3).

    k3 is a mean of non-negative, right-skewed per-token terms; [k3·e^(−h/k3), k3·e^(h/k3)] with h = hi − k3 stays
    positive and is wider above: its upper bound is ≥ hi (e^x ≥ 1 + x), so admission is never easier than with the
    symmetric interval, while an estimate far above the budget gets a lower bound above 0 and is rejected sooner.
    """
    h = hi - k3
    if not (math.isfinite(k3) and math.isfinite(h)) or k3 <= 0:
        return lo, hi
    return k3 * math.exp(-h / k3), k3 * math.exp(h / k3)


def look(k3: float, lo: float, hi: float, threshold: float, budget_kind: BudgetKind) -> LookState:
    """One look of the sequential test on the symmetric interval [lo, hi] (see `decision_interval`)."""
    state = decide(k3, *decision_interval(k3, lo, hi), threshold)
    return "unresolvable" if state == "admit" and budget_kind == "upper_bound" else state


# ------------------------------------------------------------------------------------------------ the verdict


def threshold_of(budget: Budget) -> float:
    """The mismatch compared with, nats/token: the budget's value for every kind (module docstring)."""
    return float(budget.value)


def margin_to_budget(threshold: float, k3_upper: float) -> float:
    """threshold − k3 upper bound, nats/token: > 0 when the whole interval is under the threshold."""
    return threshold - k3_upper


def ratio_to_budget(k3: float, threshold: float) -> float:
    """k3 / threshold; inf for a threshold of 0."""
    return k3 / threshold if threshold > 0 else math.inf


def ruling(evidence: Evidence, budget: Budget, policy: Policy) -> tuple[Decision, bool, str]:
    """(decision, marginal, reason) from the final state of the sequential test, by budget kind and policy."""
    e, thr = evidence, threshold_of(budget)
    k3, (lo, hi) = e.values["k3"], decision_interval(e.values["k3"], *e.intervals["k3"])
    at = f"at {e.confidence:.4g}" + (" per look" if e.max_looks > 1 else "")
    if e.state == "nonfinite":
        reason = (
            f"engine produced {e.engine_nonfinite} non-finite log-probs"
            if e.engine_nonfinite
            else f"the reference gives {e.nonfinite} sampled tokens zero probability or non-finite log-probs "
            "(k3 is infinite: the candidate samples outside the reference's top-k/top-p set)"
        )
        return "REJECT", False, reason
    if e.state == "admit":
        return "ADMIT", False, f"k3 upper bound {hi:.3g} < budget {thr:.3g} {at}"
    if e.state == "reject":
        beyond = "; the budget is only known to be ≥ this (no level reached τ): calibrate further to decide beyond it"
        reason = f"k3 lower bound {lo:.3g} > budget {thr:.3g} {at}"
        return "REJECT", False, reason + (beyond if budget.kind == "lower_bound" else "")
    why = (
        f"the budget is only known to be ≤ {thr:.3g} (even the smallest level exceeded τ)"
        if e.state == "unresolvable"
        else f"[{lo:.3g}, {hi:.3g}] {at} still contains the budget {thr:.3g} after {e.probes} probes"
    )
    decision: Decision = "ADMIT" if policy == "admit" and k3 < thr else "REJECT"
    side = "below" if k3 < thr else "above"
    return decision, True, f"marginal: {why}; point estimate {k3:.3g} is {side} it; policy.undecided = {policy}"


def predicted_cost(
    predict: Callable[[float], float], k3: float, lo: float, hi: float
) -> tuple[float | None, tuple[float, float] | None]:
    """The calibration curve at k3 and at the interval ends (monotone curve); None where k3 is not finite."""
    if not math.isfinite(k3):
        return None, None
    cost = [float(predict(max(x, 0.0))) for x in (k3, lo if math.isfinite(lo) else 0.0)]
    return cost[0], ((cost[1], float(predict(hi))) if math.isfinite(hi) else None)


def verdict(
    name: str,
    evidence: Evidence,
    budget: Budget,
    policy: Policy,
    predict_cost: Callable[[float], float],
    *,
    floor_k3: float | None = None,
    capacity: dict[str, Any] | None = None,
    seconds: float = 0.0,
    source: Literal["engine", "logs"] = "engine",
) -> Verdict:
    """The Verdict of one candidate: the ruling, the decision interval, margin, ratio and predicted quality cost."""
    decision, marginal, reason = ruling(evidence, budget, policy)
    thr, k3 = threshold_of(budget), evidence.values["k3"]
    lo, hi = decision_interval(k3, *evidence.intervals["k3"])
    cost, cost_interval = predicted_cost(predict_cost, k3, lo, hi)
    return Verdict(
        name=name,
        decision=decision,
        marginal=marginal,
        reason=reason,
        k3=k3,
        k3_interval=(lo, hi),
        budget=thr,
        budget_interval=tuple(budget.interval),
        budget_kind=budget.kind,
        margin=margin_to_budget(thr, hi),
        ratio_to_budget=ratio_to_budget(k3, thr),
        quality_cost=cost,
        quality_cost_interval=cost_interval,
        floor_k3=floor_k3,
        probes=evidence.probes,
        tokens=evidence.tokens,
        looks=evidence.looks,
        confidence_per_look=evidence.confidence,
        metrics=dict(evidence.values),
        metric_intervals=dict(evidence.intervals),
        capacity=capacity,
        seconds=seconds,
        source=source,
    )
