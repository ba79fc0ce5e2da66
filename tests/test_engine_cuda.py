"""The HF engine's captured CUDA decode against its eager loop: the same tokens under the same seed and recipe, a
log-prob difference below the BF16 noise floor, graphs reused across calls and surviving an in-place weight sync.
Plus, on CPU, the captured decode's bodies run eagerly (no graph) against the eager loop: same tokens, float32
rounding, FP8 KV included; and the in-place recipe against the CPU recipe: the same weights."""

from __future__ import annotations

import pytest
import torch

from admitcheck.config import KVCacheConfig, NoiseConfig, RolloutConfig, SamplingConfig, WeightsRecipe
from admitcheck.measurement.scorer import score
from admitcheck.rollout.engines.cuda_graph import CapturedDecoder, DecodeShape, bucket
from admitcheck.rollout.engines.hf import HFEngine
from admitcheck.rollout.kv_fp8 import KVRecipe
from admitcheck.rollout.layout import left_pad
from admitcheck.rollout.sampling import draw_uniforms
from tests.test_engine_hf import prompts
from tests.tiny import EOS, PAD, tiny_llama

T_ONE = SamplingConfig(temperature=1.0)
T_CUT = SamplingConfig(temperature=0.7, top_p=0.9, top_k=5)
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
RECIPES = {
    "bf16": {},
    "fp8-kv": {"kv_cache": KVCacheConfig(dtype="fp8_e4m3")},
    "fp8-w8a8": {"weights": WeightsRecipe(format="fp8_e4m3", activations="fp8_per_token")},
}


def k3(logp_a: torch.Tensor, logp_b: torch.Tensor) -> float:
    """mean of exp(ℓ) - 1 - ℓ, ℓ = logp_b - logp_a, over the given tokens (>= 0)."""
    ell = (logp_b - logp_a).double()
    return float((ell.exp() - 1 - ell).mean())


def common_prefix(a, b) -> torch.Tensor:
    """(B, T) bool: positions where both rollouts hold the same tokens so far (identical contexts)."""
    n = min(a.token_ids.shape[1], b.token_ids.shape[1])
    same = (a.token_ids[:, :n] == b.token_ids[:, :n]) & a.mask[:, :n] & b.mask[:, :n]
    return same.int().cumprod(dim=1).bool()


def test_buckets_are_few_and_cover():
    assert [bucket(n, 8) for n in (1, 8, 9, 17, 33, 64, 65)] == [8, 8, 16, 32, 64, 64, 96]
    assert all(bucket(n, 32) >= n for n in range(1, 600))
    assert len({bucket(n, 32) for n in range(1, 513)}) <= 8


# ----------------------------------------------------------------------------------------------- CPU: the bodies


@pytest.mark.parametrize("coupling", ["inverse_cdf", "gumbel"])
@pytest.mark.parametrize("kv", ["auto", "fp8_e4m3"])
@pytest.mark.parametrize("sampling", [T_ONE, T_CUT], ids=["t1", "t0.7-p0.9-k5"])
def test_static_decode_bodies_reproduce_the_eager_loop_on_cpu(kv, sampling, coupling):
    """Either coupling: inverse-CDF from the uniforms the eager loop draws, Gumbel-max from the seed's keys hashed in
    the step itself (issue 36) — the same tokens as the eager loop, log-probs to float32 rounding."""
    sampling = sampling.model_copy(update={"coupling": coupling})
    model = tiny_llama(eos_bias=2.0)
    rollout = RolloutConfig(dtype="float32", kv_cache=KVCacheConfig(dtype=kv, skip_layers=[1] if kv != "auto" else []))
    eng = HFEngine(model, rollout, eos_token_id=EOS, pad_token_id=PAD)
    ps, T = prompts(8), 24
    ref = eng.sample(ps, sampling, seed=0, max_new_tokens=T, return_full=True)
    ids, mask = left_pad(ps, PAD, "cpu")
    kv_spec = KVRecipe.of(rollout.kv_cache)
    shape = DecodeShape.of(len(ps), ids.shape[1], T, True)
    dec = CapturedDecoder(eng.model, "past_key_values", shape, (sampling.temperature, sampling.top_p, sampling.top_k),
                          kv_spec, eos_token_id=EOS, pad_token_id=PAD, coupling=coupling)  # fmt: skip
    uniforms = draw_uniforms(len(ps), T, 0) if coupling == "inverse_cdf" else None
    with torch.inference_mode():
        tokens, logprobs, out_mask, full, steps = dec.run(ids, mask, uniforms, T, seed=0)
    n = ref.token_ids.shape[1]
    assert int(out_mask[:8, :steps].sum(1).max()) == n
    assert torch.equal(tokens[:8, :n], ref.token_ids) and torch.equal(out_mask[:8, :n], ref.mask)
    assert (logprobs[:8, :n] - ref.logprobs).abs().max() <= 1e-6
    finite = torch.isfinite(ref.full_logprobs)
    assert torch.equal(torch.isfinite(full[:8, :n]), finite)
    assert (full[:8, :n][finite] - ref.full_logprobs[finite]).abs().max() <= 1e-6


