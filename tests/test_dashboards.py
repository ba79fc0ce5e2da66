"""Each framework's dashboard keys against a port of its own source (torch, as the framework computes them).

The reference functions below are the frameworks' code, copied from their repositories (path and function named in
each docstring) with only the surrounding plumbing (DataProto, distributed gathers, config objects) removed. They run
in float64 on synthetic arrays with unequal lengths, heavy tails (|ℓ| up to 25, beyond the ±20 clamps) and tool
tokens, and must agree with `admitcheck.measurement.dashboards` to float64 rounding: both sides do the same
operations in a
possibly different order, so a relative tolerance of 1e-9 leaves ~10⁶ ulps of room for summation order and
nothing for a formula difference (the smallest formula differences tested below are ≥ 1e-3 relative).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from admitcheck.measurement.dashboards import (
    FRAMEWORKS,
    ROWS,
    dashboard,
    dashboard_from_metrics,
    nemo_rl_metrics,
    prime_rl_metrics,
    slime_metrics,
    trl_metrics,
    verl_metrics,
)
from admitcheck.measurement.metrics import mismatch_metrics

REL = 1e-9


def _arrays(seed=0, B=24, T=160, heavy=True, tools=True):
    """(mu, pi, mask, tool_mask): ragged lengths 3..T, small noise, a few heavy tokens, tool-result spans."""
    rng = np.random.default_rng(seed)
    mu = -rng.exponential(1.0, (B, T))  # (B, T) log μ
    ell = rng.normal(0.0, 0.03, (B, T))  # (B, T) numeric noise
    if heavy:
        idx = rng.integers(0, B * T, 12)
        ell.flat[idx] = rng.choice([-3.0, 2.5, -1.5, 1.2], 12)
        ell[1, 0], ell[2, 1] = -25.0, 24.0  # beyond verl's ±20 clamp
        mu[2, 1] = -30.0  # so that π = μ + 24 stays a probability
    pi = np.minimum(mu + ell, 0.0)  # (B, T) log π
    lengths = rng.integers(3, T + 1, B)
    lengths[0] = 3  # very unequal lengths
    mask = np.arange(T)[None, :] < lengths[:, None]  # (B, T)
    tool = np.ones((B, T), dtype=bool)
    if tools:
        for b in range(0, B, 4):
            s = int(lengths[b]) // 3
            tool[b, s : s + 5] = False
            mu[b, s : s + 5] = 0.0  # TRL writes rollout log-prob 0.0 on tool-result tokens
    return mu, pi, mask, tool


def _t(x):
    return torch.as_tensor(np.asarray(x, dtype=np.float64))


def _close(ours: dict, ref: dict):
    assert set(ref) <= set(ours), set(ref) - set(ours)
    for k, v in ref.items():
        assert ours[k] == pytest.approx(v, rel=REL, abs=1e-12), k


# ------------------------------------------------------------------------------------------------------- verl


def _verl_masked_sum(values, mask, axis=None):
    valid_values = torch.where(mask.bool(), values, 0.0)  # verl/utils/torch_functional.py masked_sum
    return valid_values.sum(axis) if axis is not None else valid_values.sum()


def _verl_masked_mean(values, mask, axis=None):
    s = _verl_masked_sum(values, mask, axis)
    return s / (mask.sum(axis=axis) + 1e-8) if axis is not None else s / (mask.sum() + 1e-8)


def _verl_reference(old_log_prob, rollout_log_prob, response_mask, rollout_is_threshold=2.0):
    """verl/trainer/ppo/rollout_corr_helper.py compute_offpolicy_metrics, compute_rollout_correction_weights
    (rollout_is="token") -> compute_is_metrics; verl/utils/debug/metrics.py calculate_debug_metrics."""
    SAFETY_BOUND = 20.0
    metrics = {}
    mean_log_prob_training = _verl_masked_mean(old_log_prob, response_mask, axis=-1)
    metrics["training_ppl"] = torch.exp(-mean_log_prob_training).mean().item()
    metrics["training_log_ppl"] = (-mean_log_prob_training).mean().item()
    metrics["kl"] = _verl_masked_mean(rollout_log_prob - old_log_prob, response_mask).item()
    log_ratio = old_log_prob - rollout_log_prob
    k3_kl_matrix = torch.exp(log_ratio) - log_ratio - 1
    metrics["k3_kl"] = _verl_masked_mean(k3_kl_matrix, response_mask).item()
    mean_log_prob_rollout = _verl_masked_mean(rollout_log_prob, response_mask, axis=-1)
    metrics["rollout_ppl"] = torch.exp(-mean_log_prob_rollout).mean().item()
    metrics["rollout_log_ppl"] = (-mean_log_prob_rollout).mean().item()
    log_ppl_diff = mean_log_prob_rollout - mean_log_prob_training
    metrics["log_ppl_diff"] = log_ppl_diff.mean().item()
    metrics["log_ppl_abs_diff"] = log_ppl_diff.abs().mean().item()
    metrics["log_ppl_diff_max"] = log_ppl_diff.max().item()
    metrics["log_ppl_diff_min"] = log_ppl_diff.min().item()
    metrics["ppl_ratio"] = torch.exp(log_ppl_diff).mean().item()
    log_ratio_safe = torch.clamp(log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND)
    rho_token = torch.exp(log_ratio_safe)
    metrics["chi2_token"] = (_verl_masked_mean(rho_token.square(), response_mask) - 1.0).item()
    log_ratio_sum = _verl_masked_sum(log_ratio, response_mask, axis=-1)
    log_ratio_sum_safe = torch.clamp(log_ratio_sum, min=-SAFETY_BOUND, max=SAFETY_BOUND)
    metrics["chi2_seq"] = (torch.exp(2.0 * log_ratio_sum_safe).mean() - 1.0).item()

    # compute_rollout_correction_weights, token level: metrics BEFORE truncation
    rollout_is_weights = torch.exp(torch.clamp(log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND)) * response_mask
    lower = 1.0 / rollout_is_threshold
    metrics["rollout_is_mean"] = _verl_masked_mean(rollout_is_weights, response_mask).item()
    above = rollout_is_weights > rollout_is_threshold
    below = rollout_is_weights < lower
    metrics["rollout_is_ratio_fraction_high"] = _verl_masked_mean(above.double(), response_mask).item()
    metrics["rollout_is_ratio_fraction_low"] = _verl_masked_mean(below.double(), response_mask).item()
    mask_bool = response_mask.bool()
    metrics["rollout_is_max"] = rollout_is_weights.masked_fill(~mask_bool, float("-inf")).max().item()
    metrics["rollout_is_min"] = rollout_is_weights.masked_fill(~mask_bool, float("inf")).min().item()
    weights_for_std = rollout_is_weights.clamp(min=lower, max=rollout_is_threshold)
    mean_clamped = _verl_masked_mean(weights_for_std, response_mask)
    var = _verl_masked_mean(weights_for_std.square(), response_mask) - mean_clamped.square()
    metrics["rollout_is_std"] = torch.sqrt(torch.clamp(var, min=0.0)).item()
    weights_for_ess = rollout_is_weights.clamp(min=lower, max=rollout_is_threshold)
    mean_for_ess = _verl_masked_mean(weights_for_ess, response_mask)
    normalized = weights_for_ess / (mean_for_ess + 1e-8)
    metrics["rollout_is_eff_sample_size"] = 1.0 / _verl_masked_mean(normalized.square(), response_mask).item()
    seq_mean_weights = _verl_masked_mean(rollout_is_weights, response_mask, axis=-1)
    metrics["rollout_is_seq_mean"] = seq_mean_weights.mean().item()
    metrics["rollout_is_seq_std"] = seq_mean_weights.std().item()
    metrics["rollout_is_seq_max"] = seq_mean_weights.max().item()
    metrics["rollout_is_seq_min"] = seq_mean_weights.min().item()
    metrics["rollout_is_seq_max_deviation"] = (seq_mean_weights - 1.0).abs().max().item()
    metrics["rollout_is_seq_fraction_high"] = (seq_mean_weights > rollout_is_threshold).double().mean().item()
    metrics["rollout_is_seq_fraction_low"] = (seq_mean_weights < lower).double().mean().item()
    out = {f"rollout_corr/{k}": v for k, v in metrics.items()}

    actor_probs, rollout_probs = torch.exp(old_log_prob), torch.exp(rollout_log_prob)
    diff = torch.masked_select(torch.abs(actor_probs - rollout_probs), response_mask.bool())
    out["training/rollout_probs_diff_max"] = torch.max(diff).item()
    out["training/rollout_probs_diff_mean"] = torch.mean(diff).item()
    out["training/rollout_probs_diff_std"] = torch.std(diff).item()
    return out


def test_verl_against_its_source():
    mu, pi, mask, _ = _arrays()
    ref = _verl_reference(_t(pi), _t(mu), _t(mask))
    _close(verl_metrics(mu, pi, mask), ref)
    # the k3 is admitcheck's k3 (verl's +1e-8 in the count: relative 1e-8 / N)
    k3 = mismatch_metrics(mu, pi, mask).values["k3"]
    assert ref["rollout_corr/k3_kl"] == pytest.approx(k3, rel=1e-11)


def test_verl_ess_and_chi2_differ_from_admitcheck_on_heavy_tails():
    mu, pi, mask, _ = _arrays()
    v, ours = verl_metrics(mu, pi, mask), mismatch_metrics(mu, pi, mask).values
    # a token at ℓ = 24: admitcheck's r² is e^48, verl's is clamped at e^40, and its ESS clamps weights to [1/2, 2]
    assert ours["chi2_token"] > 100 * v["rollout_corr/chi2_token"]
    assert ours["ess"] < 1e-3 < 0.5 < v["rollout_corr/rollout_is_eff_sample_size"]
    # ppl_ratio is the mean of per-sequence reciprocals of admitcheck's geo_mean_ratio terms
    seq = mismatch_metrics(mu, pi, mask).per_sequence
    n = seq["num_tokens"]
    assert v["rollout_corr/ppl_ratio"] == pytest.approx(np.mean(np.exp(-seq["seq_log_ratio"] / n)), rel=1e-7)


# --------------------------------------------------------------------------------------------------- prime-rl


def _prime_rl_reference(trainer_logprobs, inference_logprobs, loss_mask):
    """src/prime_rl/trainer/rl/loss.py compute_importance_ratio_and_mismatch_kl; train.py collects
    mismatch_kl[mismatch_mask]; trainer/utils.py Tensors.compute_stats."""
    log_importance_ratio = trainer_logprobs - inference_logprobs
    importance_ratio = torch.exp(log_importance_ratio)
    mismatch_kl = importance_ratio - log_importance_ratio - 1
    tensors = mismatch_kl[loss_mask.bool()]
    return {
        "mismatch_kl/all/mean": tensors.mean().item(),
        "mismatch_kl/all/median": torch.median(tensors).item(),
        "mismatch_kl/all/std": tensors.std().item(),
        "mismatch_kl/all/min": tensors.min().item(),
        "mismatch_kl/all/max": tensors.max().item(),
    }


@pytest.mark.parametrize("seed", [0, 1])  # an even and an odd token count exercise torch.median's lower middle
def test_prime_rl_against_its_source(seed):
    mu, pi, mask, _ = _arrays(seed=seed)
    mask[0, 2] = seed == 1 or mask[0, 2]
    _close(prime_rl_metrics(mu, pi, mask), _prime_rl_reference(_t(pi), _t(mu), _t(mask)))
    assert prime_rl_metrics(mu, pi, mask)["mismatch_kl/all/mean"] == pytest.approx(
        mismatch_metrics(mu, pi, mask).values["k3"], rel=1e-11
    )


# ---------------------------------------------------------------------------------------------------- NeMo-RL


def _nemo_calculate_kl(logprobs, logprobs_reference, kl_type="k3"):
    """nemo_rl/algorithms/utils.py calculate_kl with input_clamp_value=None, output_clamp_value=None."""
    logr = logprobs_reference - logprobs
    if kl_type == "k1":
        return -logr
    if kl_type == "k2":
        return torch.square(logr) / 2
    return torch.exp(logr) - 1 - logr


def _nemo_masked_mean(values, mask, global_normalization_factor):
    return torch.sum(values * mask) / (global_normalization_factor + 1e-8)


def _nemo_reference(generation_logprobs, prev_logprobs, mask, kl_type="k3", microbatches=3):
    """nemo_rl/algorithms/loss/loss_functions.py ClippedPGLossFn.__call__ diagnostics, summed over microbatches
    (each normalized by the global valid-token count)."""
    global_valid_toks = mask.sum()
    out = {"token_mult_prob_error": 0.0, "gen_kl_error": 0.0, "policy_kl_error": 0.0, "js_divergence_error": 0.0}
    for rows in torch.arange(mask.shape[0]).chunk(microbatches):
        g, p, m = generation_logprobs[rows], prev_logprobs[rows], mask[rows]
        lp_error = torch.abs(g - p)
        out["token_mult_prob_error"] += _nemo_masked_mean(torch.exp(lp_error * m), m, global_valid_toks).item()
        out["gen_kl_error"] += _nemo_masked_mean(_nemo_calculate_kl(g, p, kl_type), m, global_valid_toks).item()
        out["policy_kl_error"] += _nemo_masked_mean(_nemo_calculate_kl(p, g, kl_type), m, global_valid_toks).item()
        log_mixture = torch.log(0.5 * torch.exp(p) + 0.5 * torch.exp(g))
        kl_prev = torch.exp(p - log_mixture) - (p - log_mixture) - 1
        kl_gen = torch.exp(g - log_mixture) - (g - log_mixture) - 1
        js = 0.5 * kl_prev + 0.5 * kl_gen
        out["js_divergence_error"] += _nemo_masked_mean(js, m, global_valid_toks).item()
    return {f"train/{k}": v for k, v in out.items()}


@pytest.mark.parametrize("kl_type", ["k3", "k2", "k1"])
def test_nemo_rl_against_its_source(kl_type):
    mu, pi, mask, _ = _arrays(seed=2)
    ref = _nemo_reference(_t(mu), _t(pi), _t(mask), kl_type)
    _close(nemo_rl_metrics(mu, pi, mask, kl_type=kl_type), ref)
    ours = mismatch_metrics(mu, pi, mask).values
    assert ref["train/gen_kl_error"] == pytest.approx(ours[kl_type], rel=1e-11)  # k2 users see k2 under this name
    assert ref["train/token_mult_prob_error"] == pytest.approx(ours["mult_prob_error"], rel=1e-11)
    d = dashboard("nemo-rl", mu, pi, mask, kl_type=kl_type)
    assert d.rows[0].admitcheck == kl_type and d.rows[0].value == pytest.approx(ours[kl_type], rel=1e-11)


# ------------------------------------------------------------------------------------------------------ slime


def _slime_reference(train_log_probs, rollout_log_probs, loss_masks, per_token=False, rollout_ids=None):
    """slime/backends/megatron_utils/loss.py (train_rollout_logprob_abs_diff) with cp_utils.get_sum_of_sample_mean
    (cp_size 1), examples/train_infer_mismatch_helper/mis.py add_ppl_metrics per sample; the step divides the sum by
    the global batch size (samples). Inputs: lists of 1-D tensors (one per sample), as slime holds them."""

    def masked_sum(x, loss_mask, expand=False):
        result = (x * loss_mask).sum()
        return result.expand_as(x) if expand else result

    def masked_mean(x, loss_mask, expand=False):
        result = masked_sum(x, loss_mask) / torch.clamp_min(loss_mask.sum(), 1)
        return result.expand_as(x) if expand else result

    response_lengths = [len(m) for m in loss_masks]
    if rollout_ids is None:
        sample_denoms = [m.sum() for m in loss_masks]
    else:
        totals = {}
        for rid, m in zip(rollout_ids, loss_masks, strict=True):
            totals[rid] = totals.get(rid, 0) + m.sum()
        sample_denoms = [totals[rid] for rid in rollout_ids]

    def sum_of_sample_mean(x):
        if per_token:
            return sum((x_i * m_i).sum() for x_i, m_i in zip(x.split(response_lengths), loss_masks, strict=False))
        return sum(
            (x_i * m_i).sum() / torch.clamp_min(d, 1)
            for x_i, m_i, d in zip(x.split(response_lengths), loss_masks, sample_denoms, strict=False)
        )

    metrics = {}
    for train_log_prob, rollout_log_prob, loss_mask in zip(train_log_probs, rollout_log_probs, loss_masks, strict=True):
        loss_mask = loss_mask.double()
        mean_log_prob_training = masked_mean(train_log_prob, loss_mask, expand=True)
        metrics.setdefault("training_log_ppl", []).append(-mean_log_prob_training)
        mean_log_prob_rollout = masked_mean(rollout_log_prob, loss_mask, expand=True)
        metrics.setdefault("kl", []).append(rollout_log_prob - train_log_prob)
        log_ratio = train_log_prob - rollout_log_prob
        metrics.setdefault("k3_kl", []).append(torch.exp(log_ratio) - log_ratio - 1)
        log_ppl_diff = mean_log_prob_rollout - mean_log_prob_training
        metrics.setdefault("log_ppl_diff", []).append(log_ppl_diff)
        metrics.setdefault("log_ppl_abs_diff", []).append(log_ppl_diff.abs())
        metrics.setdefault("ppl_ratio", []).append(torch.exp(log_ppl_diff))
        rho_token = torch.exp(torch.clamp(log_ratio, min=-20.0, max=20.0))
        chi2_token_value = masked_mean(rho_token.square(), loss_mask) - 1.0
        metrics.setdefault("chi2_token", []).append(chi2_token_value.expand_as(train_log_prob))
        log_ratio_sum = masked_sum(log_ratio, loss_mask, expand=True)
        rho_squared_seq = torch.exp(2.0 * torch.clamp(log_ratio_sum, min=-20.0, max=20.0))
        metrics.setdefault("chi2_seq", []).append(rho_squared_seq - 1.0)
    n_samples = len(loss_masks)
    total = sum(m.sum() for m in loss_masks) if per_token else n_samples
    out = {f"train/mis_{k}": (sum_of_sample_mean(torch.cat(v)) / total).item() for k, v in metrics.items()}
    diff = (torch.cat(train_log_probs) - torch.cat(rollout_log_probs)).abs()
    out["train/train_rollout_logprob_abs_diff"] = (sum_of_sample_mean(diff) / total).item()
    return out


@pytest.mark.parametrize(("per_token", "grouped"), [(False, False), (True, False), (False, True)])
def test_slime_against_its_source(per_token, grouped):
    mu, pi, mask, _ = _arrays(seed=3)
    lengths = mask.sum(1)
    rows = range(mask.shape[0])
    ids = [b // 3 for b in rows] if grouped else None  # three samples per rollout (multi-turn)
    ref = _slime_reference(
        [_t(pi[b, : lengths[b]]) for b in rows],
        [_t(mu[b, : lengths[b]]) for b in rows],
        [_t(mask[b, : lengths[b]]) for b in rows],
        per_token=per_token,
        rollout_ids=ids,
    )
    _close(slime_metrics(mu, pi, mask, per_token=per_token, rollout_ids=ids), ref)


def test_slime_sample_mean_differs_on_unequal_lengths():
    """A short sequence with a large mismatch: its weight is one sample, not its three tokens."""
    rng = np.random.default_rng(4)
    B, T = 16, 400
    mu = -rng.exponential(1.0, (B, T))
    pi = mu + rng.normal(0, 0.01, (B, T))
    pi[0, :3] = mu[0, :3] - 2.0
    pi = np.minimum(pi, 0.0)
    mask = np.ones((B, T), dtype=bool)
    mask[0, 3:] = False
    s, ours = slime_metrics(mu, pi, mask), mismatch_metrics(mu, pi, mask).values
    ratio = s["train/train_rollout_logprob_abs_diff"] / ours["abs_diff_mean"]
    assert ratio > 5  # 6.6x in the batch; here ~ (2/16) / (6/6003 + 0.008) ≈ 13
    assert slime_metrics(mu, pi, mask, per_token=True)["train/mis_k3_kl"] == pytest.approx(ours["k3"], rel=1e-11)


# -------------------------------------------------------------------------------------------------------- TRL


def _trl_reference(old, sampling, completion_mask, tool_mask, processes, mode="sequence_mask", cmin=None, cmax=3.0):
    """trl/trainer/grpo_trainer.py _generate_and_score_completions: IS ratio and the sampling/* metrics, each
    process on its own rows, then accelerator.gather(...).mean() / nanmin / nanmax / .max()."""
    per_process = []
    for rows in processes:
        o, s, cm, tm = old[rows], sampling[rows], completion_mask[rows], tool_mask[rows]
        mask = cm * tm
        per_token_logps_diff = (o - s) * mask
        sequence_level_is = mode in ["sequence_mask", "sequence_truncate"]
        logps_diff = per_token_logps_diff.sum(dim=-1, keepdim=True) if sequence_level_is else per_token_logps_diff
        ratio = torch.exp(logps_diff)
        if mode in ["sequence_truncate", "token_truncate"]:
            ratio = torch.clamp(ratio, min=cmin, max=cmax)
        else:
            lo = cmin if cmin is not None else -math.inf
            hi = cmax if cmax is not None else math.inf
            ratio = ratio.masked_fill((ratio < lo) | (ratio > hi), value=0.0)
        delta = torch.abs(o - s)
        bmask = (cm * tm).bool()
        delta = delta[bmask]
        flat = ratio.flatten() if sequence_level_is else ratio[bmask]
        per_process.append((delta.mean(), delta.max(), flat.min(), flat.mean(), flat.max()))
    gather = [torch.stack([p[i] for p in per_process]) for i in range(5)]
    return {
        "sampling/sampling_logp_difference/mean": gather[0].mean().item(),
        "sampling/sampling_logp_difference/max": gather[1].max().item(),
        "sampling/importance_sampling_ratio/min": torch.nanquantile(gather[2], 0.0).item(),
        "sampling/importance_sampling_ratio/mean": gather[3].nanmean().item(),
        "sampling/importance_sampling_ratio/max": torch.nanquantile(gather[4], 1.0).item(),
    }


@pytest.mark.parametrize("mode", ["sequence_mask", "token_truncate", "token_mask", "sequence_truncate"])
def test_trl_against_its_source_with_tool_mask_and_processes(mode):
    mu, pi, mask, tool = _arrays(seed=5)
    groups = np.repeat([0, 1, 2], 8)  # three processes with different lengths and mismatch
    processes = [torch.as_tensor(np.flatnonzero(groups == p)) for p in range(3)]
    ref = _trl_reference(
        _t(pi), _t(mu), _t(mask), _t(tool), processes, mode=mode, cmin=0.5 if "trunc" in mode else None
    )
    ours = trl_metrics(mu, pi, mask & tool, groups=groups, mode=mode, clip_min=0.5 if "trunc" in mode else None)
    _close(ours, ref)
    # the per-process mean is not admitcheck's token mean once processes differ
    single = trl_metrics(mu, pi, mask & tool)["sampling/sampling_logp_difference/mean"]
    assert single == pytest.approx(mismatch_metrics(mu, pi, mask & tool).values["abs_diff_mean"], rel=1e-11)
    assert abs(ours["sampling/sampling_logp_difference/mean"] / single - 1) > 1e-3


def test_trl_tool_tokens_without_tool_mask_count_as_mismatch():
    mu, pi, mask, tool = _arrays(seed=6, heavy=False)
    with_tool = mismatch_metrics(mu, pi, mask & tool).values["k3"]
    without = mismatch_metrics(mu, pi, mask).values["k3"]
    # each tool token carries k3 = e^ℓ − 1 − ℓ with ℓ = log π − 0 ≈ −Exp(1): ≈ 0.5 nats, against ~5e-4 for noise,
    # so ~1.5% of tokens being tool results multiplies k3 by ~15
    assert without > 10 * with_tool
    tools = mask & ~tool
    ell = pi[tools] - mu[tools]
    excess = without * mask.sum() - with_tool * (mask & tool).sum()
    assert excess == pytest.approx(np.sum(np.expm1(ell) - ell), rel=1e-9)


# ------------------------------------------------------------------------------------------- dashboard rows


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_dashboard_rows_and_budget_keys(framework):
    mu, pi, mask, _ = _arrays(seed=7)
    d = dashboard(framework, mu, pi, mask)
    assert [r.key for r in d.rows] == [k for k, *_ in ROWS[framework]]
    assert all(math.isfinite(r.value) for r in d.rows)
    same = {r.key for r in d.rows if r.budget == "same"}
    assert same == {"verl": {"rollout_corr/k3_kl"}, "prime-rl": {"mismatch_kl/all/mean"},
                    "nemo-rl": {"train/gen_kl_error"}, "slime": set(), "trl": set()}[framework]  # fmt: skip
    for r in d.rows:  # a key said to be k3 by formula equals admitcheck's k3 on these tokens
        if r.budget == "same":
            assert r.value == pytest.approx(r.admitcheck_value, rel=1e-11)
    assert set(d.budget_in(0.01).values()) <= {0.01}


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("heavy", [False, True])
def test_from_metrics_equals_token_ports_where_filled(framework, heavy):
    """Engine runs keep sums, not tokens: every key derived from them equals the token-level port."""
    mu, pi, mask, _ = _arrays(seed=8, heavy=heavy)
    if not heavy:  # all r in [1/2, 2]: verl's IS clamps do nothing, so its IS keys derive too
        pi = np.minimum(mu + np.clip(pi - mu, -0.6, 0.6), 0.0)
    m = mismatch_metrics(mu, pi, mask)
    tokens = {r.key: r.value for r in dashboard(framework, mu, pi, mask).rows}
    derived = dashboard_from_metrics(framework, m.values, m.num_tokens, m.per_sequence)
    filled = [r for r in derived.rows if not math.isnan(r.value)]
    assert len(filled) >= (1 if framework == "prime-rl" else 2)
    for r in filled:
        assert r.value == pytest.approx(tokens[r.key], rel=1e-9, abs=1e-12), r.key
    means_only = dashboard_from_metrics(framework, m.values, m.num_tokens)
    assert {r.key for r in means_only.rows if not math.isnan(r.value)} <= {r.key for r in filled}
    if framework == "verl" and not heavy:
        assert not math.isnan(next(r.value for r in derived.rows if r.key.endswith("eff_sample_size")))


def test_unknown_framework():
    with pytest.raises(ValueError, match="unknown framework"):
        dashboard("openrlhf", np.zeros((1, 1)), np.zeros((1, 1)), np.ones((1, 1), dtype=bool))


def _two_batches_same_k3(lengths_a, lengths_b, T=64):
    """Batch A: every token at ℓ = −a; batch B: 5% of tokens at ℓ = −2, the rest 0; a solved so k3 is equal."""
    from scipy.optimize import brentq

    rng = np.random.default_rng(11)
    k3 = lambda x: math.expm1(x) - x  # noqa: E731
    target = 0.05 * k3(-2.0)
    a = brentq(lambda x: k3(-x) - target, 1e-6, 2.0)
    out = []
    for lengths, shape in ((lengths_a, "flat"), (lengths_b, "spiky")):
        mask = np.arange(T)[None, :] < np.asarray(lengths)[:, None]
        mu = -rng.exponential(1.0, mask.shape) - 2.5  # room for ℓ up to +2 without a positive log π
        ell = np.full(mask.shape, -a)
        if shape == "spiky":
            ell = np.zeros(mask.shape)
            flat = np.flatnonzero(mask)
            ell.flat[flat[::20]] = -2.0  # exactly 5% of the masked tokens
        out.append((mu, mu + ell, mask))
    return out


def test_budget_keys_are_functions_of_k3_and_the_others_are_not():
    """docs/pipelines.md §5: keys marked "same" equal k3 on any batch; shape-dependent keys differ at equal k3."""
    (ma, pa, ka), (mb, pb, kb) = _two_batches_same_k3([60] * 20, [60] * 20)
    k3a, k3b = (mismatch_metrics(m, p, k).values["k3"] for m, p, k in ((ma, pa, ka), (mb, pb, kb)))
    assert k3a == pytest.approx(k3b, rel=1e-9)
    shape_dependent = {
        "verl": ["rollout_corr/chi2_token", "rollout_corr/rollout_is_eff_sample_size", "rollout_corr/kl"],
        "nemo-rl": ["train/token_mult_prob_error"],
        "trl": ["sampling/sampling_logp_difference/mean"],
        "slime": ["train/train_rollout_logprob_abs_diff"],
        "prime-rl": ["mismatch_kl/all/median"],
    }
    for fw in FRAMEWORKS:
        a = {r.key: r for r in dashboard(fw, ma, pa, ka).rows}
        b = {r.key: r for r in dashboard(fw, mb, pb, kb).rows}
        for key, row in a.items():
            if row.budget == "same":
                assert row.value == pytest.approx(b[key].value, rel=1e-9), key
        for key in shape_dependent[fw]:
            # a function of k3 would agree to ~1e-12 here (as the "same" keys do); these differ by ≥ 1%
            assert abs(a[key].value - b[key].value) > 1e-3 * max(abs(a[key].value), abs(b[key].value)), key
    # slime's sequence mean: same tokens' k3, different length mix -> different mis_k3_kl
    (ma, pa, ka), _ = _two_batches_same_k3([4] * 4 + [64] * 16, [60] * 20)
    s = dashboard("slime", ma, pa, ka)
    assert {r.key: r.value for r in s.rows}["train/mis_k3_kl"] == pytest.approx(k3a, rel=1e-9)  # flat: same per seq
    (ma, pa, ka), _ = _two_batches_same_k3([4] * 4 + [64] * 16, [60] * 20)
    pa[:4, :4] -= 1.0  # the short sequences disagree more: token mean and sequence mean part ways
    s, ours = dashboard("slime", ma, pa, ka), mismatch_metrics(ma, pa, ka).values["k3"]
    assert {r.key: r.value for r in s.rows}["train/mis_k3_kl"] > 1.5 * ours
