"""Mismatch between the rollout engine μ and the reference π on the sampled tokens (REFERENCE.md §2), nats/token.

    m = mismatch_metrics(rollouts.logprobs, scores.logprobs, rollouts.mask,
                         rollout_full=rollouts.full_logprobs, reference_full=scores.full_logprobs)
    m.values["k3"], m.intervals["k3"]                      # estimate and 95% CI over sequences
    decide(m.values["k3"], *m.intervals["k3"], budget=0.01)  # "admit" | "reject" | "undecided"
    pooled = metrics_from_per_sequence(combine([m.per_sequence, m2.per_sequence]))  # sequential screening

Conventions: ℓ_t = log π(y_t) − log μ(y_t), r_t = exp(ℓ_t); π = reference (trainer), μ = rollout (engine).
All maths in float64. Sequences are the independent units: a token-mean metric is the ratio estimator
Σ_i s_i / Σ_i n_i over sequences, its interval a delta-method (CLT) standard error with a Student-t quantile.
Sequences with no masked token are dropped. Terms are written so that ℓ = 0 gives exact zeros (expm1, not exp − 1):
identical inputs give exactly 0 (1 for the ratio metrics). Non-finite log-probs never raise: they propagate into
the metrics they touch (nan, or +inf for a KL that is truly infinite) and are counted in `nonfinite`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from scipy.special import stdtrit  # Student-t quantile; scipy.stats would cost ~2 s of import time

# Token-mean metrics: per-sequence sums of their terms are kept, and they get confidence intervals.
TOKEN_MEAN_METRICS = ("k1", "k2", "k3", "kl_exact", "abs_diff_mean", "mult_prob_error", "chi2_token")
IS_BAND = (0.5, 2.0)  # importance weights outside this band count as the IS tail (verl rollout_is_*)
# The order of MismatchMetrics.values (kl_exact only with full rows).
VALUE_KEYS = (*TOKEN_MEAN_METRICS[:5], "abs_diff_p95", "abs_diff_p99", "abs_diff_max", "mult_prob_error")
VALUE_KEYS += ("prob_diff_max", "chi2_token", "is_frac_outside", "ess", "is_weight_mean")
VALUE_KEYS += ("seq_log_ratio_mean", "seq_log_ratio_std", "geo_mean_ratio")
_CHUNK_ELEMENTS = 1 << 22  # full-row KL is computed over (rows x V) chunks of at most this many elements


@dataclass(frozen=True)
class PositionBucket:
    """Token-mean metrics over response positions [start, end) (0 = first response token)."""

    start: int
    end: int
    num_sequences: int  # sequences with at least one token in the bucket
    num_tokens: int
    k1: float  # nats/token
    k3: float  # nats/token
    abs_diff_mean: float  # nats/token
    kl_exact: float | None  # nats/token; None without full rows
    k3_interval: tuple[float, float]


@dataclass(frozen=True)
class PooledMetrics:
    """Metrics recomputed from per-sequence sums (no token quantiles, no position buckets)."""

    values: dict[str, float]
    intervals: dict[str, tuple[float, float]]
    num_sequences: int
    num_tokens: int
    nonfinite: int
    confidence: float

    @property
    def is_finite(self) -> bool:
        """True when no log-prob was non-finite and every value is finite."""
        return self.nonfinite == 0 and all(math.isfinite(v) for v in self.values.values())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (floats, lists); inf and nan stay floats."""
        return {
            "values": {k: float(v) for k, v in self.values.items()},
            "intervals": {k: [float(lo), float(hi)] for k, (lo, hi) in self.intervals.items()},
            "num_sequences": self.num_sequences,
            "num_tokens": self.num_tokens,
            "nonfinite": self.nonfinite,
            "confidence": self.confidence,
            "is_finite": self.is_finite,
        }


