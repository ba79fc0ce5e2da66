"""admitcheck.rollout.capacity on Llama-3.1-8B and Qwen2.5-7B configs: closed-form byte counts and ratios."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from admitcheck.config import RolloutConfig
from admitcheck.rollout.capacity import CapacitySpec, count_parameters, kv_bytes_per_token, kv_capacity, weight_bytes

LLAMA_31_8B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "attention_bias": False,
}
QWEN25_7B = {
    "model_type": "qwen2",
    "hidden_size": 3584,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "intermediate_size": 18944,
    "vocab_size": 152064,
    "tie_word_embeddings": False,
}
GIB = 2**30


def test_parameter_counts() -> None:
    assert count_parameters(LLAMA_31_8B) == 8_030_261_248  # the published count
    assert count_parameters(QWEN25_7B) == 7_615_616_512  # the published count (q/k/v biases included)
    assert count_parameters(QWEN25_7B) == pytest.approx(7.6e9, rel=0.01)
    tied = {**QWEN25_7B, "tie_word_embeddings": True}
    assert count_parameters(QWEN25_7B) - count_parameters(tied) == 152064 * 3584


def test_bf16_bytes_per_token() -> None:
    assert kv_bytes_per_token(LLAMA_31_8B, CapacitySpec()) == 32 * 2 * 8 * 128 * 2  # 128 KiB/token
    assert kv_bytes_per_token(QWEN25_7B, CapacitySpec()) == 28 * 2 * 4 * 128 * 2  # 56 KiB/token
    head_dim = {**QWEN25_7B, "head_dim": 64}
    assert kv_bytes_per_token(head_dim, CapacitySpec()) == 28 * 2 * 4 * 64 * 2


@pytest.mark.parametrize("cfg", [LLAMA_31_8B, QWEN25_7B])
def test_fp8_kv_alone_doubles_tokens(cfg: dict) -> None:
    cap = kv_capacity(cfg, CapacitySpec(kv_dtype="fp8_e4m3"), 80 * GIB)
    assert cap.kv_ratio_equal_memory == 2.0
    assert cap.weight_bytes == cap.weight_bytes_bf16 == 2 * count_parameters(cfg)
    assert cap.num_tokens_bf16 * 2 <= cap.num_tokens <= cap.num_tokens_bf16 * 2 + cap.block_size  # block rounding
    assert cap.ratio_vs_bf16 == pytest.approx(2.0, rel=1e-4)


def test_one_bf16_layer_of_28() -> None:
    rollout = RolloutConfig(kv_cache={"dtype": "fp8_e4m3", "skip_layers": [0]})
    cap = kv_capacity(QWEN25_7B, rollout, 80 * GIB)
    assert Fraction(cap.bytes_per_token_bf16, cap.bytes_per_token) == Fraction(56, 29)  # 2L / (L + k)
    assert cap.kv_ratio_equal_memory == 56 / 29


def test_how_attention_reads_the_cache_does_not_change_its_size() -> None:
    """attention_backend and scales (one fp32 scale per layer and tensor, in the layer's own buffers) move no
    KV-cache bytes: every FP8 recipe has the capacity of its dtype and skip layers."""
    caps = {
        kv_capacity(QWEN25_7B, RolloutConfig(kv_cache={"dtype": "fp8_e4m3", "skip_layers": [0], **extra}), 80 * GIB)
        for extra in ({}, {"attention_backend": "cpu"}, {"attention_backend": "fresh_prefill"},
                      {"attention_backend": "triton_attn", "scales": "calibrated", "margin": 1.2})
    }  # fmt: skip
    assert len(caps) == 1 and caps.pop().kv_ratio_equal_memory == 56 / 29


def test_tokens_formula_and_blocks() -> None:
    cap = kv_capacity(QWEN25_7B, None, 80 * GIB, utilization=0.9, activation_reserve_bytes=GIB, block_size=16)
    budget = math.floor(0.9 * 80 * GIB) - 2 * 7_615_616_512 - GIB
    assert cap.kv_budget_bytes == budget
    assert cap.num_tokens == (budget // 57344) // 16 * 16
    assert cap.num_blocks * 16 == cap.num_tokens and cap.fits
    assert cap.ratio_vs_bf16 == 1.0
    assert cap.max_sequences(4096) == cap.num_blocks // 256


def test_fp8_weights_add_the_freed_memory() -> None:
    plain = kv_capacity(LLAMA_31_8B, RolloutConfig(), 80 * GIB)
    fp8 = kv_capacity(LLAMA_31_8B, RolloutConfig(weights={"format": "fp8_e4m3"}), 80 * GIB)
    linear = count_parameters(LLAMA_31_8B) - 2 * 128256 * 4096 - (2 * 32 + 1) * 4096  # minus tables and norms
    assert fp8.num_quantized_parameters == linear
    assert plain.weight_bytes - fp8.weight_bytes == linear  # 2 bytes -> 1 byte per Linear weight
    assert fp8.num_tokens > plain.num_tokens and fp8.ratio_vs_bf16 > 1.0
    assert fp8.kv_ratio_equal_memory == 1.0
    emb = kv_capacity(LLAMA_31_8B, RolloutConfig(weights={"format": "int8", "include_embeddings": True}), 80 * GIB)
    assert fp8.weight_bytes - emb.weight_bytes == 2 * 128256 * 4096


def test_exclusions() -> None:
    h, inter, L = 3584, 18944, 28
    layer_linear = h * h * 2 + 2 * h * 512 + 3 * h * inter  # q, o, k, v, gate, up, down
    fp8 = CapacitySpec(weight_format="fp8_e4m3")
    base, n_base = weight_bytes(QWEN25_7B, fp8)
    one_layer, n_one = weight_bytes(QWEN25_7B, CapacitySpec(weight_format="fp8_e4m3", exclude_layers=(3,)))
    assert (one_layer - base, n_base - n_one) == (layer_linear, layer_linear)
    glob, _ = weight_bytes(QWEN25_7B, CapacitySpec(weight_format="fp8_e4m3", exclude=("model.layers.3.*",)))
    assert glob == one_layer
    k_only, _ = weight_bytes(QWEN25_7B, CapacitySpec(weight_format="fp8_e4m3", exclude=("*.self_attn.k_proj",)))
    assert k_only - base == L * (h * h + 2 * h * 512)  # the fused q|k|v group is kept whole
    down, _ = weight_bytes(QWEN25_7B, CapacitySpec(weight_format="fp8_e4m3", exclude=("model.layers.0.mlp.down_proj",)))
    assert down - base == inter * h
    rollout = RolloutConfig(weights={"format": "fp8_e4m3", "exclude": ["model.layers.3.*"]})
    assert CapacitySpec.from_rollout(rollout).exclude == ("model.layers.3.*",)
    assert kv_capacity(QWEN25_7B, rollout, 80 * GIB).weight_bytes == one_layer


def test_weights_that_do_not_fit() -> None:
    cap = kv_capacity(LLAMA_31_8B, None, 16 * GIB)
    assert cap.kv_budget_bytes < 0 and cap.num_tokens == 0 and not cap.fits
    assert math.isnan(cap.ratio_vs_bf16)
    fp8 = kv_capacity(LLAMA_31_8B, CapacitySpec(weight_format="fp8_e4m3"), 16 * GIB)
    assert fp8.fits and fp8.ratio_vs_bf16 == math.inf  # only the FP8 model fits


def test_moe_parameter_count() -> None:
    qwen3_30b_a3b = {
        "model_type": "qwen3_moe",
        "hidden_size": 2048,
        "num_hidden_layers": 48,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "intermediate_size": 6144,
        "moe_intermediate_size": 768,
        "num_experts": 128,
        "vocab_size": 151936,
        "tie_word_embeddings": False,
    }
    assert count_parameters(qwen3_30b_a3b) == pytest.approx(30.5e9, rel=0.01)
    assert kv_bytes_per_token(qwen3_30b_a3b, CapacitySpec()) == 48 * 2 * 4 * 128 * 2


def test_a_multimodal_wrapper_is_read_through_its_text_config() -> None:
    """io.text_config, the one rule every config.json reader uses: a wrapper without `hidden_size` of its own is its
    `text_config`, the top level filling the keys it lacks; a config with `hidden_size` is itself."""
    from admitcheck.io import text_config

    inner = {k: v for k, v in QWEN25_7B.items() if k != "tie_word_embeddings"}
    wrapper = {"model_type": "qwen2_vl", "text_config": inner, "tie_word_embeddings": False, "vision_config": {}}
    assert text_config(wrapper)["hidden_size"] == 3584 and text_config(wrapper)["model_type"] == "qwen2"
    assert text_config(wrapper)["tie_word_embeddings"] is False  # from the top level
    assert count_parameters(wrapper) == count_parameters(QWEN25_7B)
    assert kv_bytes_per_token(wrapper, CapacitySpec()) == kv_bytes_per_token(QWEN25_7B, CapacitySpec())
    both = {**QWEN25_7B, "text_config": {**QWEN25_7B, "num_hidden_layers": 1}}
    assert text_config(both) is both and text_config(QWEN25_7B) is QWEN25_7B
