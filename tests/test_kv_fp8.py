"""FP8 KV as vLLM runs it (admitcheck.rollout.kv_fp8): the prefill reads the quantized cache, flash_attn rounds the
query, calibrated scales are NeMo-RL's rule per layer and follow a weight sync; the captured decode bodies keep the
same recipe; block weights' activations in 1 × block groups."""

from __future__ import annotations

import pytest
import torch

from admitcheck.config import KVCacheConfig, RolloutConfig, SamplingConfig, WeightsRecipe
from admitcheck.rollout.engines.cuda_graph import CapturedDecoder, DecodeShape
from admitcheck.rollout.engines.hf import HFEngine
from admitcheck.rollout.kv_fp8 import KVRecipe, calibrate_scales, percentile_rank
from admitcheck.rollout.layout import left_pad, position_ids
from admitcheck.rollout.precision import fake_quant_fp8_per_group, fake_quant_fp8_per_token
from admitcheck.rollout.sampling import draw_uniforms
from tests.test_engine_hf import prompts
from tests.tiny import EOS, PAD, tiny_llama

T_ONE = SamplingConfig(temperature=1.0)


def _engine(model, **kv) -> HFEngine:
    """A float32 engine with the KV-cache fields `kv` (dtype: the cache's)."""
    rollout = RolloutConfig(dtype="float32", kv_cache=KVCacheConfig(**kv))
    return HFEngine(model, rollout, eos_token_id=EOS, pad_token_id=PAD)


def _first_step(eng: HFEngine) -> torch.Tensor:
    """(B, V) log-probs of the first response token: the prefill's output, before any decode step."""
    return eng.sample(prompts(12), T_ONE, 0, 1, return_full=True).full_logprobs[:, 0]


@pytest.fixture(scope="module")
def model():
    return tiny_llama()


def test_prefill_reads_the_quantized_cache_and_flash_attn_rounds_the_query(model):
    plain = _first_step(_engine(model))
    fresh = _first_step(_engine(model, dtype="fp8_e4m3", attention_backend="fresh_prefill"))
    cpu = _first_step(_engine(model, dtype="fp8_e4m3", attention_backend="cpu"))
    flash = _first_step(_engine(model, dtype="fp8_e4m3", attention_backend="flash_attn"))
    triton = _first_step(_engine(model, dtype="fp8_e4m3", attention_backend="triton_attn"))
    assert torch.equal(fresh, plain)  # the old recipe: the prompt's K/V and the query exact
    assert (cpu - plain).abs().max() > 1e-4  # prefill K/V quantized
    assert (flash - cpu).abs().max() > 1e-4  # the query rounded to FP8 too
    assert torch.equal(flash, triton)  # the same roundings (their kernels differ, not modelled)
    infer = _first_step(_engine(model, dtype="fp8_e4m3", attention_backend="flashinfer"))
    assert (infer - plain).abs().max() > 1e-4 and (infer - flash).abs().max() > 1e-4  # prefill K/V, exact query
    assert (infer - cpu).abs().max() > 1e-4  # rounding to nearest, not toward zero
    skipped = _first_step(_engine(model, dtype="fp8_e4m3", skip_layers=[0, 1]))
    assert torch.equal(skipped, plain)  # skipped layers: no K/V and no query rounding


def test_query_rounding_is_a_hook_that_leaves_other_engines_alone(model):
    flash = _engine(model, dtype="fp8_e4m3")
    flash.sample(prompts(4), T_ONE, 0, 4)
    from admitcheck.rollout.kv_fp8 import attention_modules

    assert all(m.admitcheck_query is not None for m in attention_modules(flash.model))
    assert not any(hasattr(m, "admitcheck_query") for m in attention_modules(model))  # the caller's model untouched
    flash.reconfigure(RolloutConfig(dtype="float32"))
    assert all(m.admitcheck_query is None for m in attention_modules(flash.model))
    assert torch.equal(_first_step(flash), _first_step(_engine(model)))


def test_calibrated_scales_follow_nemo_rl_per_layer_and_change_at_a_weight_sync(model):
    eng = _engine(model, dtype="fp8_e4m3", scales="calibrated", percentile=100.0)
    assert torch.equal(eng.kv_scales, torch.ones(2, 3))  # nothing sampled yet
    ps = prompts(8)
    eng.sample(ps, T_ONE, 0, 8)
    scales = eng.kv_scales  # (L, 3) q, k, v
    assert scales.shape == (2, 3) and (scales != 1).all() and (scales[0] != scales[1]).any()
    # percentile 100 is the max over prompts of each prompt's amax: scale = amax · 1.05 / 448, per layer
    ids, mask = left_pad(ps, PAD, "cpu")
    with torch.no_grad():  # |k| after RoPE, from the float32 model itself
        from transformers import DynamicCache

        cache = DynamicCache(config=model.config)
        model(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask), past_key_values=cache)
    for layer in range(2):
        k = cache.layers[layer].keys.abs().amax(dim=(1, 3)).masked_fill(~mask.bool(), 0)  # (B, S)
        assert scales[layer, 1].item() == pytest.approx(float(k.max()) * 1.05 / 448, rel=1e-6)
    eng.sample(ps, T_ONE, 1, 8)
    assert torch.equal(eng.kv_scales, scales)  # no sync: the same scales
    state = {k: v * 1.5 if v.ndim == 2 else v for k, v in model.state_dict().items()}
    eng.load_weights(state)
    eng.sample(ps, T_ONE, 0, 8)
    assert (eng.kv_scales - scales).abs().max() > 1e-4  # a weight sync recomputes them from the new weights


