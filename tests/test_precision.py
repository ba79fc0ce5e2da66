"""Tests for admitcheck.rollout.precision: fake-quant closed forms and bounds, fused scales, selectors, noise, hooks."""

from __future__ import annotations

import pytest
import torch

from admitcheck.config import NoiseConfig, RolloutConfig, WeightsRecipe
from admitcheck.rollout.capacity import layer_index
from admitcheck.rollout.precision import (
    apply_noise,
    apply_rollout_recipe,
    apply_weight_recipe,
    fake_quant_fp8,
    fake_quant_fp8_per_token,
    fake_quant_int8,
    quantize_kv,
    quantized_linear_names,
    recipe_state_dict,
)
from tests.tiny import tiny_llama

FP8_E4M3 = torch.float8_e4m3fn


def params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


# --- fake quantization -------------------------------------------------------------------------------------------


def test_fp8_per_channel_error_bounds_and_formats():
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(0))
    q4, q5 = fake_quant_fp8(x, "fp8_e4m3", "channel"), fake_quant_fp8(x, "fp8_e5m2", "channel")
    scale = x.abs().amax(dim=1, keepdim=True) / 448
    normal = (x / scale).abs() >= 2**-6  # elementwise bound holds in the normal range (3 mantissa bits)
    assert ((q4 - x).abs() <= 2**-4 * x.abs())[normal].all()
    assert rel_err(q4, x) <= 2**-4
    assert rel_err(q5, x) > rel_err(q4, x)  # e5m2 has 2 mantissa bits
    torch.testing.assert_close(fake_quant_fp8(q4, "fp8_e4m3", "channel"), q4, rtol=1e-6, atol=0)  # idempotent-ish
    assert q4.dtype == x.dtype and fake_quant_fp8(x.bfloat16()).dtype == torch.bfloat16


def test_channel_and_block_are_tensor_quant_per_row_and_per_ragged_block():
    x = torch.randn(100, 70, generator=torch.Generator().manual_seed(1))
    rows = torch.stack([fake_quant_fp8(r[None], granularity="tensor")[0] for r in x])
    assert torch.equal(fake_quant_fp8(x, granularity="channel"), rows)
    blocks = x.clone()
    for i in range(0, 100, 32):
        for j in range(0, 70, 32):
            blocks[i : i + 32, j : j + 32] = fake_quant_fp8(x[i : i + 32, j : j + 32], granularity="tensor")
    assert torch.equal(fake_quant_fp8(x, granularity="block", block_size=32), blocks)  # ragged edges: pad, crop


def test_zero_amax_and_clamp_before_cast():
    z = torch.zeros(4, 8)
    for g in ("tensor", "channel", "block"):
        assert torch.equal(fake_quant_fp8(z, granularity=g), z)
    assert torch.equal(fake_quant_int8(z), z) and torch.equal(fake_quant_fp8_per_token(z), z)
    big = torch.tensor([1000.0, -1e6, 448.0, 1e9])
    assert quantize_kv(big, "fp8_e4m3").tolist() == [448.0, -448.0, 448.0, 448.0]  # saturates, no NaN
    assert quantize_kv(torch.tensor([1e6, -1e9]), "fp8_e5m2").tolist() == [57344.0, -57344.0]


def test_error_ordering_tensor_channel_block_with_outliers():
    # Gaussian weights plus outliers whose magnitudes are 448·2^k, so they are exact under every granularity and
    # the error comes only from the ordinary weights: an outlier row band (rows 0-31) pushes the per-tensor scale
    # up until ordinary rows underflow; an outlier block (rows 32-63, cols 32-63) does the same to those rows'
    # per-channel scale, which per-block quantization (32×32) avoids.
    gen = torch.Generator().manual_seed(2)
    w = torch.randn(128, 128, generator=gen, dtype=torch.float64).float()
    sign = lambda shape: torch.randint(0, 2, shape, generator=gen).float() * 2 - 1  # noqa: E731
    w[:32] = 448 * 2**14 * sign((32, 128))
    w[32:64, 32:64] = 448 * 2**8 * sign((32, 32))
    mse = {g: (fake_quant_fp8(w, granularity=g, block_size=32).double() - w.double()).pow(2).mean().item()
           for g in ("tensor", "channel", "block")}  # fmt: skip
    assert mse["tensor"] > 4 * mse["channel"] > 0  # measured ratios: ~150 and ~9
    assert mse["channel"] > 4 * mse["block"] > 0


