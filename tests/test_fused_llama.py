"""The fused Llama decode forward against transformers' own: the same logits (toy pair, a GQA model; float32 to
1e-5, BF16 to its rounding), the same FP8 KV cache contents, the same tokens through the static decoder on CPU, and
weights that stay the model's parameters (an in-place sync reaches the fused buffers). The compiled forward with
in-place weight updates is a slow test (inductor on CPU)."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from admitcheck import io
from admitcheck.config import KVCacheConfig, NoiseConfig, PairConfig, RolloutConfig, SamplingConfig, WeightsRecipe
from admitcheck.pairs.load import load_pair_tokenizer, tokenize_prompts
from admitcheck.rollout.engines.cuda_graph import CapturedDecoder, DecodeShape, StaticRolloutCache
from admitcheck.rollout.engines.fused_llama import FusedLlamaForward, check_fusable, fuse_projections, is_fused
from admitcheck.rollout.engines.hf import HFEngine, _clean_copy
from admitcheck.rollout.kv_fp8 import KVRecipe, use_query_quant
from admitcheck.rollout.layout import left_pad, position_ids
from admitcheck.rollout.sampling import draw_uniforms
from tests.test_engine_hf import prompts
from tests.tiny import EOS, PAD, tiny_llama

T_ONE = SamplingConfig(temperature=1.0)
T_CUT = SamplingConfig(temperature=0.7, top_p=0.9, top_k=5)


def gqa_llama(seed: int = 0, *, tie: bool = True, dtype: torch.dtype = torch.float32) -> LlamaForCausalLM:
    """A tiny Llama with grouped-query attention (4 query heads over 2 KV heads), peaked enough to sample from."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=64, hidden_size=128, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=32, tie_word_embeddings=tie, initializer_range=0.1,
                      rope_theta=1e4, max_position_embeddings=256)  # fmt: skip
    return LlamaForCausalLM(cfg).to(dtype).eval()


def toy(which: str, toy_dir) -> LlamaForCausalLM:
    return io.load_causal_lm(toy_dir / which, "float32", "cpu")


def toy_prompts(toy_dir, n: int = 12) -> list[list[int]]:
    tokens = load_pair_tokenizer(PairConfig(student=str(toy_dir / "student"), teacher=str(toy_dir / "teacher")))
    return tokenize_prompts(tokens, io.read_prompts(toy_dir / "prompts" / "probe.jsonl", n))


def _prefill_inputs(ps: list[list[int]]):
    """Left-padded prompts and the captured decoder's prefill mask (causal, padding masked, a pad row sees itself)."""
    ids, mask = left_pad(ps, PAD, "cpu")
    m = mask.bool()
    P = ids.shape[1]
    causal = torch.ones(P, P, dtype=torch.bool).tril()
    attn = (causal & m[:, None, :] | torch.eye(P, dtype=torch.bool)).unsqueeze(1)  # (B, 1, P, P)
    return ids, mask, attn


def decode_logits(model, forward, ps, recipe: KVRecipe, steps: int = 6, seed: int = 0, prefill=None):
    """A prefill through `prefill` (default `forward`), then `steps` decode steps through `forward` (random tokens, a
    (B, 1, 1, L) mask) over a StaticRolloutCache with `recipe` (`model` gives the shapes): [(B, V) logits], cache."""
    ids, mask, attn = _prefill_inputs(ps)
    B, P = ids.shape
    dtype = next(model.parameters()).dtype
    cache = StaticRolloutCache(model.config, B, P + steps, dtype, "cpu", recipe)
    gen = torch.Generator().manual_seed(seed)
    out = []
    with torch.inference_mode():
        cache.prefill = True
        out.append((prefill or forward)(input_ids=ids, attention_mask=attn, position_ids=position_ids(mask),
                           past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1])  # fmt: skip
        cache.prefill = False
        cache.write_pos.fill_(P)
        dmask = torch.zeros(B, 1, 1, P + steps, dtype=torch.bool)
        dmask[:, 0, 0, :P] = mask.bool()
        pos = mask.sum(dim=1, keepdim=True)
        for _ in range(steps):
            tok = torch.randint(3, model.config.vocab_size, (B, 1), generator=gen)
            dmask.index_fill_(3, cache.write_pos, True)
            out.append(forward(input_ids=tok, attention_mask=dmask, position_ids=pos, past_key_values=cache,
                               use_cache=True).logits[:, -1])  # fmt: skip
            cache.write_pos += 1
            pos += 1
    return out, cache


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max())


