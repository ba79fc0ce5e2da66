# long module: one port per framework (verl, prime-rl, NeMo-RL, slime, TRL), each a transcription
"""The same tokens' mismatch, computed the way each training framework logs it, beside admitcheck's numbers.

    d = dashboard("verl", rollout_logprobs, trainer_logprobs, mask)     # (B, T) log μ, log π, bool
    for row in d.rows: row.key, row.value, row.admitcheck, row.admitcheck_value, row.relation, row.budget
    d.budget_in(0.01)               # {"rollout_corr/k3_kl": 0.01, ...}: keys where the budget reads as is
    dashboard_from_metrics("verl", m.values, m.num_tokens, m.per_sequence)   # engine runs: no token arrays

(~500 lines: five faithful ports of other code bases' formulas, each kept whole so it can be checked against its
source, plus their derivation from per-sequence sums.)
Pure numpy in float64. Each port follows the framework's current source (paths in docs/pipelines.md): its masks,
its order of means (per token, per sequence, per process), its clamps and epsilons, its key names as they appear
in W&B. Conventions as in `metrics`: ℓ = log π − log μ (π trainer, μ rollout), r = e^ℓ.

`row.budget` says whether a calibrated budget B (k3, nats/token) can be stated in that key: "same" (the key is
admitcheck's k3 by formula: B reads as is), "expectation" (an unbiased estimator of the same KL(μ‖π) on the same
tokens, e.g. k1: B holds for its expectation, single batches are noisier and can be negative), "none" (not a
function of the token-mean KL: per-sequence means weight tokens differently, IS statistics and |ℓ| moments depend on
the shape of the ℓ distribution, not only on its KL).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

FRAMEWORKS = ("verl", "prime-rl", "nemo-rl", "slime", "trl")
Budget = Literal["same", "expectation", "none"]
VERL_SAFETY_BOUND = 20.0  # verl rollout_corr_helper.SAFETY_BOUND (and slime mis.py): ℓ clamped to ±20 before exp
MASKED_MEAN_EPS = 1e-8  # verl and NeMo-RL masked_mean divide by mask.sum() + 1e-8


@dataclass(frozen=True)
class DashboardRow:
    key: str  # the framework's key as logged (W&B)
    value: float  # nan when the inputs given cannot determine it
    admitcheck: str | None  # the nearest admitcheck metric
    admitcheck_value: float | None
    relation: str  # how the two relate, in words
    budget: Budget


@dataclass(frozen=True)
class Dashboard:
    framework: str
    source: Literal["tokens", "per-sequence sums", "token means"]
    rows: tuple[DashboardRow, ...]
    notes: tuple[str, ...] = ()

    def budget_in(self, budget: float) -> dict[str, float]:
        """The budget stated in each of this framework's keys where it reads as is ("same" or "expectation")."""
        return {r.key: budget for r in self.rows if r.budget != "none"}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: non-finite numbers become None."""

        def clean(x: Any) -> Any:
            return None if isinstance(x, float) and not math.isfinite(x) else x

        rows = [{k: clean(v) for k, v in asdict(r).items()} for r in self.rows]
        return {"framework": self.framework, "source": self.source, "rows": rows, "notes": list(self.notes)}


# ---------------------------------------------------------------------------------------- faithful ports


def _prep(rollout_logprobs: Any, trainer_logprobs: Any, mask: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    def f64(x: Any) -> np.ndarray:
        return x.detach().to("cpu").double().numpy() if hasattr(x, "detach") else np.asarray(x, dtype=np.float64)

    mu, pi = f64(rollout_logprobs), f64(trainer_logprobs)  # (B, T)
    m = f64(mask) if not hasattr(mask, "dtype") or mask.dtype != bool else np.asarray(mask, dtype=np.float64)
    if mu.shape != pi.shape or mu.shape != m.shape or mu.ndim != 2:
        raise ValueError(f"shapes differ or are not (B, T): {mu.shape}, {pi.shape}, {m.shape}")
    # Padding may hold anything; the frameworks multiply by the mask, so keep padded values finite.
    mu, pi = np.where(m > 0, mu, 0.0), np.where(m > 0, pi, 0.0)
    return mu, pi, m


def verl_metrics(rollout_logprobs: Any, trainer_logprobs: Any, mask: Any, *, is_threshold: float = 2.0) -> dict:
    """verl: `compute_offpolicy_metrics` + `compute_is_metrics` (rollout_is="token") + `calculate_debug_metrics`.

    old_log_prob = trainer, rollout_log_prob = rollout, response_mask = mask (verl/trainer/ppo/rollout_corr_helper.py,
    verl/utils/debug/metrics.py). The rollout_is_* keys appear only with algorithm.rollout_correction.rollout_is set.
    """
    rollout, old, m = _prep(rollout_logprobs, trainer_logprobs, mask)
    with np.errstate(all="ignore"):

        def masked_mean(x: np.ndarray, axis: int | None = None) -> Any:
            return (x * m).sum(axis=axis) / (m.sum(axis=axis) + MASKED_MEAN_EPS)

        out: dict[str, float] = {}
        mean_lp_train = masked_mean(old, axis=-1)  # (B,)
        out["rollout_corr/training_ppl"] = float(np.exp(-mean_lp_train).mean())
        out["rollout_corr/training_log_ppl"] = float((-mean_lp_train).mean())
        out["rollout_corr/kl"] = float(masked_mean(rollout - old))
        log_ratio = old - rollout  # (B, T)
        out["rollout_corr/k3_kl"] = float(masked_mean(np.exp(log_ratio) - log_ratio - 1))
        mean_lp_rollout = masked_mean(rollout, axis=-1)  # (B,)
        out["rollout_corr/rollout_ppl"] = float(np.exp(-mean_lp_rollout).mean())
        out["rollout_corr/rollout_log_ppl"] = float((-mean_lp_rollout).mean())
        log_ppl_diff = mean_lp_rollout - mean_lp_train  # (B,)
        out["rollout_corr/log_ppl_diff"] = float(log_ppl_diff.mean())
        out["rollout_corr/log_ppl_abs_diff"] = float(np.abs(log_ppl_diff).mean())
        out["rollout_corr/log_ppl_diff_max"] = float(log_ppl_diff.max())
        out["rollout_corr/log_ppl_diff_min"] = float(log_ppl_diff.min())
        out["rollout_corr/ppl_ratio"] = float(np.exp(log_ppl_diff).mean())
        rho = np.exp(np.clip(log_ratio, -VERL_SAFETY_BOUND, VERL_SAFETY_BOUND))  # (B, T)
        out["rollout_corr/chi2_token"] = float(masked_mean(rho * rho) - 1.0)
        seq_sum = np.clip((log_ratio * m).sum(axis=-1), -VERL_SAFETY_BOUND, VERL_SAFETY_BOUND)  # (B,)
        out["rollout_corr/chi2_seq"] = float(np.exp(2.0 * seq_sum).mean() - 1.0)

        # compute_rollout_correction_weights(rollout_is="token"): metrics on the weights before truncation
        w = rho * m  # (B, T)
        lower = 1.0 / is_threshold
        valid = m > 0
        out["rollout_corr/rollout_is_mean"] = float(masked_mean(w))
        out["rollout_corr/rollout_is_ratio_fraction_high"] = float(masked_mean((w > is_threshold).astype(float)))
        out["rollout_corr/rollout_is_ratio_fraction_low"] = float(masked_mean((w < lower).astype(float)))
        out["rollout_corr/rollout_is_max"] = float(np.where(valid, w, -np.inf).max())
        out["rollout_corr/rollout_is_min"] = float(np.where(valid, w, np.inf).min())
        wc = np.clip(w, lower, is_threshold)  # (B, T) clamped for std and ESS
        if m.sum() > 1:
            var = masked_mean(wc * wc) - masked_mean(wc) ** 2
            out["rollout_corr/rollout_is_std"] = float(math.sqrt(max(var, 0.0)))
        else:
            out["rollout_corr/rollout_is_std"] = 0.0
        normalized = wc / (masked_mean(wc) + 1e-8)
        out["rollout_corr/rollout_is_eff_sample_size"] = float(1.0 / masked_mean(normalized * normalized))
        seq_w = masked_mean(w, axis=-1)  # (B,)
        out["rollout_corr/rollout_is_seq_mean"] = float(seq_w.mean())
        out["rollout_corr/rollout_is_seq_std"] = float(seq_w.std(ddof=1)) if seq_w.size > 1 else 0.0
        out["rollout_corr/rollout_is_seq_max"] = float(seq_w.max())
        out["rollout_corr/rollout_is_seq_min"] = float(seq_w.min())
        out["rollout_corr/rollout_is_seq_max_deviation"] = float(np.abs(seq_w - 1.0).max())
        out["rollout_corr/rollout_is_seq_fraction_high"] = float((seq_w > is_threshold).mean())
        out["rollout_corr/rollout_is_seq_fraction_low"] = float((seq_w < lower).mean())

        # calculate_debug_metrics: probability (not log-prob) differences, torch.std is unbiased
        diff = np.abs(np.exp(old) - np.exp(rollout))[valid]  # (N,)
        out["training/rollout_probs_diff_max"] = float(diff.max())
        out["training/rollout_probs_diff_mean"] = float(diff.mean())
        out["training/rollout_probs_diff_std"] = float(diff.std(ddof=1)) if diff.size > 1 else math.nan
    return out


def prime_rl_metrics(rollout_logprobs: Any, trainer_logprobs: Any, mask: Any) -> dict:
    """prime-rl: `compute_importance_ratio_and_mismatch_kl` per token, all ranks' tokens gathered, then
    `Tensors.compute_stats` (src/prime_rl/trainer/rl/train.py, loss.py, trainer/utils.py)."""
    inference, trainer, m = _prep(rollout_logprobs, trainer_logprobs, mask)
    with np.errstate(all="ignore"):
        log_ratio = trainer - inference
        kl = (np.exp(log_ratio) - log_ratio - 1)[m > 0]  # (N,)
    s = np.sort(kl)
    return {
        "mismatch_kl/all/mean": float(kl.mean()),
        "mismatch_kl/all/median": float(s[(s.size - 1) // 2]),  # torch.median: the lower of the two middles
        "mismatch_kl/all/std": float(kl.std(ddof=1)) if kl.size > 1 else math.nan,
        "mismatch_kl/all/min": float(kl.min()),
        "mismatch_kl/all/max": float(kl.max()),
    }


def nemo_rl_metrics(rollout_logprobs: Any, trainer_logprobs: Any, mask: Any, *, kl_type: str = "k3") -> dict:
    """NeMo-RL `ClippedPGLossFn.__call__` diagnostics (nemo_rl/algorithms/loss/loss_functions.py, utils.calculate_kl).

    generation_logprobs = rollout, prev_logprobs = trainer, mask = token_mask · sample_mask; every microbatch's masked
    sum divided by the global valid-token count, summed over microbatches: one token mean. `kl_type` is
    loss_fn.reference_policy_kl_type (default "k3").
    """
    gen, prev, m = _prep(rollout_logprobs, trainer_logprobs, mask)
    n = m.sum() + MASKED_MEAN_EPS

    def calculate_kl(logprobs: np.ndarray, logprobs_reference: np.ndarray) -> np.ndarray:
        logr = logprobs_reference - logprobs  # input_clamp_value=None for these diagnostics
        if kl_type == "k1":
            return -logr
        if kl_type == "k2":
            return logr * logr / 2
        if kl_type == "k3":
            return np.exp(logr) - 1 - logr
        raise ValueError(f"unknown kl_type {kl_type!r} (k1, k2, k3)")

    with np.errstate(all="ignore"):
        lp_error = np.abs(gen - prev)
        log_mixture = np.log(0.5 * np.exp(prev) + 0.5 * np.exp(gen))
        kl_prev = np.exp(prev - log_mixture) - (prev - log_mixture) - 1
        kl_gen = np.exp(gen - log_mixture) - (gen - log_mixture) - 1
        return {
            "train/token_mult_prob_error": float((np.exp(lp_error * m) * m).sum() / n),
            "train/gen_kl_error": float((calculate_kl(gen, prev) * m).sum() / n),
            "train/policy_kl_error": float((calculate_kl(prev, gen) * m).sum() / n),
            "train/js_divergence_error": float(((0.5 * kl_prev + 0.5 * kl_gen) * m).sum() / n),
        }


def slime_metrics(
    rollout_logprobs: Any,
    trainer_logprobs: Any,
    mask: Any,
    *,
    per_token: bool = False,
    rollout_ids: Any = None,
) -> dict:
    """slime: `train_rollout_logprob_abs_diff` (slime/backends/megatron_utils/loss.py) and the mismatch helper's
    `mis_*` keys (examples/train_infer_mismatch_helper/mis.py `add_ppl_metrics`), reduced by `sum_of_sample_mean`
    (cp_utils.get_sum_of_sample_mean) and divided by the step's sample count.

    Default: each sample's token mean, then the mean over samples; samples sharing a rollout id share one
    denominator (the rollout's token total). `per_token` (--calculate-per-token-loss): one token mean.
    """
    rollout, train, m = _prep(rollout_logprobs, trainer_logprobs, mask)
    B = m.shape[0]
    counts = m.sum(axis=-1)  # (B,)
    if rollout_ids is not None:
        ids = np.asarray(rollout_ids)
        denoms = np.array([counts[ids == i].sum() for i in ids], dtype=np.float64)  # (B,) rollout_mask_sums
    else:
        denoms = counts

    def reduce(x: np.ndarray) -> float:  # x (B, T) per token (or a per-sample value broadcast along T)
        if per_token:
            return float((x * m).sum() / max(m.sum(), 1.0))
        return float(((x * m).sum(axis=-1) / np.maximum(denoms, 1.0)).sum() / B)

    def seq_mean(x: np.ndarray) -> np.ndarray:  # mis.py masked_mean(expand=True): (B, T) constant per row
        return np.broadcast_to(((x * m).sum(-1) / np.maximum(counts, 1.0))[:, None], x.shape)

    with np.errstate(all="ignore"):
        log_ratio = train - rollout
        log_ppl_diff = seq_mean(rollout) - seq_mean(train)
        rho = np.exp(np.clip(log_ratio, -VERL_SAFETY_BOUND, VERL_SAFETY_BOUND))
        seq_sum = np.clip((log_ratio * m).sum(-1), -VERL_SAFETY_BOUND, VERL_SAFETY_BOUND)
        return {
            "train/train_rollout_logprob_abs_diff": reduce(np.abs(train - rollout)),
            "train/mis_training_log_ppl": reduce(-seq_mean(train)),
            "train/mis_kl": reduce(rollout - train),
            "train/mis_k3_kl": reduce(np.exp(log_ratio) - log_ratio - 1),
            "train/mis_log_ppl_diff": reduce(log_ppl_diff),
            "train/mis_log_ppl_abs_diff": reduce(np.abs(log_ppl_diff)),
            "train/mis_ppl_ratio": reduce(np.exp(log_ppl_diff)),
            "train/mis_chi2_token": reduce(seq_mean(rho * rho) - 1.0),
            "train/mis_chi2_seq": reduce(np.broadcast_to((np.exp(2.0 * seq_sum) - 1.0)[:, None], m.shape)),
        }


def trl_metrics(
    rollout_logprobs: Any,
    trainer_logprobs: Any,
    mask: Any,
    *,
    groups: Any = None,
    mode: str = "sequence_mask",
    clip_min: float | None = None,
    clip_max: float | None = 3.0,
) -> dict:
    """TRL GRPOTrainer `_generate_and_score_completions` with vLLM IS correction (trl/trainer/grpo_trainer.py).

    sampling_per_token_logps = rollout, old_per_token_logps = trainer, mask = completion_mask · tool_mask. Each
    process (`groups`: process index per sequence; default one process) takes its own mean, then
    `accelerator.gather(...).mean()`. IS ratio per `vllm_importance_sampling_mode` (default "sequence_mask": the
    sequence's exp(Σℓ), set to 0 above clip_max = 3).
    """
    sampling, old, m = _prep(rollout_logprobs, trainer_logprobs, mask)
    g = np.zeros(m.shape[0], dtype=np.int64) if groups is None else np.asarray(groups)
    with np.errstate(all="ignore"):
        diff = (old - sampling) * m  # (B, T)
        ratio = np.exp(diff.sum(-1, keepdims=True) if mode.startswith("sequence") else diff)
        lo = clip_min if clip_min is not None else -math.inf
        hi = clip_max if clip_max is not None else math.inf
        if mode.endswith("truncate"):
            ratio = np.clip(ratio, lo, hi)
        elif mode.endswith("mask"):
            ratio = np.where((ratio < lo) | (ratio > hi), 0.0, ratio)
        else:
            raise ValueError(f"unknown vllm_importance_sampling_mode {mode!r}")
        means, maxes, r_min, r_mean, r_max = [], [], [], [], []
        for p in np.unique(g):
            rows = g == p
            delta = np.abs(old - sampling)[rows][m[rows] > 0]  # (n_p,)
            means.append(delta.mean() if delta.size else 0.0)
            maxes.append(delta.max() if delta.size else 0.0)
            flat = ratio[rows].ravel() if mode.startswith("sequence") else ratio[rows][m[rows] > 0]
            r_min.append(flat.min() if flat.size else 0.0)
            r_mean.append(flat.mean() if flat.size else 0.0)
            r_max.append(flat.max() if flat.size else 0.0)
    return {
        "sampling/sampling_logp_difference/mean": float(np.mean(means)),
        "sampling/sampling_logp_difference/max": float(np.max(maxes)),
        "sampling/importance_sampling_ratio/min": float(np.nanmin(r_min)),
        "sampling/importance_sampling_ratio/mean": float(np.nanmean(r_mean)),
        "sampling/importance_sampling_ratio/max": float(np.nanmax(r_max)),
    }


# ------------------------------------------------------------------------------ rows beside admitcheck's numbers

SAMPLE_MEAN = "differs: each sequence's token mean, then the mean over sequences (same only at equal lengths)"
# framework -> (key, admitcheck metric, relation, budget); the order is the display order.
ROWS: dict[str, tuple[tuple[str, str | None, str, Budget], ...]] = {
    "verl": (
        ("rollout_corr/k3_kl", "k3", "same (verl adds 1e-8 to the token count)", "same"),
        ("rollout_corr/kl", "k1", "same: k1, unbiased for the same KL, noisier and can be negative", "expectation"),
        ("rollout_corr/chi2_token", "chi2_token", "same while |ℓ| ≤ 20 (verl clamps ℓ at ±20)", "none"),
        ("rollout_corr/chi2_seq", None, "per-sequence (Πr)² − 1, Σℓ clamped at ±20", "none"),
        ("rollout_corr/log_ppl_diff", "seq_log_ratio_mean", "differs: per-sequence token mean of −ℓ, not Σℓ", "none"),
        ("rollout_corr/log_ppl_abs_diff", None, "per-sequence |mean ℓ|, averaged over sequences", "none"),
        (
            "rollout_corr/ppl_ratio",
            "geo_mean_ratio",
            "differs: mean over sequences of exp(−mean ℓ), each term the reciprocal of a geo_mean_ratio term",
            "none",
        ),
        ("rollout_corr/rollout_is_mean", "is_weight_mean", "same while |ℓ| ≤ 20 (before truncation)", "none"),
        ("rollout_corr/rollout_is_eff_sample_size", "ess", "differs: weights clamped to [1/2, 2] first", "none"),
        ("rollout_corr/rollout_is_ratio_fraction_high", "is_frac_outside", "high + low = is_frac_outside", "none"),
        ("rollout_corr/rollout_is_ratio_fraction_low", "is_frac_outside", "high + low = is_frac_outside", "none"),
        ("rollout_corr/rollout_is_std", None, "token std of weights clamped to [1/2, 2]", "none"),
        ("training/rollout_probs_diff_max", "prob_diff_max", "same", "none"),
        ("training/rollout_probs_diff_mean", None, "token mean of |π(y) − μ(y)| (probabilities)", "none"),
    ),
    "prime-rl": (
        ("mismatch_kl/all/mean", "k3", "same", "same"),
        ("mismatch_kl/all/median", None, "median token k3 (lower middle)", "none"),
        ("mismatch_kl/all/std", None, "token std of k3", "none"),
        ("mismatch_kl/all/max", None, "largest token k3", "none"),
    ),
    "nemo-rl": (
        ("train/gen_kl_error", "k3", "same with reference_policy_kl_type k3 (the default)", "same"),
        ("train/token_mult_prob_error", "mult_prob_error", "same", "none"),
        ("train/policy_kl_error", None, "k3 of −ℓ on μ's tokens: not KL(π‖μ) unless π sampled them", "none"),
        ("train/js_divergence_error", None, "per-token Jensen-Shannon proxy of the two sampled-token probs", "none"),
    ),
    "slime": (
        ("train/train_rollout_logprob_abs_diff", "abs_diff_mean", SAMPLE_MEAN, "none"),
        ("train/mis_k3_kl", "k3", SAMPLE_MEAN, "none"),
        ("train/mis_kl", "k1", SAMPLE_MEAN, "none"),
        ("train/mis_chi2_token", "chi2_token", "differs: each sequence's χ², then the mean over sequences", "none"),
        ("train/mis_log_ppl_diff", "seq_log_ratio_mean", "differs: per-sequence token mean of −ℓ", "none"),
        ("train/mis_ppl_ratio", "geo_mean_ratio", "differs: mean of exp(−mean ℓ) per sequence", "none"),
        ("train/mis_chi2_seq", None, "per-sequence (Πr)² − 1, Σℓ clamped at ±20", "none"),
    ),
    "trl": (
        (
            "sampling/sampling_logp_difference/mean",
            "abs_diff_mean",
            "same in one process; with several, the mean of per-process means",
            "none",
        ),
        ("sampling/sampling_logp_difference/max", "abs_diff_max", "same", "none"),
        (
            "sampling/importance_sampling_ratio/mean",
            None,
            "sequence_mask: mean of exp(Σℓ) per sequence, 0 above 3",
            "none",
        ),
        ("sampling/importance_sampling_ratio/min", None, "smallest sequence IS ratio (0 = one was masked)", "none"),
        ("sampling/importance_sampling_ratio/max", None, "largest sequence IS ratio kept (≤ 3)", "none"),
    ),
}

_PORTS = {
    "verl": verl_metrics,
    "prime-rl": prime_rl_metrics,
    "nemo-rl": nemo_rl_metrics,
    "slime": slime_metrics,
    "trl": trl_metrics,
}
NOTES = {
    "verl": ("rollout_corr/* needs algorithm.rollout_correction; rollout_is_* only with rollout_is: token.",),
    "nemo-rl": ("with reference_policy_kl_type: k2 (or k1), gen_kl_error is k2 (k1) under the same name.",),
    "slime": ("with --calculate-per-token-loss every key here is a token mean (mis_k3_kl = k3).",),
    "trl": ("TRL also averages over the generation batches of one optimizer step.",),
}


def _check(framework: str) -> None:
    if framework not in ROWS:
        raise ValueError(f"unknown framework {framework!r} (known: {', '.join(FRAMEWORKS)})")


def _rows(framework: str, values: Mapping[str, float], ours: Mapping[str, float]) -> tuple[DashboardRow, ...]:
    out = []
    for key, mine, relation, budget in ROWS[framework]:
        theirs = ours.get(mine) if mine else None
        out.append(DashboardRow(key, float(values.get(key, math.nan)), mine, theirs, relation, budget))
    return tuple(out)


def dashboard(
    framework: str,
    rollout_logprobs: Any,
    trainer_logprobs: Any,
    mask: Any,
    *,
    groups: Any = None,
    **options: Any,
) -> Dashboard:
    """The framework's keys on these tokens (exact ports), beside admitcheck's metrics of the same tokens.

    `groups`: per-sequence process index (TRL's per-process means). `options` go to the port (verl is_threshold,
    nemo-rl kl_type, slime per_token / rollout_ids, trl mode / clip_min / clip_max).
    """
    from admitcheck.measurement.metrics import mismatch_metrics

    _check(framework)
    if framework == "trl":
        options = {"groups": groups, **options}
    values = _PORTS[framework](rollout_logprobs, trainer_logprobs, mask, **options)
    ours = mismatch_metrics(rollout_logprobs, trainer_logprobs, np.asarray(mask, dtype=bool)).values
    if framework == "nemo-rl" and options.get("kl_type", "k3") != "k3":
        k = options["kl_type"]
        row = ("train/gen_kl_error", k, f"same: {k} (reference_policy_kl_type: {k})", "expectation")
        rows = _rows(framework, values, ours)
        fixed = DashboardRow(row[0], rows[0].value, k, ours.get(k), row[2], "expectation" if k == "k1" else "none")
        return Dashboard(framework, "tokens", (fixed, *rows[1:]), NOTES.get(framework, ()))
    return Dashboard(framework, "tokens", _rows(framework, values, ours), NOTES.get(framework, ()))


def dashboard_from_metrics(
    framework: str,
    values: Mapping[str, float],
    num_tokens: int,
    per_sequence: Mapping[str, Any] | None = None,
) -> Dashboard:
    """The keys that admitcheck's token means (and, when given, per-sequence sums) determine; the others are nan.

    For engine runs, which keep sums rather than token arrays: `values` = MismatchMetrics.values, `per_sequence` =
    MismatchMetrics.per_sequence. Exact where filled in (tested against the token-level ports).
    """
    _check(framework)
    N = float(num_tokens)
    v = dict(values)
    out: dict[str, float] = {}
    ps = {k: np.asarray(x, dtype=np.float64) for k, x in (per_sequence or {}).items()}
    small = v.get("abs_diff_max", math.inf) <= VERL_SAFETY_BOUND  # verl/slime clamps do nothing
    inside = v.get("is_frac_outside", 1.0) == 0.0  # every r in [1/2, 2]: verl's [1/2, 2] clamp does nothing
    with np.errstate(all="ignore"):
        if framework == "verl":
            scale = N / (N + MASKED_MEAN_EPS)
            out["rollout_corr/k3_kl"] = v["k3"] * scale
            out["rollout_corr/kl"] = v["k1"] * scale
            if small:
                out["rollout_corr/chi2_token"] = (v["chi2_token"] + 1.0) * scale - 1.0
                out["rollout_corr/rollout_is_mean"] = v["is_weight_mean"] * scale
            out["training/rollout_probs_diff_max"] = v["prob_diff_max"]
            if inside:
                mean_w = v["is_weight_mean"] * scale
                mean_w2 = (v["chi2_token"] + 1.0) * scale
                out["rollout_corr/rollout_is_ratio_fraction_high"] = 0.0
                out["rollout_corr/rollout_is_ratio_fraction_low"] = 0.0
                out["rollout_corr/rollout_is_std"] = math.sqrt(max(mean_w2 - mean_w**2, 0.0)) if N > 1 else 0.0
                out["rollout_corr/rollout_is_eff_sample_size"] = 1.0 / (mean_w2 / (mean_w + 1e-8) ** 2)
            if ps:
                n, seq = ps["num_tokens"], ps["seq_log_ratio"]
                d = -seq / (n + MASKED_MEAN_EPS)  # (m,) per-sequence log_ppl_diff
                out["rollout_corr/log_ppl_diff"] = float(d.mean())
                out["rollout_corr/log_ppl_abs_diff"] = float(np.abs(d).mean())
                out["rollout_corr/ppl_ratio"] = float(np.exp(d).mean())
                clipped = np.clip(seq, -VERL_SAFETY_BOUND, VERL_SAFETY_BOUND)
                out["rollout_corr/chi2_seq"] = float(np.exp(2.0 * clipped).mean() - 1.0)
        elif framework == "prime-rl":
            out["mismatch_kl/all/mean"] = v["k3"]
        elif framework == "nemo-rl":
            scale = N / (N + MASKED_MEAN_EPS)
            out["train/gen_kl_error"] = v["k3"] * scale
            out["train/token_mult_prob_error"] = v["mult_prob_error"] * scale
        elif framework == "slime" and ps:
            n = np.maximum(ps["num_tokens"], 1.0)
            for key, term in (
                ("train/train_rollout_logprob_abs_diff", "abs_diff_mean"),
                ("train/mis_k3_kl", "k3"),
                ("train/mis_kl", "k1"),
            ):
                out[key] = float((ps[term] / n).mean())
            d = -ps["seq_log_ratio"] / n
            out["train/mis_log_ppl_diff"] = float(d.mean())
            out["train/mis_ppl_ratio"] = float(np.exp(d).mean())
            if small:
                out["train/mis_chi2_token"] = float((ps["chi2_token"] / n).mean())
            clipped = np.clip(ps["seq_log_ratio"], -VERL_SAFETY_BOUND, VERL_SAFETY_BOUND)
            out["train/mis_chi2_seq"] = float((np.exp(2.0 * clipped) - 1.0).mean())
        elif framework == "trl":
            out["sampling/sampling_logp_difference/mean"] = v["abs_diff_mean"]
            out["sampling/sampling_logp_difference/max"] = v["abs_diff_max"]
            if ps:
                r = np.exp(ps["seq_log_ratio"])
                r = np.where(r > 3.0, 0.0, r)  # sequence_mask, clip_max 3
                out["sampling/importance_sampling_ratio/mean"] = float(r.mean())
                out["sampling/importance_sampling_ratio/min"] = float(r.min())
                out["sampling/importance_sampling_ratio/max"] = float(r.max())
    source = "per-sequence sums" if ps else "token means"
    missing = sum(1 for key, *_ in ROWS[framework] if key not in out)
    notes = NOTES.get(framework, ())
    if missing:
        notes = (*notes, f"{missing} keys need token-level log-probs: run with --from-logs for them.")
    return Dashboard(framework, source, _rows(framework, out, v), notes)