def test_calibration_bypasses_the_engines_own_recipe(model):
    """The scales come from the trainer's (clean float32) weights: noise, FP8 weights and activations do not move
    them."""
    ps = prompts(6)
    ids, mask = left_pad(ps, PAD, "cpu")
    kv = KVCacheConfig(dtype="fp8_e4m3", scales="calibrated")
    clean = {k: v.float() for k, v in model.state_dict().items()}
    plain = calibrate_scales(model, clean, ids, mask, position_ids(mask), kv, cache_kwarg="past_key_values")
    w8a8 = RolloutConfig(dtype="bfloat16", kv_cache=kv, weights=WeightsRecipe(format="fp8_e4m3",
                         activations="fp8_per_token"))  # fmt: skip
    eng = HFEngine(model, w8a8, eos_token_id=EOS, pad_token_id=PAD)
    eng.sample(ps, T_ONE, 0, 4)
    assert torch.allclose(eng.kv_scales, plain, rtol=1e-6)


def test_percentile_rank_is_nemo_rls():
    v = torch.arange(1000, dtype=torch.float32).flip(0)
    assert percentile_rank(v, 99.9) == 998.0 and percentile_rank(v, 100) == 999.0 and percentile_rank(v, 50) == 500.0


@pytest.mark.parametrize("kv", [{"dtype": "fp8_e4m3"}, {"dtype": "fp8_e4m3", "scales": "calibrated"},
                                {"dtype": "fp8_e4m3", "attention_backend": "fresh_prefill", "skip_layers": [1]},
                                {"dtype": "fp8_e5m2", "attention_backend": "cpu"}], ids=["flash", "calibrated", "fresh",
                                                                                        "cpu-e5m2"])  # fmt: skip
def test_captured_bodies_keep_the_eager_recipe(kv):
    """The CUDA path's cache (`StaticRolloutCache`, run eagerly on CPU) gives the eager loop's tokens under every
    FP8 recipe, calibrated scales and the query hook included."""
    model = tiny_llama(eos_bias=2.0)
    eng = HFEngine(model, RolloutConfig(dtype="float32", kv_cache=KVCacheConfig(**kv)), eos_token_id=EOS,
                   pad_token_id=PAD)  # fmt: skip
    ps, T = prompts(8), 24
    ref = eng.sample(ps, T_ONE, seed=0, max_new_tokens=T)
    ids, mask = left_pad(ps, PAD, "cpu")
    recipe = KVRecipe.of(eng.rollout.kv_cache, eng._kv_scales)
    dec = CapturedDecoder(eng.model, "past_key_values", DecodeShape.of(8, ids.shape[1], T, False), (1.0, 1.0, 0),
                          recipe, eos_token_id=EOS, pad_token_id=PAD)  # fmt: skip
    with torch.inference_mode():
        tokens, logprobs, _, _, _ = dec.run(ids, mask, draw_uniforms(8, T, 0), T)
    n = ref.token_ids.shape[1]
    assert torch.equal(tokens[:8, :n], ref.token_ids) and (logprobs[:8, :n] - ref.logprobs).abs().max() <= 1e-6


def test_block_weights_round_activations_in_groups():
    x = torch.randn(3, 5, 96) * torch.linspace(0.1, 10, 96)
    g = fake_quant_fp8_per_group(x, group=32)
    for j in range(3):  # each 32-wide group on its own: the per-token rule on that slice
        sl = slice(32 * j, 32 * (j + 1))
        assert torch.equal(g[..., sl], fake_quant_fp8_per_token(x[..., sl]))
    assert not torch.equal(g, fake_quant_fp8_per_token(x))
    ragged = fake_quant_fp8_per_group(x[..., :80], group=32)
    assert torch.equal(ragged[..., 64:], fake_quant_fp8_per_token(x[..., 64:80]))  # the last group is the rest
    assert torch.equal(fake_quant_fp8_per_group(x, group=128), fake_quant_fp8_per_token(x))


