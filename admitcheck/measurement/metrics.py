# long module: pure metrics and the intervals over their per-sequence sums, pinned together
"""Mismatch between the rollout engine μ and the reference π on the sampled tokens (REFERENCE.md §2), nats/token.

    m = mismatch_metrics(rollouts.logprobs, scores.logprobs, rollouts.mask,
                         rollout_full=rollouts.full_logprobs, reference_full=scores.full_logprobs)
    m.values["k3"], m.intervals["k3"]                      # estimate and 95% CI over sequences
    decide(m.values["k3"], *m.intervals["k3"], budget=0.01)  # "admit" | "reject" | "undecided"
    pooled = metrics_from_per_sequence(combine([m.per_sequence, m2.per_sequence]))  # sequential screening

Conventions: ℓ_t = log π(y_t) − log μ(y_t), r_t = exp(ℓ_t); π = reference (trainer), μ = rollout (engine).
All maths in float64. Sequences are the independent units: a token-mean metric is the ratio estimator
Σ_i s_i / Σ_i n_i over sequences; its interval is a studentized bootstrap (bootstrap-t) over sequences
(`ratio_interval_t`), which keeps its level where a few sequences carry much of the total and the delta-method t
interval (`ratio_interval`, its standard error) does not; `pareto_k` and `top_share` say when even it cannot be
trusted (docs/statistics.md).
Sequences with no masked token are dropped. Terms are written so that ℓ = 0 gives exact zeros (expm1, not exp − 1):
identical inputs give exactly 0 (1 for the ratio metrics). Non-finite log-probs never raise: they propagate into
the metrics they touch (nan, or +inf for a KL that is truly infinite) and are counted in `nonfinite`.
"""

from __future__ import annotations

import functools
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


def k3_terms(ell: Any) -> Any:
    """Per-token k3 = r − 1 − ℓ = expm1(ℓ) − ℓ ≥ 0 of log ratios ℓ (expm1, not exp − 1: ℓ = 0 gives exactly 0).

    The one home of the formula: a numpy array is computed by numpy (the probe metrics, the log readers), a torch
    tensor by torch (a training step's in-run mismatch), each in its own library so their numbers stay as shipped."""
    return ell.expm1() - ell if hasattr(ell, "expm1") else np.expm1(ell) - ell


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


def per_sequence_sums(
    rollout_logprobs: Any,
    reference_logprobs: Any,
    mask: Any,
    *,
    rollout_full: Any = None,
    reference_full: Any = None,
) -> dict[str, np.ndarray]:
    """The per-sequence sums of `MismatchMetrics.per_sequence` (one entry per non-empty sequence), without the
    metrics and intervals: what a probe loop keeps per batch (arguments as in `mismatch_metrics`)."""
    return _terms(rollout_logprobs, reference_logprobs, mask, rollout_full, reference_full)[0]


def _terms(rollout_logprobs, reference_logprobs, mask, rollout_full, reference_full):
    """(per-sequence sums, per-token terms, ℓ, mask) of the non-empty sequences."""
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
            "k3": k3_terms(ell),  # r − 1 − ℓ ≥ 0
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
    return per_seq, terms, ell, msk


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
    per_seq, terms, ell, msk = _terms(rollout_logprobs, reference_logprobs, mask, rollout_full, reference_full)
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
        k3, lo, hi = ratio_interval_t(sums["k3"], n_b, confidence)
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
            values[k], lo, hi = ratio_interval_t(ps[k], n, confidence)
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


# ------------------------------------------------------------------------------- heavy-tail-aware ratio bounds

BOOTSTRAP_RESAMPLES = 2000  # resamples of the bootstrap-t; ≥ 6 fall beyond the 0.31% per-look quantile of a screen
BOOTSTRAP_SEED = 20251203  # fixed: a verdict is a function of the data, not of the bootstrap's draw


