"""KV-cache capacity of a rollout config from the model's config.json alone, no weights (REFERENCE §4).

    cap = kv_capacity(json.load(open("Qwen2.5-7B/config.json")), rollout_config, gpu_memory_bytes=80 * 2**30)
    cap.num_tokens, cap.ratio_vs_bf16, cap.kv_ratio_equal_memory

bytes/token = Σ_layers 2 · n_kv_heads · head_dim · bytes(KV dtype) (engine dtype for "auto" and skipped layers,
1 for FP8; how attention reads an FP8 cache and its per-layer scales, `kv_cache.attention_backend` and `scales`, move
no cache bytes). Weight bytes: every Linear weight the recipe quantizes (fp8/int8) at 1 byte/parameter (per-channel or
per-block scales neglected), everything else at the engine dtype — embeddings, lm_head (unless
include_embeddings), norms, biases and MoE routers, as vLLM keeps them. Exclusions follow the recipe semantics:
`exclude` globs (fnmatch, case-sensitive) on module names such as "model.layers.3.self_attn.q_proj",
`exclude_layers` on decoder indices, and a fused group (q|k|v, gate|up) is excluded as a whole when any member is.
Capacity at a memory budget: ⌊(util·total − weights − reserve) / bytes_per_token⌋, rounded down to whole blocks.
Not modelled: MLA (DeepSeek) and sliding-window layers, vision towers, CUDA-graph memory beyond the reserve.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, model_serializer

from admitcheck.io import text_config

if TYPE_CHECKING:
    from admitcheck.config import CapacityConfig, RolloutConfig

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1, "int8": 1}
DEFAULT_ACTIVATION_RESERVE = 2**30  # bytes: activation peak + non-torch overhead (vLLM profiles ~1-4 GiB at 7-8B)
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)(?:\.|$)")


def layer_index(module_name: str) -> int | None:
    """Decoder layer index in a name like "model.layers.12.mlp.up_proj" (12); None outside the decoder layers."""
    match = _LAYER.search(module_name)
    return int(match.group(1)) if match else None


def recipe_excludes(module_name: str, exclude: Iterable[str], exclude_layers: Collection[int]) -> bool:
    """Whether a weight recipe keeps this module in the engine dtype: a glob of `exclude` matches its name (fnmatch,
    case-sensitive), or its decoder layer is in `exclude_layers`. The one rule of the HF engine's recipes
    (`precision`), of vLLM's ignore list (through them) and of the capacity count."""
    return any(fnmatchcase(module_name, g) for g in exclude) or layer_index(module_name) in exclude_layers


@dataclass(frozen=True)
class CapacitySpec:
    """The parts of a rollout config that decide memory (`RolloutConfig` converts via `from_rollout`)."""

    dtype: str = "bfloat16"  # engine dtype: unquantized weights, embeddings, norms, KV "auto"
    weight_format: str | None = None  # "fp8_e4m3" | "fp8_e5m2" | "int8" | None (engine dtype)
    exclude: tuple[str, ...] = ()  # module-name globs kept in the engine dtype
    exclude_layers: tuple[int, ...] = ()  # decoder layers kept in the engine dtype
    include_embeddings: bool = False  # also quantize embed_tokens and lm_head
    kv_dtype: str = "auto"  # "auto" | "fp8_e4m3" | "fp8_e5m2"
    kv_skip_layers: tuple[int, ...] = ()  # layers whose KV cache stays in the engine dtype

    @classmethod
    def from_rollout(cls, rollout: Any) -> CapacitySpec:
        """From an `admitcheck.config.RolloutConfig`."""
        w = rollout.weights
        return cls(
            dtype=rollout.dtype,
            weight_format=None if w is None else w.format,
            exclude=() if w is None else tuple(w.exclude),
            exclude_layers=() if w is None else tuple(w.exclude_layers),
            include_embeddings=False if w is None else w.include_embeddings,
            kv_dtype=rollout.kv_cache.dtype,
            kv_skip_layers=tuple(rollout.kv_cache.skip_layers),
        )


@dataclass(frozen=True)
class KVCapacity:
    """KV-cache capacity of one rollout config at one memory budget; bytes are exact integers."""

    num_parameters: int  # all parameters of the language model
    num_quantized_parameters: int  # Linear weight parameters stored at 1 byte
    weight_bytes: int
    bytes_per_token: int  # KV cache, all layers, K and V
    kv_budget_bytes: int  # util · total − weights − reserve; negative when the weights do not fit
    num_blocks: int
    num_tokens: int  # num_blocks · block_size
    block_size: int  # tokens per KV block
    fits: bool  # False: no whole block fits (num_tokens = 0)
    weight_bytes_bf16: int  # the same model in plain BF16 (BF16 weights, BF16 KV)
    bytes_per_token_bf16: int
    num_tokens_bf16: int
    ratio_vs_bf16: float  # num_tokens / num_tokens_bf16 at the same memory (inf when BF16 does not fit)
    kv_ratio_equal_memory: float  # bytes_per_token_bf16 / bytes_per_token: tokens ratio at equal KV memory

    def max_sequences(self, tokens_per_sequence: int) -> int:
        """Sequences of this length (prompt + response, tokens) that fit at once, whole blocks per sequence."""
        return self.num_blocks // math.ceil(tokens_per_sequence / self.block_size)


