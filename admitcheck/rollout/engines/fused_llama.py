"""A Llama decode forward with one GEMM for q|k|v and one for gate|up per layer, over the model's own weights.

    forward = FusedLlamaForward(model)          # fuses model's q/k/v and gate/up weights in place (views, see below)
    logits = forward(input_ids=tok, attention_mask=mask4d, position_ids=pos, past_key_values=cache).logits
    decoder = CapturedDecoder(model, ..., forward=torch.compile(forward, dynamic=False))   # the step graph's forward

Why: at batch 64 the SmolLM2 decode step is launch-bound (REFERENCE §5: 2.2-2.6 ms/step, kernel count, not
bandwidth); per layer this runs 4 GEMMs (q|k|v, o, gate|up, down) instead of HF's 7.

The weights stay the model's parameters: each layer gets one buffer (q+k+v rows, hidden) and one (2·intermediate,
hidden), and q/k/v_proj.weight (gate/up_proj.weight) are re-pointed as row views into it (`param.data = buf[rows]`).
Everything that writes weights in place (`load_state_dict`, the engine's `torch._foreach_copy_` sync, noise,
fake-quant `copy_`) then writes the fused buffer, and captured graphs keep reading the same memory. Anything that
re-allocates a parameter (`model.to(...)`, `p.data = ...`) breaks the aliasing: fuse after the model's last move.

The math mirrors transformers' LlamaForCausalLM with an SDPA attention and a prepared 4-D boolean mask (the only
kind the captured decoder passes): the model's own modules for the embedding, RMSNorms (float32, then cast), rotary
cos/sin, o_proj, down_proj, act_fn and lm_head (their hooks run); the projections' forward pre-hooks (the recipe's
FP8 activation fake-quant, identical on every member of a fused group) run once on the shared input; rotate_half
RoPE; `cache.update` (the engine's caches: FP8 KV recipe, skip layers, prefill semantics); the query rounding hook
of `kv_fp8.use_query_quant`; K/V repeated to the query heads (`repeat_kv`, what HF's SDPA path does whenever a mask
is given) and `scaled_dot_product_attention(mask, scale=head_dim**-0.5)`. In a decode step (one query token) with
GQA, `group_queries` (default) instead hands SDPA each KV head's n_rep query heads as n_rep query rows of that head,
(B, H_kv, n_rep, D) against the cache as it is: the same per-row math (q·K/sqrt(D), masked softmax, ·V; float32
rounding apart), without writing and re-reading a repeated copy of the whole cache in every layer (SmolLM2, 3 KV
heads for 9: ~1.5 GB of traffic a step at batch 64 and 256 cached tokens, a few tenths of a millisecond on an H200).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from admitcheck.rollout.kv_fp8 import attention_implementation, query_rounding

_QKV, _GATE_UP = ("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj")
_ATTENTION = ("sdpa", "admitcheck_sdpa")  # SDPA, plain or with kv_fp8's query hook (same kernel)
GROUP_QUERIES = True  # the default of FusedLlamaForward(group_queries=): GQA decode steps without repeated K/V


class FusedOutput(NamedTuple):
    logits: torch.Tensor  # (B, S_kept, V)


def _check_member_hooks(group: list[torch.nn.Module], what: str) -> None:
    """A fused group runs the first member's pre-hooks once: every member must carry the same ones, and none may
    carry forward (post) hooks, whose per-member outputs a fused GEMM cannot give."""
    first = list(group[0]._forward_pre_hooks.values())
    for m in group:
        if list(m._forward_pre_hooks.values()) != first:
            raise ValueError(f"{what}: the fused projections carry different forward pre-hooks")
        if m._forward_hooks:
            raise ValueError(f"{what}: a fused projection carries a forward hook (cannot be fused)")


def check_fusable(model: torch.nn.Module) -> None:
    """Raise ValueError unless `model` is a Llama causal LM the fused forward reproduces (no biases on the fused
    projections, SDPA attention, every fused group with identical pre-hooks and no forward hooks, and no hook on a
    module whose own forward the fused path does not call: the model, model.model, a decoder layer, its self_attn or
    its mlp)."""
    cfg = model.config
    if cfg.model_type != "llama":
        raise ValueError(f"fused decode forward: Llama only (model_type {cfg.model_type!r})")
    impl = attention_implementation(model)
    if impl not in _ATTENTION:
        raise ValueError(f"fused decode forward: SDPA attention only (attn_implementation {impl!r})")
    for layer in model.model.layers[: cfg.num_hidden_layers]:
        attn, mlp = layer.self_attn, layer.mlp
        for mod, names in ((attn, _QKV), (mlp, _GATE_UP)):
            group = [getattr(mod, n) for n in names]
            if any(m.bias is not None for m in group):
                raise ValueError(f"layer {attn.layer_idx}: fused projections with biases are not supported")
            _check_member_hooks(group, f"layer {attn.layer_idx}")
    bypassed = [("the model", model), ("model.model", model.model)] + [
        (f"layer {i}{part and '.' + part}", getattr(layer, part) if part else layer)
        for i, layer in enumerate(model.model.layers[: cfg.num_hidden_layers])
        for part in ("", "self_attn", "mlp")
    ]
    for what, mod in bypassed:
        if mod._forward_pre_hooks or mod._forward_hooks:
            raise ValueError(f"fused decode forward: {what} carries a forward hook, which the fused path would skip")


def _aliases(module: torch.nn.Module, names: tuple[str, ...], attr: str) -> bool:
    """Whether `module`'s `names` projection weights are, in order, the row blocks of its fused buffer `attr`."""
    buf = getattr(module, attr, None)
    start = 0
    for n in names:
        w = getattr(module, n).weight
        if buf is None or w.data_ptr() != buf[start:].data_ptr() or w.shape != buf[start : start + w.shape[0]].shape:
            return False
        start += w.shape[0]
    return start == buf.shape[0]