def test_int8_per_channel_grid_and_bound():
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(3))
    q = fake_quant_int8(x)
    scale = x.abs().amax(dim=1, keepdim=True) / 127
    steps = q / scale
    torch.testing.assert_close(steps, steps.round(), rtol=0, atol=1e-4)
    assert (steps.abs() <= 127 + 1e-4).all() and ((q - x).abs() <= scale / 2 + 1e-6).all()


def test_quantize_kv_and_per_token_error_bounds():
    x = torch.randn(2, 4, 16, 32, generator=torch.Generator().manual_seed(4))  # (B, H, T, D)
    normal = x.abs() >= 2**-6
    assert ((quantize_kv(x, "fp8_e4m3") - x).abs() <= 2**-4 * x.abs())[normal].all()
    assert ((quantize_kv(x, "fp8_e5m2") - x).abs() <= 2**-3 * x.abs())[x.abs() >= 2**-14].all()
    assert quantize_kv(x.bfloat16()).dtype == torch.bfloat16
    t = fake_quant_fp8_per_token(x)
    assert rel_err(t, x) <= 2**-4
    assert torch.equal(t[0, 0, 0], fake_quant_fp8(x[0, 0, 0], granularity="tensor"))  # one scale per token
    with pytest.raises(ValueError):
        quantize_kv(x, "auto")


# --- selectors and the model path -------------------------------------------------------------------------------


def test_layer_index():
    assert layer_index("model.layers.12.mlp.up_proj") == 12
    assert layer_index("model.layers.3") == 3
    assert layer_index("lm_head") is None and layer_index("model.embed_tokens") is None


def test_fused_qkv_and_gate_up_share_one_scale():
    model = tiny_llama()
    before = params(model)
    apply_weight_recipe(model, WeightsRecipe(format="fp8_e4m3", granularity="tensor"))
    after = model.state_dict()
    for group in (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj")):
        prefix = "model.layers.0." + ("self_attn." if len(group) == 3 else "mlp.")
        keys = [f"{prefix}{n}.weight" for n in group]
        fused = torch.cat([before[k] for k in keys])  # (sum of out, in)
        expected = fake_quant_fp8(fused, granularity="tensor").split([before[k].shape[0] for k in keys])
        scale = fused.abs().max() / 448  # the one shared scale
        for k, e in zip(keys, expected):
            assert torch.equal(after[k], e)
            grid = after[k] / scale  # on the FP8 grid up to float32 rounding of value * scale / scale
            torch.testing.assert_close(grid.to(FP8_E4M3).float(), grid, rtol=2e-7, atol=0)
        # a member without the group's amax would have got its own, smaller scale if quantized alone
        assert any(not torch.equal(after[k], fake_quant_fp8(before[k])) for k in keys)


def test_exclusions_by_glob_layer_and_whole_fused_group():
    recipe = WeightsRecipe(format="fp8_e4m3", exclude=["*.mlp.down_proj", "model.layers.0.self_attn.k_proj"],
                           exclude_layers=[1])  # fmt: skip
    model = tiny_llama()
    names = quantized_linear_names(model, recipe)
    assert names == ["model.layers.0.self_attn.o_proj", "model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj"]
    before = params(model)
    apply_weight_recipe(model, recipe)
    for key, w in model.state_dict().items():
        assert torch.equal(w, before[key]) == (key.removesuffix(".weight") not in names), key


def test_embeddings_lm_head_norms_untouched_unless_included():
    model = tiny_llama()
    before = params(model)
    apply_weight_recipe(model, WeightsRecipe(format="fp8_e4m3", granularity="block", block_size=32))
    after = model.state_dict()
    for key in before:
        unchanged = "norm" in key or key in ("model.embed_tokens.weight", "lm_head.weight")
        assert torch.equal(after[key], before[key]) == unchanged, key
    model = tiny_llama()
    apply_weight_recipe(model, WeightsRecipe(format="fp8_e4m3", include_embeddings=True))
    assert torch.equal(model.lm_head.weight, fake_quant_fp8(before["lm_head.weight"], granularity="channel"))
    assert torch.equal(model.model.embed_tokens.weight, fake_quant_fp8(before["model.embed_tokens.weight"], "fp8_e4m3",
                                                                       "channel"))  # fmt: skip
    assert torch.equal(model.model.norm.weight, before["model.norm.weight"])


def test_activation_hooks_change_outputs_and_are_removable():
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(5))
    weight_only, hooked = tiny_llama(), tiny_llama()
    assert apply_weight_recipe(weight_only, WeightsRecipe(format="fp8_e4m3")) == []
    handles = apply_weight_recipe(hooked, WeightsRecipe(format="fp8_e4m3", activations="fp8_per_token"))
    assert len(handles) == 2 * 7  # q k v o gate up down in each of 2 layers
    with torch.no_grad():
        ref, out = weight_only(ids).logits, hooked(ids).logits
        assert not torch.equal(out, ref) and rel_err(out, ref) < 0.1
        for h in handles:
            h.remove()
        assert torch.equal(hooked(ids).logits, ref)


