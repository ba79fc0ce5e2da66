"""FP8 KV cache as vLLM runs it: what each attention backend does, the query's FP8 rounding, per-layer scales.

    recipe = KVRecipe.of(rollout.kv_cache, num_layers, scales)     # what the engine's KV caches do
    use_query_quant(model, recipe)                                  # flash_attn, triton_attn: the query in FP8 too
    scales = calibrate_scales(model, clean_state, ids, mask, pos, kv, cache_kwarg="past_key_values")  # (L, 3)

vLLM V1 (0.32, `vllm/v1/attention/backends/`) writes K/V to the cache first (`reshape_and_cache_flash` with the
layer's `_k_scale`/`_v_scale`) and every backend attends over the FP8 cache, prefill included. With an FP8 cache the
attention layer also rounds the query to FP8 e4m3 with its static `_q_scale` when the backend declares
`supports_quant_query_input`: FlashAttention (on CUDA, except the SM90 FA4 dequant path) and Triton (CUDA) do;
FlashInfer only on SM100 trtllm-gen and in SM90 prefill (`flashinfer` here keeps the query in the model dtype, as
its SM90 decode and older GPUs do); vLLM-CPU does not, and its cache write (`cpu_attn_reshape_and_cache`, ISAs
"vec" and "amx" alike: one scalar function, two cache layouts) rounds K/V/scale to FP8 toward zero, where CUDA's
casts round to nearest-even (checked bit for bit against vLLM-CPU 0.32 in both layouts, e4m3 and e5m2, unit and
non-unit scales). Skipped layers
(`kv_cache.skip_layers`) have an `auto` cache and no query rounding. What is left between backends is inside the
kernels (accumulation order, where the dequantization happens): the HF engine fakes the roundings in float32.

Scales: vLLM's default is 1.0 (`calculate_kv_scales` was removed in mid-2026); `scales: calibrated` computes per-layer
q/k/v scales from the trainer's activations as NeMo-RL's `calibrate_qkv_fp8_scales` does (include_q=True): each
prompt's amax of |q|, |k|, |v| after RoPE (padding excluded; NeMo-RL takes one amax per forward micro batch, here a
prompt is the unit), the `percentile` of those amaxes by NeMo-RL's rank rule
(sorted, index round(p/100·(n−1))), times `margin`, over the FP8 max (448 for e4m3; q is always e4m3). The engine
calls it at every weight sync, on the trainer's (clean float32) weights and the prompts of the next `sample`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from admitcheck.config import KVCacheConfig
from admitcheck.rollout.precision import activation_hooks_off, fp8_max, quantize_kv

QUERY_FORMAT = "fp8_e4m3"  # vLLM's QuantFP8 rounds the query to the platform FP8 dtype, e4m3
_QUERY_ATTR = "admitcheck_query"  # on each attention module: None, or a callable applied to the (B, H, S, D) query


@dataclass(frozen=True, eq=False)
class KVRecipe:
    """What an engine's KV cache does with K/V, per layer (the eager `RolloutCache` and the captured cache alike)."""

    dtype: str | None = None  # FP8 cache dtype; None: not quantized
    skip_layers: tuple[int, ...] = ()
    prefill_reads_cache: bool = True  # the prompt's first pass attends over the quantized K/V (vLLM)
    quantize_query: bool = False  # the query rounded to FP8 e4m3 with the layer's q scale
    scales: torch.Tensor | None = None  # (L, 3) float32 q, k, v scales; None = 1.0 (vLLM's default)
    rounding: str = "nearest"  # K/V to FP8: "nearest" (even; CUDA's casts) or "toward_zero" (vLLM-CPU's cache write)

    @classmethod
    def of(cls, kv: KVCacheConfig, scales: torch.Tensor | None = None) -> KVRecipe:
        if kv.dtype == "auto":
            return cls()
        b = kv.backend  # config.KV_BACKENDS: what this attention backend does with the cache and the query
        scales = scales if kv.scales == "calibrated" else None
        return cls(kv.dtype, tuple(kv.skip_layers), b.prefill_reads_cache, b.quantize_query, scales, b.rounding)

    def quantized(self, layer: int) -> bool:
        return self.dtype is not None and layer not in self.skip_layers

    def scale(self, layer: int, which: int) -> torch.Tensor | None:
        """The 0-d scale of q (0), k (1) or v (2) in `layer` (a view: in-place updates reach captured graphs)."""
        return None if self.scales is None else self.scales[layer, which]

    def quantize(self, k: torch.Tensor, v: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        r = self.rounding
        return quantize_kv(k, self.dtype, self.scale(layer, 1), r), quantize_kv(v, self.dtype, self.scale(layer, 2), r)


def attention_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder layers' self-attention modules, in layer order (each has `layer_idx`)."""
    mods = [m for m in model.modules() if isinstance(getattr(m, "layer_idx", None), int) and hasattr(m, "q_proj")]
    return sorted(mods, key=lambda m: m.layer_idx)


def _attention_with_query_hook(base: str):
    """An attention function that applies the module's query hook, then `base` (sdpa, eager, ...)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    def attention(module, query, key, value, attention_mask, **kwargs):
        hook = getattr(module, _QUERY_ATTR, None)
        if hook is not None:
            query = hook(query)
        if base == "eager":  # the model's own eager attention (it lives in its modeling module)
            fn = sys.modules[type(module).__module__].eager_attention_forward
        else:
            fn = ALL_ATTENTION_FUNCTIONS[base]
        return fn(module, query, key, value, attention_mask, **kwargs)

    return attention


def attention_implementation(model: torch.nn.Module) -> str:
    """The model's attention implementation now (`sdpa`, `eager`, ...; `admitcheck_<base>` once query hooks run)."""
    return model.config._attn_implementation or "eager"


def _hooked_implementation(model: torch.nn.Module) -> str:
    """Switch the model to a registered copy of its attention implementation that runs the query hooks."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    current = attention_implementation(model)
    if current.startswith("admitcheck_"):
        return current
    name = f"admitcheck_{current}"
    if name not in ALL_ATTENTION_FUNCTIONS._global_mapping:
        ALL_ATTENTION_FUNCTIONS.register(name, _attention_with_query_hook(current))
        ALL_MASK_ATTENTION_FUNCTIONS.register(name, ALL_MASK_ATTENTION_FUNCTIONS[current])  # the same masks
    model.config._attn_implementation = name
    return name


def _round_query(scale: torch.Tensor | None):
    return lambda q: quantize_kv(q, QUERY_FORMAT, scale)


def query_rounding(module: torch.nn.Module):
    """The attention module's query rounding (a callable on the (B, H, S, D) query), or None."""
    return getattr(module, _QUERY_ATTR, None)


def use_query_quant(model: torch.nn.Module, recipe: KVRecipe) -> None:
    """Set (or clear) each attention module's query rounding for `recipe`; quantized layers only."""
    mods = attention_modules(model)
    if recipe.quantize_query:
        _hooked_implementation(model)
    for m in mods:
        on = recipe.quantize_query and recipe.quantized(m.layer_idx)
        setattr(m, _QUERY_ATTR, _round_query(recipe.scale(m.layer_idx, 0)) if on else None)


class _AmaxCache(DynamicCache):
    """A KV cache that records each row's amax of |k| and |v| over its valid (non-pad) positions, per layer."""

    def __init__(self, config, valid: torch.Tensor) -> None:
        super().__init__(config=config)
        self.valid = valid  # (B, S) bool
        self.amax: dict[tuple[int, int], torch.Tensor] = {}  # (layer, 1 = k | 2 = v) -> (B,)

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        for which, x in ((1, key_states), (2, value_states)):
            self.amax[(layer_idx, which)] = _row_amax(x, self.valid)
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)