def _head_dim(cfg: dict[str, Any]) -> int:
    return int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])


def _modules(cfg: dict[str, Any]) -> tuple[list[list[tuple[str, int]]], list[tuple[str, int]], int]:
    """Linear weights in fused groups [[(module name, weight params)], ...], the embedding tables [(name, params)]
    (one when tied), and the params always kept in the engine dtype (norms, biases, MoE routers as in vLLM)."""
    h, L, hd = cfg["hidden_size"], cfg["num_hidden_layers"], _head_dim(cfg)
    nq, nkv = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    mtype = str(cfg.get("model_type", ""))
    num_experts = cfg.get("num_experts") or cfg.get("num_local_experts") or 0
    sparse_step = cfg.get("decoder_sparse_step") or 1
    dense_layers = set(cfg.get("mlp_only_layers") or [])
    qkv_bias = "attention_bias" not in cfg and mtype.startswith("qwen2")  # Qwen2 has q/k/v biases, no flag
    all_bias = bool(cfg.get("attention_bias", False))  # Llama's flag: q, k, v and o biases

    def mlp(prefix: str, inter: int, names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")) -> None:
        gate_up = [(prefix + names[0], h * inter), (prefix + names[1], h * inter)]
        fused = names[0] == "gate_proj"  # recipes fuses gate|up; Mixtral's w1|w3 stay separate there
        groups.extend([gate_up] if fused else [[g] for g in gate_up])
        groups.append([(prefix + names[2], inter * h)])

    groups: list[list[tuple[str, int]]] = []
    other = h  # final norm
    for i in range(L):
        p = f"model.layers.{i}."
        a = p + "self_attn."
        groups.append([(a + "q_proj", h * nq * hd), (a + "k_proj", h * nkv * hd), (a + "v_proj", h * nkv * hd)])
        groups.append([(a + "o_proj", nq * hd * h)])
        other += 2 * h + (2 * hd if mtype.startswith("qwen3") else 0)  # layer norms (+ q_norm, k_norm)
        other += (nq + 2 * nkv) * hd * (qkv_bias or all_bias) + h * all_bias  # attention biases
        if not (num_experts and i not in dense_layers and (i + 1) % sparse_step == 0):
            mlp(p + "mlp.", cfg["intermediate_size"])
            continue
        inter = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]
        other += h * num_experts  # router, engine dtype in vLLM
        for e in range(num_experts):
            if mtype == "mixtral":
                mlp(p + f"block_sparse_moe.experts.{e}.", inter, ("w1", "w3", "w2"))
            else:
                mlp(p + f"mlp.experts.{e}.", inter)
        if cfg.get("shared_expert_intermediate_size"):  # Qwen2-MoE
            mlp(p + "mlp.shared_expert.", cfg["shared_expert_intermediate_size"])
            other += h  # shared_expert_gate
    tables = [("model.embed_tokens", cfg["vocab_size"] * h)]
    if not cfg.get("tie_word_embeddings", False):  # transformers' Llama/Qwen2 default: untied
        tables.append(("lm_head", cfg["vocab_size"] * h))
    return groups, tables, other


def count_parameters(model_config: dict[str, Any]) -> int:
    """Parameters of the language model described by a config.json dict (embeddings counted once when tied)."""
    groups, tables, other = _modules(text_config(model_config))
    return sum(n for g in groups for _, n in g) + sum(n for _, n in tables) + other


def weight_bytes(model_config: dict[str, Any], spec: CapacitySpec) -> tuple[int, int]:
    """(weight bytes, quantized parameter count) under the spec's weight recipe."""
    groups, tables, _ = _modules(text_config(model_config))
    total = count_parameters(model_config)
    engine = DTYPE_BYTES[spec.dtype]
    if spec.weight_format is None:
        return total * engine, 0
    skip_layers = set(spec.exclude_layers)
    candidates = groups + ([[t] for t in tables] if spec.include_embeddings else [])
    kept = [g for g in candidates if not any(recipe_excludes(m, spec.exclude, skip_layers) for m, _ in g)]
    quantized = sum(sum(n for _, n in g) for g in kept)
    return quantized * DTYPE_BYTES[spec.weight_format] + (total - quantized) * engine, quantized