def test_plain_rollout_is_bit_identical_noop():
    model = tiny_llama(dtype=torch.bfloat16)
    before = params(model)
    assert apply_rollout_recipe(model, RolloutConfig(), noise_step=7) == []
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


# --- noise ----------------------------------------------------------------------------------------------------


def test_noise_reproducible_fresh_per_step_and_relative_size():
    noise = NoiseConfig(relative_std=0.05, seed=3)
    a, b, c, d = tiny_llama(), tiny_llama(), tiny_llama(), tiny_llama()
    clean = params(a)
    apply_noise(a, noise, step=1)
    apply_noise(b, noise, step=1)
    apply_noise(c, noise, step=2)
    apply_noise(d, NoiseConfig(relative_std=0.05, seed=4), step=1)
    for key, w in a.state_dict().items():
        assert torch.equal(w, b.state_dict()[key])
        if "norm" in key:
            assert torch.equal(w, clean[key])
            continue
        assert not torch.equal(w, c.state_dict()[key]) and not torch.equal(w, d.state_dict()[key])
        ratio = (w - clean[key]).pow(2).mean().sqrt() / clean[key].pow(2).mean().sqrt()
        assert abs(ratio.item() / 0.05 - 1) < 0.1, key
    e = tiny_llama()
    apply_noise(e, NoiseConfig(relative_std=0.0, seed=3), step=1)
    assert all(torch.equal(v, clean[k]) for k, v in e.state_dict().items())


# --- state-dict path ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "tie", "recipe"),
    [
        (
            torch.float32,
            False,
            WeightsRecipe(format="fp8_e4m3", granularity="block", block_size=32, exclude_layers=[1]),
        ),
        (torch.bfloat16, True, WeightsRecipe(format="fp8_e4m3", granularity="tensor", include_embeddings=True)),
        (torch.bfloat16, False, WeightsRecipe(format="int8")),
    ],
)
def test_recipe_state_dict_matches_model_path(dtype, tie, recipe):
    rollout = RolloutConfig(weights=recipe, noise=NoiseConfig(relative_std=0.02, seed=1))
    model = tiny_llama(dtype=dtype, tie=tie)
    state = model.state_dict()
    snapshot = params(model)
    out = recipe_state_dict(state, rollout, noise_step=4)
    assert all(torch.equal(v, snapshot[k]) for k, v in state.items())  # input untouched
    apply_rollout_recipe(model, rollout, noise_step=4)
    after = model.state_dict()
    assert out.keys() == after.keys()
    for key in after:
        assert torch.equal(out[key], after[key]), key
    assert not torch.equal(out["model.layers.0.mlp.up_proj.weight"], snapshot["model.layers.0.mlp.up_proj.weight"])