# ------------------------------------------------------------------------------------------------ logits


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("which", ["toy-teacher", "toy-student", "gqa", "gqa-repeat-kv", "lm-head-bias"])
def test_fused_forward_gives_the_hf_logits(which, dtype, toy_pair_dir):
    if which.startswith("toy"):
        model = toy(which.split("-")[1], toy_pair_dir).to(dtype)
        ps = toy_prompts(toy_pair_dir, 8)
    else:
        model = gqa_llama(dtype=dtype) if which.startswith("gqa") else tiny_llama(eos_bias=2.0, dtype=dtype)
        ps = prompts(8)
    ref = copy.deepcopy(model)  # never fused
    fused = FusedLlamaForward(model, group_queries=which != "gqa-repeat-kv")
    assert is_fused(model)
    a, _ = decode_logits(ref, ref, ps, KVRecipe())
    b, _ = decode_logits(ref, fused, ps, KVRecipe(), prefill=ref)  # the captured decoder's split: HF prefill
    c, _ = decode_logits(ref, fused, ps, KVRecipe(), prefill=ref)
    full, _ = decode_logits(ref, fused, ps, KVRecipe())  # the fused prefill too
    tol = 1e-5 if dtype == torch.float32 else 2**-7  # BF16: one rounding of the logits' scale
    for x, y, z, w in zip(a, b, c, full):
        assert _rel(y, x) <= tol and _rel(w, x) <= tol
        assert torch.equal(y, z)  # deterministic
    if which != "gqa":  # one kernel shape per row as HF's: bit-identical on CPU (another BLAS may round otherwise)
        assert all(_rel(y, x) <= 1e-6 for x, y in zip(a, b))


# ------------------------------------------------------------------------------------------------ FP8 KV cache

FP8_RECIPES = {
    "e4m3-skip1": KVRecipe("fp8_e4m3", skip_layers=(1,)),
    "e4m3-query-scales": KVRecipe("fp8_e4m3", quantize_query=True, scales=torch.tensor([[0.02, 0.03, 0.01]] * 2)),
    "e5m2-fresh-prefill": KVRecipe("fp8_e5m2", prefill_reads_cache=False),
    "e4m3-toward-zero": KVRecipe("fp8_e4m3", rounding="toward_zero"),
}


@pytest.mark.parametrize("grouped", [False, True], ids=["repeat-kv", "grouped-queries"])
@pytest.mark.parametrize("name", list(FP8_RECIPES))
def test_fp8_kv_recipe_through_the_fused_forward_fills_the_same_cache(name, grouped):
    """The fused forward calls the same `cache.update`: the same FP8 K/V in the cache. With HF's attention shapes
    (repeat_kv) bit-identical here; with grouped queries layer 0's cache is (its inputs are), deeper layers see
    float32-rounding differences, which move an FP8 grid point now and then (unquantized layers: 1e-5)."""
    recipe = FP8_RECIPES[name]
    model = gqa_llama()
    use_query_quant(model, recipe)  # the query rounding hook (flash_attn backends), read by both forwards
    ref = copy.deepcopy(model)
    fused = FusedLlamaForward(model, group_queries=grouped)
    ps = prompts(8)
    a, ca = decode_logits(ref, ref, ps, recipe)
    b, cb = decode_logits(ref, fused, ps, recipe, prefill=model)
    for layer in range(2):
        for x, y in ((ca.keys[layer], cb.keys[layer]), (ca.values[layer], cb.values[layer])):
            if layer == 0 or not grouped:
                differ = (x != y).float().mean().item()
                assert differ <= 1e-3, (layer, differ)  # bit-identical here; another BLAS may move a grid point
            elif recipe.quantized(layer):
                assert (x != y).float().mean().item() <= 1e-3
            else:
                assert _rel(y, x) <= 1e-5
    flips = any(not torch.equal(x, y) for x, y in zip(ca.keys + ca.values, cb.keys + cb.values))
    for x, y in zip(a, b):
        assert _rel(y, x) <= (1e-5 if not flips else 1e-2)  # a K/V element one FP8 step off moves the logits a bit
    if recipe.quantize_query:  # the hook acts: without it the logits move
        use_query_quant(model, KVRecipe())
        c, _ = decode_logits(ref, fused, ps, recipe, prefill=model)
        assert _rel(c[-1], a[-1]) > 1e-4


