"""measure: the invariants of REFERENCE §2 on real engines — zero mismatch for identical numerics, k3 ≈ kl_exact,
monotone in noise, FP8 formats ordered, FP8 KV growing with position, determinism."""

from __future__ import annotations

import itertools

import pytest
import torch
from transformers import LlamaForCausalLM

from admitcheck.config import MeasureConfig, ProbeConfig, RolloutConfig, SamplingConfig
from admitcheck.measurement.measure import measure, measure_engine
from admitcheck.rollout.engines.hf import HFEngine
from tests.tiny import tiny_llama

NO_EOS = -1  # a random model never emits it: every response runs to max_new_tokens (long generations)


@pytest.fixture(scope="module")
def random_lm() -> LlamaForCausalLM:
    return tiny_llama(initializer_range=0.2)  # peaked distributions: perturbations move them measurably


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(0)
    return [torch.randint(3, 64, (int(n),), generator=g).tolist() for n in torch.randint(4, 12, (64,), generator=g)]


def run(model, prompts, rollout: RolloutConfig, *, max_new_tokens=32, sampling=SamplingConfig(), bucket_size=16):
    engine = HFEngine(model, rollout, eos_token_id=NO_EOS, pad_token_id=0)
    probe = ProbeConfig(prompts="-", num_prompts=len(prompts), max_new_tokens=max_new_tokens, batch_size=32)
    acc = measure_engine(engine, model, prompts, probe, sampling, full=True)
    return acc.metrics().values, acc.metrics()


@pytest.mark.parametrize("sampling", [SamplingConfig(), SamplingConfig(temperature=0.7, top_p=0.9)])
def test_identical_configuration_gives_zero_mismatch(random_lm, prompts, sampling):
    values, _ = run(random_lm, prompts, RolloutConfig(dtype="float32"), sampling=sampling)
    # Decode (one token, cached K/V) and teacher forcing (whole sequence) use different kernel shapes (different
    # accumulation order), so float32 log-probs agree to a few ulp, not bitwise: mean gap ~1e-7, k3 ~1e-13.
    # (initializer_range 0.2 makes logits ~10x larger than a trained model's, and the rounding with them.)
    assert values["abs_diff_mean"] <= 1e-5
    assert values["abs_diff_max"] <= 5e-5
    for key in ("k1", "chi2_token"):  # linear in the gap: ~ its mean
        assert abs(values[key]) < 1e-6, (key, values[key])
    # kl_exact = mean_t Σ_v μ(v)(log μ(v) − log π(v)) is quadratic only between exactly normalised distributions; in
    # float32 each row's log-softmax carries its own rounding (a per-row shift of a few ulp), which enters Σ_v μ δ_v
    # linearly. So |kl_exact| ≤ the mean per-entry gap, the same rounding abs_diff_mean measures on sampled tokens
    # (a 1e-9 bound held on one transformers version and failed at −1.6e-9 on another).
    assert abs(values["kl_exact"]) <= max(values["abs_diff_mean"], 1e-9), (values["kl_exact"], values["abs_diff_mean"])
    for key in ("k2", "k3"):  # per token ℓ²/2 (+ O(ℓ³) for k3): at most the largest gap squared over 2
        assert 0 <= values[key] <= values["abs_diff_max"] ** 2 / 2 * 1.01, (key, values[key])
    assert values["mult_prob_error"] == pytest.approx(1.0, abs=1e-5)


def test_k3_agrees_with_kl_exact_within_its_interval(random_lm, prompts):
    values, m = run(random_lm, prompts, RolloutConfig(dtype="float32", noise={"relative_std": 0.05}))
    lo, hi = m.intervals["k3"]
    assert values["k3"] > 1e-4
    assert lo <= values["kl_exact"] <= hi, (values["k3"], (lo, hi), values["kl_exact"])


def test_mismatch_rises_monotonically_with_noise(random_lm, prompts):
    k3 = [
        run(random_lm, prompts, RolloutConfig(dtype="float32", noise={"relative_std": s}))[0]["k3"]
        for s in (0.005, 0.02, 0.05, 0.1, 0.2)
    ]
    assert all(a < b for a, b in itertools.pairwise(k3)), k3


def test_fp8_e5m2_weights_worse_than_e4m3(random_lm, prompts):
    k3 = {
        fmt: run(random_lm, prompts, RolloutConfig(dtype="float32", weights={"format": fmt, "granularity": "tensor"}))[
            0
        ]["k3"]
        for fmt in ("fp8_e4m3", "fp8_e5m2")
    }
    assert k3["fp8_e5m2"] > k3["fp8_e4m3"] > 0, k3


def test_fp8_kv_cache_mismatch_is_positive_and_larger_late(random_lm, prompts):
    # float32 engine: the FP8 KV cache is the only difference from the reference.
    values, m = run(
        random_lm, prompts, RolloutConfig(dtype="float32", kv_cache={"dtype": "fp8_e4m3"}), max_new_tokens=128
    )
    assert values["k3"] > 1e-3
    buckets = m.position_buckets
    assert len(buckets) == 8
    late = [b.k3 for b in buckets if b.start >= 64]
    # Prefill attends to unquantized K/V (as vLLM's flash prefill does); every later token reads more FP8 K/V.
    assert buckets[0].k3 < sum(late) / len(late), [round(b.k3, 5) for b in buckets]
    skipped, _ = run(
        random_lm, prompts, RolloutConfig(dtype="float32", kv_cache={"dtype": "fp8_e4m3", "skip_layers": [0, 1]})
    )
    assert skipped["k3"] < 1e-9  # every layer skipped: back to the reference's numerics


def toy_config(toy, **rollout) -> MeasureConfig:
    return MeasureConfig(
        pair={"student": str(toy / "student"), "teacher": str(toy / "teacher")},
        probe={
            "prompts": str(toy / "prompts" / "probe.jsonl"),
            "num_prompts": 32,
            "max_new_tokens": 16,
            "batch_size": 16,
            "seed": 3,
        },
        rollout=rollout or {"dtype": "bfloat16"},
    )


@pytest.mark.slow
def test_same_seed_same_report_different_seed_different_samples(toy_pair_dir):
    cfg = toy_config(toy_pair_dir, dtype="bfloat16", noise={"relative_std": 0.05})
    a, b = measure(cfg).to_dict(), measure(cfg).to_dict()
    for r in (a, b):
        for m in ("candidate", "floor"):
            r[m].pop("seconds_measure"), r[m].pop("seconds_engine_start")
        r.pop("seconds_total")
    assert a == b
    other = measure(cfg.model_copy(update={"probe": cfg.probe.model_copy(update={"seed": 4})})).to_dict()
    assert other["candidate"]["metrics"]["values"]["k3"] != a["candidate"]["metrics"]["values"]["k3"]
    assert a["floor"]["metrics"]["values"]["k3"] < 1e-9