@functools.lru_cache(maxsize=64)
def resample_counts(m: int, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> np.ndarray:
    """(resamples, m) multinomial counts of a nonparametric bootstrap over m units (each row sums to m); cached and
    read-only (every look of every screen with m units resamples the same way)."""
    rng = np.random.default_rng([seed, m])
    idx = rng.integers(0, m, size=(resamples, m))  # (R, m)
    counts = np.zeros((resamples, m), dtype=np.float64)
    np.add.at(counts, (np.arange(resamples)[:, None], idx), 1.0)
    counts.flags.writeable = False
    return counts


def bootstrap_t_bounds(
    sums: np.ndarray, counts: np.ndarray, alpha_low: float, alpha_high: float, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Studentized (bootstrap-t) bounds of the ratio Σs/Σn for k data sets at once.

    sums, counts: (k, m) per-unit sums and token counts; weights: (R, m) bootstrap counts (`resample_counts`).
    Returns (estimate, lower, upper), each (k,): lower misses the ratio with probability ≈ alpha_low, upper with
    ≈ alpha_high. t* = (R* − R̂)/se*, se the delta-method standard error of `ratio_interval` in each resample;
    lower = R̂ − q_{1−α_low}(t*)·se, upper = R̂ − q_{α_high}(t*)·se. On right-skewed units a resample without the
    largest ones has a small se* and a very negative t*, which is what pushes the upper bound up (Hall 1992, §3.10).
    """
    s, n = np.asarray(sums, dtype=np.float64), np.asarray(counts, dtype=np.float64)  # (k, m)
    m = s.shape[1]
    with np.errstate(all="ignore"):
        est = s.sum(1) / n.sum(1)  # (k,)
        resid = s - est[:, None] * n  # (k, m)
        se = np.sqrt((resid * resid).sum(1) / (m * (m - 1))) / n.mean(1)  # (k,)
        w = weights  # (R, m)
        sw, nw = s @ w.T, n @ w.T  # (k, R)
        est_b = sw / nw  # (k, R)
        # Σ w (s − R* n)² = Σ w s² − 2 R* Σ w s n + R*² Σ w n²: three products instead of a (k, R, m) array
        ss = (s * s) @ w.T - 2.0 * est_b * ((s * n) @ w.T) + est_b * est_b * ((n * n) @ w.T)  # (k, R)
        se_b = np.sqrt(np.maximum(ss, 0.0) / (m * (m - 1))) / (nw / m)  # (k, R)
        t = (est_b - est[:, None]) / se_b  # (k, R); 0/0 (a resample of one repeated unit) is nan
        t = np.where(np.isnan(t), 0.0, t)  # such a resample says nothing about the spread
        q_hi = np.quantile(t, 1.0 - alpha_low, axis=1)  # (k,)
        q_lo = np.quantile(t, alpha_high, axis=1)  # (k,)
        lower = np.where(se > 0, est - q_hi * se, est)
        upper = np.where(se > 0, est - q_lo * se, est)
    return est, lower, upper


def ratio_interval_t(sums: Any, counts: Any, confidence: float = 0.95) -> tuple[float, float, float]:
    """Ratio estimator Σs/Σn with a two-sided interval at `confidence` -> (mean, lo, hi): `bootstrap_t_bounds`.

    The interval every token-mean metric is reported with (descriptive: on heavy-tailed sequences no interval for an
    unbounded mean keeps its level, docs/statistics.md; a screen decides on `Functional` with `betting_decides`).
    Non-finite or degenerate inputs behave as in `ratio_interval`.
    """
    s = np.asarray(sums, dtype=np.float64)  # (m,)
    n = np.asarray(counts, dtype=np.float64)  # (m,)
    est, lo, hi = ratio_interval(s, n, confidence)
    if not (math.isfinite(est) and math.isfinite(lo) and math.isfinite(hi)) or s.size < 3 or hi == lo:
        return est, lo, hi
    a = (1.0 - confidence) / 2.0
    e, lo_b, hi_b = bootstrap_t_bounds(s[None], n[None], a, a, resample_counts(s.size))
    return float(e[0]), float(lo_b[0]), float(hi_b[0])


def top_share(sums: Any) -> float:
    """The largest unit's share of the total, max|s_i| / Σ|s_i| (0 for an all-zero total): the heavy-tail flag."""
    a = np.abs(np.asarray(sums, dtype=np.float64))
    with np.errstate(all="ignore"):
        total = float(a.sum())
    return float(a.max()) / total if a.size and total > 0 and math.isfinite(total) else 0.0


PARETO_MIN_UNITS = 100  # below, the tail has < 20 points and k̂ is mostly its prior and noise (sd ~0.3 at 32 units)


def pareto_k(sums: Any) -> float:
    """Tail index k̂ of the per-unit values |s_i|: a generalized Pareto fit to the largest min(20%, 3√m) exceedances
    (Zhang & Stephens 2009 profile estimator with the weak prior of Vehtari et al. 2024, as in PSIS).

    k̂ ≥ 1/2: infinite variance in the limit; k̂ > 0.7: the sample mean of this many units is not reliable — its
    error is dominated by values not yet seen, and no interval computed from the sample can know that.
    Returns −inf when the tail is flat (fewer than 5 distinct exceedances: nothing heavy to fit) or m <
    PARETO_MIN_UNITS (then `top_share` alone speaks for the tail).
    """
    a = np.sort(np.abs(np.asarray(sums, dtype=np.float64)))  # (m,)
    m = a.size
    if m < PARETO_MIN_UNITS or not np.all(np.isfinite(a)):
        return -math.inf
    tail = math.ceil(min(0.2 * m, 3.0 * math.sqrt(m)))
    x = a[-tail:] - a[-tail - 1]  # (M,) exceedances over the cutoff, ascending
    x = x[x > 0]
    n = x.size
    if n < 5:
        return -math.inf
    grid = 30 + int(math.sqrt(n))
    b = 1.0 - np.sqrt(grid / (np.arange(1, grid + 1) - 0.5))  # (grid,)
    b = b / (3.0 * x[int(n / 4 + 0.5) - 1]) + 1.0 / x[-1]
    with np.errstate(all="ignore"):
        k = np.log1p(-b[:, None] * x).mean(axis=1)  # (grid,)
        profile = n * (np.log(-b / k) - k - 1.0)  # (grid,)
        w = 1.0 / np.exp(profile - profile[:, None]).sum(axis=1)  # (grid,)
        w = np.where(np.isfinite(w), w, 0.0)
        b_post = float((b * w).sum() / w.sum())
        k_post = float(np.log1p(-b_post * x).mean())
    return (n * k_post + 10 * 0.5) / (n + 10)  # shrunk toward 0.5 with weight 10, as in PSIS


# ------------------------------------------------------------------------------- the screen's estimand and its bound

WINSOR_KAPPA = 8.0  # a sequence counts at most κ × the estimand (docs/statistics.md §1 says how κ was chosen)
BET_TRUNCATION = 0.5  # bets risk at most half the capital on one sequence (Waudby-Smith & Ramdas 2024, §5)


@dataclass(frozen=True)
class Functional:
    """What a budget's x and a screen's mismatch both are: the self-winsorized sequence mean of one estimator.

    Each probe sequence i gives its token mean X_i = s_i / n_i of the estimator (kl_exact or k3; nats/token). The
    functional is the T that solves T = E[min(X, κ T)]: the mean over sequences with every sequence counted at most
    κ × T. It is the plain sequence mean where no sequence exceeds κ × T (light tails), scale-equivariant, and bounded
    relative to itself, which is what makes an anytime-valid bound with power possible (`betting_log_capital`).
    `estimator` None: the calibration's metric decides (`admission.sequential.decision_estimator`).
    """

    estimator: str | None = None
    kappa: float = WINSOR_KAPPA
    aggregate: Literal["sequence_mean"] = "sequence_mean"

    def to_dict(self) -> dict[str, Any]:
        return {"estimator": self.estimator, "kappa": self.kappa, "aggregate": self.aggregate}

    def describe(self) -> str:
        return f"{self.estimator or 'metric'} sequence means, self-winsorized at {self.kappa:g} × the value"

    def sequence_means(self, per_sequence: Mapping[str, np.ndarray], key: str | None = None) -> np.ndarray:
        """(m,) X_i = s_i / n_i of `key` (default: the functional's estimator)."""
        k = key or self.estimator
        s, n = (np.asarray(per_sequence[x], dtype=np.float64) for x in (k, "num_tokens"))
        with np.errstate(all="ignore"):
            return s / n

    def value(self, per_sequence: Mapping[str, np.ndarray], key: str | None = None) -> float:
        """The functional of the measured sequences (plug-in: the fixed point on their empirical distribution)."""
        return float(winsorized_mean(self.sequence_means(per_sequence, key)[None], self.kappa)[0])


def winsorized_mean(x: Any, kappa: float) -> np.ndarray:
    """Row-wise T solving T = mean(min(x, κ T)) for (k, m) nonnegative rows -> (k,) (κ > 1).

    T(1 − κ j / m) = (sum of the m − j smallest) / m when exactly j values exceed κ T: found by trying every j on the
    sorted row. 0 for an all-zero row (and when fewer than m/κ values are positive); inf/nan propagate."""
    a = -np.sort(-np.asarray(x, dtype=np.float64), axis=1)  # (k, m) descending
    k, m = a.shape
    if m == 0:
        return np.full(k, np.nan)
    j = np.arange(m)  # values above the cap
    with np.errstate(all="ignore"):
        rest = a.sum(1, keepdims=True) - np.concatenate([np.zeros((k, 1)), np.cumsum(a, 1)[:, :-1]], 1)
    denom = m - kappa * j  # (m,)
    with np.errstate(all="ignore"):
        t = np.where(denom > 0, rest / denom, np.inf)  # (k, m) candidate T for each j
        above = np.where(j > 0, a[:, np.maximum(j - 1, 0)] > kappa * t, True)  # the j largest exceed κT
        below = a <= kappa * t  # the (j+1)-th largest does not exceed κT
        ok = above & below & (denom > 0)
    first = np.argmax(ok, axis=1)  # (k,)
    out = t[np.arange(k), first]
    out = np.where(ok.any(1), out, 0.0)
    bad = ~np.isfinite(a).all(1)
    return np.where(bad, np.where(np.isnan(a).any(1), np.nan, np.inf), out)


def capped_share(x: Any, value: float, kappa: float) -> float:
    """Share of Σ X_i above the cap κ × value: what the functional does not count (0 with no sequence above)."""
    a = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        total = float(a.sum())
        over = float(np.clip(a - kappa * value, 0.0, None).sum())
    return over / total if total > 0 and math.isfinite(total) else 0.0


def betting_log_capital(x: Any, threshold: Any, kappa: float, side: Literal["below", "above"]) -> np.ndarray:
    """Log capital of a bettor against "the functional is ≥ threshold" (side "below": evidence that it is below) or
    "≤ threshold" ("above"), after each sequence: (k, m) rows of X_i in their sequence order -> (k, m).

    T ≥ b  ⇔  E[min(X, κ b)] ≥ b  (T = E[min(X, κT)] with the right side concave in T), so with
    z_i = (min(X_i, κ b) − b) / (κ b) ∈ [−1/κ, 1 − 1/κ] the capital Π (1 + λ_i y_i), y = −z ("below") or z
    ("above"), is a nonnegative supermartingale under the null for any predictable λ_i ∈ [0, 1 / max(−y)]
    (Waudby-Smith & Ramdas 2024, JRSSB): by Ville's inequality it ever reaches 1/α with probability ≤ α, at every
    look and every stopping time alike, with no split of α over the looks. λ_i: the aGRAPA bet
    mean(y) / mean(y²) of the sequences before i (one prior pseudo-sequence at y = 0, y² = (range/2)²), truncated to
    [0, BET_TRUNCATION / max(−y)]."""
    xs = np.asarray(x, dtype=np.float64)  # (k, m)
    xs = np.where(np.isnan(xs), np.inf, np.maximum(xs, 0.0))  # a nan counts as the cap; rounding below 0 as 0
    b = np.broadcast_to(np.asarray(threshold, dtype=np.float64).reshape(-1, 1), (xs.shape[0], 1))  # (k, 1)
    with np.errstate(all="ignore"):
        z = (np.minimum(xs, kappa * b) - b) / (kappa * b)  # (k, m)
    z = np.where(np.isfinite(z), z, 0.0)  # a threshold of 0 or inf: no bet
    y, worst = (-z, 1.0 - 1.0 / kappa) if side == "below" else (z, 1.0 / kappa)  # max(−y)
    prior_sq = (0.5 / 1.0) ** 2  # (range / 2)², the range of z being 1
    s1 = np.concatenate([np.zeros((xs.shape[0], 1)), np.cumsum(y, 1)[:, :-1]], 1)  # (k, m) Σ y before i
    s2 = np.concatenate([np.zeros((xs.shape[0], 1)), np.cumsum(y * y, 1)[:, :-1]], 1)
    count = np.arange(xs.shape[1]) + 1.0  # sequences before i, plus the prior one
    lam = np.clip((s1 / count) / ((s2 + prior_sq) / count), 0.0, BET_TRUNCATION / worst)  # (k, m)
    return np.cumsum(np.log1p(lam * y), axis=1)


def betting_decides(x: Any, threshold: Any, kappa: float, alpha: float, side: Literal["below", "above"]) -> np.ndarray:
    """(k,) True where the capital against the other side reached 1/α at some sequence of the row (Ville)."""
    cap = betting_log_capital(x, threshold, kappa, side)
    return cap.max(axis=1) >= math.log(1.0 / alpha) if cap.shape[1] else np.zeros(cap.shape[0], bool)


def winsorized_bounds(x: Any, kappa: float, alpha: float, iters: int = 48) -> tuple[float, float, float]:
    """(estimate, lower, upper) of the functional from one row of sequence means: the confidence sequence
    {b : neither bettor has reached 1/α against b}, each end found by bisection in log b (each side at level α).

    Valid at every look (Ville); the ends assume the rejected sets are monotone in b, which they are up to the
    bets' adaptation — the screen's decisions test the budget's own ends directly (`betting_decides`), so this
    interval is for display."""
    a = np.asarray(x, dtype=np.float64)[None]  # (1, m)
    est = float(winsorized_mean(a, kappa)[0])
    if a.size == 0 or not math.isfinite(est):
        return est, est, est
    if est == 0.0 and not (a > 0).any():
        return 0.0, 0.0, 0.0
    top = float(np.nanmax(a)) if a.size else 1.0
    scale = max(est, top / kappa, 1e-300)

    def rejects(b: float, side: str) -> bool:
        return bool(betting_decides(a, b, kappa, alpha, side)[0])  # type: ignore[arg-type]

    def edge(side: str) -> float:
        # side "below" rejects large b (upper end); "above" rejects small b (lower end)
        lo, hi = math.log(scale) - 40.0, math.log(scale) + 40.0
        if side == "below" and not rejects(math.exp(hi), side):
            return math.inf
        if side == "above" and not rejects(math.exp(lo), side):
            return 0.0
        for _ in range(iters):
            mid = 0.5 * (lo + hi)
            if rejects(math.exp(mid), side) == (side == "below"):
                hi = mid
            else:
                lo = mid
        return math.exp(hi if side == "below" else lo)

    return est, edge("above"), edge("below")


@dataclass(frozen=True)
class FunctionalValue:
    """A functional measured on probe sequences: the value, its confidence sequence and what the cap left out."""

    value: float  # nats/token
    interval: tuple[float, float]  # `winsorized_bounds` at (1 − confidence)/2 per side
    capped_share: float  # `capped_share`
    estimator: str
    kappa: float
    num_sequences: int


def functional_value(
    per_sequence: Mapping[str, np.ndarray], functional: Functional, confidence: float = 0.95
) -> FunctionalValue:
    """The one measurement of a `Functional`: a calibration level's x and a screen's mismatch both come from here."""
    x = functional.sequence_means(per_sequence)  # (m,)
    est, lo, hi = winsorized_bounds(x, functional.kappa, (1.0 - confidence) / 2.0)
    return FunctionalValue(
        est, (lo, hi), capped_share(x, est, functional.kappa), str(functional.estimator), functional.kappa, x.size
    )