def test_shipped_fp8_kv_runs_are_keyed_by_their_recipe():
    """The shipped backtest ledger's FP8-KV runs are found under the recipe each was made with — vLLM's (`flash_attn`,
    the default), its calibrated scales, e5m2 through flashinfer, and the recipe before #24 (`fresh_prefill`) — and
    under no other: a resumed ledger never mixes two recipes' runs. Dumps name the recipe; a key read back (plan's
    level matching) is the recipe it was made with."""
    import json
    from pathlib import Path

    from admitcheck import io
    from admitcheck.calibration.calibrate import run_key
    from admitcheck.calibration.learning import spec_key
    from admitcheck.calibration.levels import Level, replicate_seed
    from admitcheck.calibration.record import LevelSpec

    root = Path(__file__).resolve().parents[1]
    keys = {r["key"] for r in io.read_jsonl(root / "calibrations" / "toy.backtest.ledger.jsonl")[1:]
            if r["kind"] == "run"}  # fmt: skip
    seed = replicate_seed(0, 0)

    def key(dtype="fp8_e4m3", **kv) -> str:
        rollout = RolloutConfig(engine="hf", dtype="bfloat16", kv_cache=KVCacheConfig(dtype=dtype, **kv))
        return run_key(Level("x", "rollout", rollout=rollout), seed)

    made = ({}, {"scales": "calibrated"}, {"skip_layers": [0]}, {"attention_backend": "fresh_prefill"},
            {"dtype": "fp8_e5m2", "attention_backend": "flashinfer"})  # fmt: skip
    for recipe in made:
        assert key(**recipe) in keys, recipe
    for other in ({"attention_backend": "cpu"}, {"attention_backend": "fresh_prefill", "scales": "calibrated"}):
        assert key(**other) not in keys
    assert json.loads(key())["level"]["rollout"]["kv_cache"] == {
        "dtype": "fp8_e4m3", "skip_layers": [], "attention_backend": "flash_attn", "scales": "one"}  # fmt: skip
    legacy = Level(
        "x",
        "rollout",
        rollout=RolloutConfig(kv_cache=KVCacheConfig(dtype="fp8_e4m3", attention_backend="fresh_prefill")),
    )
    assert legacy.to_dict()["rollout"]["kv_cache"]["attention_backend"] == "fresh_prefill"  # artifacts: explicit
    again = RolloutConfig.model_validate(legacy.to_dict()["rollout"])
    assert again == legacy.rollout  # a dump reads back as the same recipe
    backends = set()
    for k in keys:
        level = json.loads(k)["level"]
        if (level["rollout"] or {}).get("kv_cache", {}).get("dtype", "auto") != "auto":
            kv = json.loads(spec_key(LevelSpec(**level)))["rollout"]["kv_cache"]
            made_with = level["rollout"]["kv_cache"].get("attention_backend", "fresh_prefill")  # older keys: no field
            assert kv["attention_backend"] == made_with  # read back as the recipe it was made with
            backends.add((kv["dtype"], kv["attention_backend"]))
    assert backends == {("fp8_e4m3", "flash_attn"), ("fp8_e4m3", "fresh_prefill"), ("fp8_e5m2", "flashinfer")}


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
def test_rounding_toward_zero_is_the_grid_point_below_in_magnitude(fmt):
    from admitcheck.rollout.precision import quantize_kv

    x = torch.randn(4096) * 3  # |x / scale| mostly below the FP8 max
    scale = torch.tensor(0.037)
    t = quantize_kv(x, fmt, scale, rounding="toward_zero")
    n = quantize_kv(x, fmt, scale)
    assert (t.abs() <= x.abs() + 1e-6).all() and (t * x >= 0).all()  # never away from zero
    assert torch.equal(quantize_kv(t, fmt, scale), t)  # on the grid
    assert torch.equal(t[n.abs() <= x.abs()], n[n.abs() <= x.abs()])  # where nearest rounded down, the same
    assert (t != n).float().mean() > 0.3  # and otherwise one grid point lower


def test_sensitivity_units_keep_the_fp8_kv_recipe():
    """A per-unit restriction of an FP8-KV recipe (sensitivity, recipe search) keeps its backend and scales."""
    from admitcheck.measurement.sensitivity import Unit, unit_rollout, without_units

    kv = KVCacheConfig(dtype="fp8_e5m2", attention_backend="cpu", scales="calibrated", margin=1.2)
    recipe = RolloutConfig(dtype="bfloat16", kv_cache=kv)
    one = unit_rollout(recipe, Unit("kv", 1), 2).kv_cache
    fewer = without_units(recipe, [Unit("kv", 0)], 2).kv_cache
    for got, skip in ((one, [0]), (fewer, [0])):
        assert got.model_dump() == kv.model_copy(update={"skip_layers": skip}).model_dump()


def test_a_kv_backend_is_read_from_its_record():
    from admitcheck.config import KV_BACKENDS

    for name, b in KV_BACKENDS.items():
        r = KVRecipe.of(KVCacheConfig(dtype="fp8_e4m3", attention_backend=name))
        assert (r.prefill_reads_cache, r.quantize_query, r.rounding) == (b.prefill_reads_cache, b.quantize_query,
                                                                          b.rounding)  # fmt: skip
        if not b.quantize_query:
            KVCacheConfig(dtype="fp8_e5m2", attention_backend=name)  # a query kept in the model dtype reads e5m2
        else:
            with pytest.raises(ValueError, match="reads fp8_e4m3 caches only"):
                KVCacheConfig(dtype="fp8_e5m2", attention_backend=name)