# ------------------------------------------------------------------------------------------------ the engine


def _engines(model, rollout: RolloutConfig):
    plain = HFEngine(model, rollout, eos_token_id=EOS, pad_token_id=PAD)
    fused = HFEngine(model, rollout, eos_token_id=EOS, pad_token_id=PAD, fused=True)
    assert fused.fused and is_fused(fused.model) and not is_fused(plain.model)
    return plain, fused


def static_decode(eng: HFEngine, ps, sampling: SamplingConfig, seed: int, T: int):
    """The engine's static decoder with the HF forward, bodies run eagerly (no graph): (tokens, logprobs, mask,
    full) cropped like the engine's output."""
    ids, mask = left_pad(ps, PAD, "cpu")
    recipe = eng._kv_recipe(ids, mask)
    spec = (sampling.temperature, sampling.top_p, sampling.top_k)
    dec = CapturedDecoder(eng.model, eng._cache_kwarg, DecodeShape.of(len(ps), ids.shape[1], T, True), spec, recipe,
                          eos_token_id=EOS, pad_token_id=PAD, coupling=sampling.coupling)  # fmt: skip
    uniforms = draw_uniforms(len(ps), T, seed) if sampling.coupling == "inverse_cdf" else None
    with torch.inference_mode():
        tokens, logprobs, out_mask, full, steps = dec.run(ids, mask, uniforms, T, seed=seed)
    n = int(out_mask[: len(ps), :steps].sum(1).max())
    return tuple(x[: len(ps), :n].clone() for x in (tokens, logprobs, out_mask, full))


def _same_rollouts(a, b, tol: float) -> None:
    assert torch.equal(a.token_ids, b.token_ids) and torch.equal(a.mask, b.mask)
    assert (a.logprobs - b.logprobs).abs().max() <= tol


@pytest.mark.parametrize(
    "sampling", [T_ONE, T_CUT, T_ONE.model_copy(update={"coupling": "gumbel"})], ids=["t1", "t0.7-p0.9-k5", "gumbel"]
)
@pytest.mark.parametrize("kv", ["auto", "fp8_e4m3"])
def test_fused_engine_draws_the_eager_loops_tokens_on_the_toy_pair(kv, sampling, toy_pair_dir):
    """float32 on CPU: the fused engine (its static decoder's bodies run eagerly) against the eager loop (same tokens;
    the eager loop's kernel shapes differ, log-probs agree to float32 rounding) and against the same static decoder
    with HF's forward (the fusion alone: bit-identical here, 1e-6 allowed for another BLAS)."""
    rollout = RolloutConfig(dtype="float32", kv_cache=KVCacheConfig(dtype=kv))
    ps = toy_prompts(toy_pair_dir, 12)
    for which in ("student", "teacher"):
        plain, fused = _engines(toy(which, toy_pair_dir), rollout)
        a = plain.sample(ps, sampling, seed=0, max_new_tokens=14, return_full=True)
        b = fused.sample(ps, sampling, seed=0, max_new_tokens=14, return_full=True)
        _same_rollouts(a, b, 1e-5)
        finite = torch.isfinite(a.full_logprobs)
        assert torch.equal(finite, torch.isfinite(b.full_logprobs))
        assert (a.full_logprobs[finite] - b.full_logprobs[finite]).abs().max() <= 1e-4  # tails of ~-20 nats
        assert "stop" in b.finish_reasons
        tokens, logprobs, mask, full = static_decode(plain, ps, sampling, 0, 14)
        assert torch.equal(tokens, b.token_ids) and torch.equal(mask, b.mask)
        assert (logprobs - b.logprobs).abs().max() <= 1e-6
        assert (full[finite] - b.full_logprobs[finite]).abs().max() <= 1e-6