@dataclass(frozen=True)
class MismatchMetrics(PooledMetrics):
    """All mismatch metrics of one measurement; `values` keys are listed in `mismatch_metrics`.

    `per_sequence` (one entry per non-empty sequence): num_tokens, the sums of each token-mean metric's terms, and
    is_weight (Σr), is_outside (count), seq_log_ratio (Σℓ), abs_diff_max, prob_diff_max, nonfinite (count) —
    enough for `metrics_from_per_sequence` to recompute everything but the abs_diff quantiles.
    """

    position_buckets: list[PositionBucket] = field(default_factory=list)
    per_sequence: dict[str, np.ndarray] = field(default_factory=dict)  # each (num_sequences,)

    def to_dict(self, include_per_sequence: bool = False) -> dict[str, Any]:
        out = super().to_dict()
        out["position_buckets"] = [
            {**b.__dict__, "k3_interval": [float(b.k3_interval[0]), float(b.k3_interval[1])]}
            for b in self.position_buckets
        ]
        if include_per_sequence:
            out["per_sequence"] = {k: v.tolist() for k, v in self.per_sequence.items()}
        return out


def ratio_interval(sums: Any, counts: Any, confidence: float = 0.95) -> tuple[float, float, float]:
    """Ratio estimator Σs/Σn over independent units with a delta-method t interval -> (mean, lo, hi).

    Var(R) ≈ Σ_i (s_i − R n_i)² / (m (m − 1) n̄²) for m units. A non-finite estimate is returned as its own bounds
    (an infinite KL is infinite whatever the spread); one unit gives (mean, −inf, inf); no units gives nans.
    """
    s = np.asarray(sums, dtype=np.float64)  # (m,)
    n = np.asarray(counts, dtype=np.float64)  # (m,)
    m = s.size
    if m == 0 or n.sum() <= 0:
        return (math.nan, math.nan, math.nan)
    with np.errstate(all="ignore"):
        est = float(s.sum() / n.sum())
    if not math.isfinite(est):
        return (est, est, est)
    if m < 2:
        return (est, -math.inf, math.inf)
    resid = s - est * n  # (m,)
    se = math.sqrt(float(np.sum(resid * resid)) / (m * (m - 1))) / float(n.mean())
    q = float(stdtrit(m - 1, 0.5 + confidence / 2.0))
    return (est, est - q * se, est + q * se)


def _f64(x: Any) -> np.ndarray:
    """torch tensor (any float dtype, any device) or array-like -> float64 numpy array."""
    if hasattr(x, "detach"):  # torch, without importing it
        return x.detach().to("cpu").double().numpy()
    return np.asarray(x, dtype=np.float64)