@pytest.mark.parametrize("tie", [False, True])
def test_in_place_recipe_gives_the_cpu_recipes_weights(tie):
    """On CPU the in-place path draws the same normals as `apply_noise` (same seeds, same generator kind)."""
    rollout = RolloutConfig(dtype="bfloat16", noise=NoiseConfig(relative_std=0.05, seed=3),
                            weights=WeightsRecipe(format="fp8_e4m3", activations="fp8_per_token"))  # fmt: skip
    model = tiny_llama(tie=tie)
    a = HFEngine(model, rollout, eos_token_id=EOS, pad_token_id=PAD)
    b = HFEngine(model, rollout, eos_token_id=EOS, pad_token_id=PAD)
    a._apply_recipe(2)
    b._apply_recipe_on_device(2, rehook=True)
    sa, sb = a.model.state_dict(), b.model.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    hooks = sum(len(m._forward_pre_hooks) for m in b.model.modules())
    b._apply_recipe_on_device(2, rehook=False)  # a sync: same weights, the hooks left as they are
    assert all(torch.equal(sa[k], b.model.state_dict()[k]) for k in sa)
    assert sum(len(m._forward_pre_hooks) for m in b.model.modules()) == hooks == len(a._handles)


# ----------------------------------------------------------------------------------------------- CUDA


def _engines(model, recipe: dict, **captured):
    rollout = RolloutConfig(dtype="bfloat16", device="cuda", **recipe)
    eager = HFEngine(model, rollout, eos_token_id=EOS, pad_token_id=PAD, cuda_graphs=False)
    graphs = HFEngine(model, rollout, eos_token_id=EOS, pad_token_id=PAD, **captured)
    assert graphs.cuda_graphs and not eager.cuda_graphs
    return eager, graphs


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("recipe", list(RECIPES), ids=list(RECIPES))
@pytest.mark.parametrize("compiled", [None, True, False], ids=["default", "compiled", "eager-kernels"])
@pytest.mark.parametrize("coupling", ["inverse_cdf", "gumbel"])
def test_captured_engine_draws_the_eager_engines_tokens(recipe, compiled, coupling):
    """>= 99% of the eager loop's tokens, and k3 between the two (on identical contexts) below the BF16 noise floor
    (the eager BF16 engine against the float32 reference). The known gap: the compiled forward under a fake-quant
    recipe (H200: W8A8 97.9% same, k3 11x the floor; FP8 KV k3 1.14x), which is why the engine does not compile
    those recipes by default (default = eager kernels in the graph there: 100% same, k3 ~1e-8)."""
    model = tiny_llama(eos_bias=1.0)
    eager, graphs = _engines(model, RECIPES[recipe], compile_forward=compiled)
    ps, sampling = prompts(12), T_ONE.model_copy(update={"coupling": coupling})  # Gumbel: captured too (issue 36)
    a = eager.sample(ps, sampling, seed=0, max_new_tokens=40)
    b = graphs.sample(ps, sampling, seed=0, max_new_tokens=40)
    assert a.token_ids.shape == b.token_ids.shape and b.token_ids.device.type == "cpu"
    same = (a.token_ids == b.token_ids).float().mean().item()
    both = common_prefix(a, b)
    between = k3(a.logprobs[both], b.logprobs[both])
    bf16 = _engines(model, {})[0].sample(ps, T_ONE, seed=0, max_new_tokens=40)
    ref = score(model.to("cuda"), bf16.prompt_ids, bf16.token_ids, bf16.mask, T_ONE)
    floor = k3(ref.logprobs[bf16.mask], bf16.logprobs[bf16.mask])
    print(f"{recipe} compiled={graphs.compile_forward}: same tokens {same:.4f}, k3 captured-eager {between:.2e}, "
          f"BF16 floor {floor:.2e}")  # fmt: skip
    if graphs.compile_forward and recipe != "bf16" and (between > floor or same < 0.99):
        pytest.xfail(f"known gap, compiled forward under a fake-quant recipe: {same:.4f} same, k3 {between:.2e}")
    assert between <= floor
    assert same >= 0.99, same