def test_fused_engine_keeps_noise_and_w8a8_recipes():
    """Weight noise and FP8 W8A8 (fake-quant in place, activation pre-hooks): the fused group quantizes its shared
    input once, which is what the unfused projections' identical hooks do: the static decoder's tokens with HF's
    forward, and its log-probs to float32 rounding wherever no activation crosses an FP8 grid step. The fused GEMM has
    another shape than the three it replaces, so its float32 rounding differs in the last bit, and now and then that
    moves an activation of the next layer across an e4m3 step (1/8 of its value): under the numeric pins (MKL's
    compatible path, ATen's AVX2 kernels) 7 of 225 log-probs moved, by at most 0.009 nats; on AMD's MKL AVX-512 path
    none. So: the tokens equal, ≥ 90% of the log-probs within 1e-5, none beyond 0.05 (a grid step's effect)."""
    rollout = RolloutConfig(dtype="float32", noise=NoiseConfig(relative_std=0.05, seed=3),
                            weights=WeightsRecipe(format="fp8_e4m3", activations="fp8_per_token"))  # fmt: skip
    plain, fused = _engines(gqa_llama(tie=False), rollout)
    assert sum(len(m._forward_pre_hooks) for m in fused.model.modules()) > 0
    ps = prompts(12)
    b = fused.sample(ps, T_CUT, seed=1, max_new_tokens=20)
    tokens, logprobs, mask, _ = static_decode(plain, ps, T_CUT, 1, 20)
    assert torch.equal(tokens, b.token_ids) and torch.equal(mask, b.mask)
    moved = (logprobs - b.logprobs).abs()[mask.bool()]
    assert (moved <= 1e-5).float().mean() >= 0.9 and moved.max() <= 0.05  # float32 rounding, or an FP8 grid step
    assert torch.equal(plain.sample(ps, T_CUT, seed=1, max_new_tokens=20).token_ids, b.token_ids)