def _kl_rows(rollout_full: Any, reference_full: Any) -> np.ndarray:
    """(B, T, V) log μ and log π -> (B, T) KL(μ‖π) = Σ_{v: μ_v > 0} μ_v (log μ_v − log π_v), nats."""
    B, T = rollout_full.shape[:2]
    V = rollout_full.shape[-1]
    out = np.empty((B, T), dtype=np.float64)  # (B, T)
    step = max(1, _CHUNK_ELEMENTS // max(V, 1))
    for b in range(B):
        for t0 in range(0, T, step):
            lmu = _f64(rollout_full[b, t0 : t0 + step])  # (t, V)
            lpi = _f64(reference_full[b, t0 : t0 + step])  # (t, V)
            with np.errstate(all="ignore"):
                # μ_v = 0 (log μ = −inf) contributes 0, not 0·(−inf − log π) = nan; π_v = 0 < μ_v gives +inf.
                terms = np.where(lmu == -np.inf, 0.0, np.exp(lmu) * (lmu - lpi))  # (t, V)
            out[b, t0 : t0 + step] = terms.sum(axis=-1)
    return out


def mismatch_metrics(
    rollout_logprobs: Any,
    reference_logprobs: Any,
    mask: Any,
    *,
    rollout_full: Any = None,
    reference_full: Any = None,
    confidence: float = 0.95,
    bucket_size: int = 16,
) -> MismatchMetrics:
    """Mismatch of μ (rollout) against π (reference) on the masked sampled tokens.

    rollout_logprobs, reference_logprobs: (B, T) log μ(y_t), log π(y_t) (torch or numpy); mask (B, T) bool.
    rollout_full, reference_full: optional (B, T, V) processed log-probs (−inf outside a top-k/top-p kept set).
    `values`: k1, k2, k3, kl_exact (with full rows), abs_diff_mean/_p95/_p99/_max, mult_prob_error, prob_diff_max,
    chi2_token, is_frac_outside (r outside [0.5, 2]), ess ((Σr)²/(n Σr²)), is_weight_mean (mean r),
    seq_log_ratio_mean/_std (per-sequence Σℓ, population std), geo_mean_ratio (mean_i exp(mean_t ℓ)).
    """
    lmu = _f64(rollout_logprobs)  # (B, T) nats
    lpi = _f64(reference_logprobs)  # (B, T) nats
    msk = np.asarray(mask.detach().cpu().numpy() if hasattr(mask, "detach") else mask, dtype=bool)  # (B, T)
    if lmu.shape != lpi.shape or lmu.shape != msk.shape or lmu.ndim != 2:
        raise ValueError(f"shapes differ or are not (B, T): {lmu.shape}, {lpi.shape}, {msk.shape}")
    if (rollout_full is None) != (reference_full is None):
        raise ValueError("give both rollout_full and reference_full, or neither")
    with_full = rollout_full is not None
    if with_full and (tuple(rollout_full.shape[:2]) != lmu.shape or rollout_full.shape != reference_full.shape):
        raise ValueError(f"full rows must be (B, T, V) with (B, T) = {lmu.shape}")
    kl = _kl_rows(rollout_full, reference_full) if with_full else None  # (B, T) nats

    keep = msk.any(axis=1)  # empty sequences carry no information
    lmu, lpi, msk = lmu[keep], lpi[keep], msk[keep]  # (m, T)
    kl = kl[keep] if kl is not None else None
    with np.errstate(all="ignore"):
        ell = lpi - lmu  # (m, T) log r; x − x = +0.0 exactly
        r = np.exp(ell)  # (m, T)
        terms = {
            "k1": lmu - lpi,  # −ℓ
            "k2": 0.5 * ell * ell,
            "k3": np.expm1(ell) - ell,  # r − 1 − ℓ ≥ 0
            "abs_diff_mean": np.abs(ell),
            "mult_prob_error": np.exp(np.abs(ell)),
            "chi2_token": np.expm1(2.0 * ell),  # r² − 1
        }
        if kl is not None:
            terms["kl_exact"] = kl
        outside = np.where(np.isnan(ell), np.nan, ((r < IS_BAND[0]) | (r > IS_BAND[1])).astype(np.float64))
        prob_diff = np.abs(np.exp(lpi) - np.exp(lmu))  # (m, T) probability units
        nonfinite = ~(np.isfinite(lmu) & np.isfinite(lpi)) & msk  # (m, T)

    def row_sum(x: np.ndarray) -> np.ndarray:
        return np.where(msk, x, 0.0).sum(axis=1)  # (m,)

    def row_max(x: np.ndarray) -> np.ndarray:
        return np.where(msk, x, -np.inf).max(axis=1, initial=-np.inf)  # (m,)

    per_seq = {"num_tokens": msk.sum(axis=1).astype(np.float64)}
    per_seq.update({k: row_sum(v) for k, v in terms.items()})
    per_seq.update(
        is_weight=row_sum(r),
        is_outside=row_sum(outside),
        seq_log_ratio=row_sum(ell),
        abs_diff_max=row_max(terms["abs_diff_mean"]),
        prob_diff_max=row_max(prob_diff),
        nonfinite=nonfinite.sum(axis=1).astype(np.float64),
    )
    pooled = metrics_from_per_sequence(per_seq, confidence)

    abs_tok = np.abs(ell[msk])  # (N,)
    with np.errstate(all="ignore"):
        p95, p99 = np.quantile(abs_tok, [0.95, 0.99]) if abs_tok.size else (math.nan, math.nan)
    values = pooled.values | {"abs_diff_p95": float(p95), "abs_diff_p99": float(p99)}
    values = {k: values[k] for k in VALUE_KEYS if k in values}

    buckets = []
    for start in range(0, msk.shape[1], bucket_size):
        sl = slice(start, start + bucket_size)
        bm = msk[:, sl]  # (m, b)
        rows = bm.any(axis=1)  # (m,)
        if not rows.any():
            continue
        n_b = bm.sum(axis=1)[rows].astype(np.float64)  # (m_b,)
        sums = {k: np.where(bm, terms[k][:, sl], 0.0).sum(axis=1)[rows] for k in terms}  # each (m_b,)
        k3, lo, hi = ratio_interval(sums["k3"], n_b, confidence)
        with np.errstate(all="ignore"):
            mean = {k: float(s.sum() / n_b.sum()) for k, s in sums.items()}
        buckets.append(
            PositionBucket(
                start=start,
                end=start + bm.shape[1],
                num_sequences=int(rows.sum()),
                num_tokens=int(n_b.sum()),
                k1=mean["k1"],
                k3=k3,
                abs_diff_mean=mean["abs_diff_mean"],
                kl_exact=mean.get("kl_exact"),
                k3_interval=(lo, hi),
            )
        )
    return MismatchMetrics(
        values=values,
        intervals=pooled.intervals,
        num_sequences=pooled.num_sequences,
        num_tokens=pooled.num_tokens,
        nonfinite=pooled.nonfinite,
        confidence=confidence,
        position_buckets=buckets,
        per_sequence=per_seq,
    )


def combine(per_sequence_list: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Concatenate the `per_sequence` dicts of several measurements (keys present in all of them)."""
    if not per_sequence_list:
        raise ValueError("combine needs at least one per_sequence dict")
    keys = [k for k in per_sequence_list[0] if all(k in p for p in per_sequence_list)]
    return {k: np.concatenate([np.asarray(p[k], dtype=np.float64) for p in per_sequence_list]) for k in keys}


def metrics_from_per_sequence(per_sequence: Mapping[str, np.ndarray], confidence: float = 0.95) -> PooledMetrics:
    """Every metric that per-sequence sums determine (all but the abs_diff quantiles), with intervals."""
    ps = {k: np.asarray(v, dtype=np.float64) for k, v in per_sequence.items()}  # each (m,)
    n = ps["num_tokens"]  # (m,)
    total = float(n.sum())
    values: dict[str, float] = {}
    intervals: dict[str, tuple[float, float]] = {}
    for k in TOKEN_MEAN_METRICS:
        if k in ps:
            values[k], lo, hi = ratio_interval(ps[k], n, confidence)
            intervals[k] = (lo, hi)
    with np.errstate(all="ignore"):
        sum_r = float(ps["is_weight"].sum())
        sum_r2 = float(ps["chi2_token"].sum()) + total  # Σ(r² − 1) + n
        seq = ps["seq_log_ratio"]  # (m,) Σ_t ℓ per sequence
        empty = n.size == 0
        values.update(
            abs_diff_max=float(ps["abs_diff_max"].max()) if not empty else math.nan,
            prob_diff_max=float(ps["prob_diff_max"].max()) if not empty else math.nan,
            is_frac_outside=float(ps["is_outside"].sum()) / total if total else math.nan,
            ess=sum_r * sum_r / (total * sum_r2) if total else math.nan,
            is_weight_mean=sum_r / total if total else math.nan,
            seq_log_ratio_mean=float(seq.mean()) if not empty else math.nan,
            seq_log_ratio_std=float(seq.std()) if not empty else math.nan,
            geo_mean_ratio=float(np.exp(seq / n).mean()) if not empty else math.nan,
        )
    return PooledMetrics(
        values=values,
        intervals=intervals,
        num_sequences=int(n.size),
        num_tokens=int(total),
        nonfinite=int(ps["nonfinite"].sum()) if "nonfinite" in ps else 0,
        confidence=confidence,
    )


def decide(estimate: float, lo: float, hi: float, budget: float) -> Literal["admit", "reject", "undecided"]:
    """Screen verdict (REFERENCE §3.4): admit when hi < budget, reject when lo > budget, else undecided."""
    if any(math.isnan(v) for v in (estimate, lo, hi, budget)):
        return "undecided"
    if hi < budget:
        return "admit"
    if lo > budget:
        return "reject"
    return "undecided"


def sequential_confidence(confidence: float, max_looks: int) -> float:
    """Per-look confidence for a screen that looks at most `max_looks` times (Bonferroni: α spent evenly).

    With per-look level 1 − α/K, the chance that any of the K intervals misses is ≤ α, whatever the stopping rule,
    so the verdict at the look that stops is valid at `confidence`. Conservative, but simple and exact in its claim.
    """
    if max_looks < 1:
        raise ValueError("max_looks must be >= 1")
    return 1.0 - (1.0 - confidence) / max_looks