@pytest.mark.gpu
@cuda
def test_graphs_are_reused_and_survive_an_in_place_weight_sync():
    model, other = tiny_llama(), tiny_llama(seed=5)
    eager, graphs = _engines(model, RECIPES["fp8-w8a8"])  # eager kernels in the graph by default (exact)
    assert not graphs.compile_forward
    ps = prompts(12)
    first = graphs.sample(ps, T_CUT, seed=3, max_new_tokens=30)
    again = graphs.sample(ps[:10], T_CUT, seed=3, max_new_tokens=30)  # same buckets: no new capture
    assert len(graphs._decoders) == 1
    assert torch.equal(first.token_ids[:10, : again.token_ids.shape[1]], again.token_ids)
    ptrs = [p.data_ptr() for p in graphs.model.parameters()]
    state = {k: v.to("cuda") for k, v in other.state_dict().items()}
    graphs.load_weights(state, noise_step=1)
    eager.load_weights(state, noise_step=1)
    assert ptrs == [p.data_ptr() for p in graphs.model.parameters()] and len(graphs._decoders) == 1
    a = eager.sample(ps, T_CUT, seed=4, max_new_tokens=30)
    b = graphs.sample(ps, T_CUT, seed=4, max_new_tokens=30)
    assert (a.token_ids == b.token_ids).float().mean() >= 0.99
    assert not torch.equal(b.token_ids, graphs.sample(ps, T_CUT, seed=5, max_new_tokens=30).token_ids)


@pytest.mark.gpu
@cuda
def test_captured_float32_engine_keeps_the_invariant():
    """float32, eager kernels in the graph: the engine reproduces the reference scorer as the eager loop does."""
    model = tiny_llama()
    eng = HFEngine(model, RolloutConfig(dtype="float32", device="cuda"), eos_token_id=EOS, pad_token_id=PAD,
                   compile_forward=False)  # fmt: skip
    r = eng.sample(prompts(), T_CUT, seed=0, max_new_tokens=40, return_full=True)
    ref = score(model.to("cuda"), r.prompt_ids, r.token_ids, r.mask, T_CUT, full=True)
    assert (r.logprobs - ref.logprobs)[r.mask].abs().max() <= 1e-5
    mu, pi = r.full_logprobs[r.mask], ref.full_logprobs[r.mask]
    assert torch.equal(torch.isfinite(mu), torch.isfinite(pi))


@cuda
@pytest.mark.gpu
def test_full_rows_on_the_device_are_the_cpu_rows_and_their_reverse_kl_agrees() -> None:
    """`full_on_device` (the held-out evaluation's path, issue 37): the engine's and the scorer's (B, T, V) rows stay on
    the GPU, equal to the rows moved to the CPU, and the reverse KL reduced there agrees with the CPU reduction within
    float32 rounding."""
    from admitcheck.calibration.evaluation import reverse_kl_on_device
    from admitcheck.calibration.objectives import reverse_kl_rows

    torch.manual_seed(0)
    model = tiny_llama().to("cuda")
    engine = HFEngine(model, RolloutConfig(dtype="float32", device="cuda"), eos_token_id=EOS, pad_token_id=PAD)
    ids = prompts(12)
    on_gpu = engine.sample(ids, T_ONE, 3, 12, return_full=True, full_on_device=True)
    on_cpu = engine.sample(ids, T_ONE, 3, 12, return_full=True)
    assert on_gpu.full_logprobs.device.type == "cuda" and on_cpu.full_logprobs.device.type == "cpu"
    assert torch.equal(on_gpu.full_logprobs.cpu(), on_cpu.full_logprobs)
    t_gpu = score(model, on_gpu.prompt_ids, on_gpu.token_ids, on_gpu.mask, T_ONE, full=True, full_on_device=True)
    t_cpu = score(model, on_cpu.prompt_ids, on_cpu.token_ids, on_cpu.mask, T_ONE, full=True)
    assert t_gpu.full_logprobs.device.type == "cuda" and torch.equal(t_gpu.full_logprobs.cpu(), t_cpu.full_logprobs)
    kl_gpu = reverse_kl_on_device(on_gpu.full_logprobs, t_gpu.full_logprobs)  # 8 sequences at a time on the GPU
    kl_cpu = reverse_kl_rows(on_cpu.full_logprobs, t_cpu.full_logprobs)
    assert kl_gpu.device.type == "cpu" and torch.allclose(kl_gpu, kl_cpu, rtol=1e-5, atol=1e-7)
    engine.close()