@pytest.mark.parametrize("path", ["cpu-load-state-dict", "foreach-copy-on-device-path", "foreach-copy-direct"])
def test_in_place_weight_sync_reaches_the_fused_forward(path):
    """The projections' weights are views of the fused buffers: a sync that copies into the parameters (the CPU
    engine's load_state_dict, the CUDA engine's torch._foreach_copy_) changes what the fused forward computes."""
    model, other = gqa_llama(tie=False), gqa_llama(seed=7, tie=False)
    eng = HFEngine(model, RolloutConfig(dtype="float32"), eos_token_id=EOS, pad_token_id=PAD, fused=True)
    fwd = FusedLlamaForward(eng.model)  # the same buffers as the engine's (fusing twice is a no-op)
    ptrs = [p.data_ptr() for p in eng.model.parameters()]
    ps = prompts(8)
    before, _ = decode_logits(eng.model, fwd, ps, KVRecipe())
    state = other.state_dict()
    if path == "cpu-load-state-dict":
        eng.load_weights(state)
    elif path == "foreach-copy-on-device-path":  # what load_weights does on CUDA, run on CPU
        eng._clean = _clean_copy(state)
        eng._apply_recipe_on_device(noise_step=0, rehook=False)
    else:
        params = dict(eng.model.named_parameters())
        with torch.no_grad():
            torch._foreach_copy_([params[k] for k in params], [state[k] for k in params])
    assert is_fused(eng.model) and ptrs == [p.data_ptr() for p in eng.model.parameters()]
    layer = eng.model.model.layers[1]
    qkv = torch.cat([other.model.layers[1].self_attn.q_proj.weight, other.model.layers[1].self_attn.k_proj.weight,
                     other.model.layers[1].self_attn.v_proj.weight])  # fmt: skip
    assert torch.equal(layer.self_attn.admitcheck_qkv, qkv)
    after, _ = decode_logits(eng.model, fwd, ps, KVRecipe())
    want, _ = decode_logits(other, other, ps, KVRecipe())
    assert _rel(after[-1], before[-1]) > 1e-2  # the weights moved, and the fused forward saw it
    for x, y in zip(want, after):
        assert _rel(y, x) <= 1e-5
    plain = HFEngine(other, RolloutConfig(dtype="float32"), eos_token_id=EOS, pad_token_id=PAD)
    _same_rollouts(plain.sample(ps, T_ONE, seed=2, max_new_tokens=16), eng.sample(ps, T_ONE, seed=2, max_new_tokens=16),
                   1e-5)  # fmt: skip


# ------------------------------------------------------------------------------------------------ refusals, identity


def test_fusing_twice_reuses_the_buffers_and_state_dict_is_unchanged():
    model = gqa_llama()
    keys = list(model.state_dict())
    first = fuse_projections(model)
    second = fuse_projections(model)
    assert all(a is c and b is d for (a, b), (c, d) in zip(first, second))
    assert list(model.state_dict()) == keys  # no new entries: the fused buffers are plain attributes
    model.to(torch.float64)  # re-allocates every parameter: the views are gone
    assert not is_fused(model)
    fuse_projections(model)
    assert is_fused(model)


def test_unfusable_models_are_refused():
    cfg = dict(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2)
    with pytest.raises(ValueError, match="biases"):
        check_fusable(LlamaForCausalLM(LlamaConfig(**cfg, attention_bias=True)))
    eager = LlamaForCausalLM(LlamaConfig(**cfg))
    eager.config._attn_implementation = "eager"
    with pytest.raises(ValueError, match="SDPA"):
        check_fusable(eager)
    hooked = tiny_llama()
    hooked.model.layers[0].self_attn.k_proj.register_forward_pre_hook(lambda m, a: None)
    with pytest.raises(ValueError, match="pre-hooks"):
        check_fusable(hooked)
    for where in ("model", "layer", "self_attn", "mlp"):  # modules whose own forward the fused path does not call
        hooked = tiny_llama()
        layer = hooked.model.layers[1]
        mod = {"model": hooked.model, "layer": layer, "self_attn": layer.self_attn, "mlp": layer.mlp}[where]
        mod.register_forward_hook(lambda m, a, o: None)
        with pytest.raises(ValueError, match="would skip"):
            check_fusable(hooked)
    check_fusable(tiny_llama())
    with pytest.raises(ValueError, match="4-D"):
        FusedLlamaForward(tiny_llama())(input_ids=torch.ones(1, 1, dtype=torch.long),
                                        attention_mask=torch.ones(1, 1), position_ids=torch.zeros(1, 1))  # fmt: skip


# ------------------------------------------------------------------------------------------------ compiled (slow)