def _fuse(module: torch.nn.Module, names: tuple[str, ...], attr: str) -> torch.Tensor:
    """The fused (sum of rows, in) buffer of `module`'s `names` projections, the members' weights re-pointed as views
    into it; an existing buffer is reused while every member still aliases it (fusing twice is a no-op)."""
    if _aliases(module, names, attr):
        return getattr(module, attr)
    weights = [getattr(module, n).weight for n in names]
    rows = [w.shape[0] for w in weights]
    starts = [sum(rows[:i]) for i in range(len(rows))]
    with torch.no_grad():
        buf = torch.cat([w.detach() for w in weights], dim=0)  # (sum rows, in), the parameters' dtype and device
    for w, s, r in zip(weights, starts, rows):
        w.data = buf[s : s + r]  # a contiguous row view: in-place writes to the parameter land in `buf`
    object.__setattr__(module, attr, buf)  # a plain attribute: not a buffer (no state_dict entry, no .to())
    return buf


def fuse_projections(model: torch.nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Fuse every layer's q|k|v and gate|up weights in place (see the module docstring); [(qkv, gate_up)] per layer."""
    check_fusable(model)
    return [
        (_fuse(layer.self_attn, _QKV, "admitcheck_qkv"), _fuse(layer.mlp, _GATE_UP, "admitcheck_gate_up"))
        for layer in model.model.layers[: model.config.num_hidden_layers]
    ]


def is_fused(model: torch.nn.Module) -> bool:
    """Whether every layer's projections are views of its fused buffers now."""
    return all(
        _aliases(layer.self_attn, _QKV, "admitcheck_qkv") and _aliases(layer.mlp, _GATE_UP, "admitcheck_gate_up")
        for layer in model.model.layers[: model.config.num_hidden_layers]
    )


def _pre_hooks(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """`module`'s forward pre-hooks applied to its one input, as `nn.Module.__call__` applies them."""
    for hook in module._forward_pre_hooks.values():
        out = hook(module, (x,))
        if out is not None:
            x = out[0] if isinstance(out, tuple) else out
    return x


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(B, H_kv, L, D) -> (B, H_kv·n_rep, L, D), each KV head repeated for its query group (HF's repeat_kv)."""
    if n_rep == 1:
        return x
    B, H, L, D = x.shape
    return x[:, :, None].expand(B, H, n_rep, L, D).reshape(B, H * n_rep, L, D)


class FusedLlamaForward(torch.nn.Module):
    """The decode forward of a Llama causal LM with fused q|k|v and gate|up GEMMs (see the module docstring). Takes
    the keywords the captured decoder passes; the mask must be a prepared 4-D boolean (B, 1, S, L), True = attend."""

    def __init__(self, model: torch.nn.Module, *, group_queries: bool | None = None) -> None:
        super().__init__()
        # decode steps: GQA without repeated (B, H, L, D) K/V copies (see the module docstring)
        self.group_queries = GROUP_QUERIES if group_queries is None else group_queries
        fused = fuse_projections(model)
        self.model = model  # a submodule: its parameters are the fused buffers' views and the unfused rest
        cfg = model.config
        self.n_layers = cfg.num_hidden_layers
        self.heads = cfg.num_attention_heads
        self.kv_heads = cfg.num_key_value_heads
        attn = model.model.layers[0].self_attn
        self.head_dim = attn.head_dim
        self.scaling = attn.scaling
        self.intermediate = cfg.intermediate_size
        for i, (qkv, gate_up) in enumerate(fused):  # non-persistent buffers: graph inputs read at run time
            self.register_buffer(f"qkv_{i}", qkv, persistent=False)
            self.register_buffer(f"gate_up_{i}", gate_up, persistent=False)

    def _attention(self, layer: torch.nn.Module, i: int, x, cos, sin, mask, cache) -> torch.Tensor:
        attn = layer.self_attn
        B, S, _ = x.shape
        D, H, Hkv = self.head_dim, self.heads, self.kv_heads
        x = _pre_hooks(attn.q_proj, x)  # the activation fake-quant of q|k|v (one shared input)
        qkv = F.linear(x, getattr(self, f"qkv_{i}"))  # (B, S, (H + 2 H_kv) D)
        q, k, v = qkv.split([H * D, Hkv * D, Hkv * D], dim=-1)
        q = q.view(B, S, H, D).transpose(1, 2)  # (B, H, S, D)
        k = k.view(B, S, Hkv, D).transpose(1, 2)  # (B, H_kv, S, D)
        v = v.view(B, S, Hkv, D).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin  # cos, sin (B, 1, S, D)
        k = k * cos + _rotate_half(k) * sin
        if cache is not None:
            k, v = cache.update(k, v, attn.layer_idx)  # the engine's cache: FP8 KV recipe included
        hook = query_rounding(attn)
        if hook is not None:
            q = hook(q)  # the FP8 query rounding (flash_attn / triton_attn backends)
        n_rep = H // Hkv
        if S == 1 and n_rep > 1 and self.group_queries:  # a KV head's n_rep queries as its rows: K/V read as cached
            out = F.scaled_dot_product_attention(
                q.reshape(B, Hkv, n_rep, D), k, v, attn_mask=mask, dropout_p=0.0, scale=self.scaling
            ).reshape(B, H, 1, D)  # query head h reads KV head h // n_rep, as repeat_kv pairs them
        else:
            out = F.scaled_dot_product_attention(
                q, _repeat_kv(k, n_rep), _repeat_kv(v, n_rep), attn_mask=mask, dropout_p=0.0, scale=self.scaling
            )  # (B, H, S, D)
        out = out.transpose(1, 2).contiguous().reshape(B, S, H * D).contiguous()
        return attn.o_proj(out)

    def _mlp(self, layer: torch.nn.Module, i: int, x: torch.Tensor) -> torch.Tensor:
        mlp = layer.mlp
        x = _pre_hooks(mlp.gate_proj, x)
        gate, up = F.linear(x, getattr(self, f"gate_up_{i}")).split(self.intermediate, dim=-1)  # (B, S, I) each
        return mlp.down_proj(mlp.act_fn(gate) * up)

    def forward(
        self,
        input_ids: torch.Tensor,  # (B, S)
        attention_mask: torch.Tensor,  # (B, 1, S, L) bool, True = attend
        position_ids: torch.Tensor,  # (B, S)
        past_key_values=None,  # the KV cache (`update(k, v, layer_idx)`), by either keyword transformers uses
        cache=None,
        use_cache: bool = True,
        logits_to_keep: int = 0,
    ) -> FusedOutput:
        if attention_mask.dim() != 4:
            raise ValueError("the fused forward takes a prepared 4-D attention mask (B, 1, S, L)")
        kv = cache if cache is not None else past_key_values
        kv = kv if use_cache else None
        base = self.model.model
        h = base.embed_tokens(input_ids)  # (B, S, hidden)
        cos, sin = base.rotary_emb(h, position_ids=position_ids)  # (B, S, D) each, in h's dtype
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, 1, S, D)
        for i, layer in enumerate(base.layers[: self.n_layers]):
            h = h + self._attention(layer, i, layer.input_layernorm(h), cos, sin, attention_mask, kv)
            h = h + self._mlp(layer, i, layer.post_attention_layernorm(h))
        h = base.norm(h)
        return FusedOutput(self.model.lm_head(h[:, slice(-logits_to_keep, None)]))  # (B, S_kept, V)