def kv_bytes_per_token(model_config: dict[str, Any], spec: CapacitySpec) -> int:
    """KV-cache bytes per token over all layers: Σ_layers 2 · n_kv_heads · head_dim · bytes(dtype)."""
    cfg = text_config(model_config)
    per_elem = 2 * (cfg.get("num_key_value_heads") or cfg["num_attention_heads"]) * _head_dim(cfg)  # K and V
    engine = DTYPE_BYTES[spec.dtype]
    kv = engine if spec.kv_dtype == "auto" else DTYPE_BYTES[spec.kv_dtype]
    skip = set(spec.kv_skip_layers)
    return sum(per_elem * (engine if i in skip else kv) for i in range(cfg["num_hidden_layers"]))


def kv_capacity(
    model_config: dict[str, Any],
    rollout: Any,
    gpu_memory_bytes: int,
    utilization: float = 0.9,
    activation_reserve_bytes: int = DEFAULT_ACTIVATION_RESERVE,
    block_size: int = 16,
) -> KVCapacity:
    """Capacity of `rollout` (a RolloutConfig, a CapacitySpec, or None = plain BF16) on one GPU of this memory."""
    if rollout is None:
        spec = CapacitySpec()
    else:
        spec = rollout if isinstance(rollout, CapacitySpec) else CapacitySpec.from_rollout(rollout)
    usable = math.floor(utilization * gpu_memory_bytes) - activation_reserve_bytes  # bytes for weights + KV

    def tokens(weights: int, per_token: int) -> tuple[int, int]:
        budget = usable - weights
        blocks = max(budget, 0) // (per_token * block_size)
        return budget, blocks

    w_bytes, n_quant = weight_bytes(model_config, spec)
    per_token = kv_bytes_per_token(model_config, spec)
    budget, blocks = tokens(w_bytes, per_token)
    bf16 = CapacitySpec()
    w_bf16, _ = weight_bytes(model_config, bf16)
    per_token_bf16 = kv_bytes_per_token(model_config, bf16)
    _, blocks_bf16 = tokens(w_bf16, per_token_bf16)
    n_tokens, n_bf16 = blocks * block_size, blocks_bf16 * block_size
    return KVCapacity(
        num_parameters=count_parameters(model_config),
        num_quantized_parameters=n_quant,
        weight_bytes=w_bytes,
        bytes_per_token=per_token,
        kv_budget_bytes=budget,
        num_blocks=blocks,
        num_tokens=n_tokens,
        block_size=block_size,
        fits=n_tokens > 0,
        weight_bytes_bf16=w_bf16,
        bytes_per_token_bf16=per_token_bf16,
        num_tokens_bf16=n_bf16,
        ratio_vs_bf16=n_tokens / n_bf16 if n_bf16 else (math.inf if n_tokens else math.nan),
        kv_ratio_equal_memory=per_token_bf16 / per_token,
    )


class CapacitySummary(BaseModel):
    """What a verdict reports of `kv_capacity` for a rollout on the configured GPU (`capacity_summary`), and the KV
    blocks the candidate's engine really allocated where it reports them (`engine_allocated`, absent when not)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ratio_vs_bf16: float | None  # KV tokens against plain BF16 at the same memory (None: read back from JSON's null)
    kv_ratio_equal_memory: float | None
    num_tokens: int
    num_tokens_bf16: int
    bytes_per_token: int
    weight_bytes: int
    fits: bool
    gpu_memory_gib: float
    engine_allocated: Any = None  # the engine's own allocation (vLLM), as it reports it

    @model_serializer(mode="wrap")
    def _without_unset_allocation(self, handler: Any) -> dict[str, Any]:
        out = handler(self)
        if self.engine_allocated is None:
            out.pop("engine_allocated", None)
        return out


def capacity_summary(model_config: dict[str, Any], rollout: RolloutConfig, cap: CapacityConfig) -> CapacitySummary:
    """What a verdict reports of `kv_capacity` for a rollout on the configured GPU (`capacity:` of a screen)."""
    gib = 2**30
    c = kv_capacity(
        model_config,
        rollout,
        int(cap.gpu_memory_gib * gib),
        cap.utilization,
        int(cap.activation_reserve_gib * gib),
    )
    return CapacitySummary(
        ratio_vs_bf16=c.ratio_vs_bf16,
        kv_ratio_equal_memory=c.kv_ratio_equal_memory,
        num_tokens=c.num_tokens,
        num_tokens_bf16=c.num_tokens_bf16,
        bytes_per_token=c.bytes_per_token,
        weight_bytes=c.weight_bytes,
        fits=c.fits,
        gpu_memory_gib=cap.gpu_memory_gib,
    )