@pytest.mark.slow
def test_compiled_fused_forward_reads_in_place_weight_updates():
    """Inductor treats the fused buffers as inputs read at run time (not constants): after an in-place copy into
    the module parameters, the compiled forward gives the new model's logits."""
    model, other = gqa_llama(tie=False), gqa_llama(seed=7, tie=False)
    fwd = FusedLlamaForward(model)
    compiled = torch.compile(fwd, dynamic=False)
    ps = prompts(8)
    a, _ = decode_logits(model, compiled, ps, KVRecipe(), steps=3)
    want_a, _ = decode_logits(model, model, ps, KVRecipe(), steps=3)
    params, state = dict(model.named_parameters()), other.state_dict()
    with torch.no_grad():
        torch._foreach_copy_([params[k] for k in params], [state[k] for k in params])
    b, _ = decode_logits(model, compiled, ps, KVRecipe(), steps=3)
    want_b, _ = decode_logits(other, other, ps, KVRecipe(), steps=3)
    for x, y in zip(want_a + want_b, a + b):
        assert _rel(y, x) <= 1e-4


# ------------------------------------------------------------------------------------------------ CUDA (gpu tier)

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "eager-kernels"])
@pytest.mark.parametrize("kv", ["auto", "fp8_e4m3"])
def test_fused_captured_engine_draws_the_unfused_captured_tokens(kv, compiled):
    """BF16 on the GPU, GQA: the fused forward captured in the step graph against the unfused one: the gpu tests' rule
    (>= 99% same tokens, k3 between the two on identical contexts below the BF16 floor: the BF16 engine against the
    float32 reference)."""
    from admitcheck.measurement.scorer import score
    from tests.test_engine_cuda import common_prefix, k3

    rollout = RolloutConfig(dtype="bfloat16", device="cuda", kv_cache=KVCacheConfig(dtype=kv))
    model = gqa_llama(tie=False)
    plain = HFEngine(model, rollout, eos_token_id=EOS, pad_token_id=PAD, compile_forward=compiled)
    fused = HFEngine(model, rollout, eos_token_id=EOS, pad_token_id=PAD, compile_forward=compiled, fused=True)
    assert fused.cuda_graphs and fused.compile_forward == compiled and is_fused(fused.model)
    ps = prompts(12)
    a = plain.sample(ps, T_ONE, seed=0, max_new_tokens=40)
    b = fused.sample(ps, T_ONE, seed=0, max_new_tokens=40)
    assert len(fused._decoders) == 1 and fused.fused
    same = (a.token_ids == b.token_ids).float().mean().item()
    both = common_prefix(a, b)
    between = k3(a.logprobs[both], b.logprobs[both])
    ref = score(model.to("cuda"), a.prompt_ids, a.token_ids, a.mask, T_ONE)
    floor = k3(ref.logprobs[a.mask], a.logprobs[a.mask])
    print(f"kv {kv} compiled {compiled}: same tokens {same:.4f}, k3 fused-unfused {between:.2e}, floor {floor:.2e}")
    assert between <= floor
    assert same >= 0.99, same


@pytest.mark.gpu
@cuda
def test_fused_graphs_survive_an_in_place_weight_sync():
    """The engine's CUDA sync (torch._foreach_copy_ into the parameters, i.e. into the fused buffers) under captured
    compiled graphs: no re-allocation, no re-capture, and the new weights' tokens."""
    model, other = gqa_llama(tie=False), gqa_llama(seed=7, tie=False)
    rollout = RolloutConfig(dtype="bfloat16", device="cuda")
    fused = HFEngine(model, rollout, eos_token_id=EOS, pad_token_id=PAD, fused=True)
    ps = prompts(12)
    fused.sample(ps, T_CUT, seed=3, max_new_tokens=30)
    ptrs = [p.data_ptr() for p in fused.model.parameters()]
    fused.load_weights({k: v.to("cuda") for k, v in other.state_dict().items()}, noise_step=1)
    assert ptrs == [p.data_ptr() for p in fused.model.parameters()] and len(fused._decoders) == 1
    assert is_fused(fused.model)
    want = HFEngine(other, rollout, eos_token_id=EOS, pad_token_id=PAD).sample(ps, T_CUT, seed=4, max_new_tokens=30)
    got = fused.sample(ps, T_CUT, seed=4, max_new_tokens=30)
    assert (want.token_ids == got.token_ids).float().mean() >= 0.99