def _row_amax(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """(B, H, S, D), (B, S) -> (B,) float32 amax of |x| over the valid positions of each row."""
    a = x.detach().abs().to(torch.float32).amax(dim=(1, 3))  # (B, S)
    return a.masked_fill(~valid, 0.0).amax(dim=1)


def percentile_rank(values: torch.Tensor, percentile: float) -> torch.Tensor:
    """NeMo-RL's percentile: the sorted values at index round(p/100 · (n − 1))."""
    n = values.numel()
    rank = max(0, min(n - 1, round(percentile / 100.0 * (n - 1))))
    return values.sort().values[rank]


@torch.no_grad()
def calibrate_scales(
    model: torch.nn.Module,
    clean: dict[str, torch.Tensor],
    ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    positions: torch.Tensor,
    kv: KVCacheConfig,
    *,
    cache_kwarg: str,
) -> torch.Tensor:
    """(L, 3) float32 q, k, v scales (on the device of `clean`) from one forward of the decoder of `model` with the
    parameters `clean` (the trainer's weights; the engine's own noise, fake-quant and activation hooks are bypassed)
    over left-padded prompts (B, S)."""
    from torch.func import functional_call

    decoder = model.get_decoder()
    prefix = next(n for n, m in model.named_modules() if m is decoder)
    params = {k[len(prefix) + 1 :]: v for k, v in clean.items() if k.startswith(prefix + ".")}
    valid = prompt_mask.bool()  # (B, S)
    cache = _AmaxCache(model.config, valid)
    q_amax: dict[int, torch.Tensor] = {}
    mods = attention_modules(model)
    saved = [getattr(m, _QUERY_ATTR, None) for m in mods]
    _hooked_implementation(model)

    def recorder(layer: int):
        def record(q: torch.Tensor) -> torch.Tensor:
            q_amax[layer] = _row_amax(q, valid)
            return q

        return record

    try:
        for m in mods:
            setattr(m, _QUERY_ATTR, recorder(m.layer_idx))
        kwargs = dict(input_ids=ids, attention_mask=prompt_mask, position_ids=positions, use_cache=True)
        with activation_hooks_off():
            functional_call(decoder, params, args=(), kwargs={**kwargs, cache_kwarg: cache}, strict=False)
    finally:
        for m, hook in zip(mods, saved):
            setattr(m, _QUERY_ATTR, hook)
    kv_max = fp8_max(kv.dtype)
    q_max = fp8_max(QUERY_FORMAT)
    out = torch.ones(len(mods), 3, dtype=torch.float32)
    for m in mods:
        i = m.layer_idx
        for which, amax, fmax in (
            (0, q_amax.get(i), q_max),
            (1, cache.amax.get((i, 1)), kv_max),
            (2, cache.amax.get((i, 2)), kv_max),
        ):
            if amax is not None:
                p = float(percentile_rank(amax.cpu(), kv.percentile))
                out[i, which] = p * kv.margin / fmax if p > 0 else 1.0
    return out.to(next(iter(clean.values())).device)
