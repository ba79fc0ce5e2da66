"""The sections every config kind shares: the pair, the probe set, sampling, the reference and the rollout config
(its precision recipe: weights, KV cache with one `KVBackend` record per attention backend in `KV_BACKENDS`,
noise, vLLM options).

    rollout = RolloutConfig(engine="vllm", kv_cache={"dtype": "fp8_e4m3", "attention_backend": "flash_attn"})
    KV_BACKENDS["flash_attn"].quantize_query   # what the backend does with the query
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, model_serializer, model_validator

from admitcheck.config.base import NOISE_SWITCHES, Dtype, Strict, without_defaults


class PairConfig(Strict):
    """The student and teacher: HF model dirs (or ids already on disk); the tokenizer is the student's by default."""

    name: str | None = None  # names calibrations/<name>.yaml; default: the student dir's name
    student: str
    teacher: str
    tokenizer: str | None = None  # dir of the tokenizer; default: the student dir


class ProbeConfig(Strict):
    """The prompts a measurement samples from."""

    prompts: str  # JSONL, one {"prompt": ..., "answer": ...} per line
    num_prompts: int = Field(64, gt=0)  # prompts used (the first N of the file)
    max_new_tokens: int = Field(64, gt=0)  # response length cap, tokens
    batch_size: int = Field(32, gt=0)  # sequences per engine call
    seed: int = 0  # sampling seed; batch i uses seed + i


class SamplingConfig(Strict):
    """How tokens are drawn; μ is the distribution after these transforms (REFERENCE §2, sampling semantics)."""

    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0)  # 0 = off
    # How the sampled token is drawn from μ (hf engine; rollout/sampling.py): one shared uniform per (sequence,
    # position) through the CDF (today's), or Gumbel-max with noise per (seed, sequence, position, token), which
    # couples nearby policies far better. Left out of the dump at its default: older protocols stay as they were.
    coupling: Literal["inverse_cdf", "gumbel"] = "inverse_cdf"

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        return without_defaults(self, handler(self), NOISE_SWITCHES)


class ReferenceConfig(Strict):
    """The student in trainer precision, re-scoring the sampled tokens by teacher forcing."""

    dtype: Dtype = "float32"
    device: str = "cpu"  # "cpu", "cuda", "cuda:N"


class WeightsRecipe(Strict):
    """Quantization of the rollout engine's Linear weights (fake-quantized: the engine computes in its dtype)."""

    format: Literal["fp8_e4m3", "fp8_e5m2", "int8"]
    granularity: Literal["tensor", "channel", "block"] = "channel"  # scale per tensor / output channel / block
    block_size: int = Field(128, gt=0)  # block edge for granularity=block (vLLM: 128x128)
    activations: Literal["none", "fp8_per_token"] = "none"  # dynamic per-token FP8 inputs of each quantized Linear
    exclude: list[str] = []  # module-name globs kept in the engine dtype, e.g. "model.layers.0.*", "*.mlp.down_proj"
    exclude_layers: list[int] = []  # decoder layer indices kept in the engine dtype
    include_embeddings: bool = False  # also quantize embed_tokens and lm_head (vLLM never does)

    @model_validator(mode="after")
    def _int8_is_per_channel(self) -> WeightsRecipe:
        if self.format == "int8" and self.granularity != "channel":
            raise ValueError("format int8 supports only granularity: channel")
        if self.format == "int8" and self.activations != "none":
            raise ValueError("activations: fp8_per_token needs an fp8 weight format, not int8")
        return self


@dataclass(frozen=True)
class KVBackend:
    """How one attention backend reads an FP8 KV cache (admitcheck.rollout.kv_fp8 models it; vLLM runs it)."""

    name: str  # `kv_cache.attention_backend`
    prefill_reads_cache: bool  # the prompt's first pass attends over the quantized K/V (vLLM writes the cache first)
    quantize_query: bool  # the query rounded to FP8 e4m3 with the layer's q scale (so it reads e4m3 caches only)
    rounding: Literal["nearest", "toward_zero"]  # K/V to FP8: CUDA's casts round to nearest-even; vLLM-CPU truncates
    runs_on: Literal["gpu", "cpu", "hf"]  # vLLM on a GPU, vLLM-CPU, or the HF engine only (no vLLM backend)
    vllm_name: str | None  # vLLM's `AttentionConfig.backend`; None: vLLM's own choice (vLLM-CPU's one backend)

    @property
    def where(self) -> str:
        """How a message names where it runs: " (GPU)", " (vLLM-CPU)", or "" for the HF engine's own recipe."""
        return {"gpu": " (GPU)", "cpu": " (vLLM-CPU)", "hf": ""}[self.runs_on]


# vLLM's backends write K/V to the cache first and attend over the FP8 cache in prefill and decode; flash_attn and
# triton_attn (CUDA) also round the query to FP8 with the layer's q scale, flashinfer (before SM100) and cpu (vLLM-CPU,
# which also truncates K/V) keep it in the model dtype. fresh_prefill is the HF engine's recipe before #24 (the
# prompt's K/V and every query unquantized): the shipped toy FP8-KV measurements were made with it.
KV_BACKENDS: dict[str, KVBackend] = {
    b.name: b
    for b in (
        KVBackend("flash_attn", True, True, "nearest", "gpu", "FLASH_ATTN"),
        KVBackend("triton_attn", True, True, "nearest", "gpu", "TRITON_ATTN"),
        KVBackend("flashinfer", True, False, "nearest", "gpu", "FLASHINFER"),  # SM90 decode, pre-Hopper (not SM100)
        KVBackend("cpu", True, False, "toward_zero", "cpu", None),  # measured: vLLM-CPU ISAs vec and amx
        KVBackend("fresh_prefill", False, False, "nearest", "hf", None),
    )
}
AttentionBackend = Literal["flash_attn", "triton_attn", "flashinfer", "cpu", "fresh_prefill"]  # KV_BACKENDS' keys


def _either(names: list[str]) -> str:
    """The names as a message lists them: `a, b or c`."""
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else "".join(names)


_KV_FP8_FIELDS = ("attention_backend", "scales", "percentile", "margin")


class KVCacheConfig(Strict):
    """KV-cache storage dtype and, for FP8, how attention reads it and which K/V (and query) scales it uses.

    Dumps (ledger run keys, artifacts) carry the FP8 fields only for an FP8 dtype, and then always, so a recipe is
    never implied by a default: a dump of `dtype: auto` is the same as before these fields existed."""

    dtype: Literal["auto", "fp8_e4m3", "fp8_e5m2"] = "auto"  # auto = the engine dtype
    skip_layers: list[int] = []  # layers whose cache stays in the engine dtype
    attention_backend: AttentionBackend = "flash_attn"  # the vLLM attention backend whose FP8 path is modelled
    scales: Literal["one", "calibrated"] = "one"  # one: vLLM's default 1.0; calibrated: per layer from the trainer
    percentile: float = Field(99.9, gt=0, le=100)  # calibrated: percentile of the per-prompt amax (NeMo-RL: 99.9)
    margin: float = Field(1.05, ge=1)  # calibrated: scale = percentile amax × margin / FP8 max (NeMo-RL: 1.05)

    @model_validator(mode="after")
    def _fp8_fields(self) -> KVCacheConfig:
        if self.dtype == "auto":
            given = [k for k in _KV_FP8_FIELDS if k in self.model_fields_set]
            if given:
                raise ValueError(f"{', '.join(given)} need an fp8 dtype (dtype is auto: the cache is not quantized)")
        if self.scales == "one" and {"percentile", "margin"} & self.model_fields_set:
            raise ValueError("percentile and margin apply to scales: calibrated only")
        if self.dtype == "fp8_e5m2" and self.backend.quantize_query:
            others = _either([b.name + b.where for b in KV_BACKENDS.values() if not b.quantize_query])
            raise ValueError(
                f"attention_backend {self.attention_backend} reads fp8_e4m3 caches only (vLLM rounds the query to "
                f"e4m3 there); for fp8_e5m2 set attention_backend: {others}"
            )
        return self

    @property
    def backend(self) -> KVBackend:
        return KV_BACKENDS[self.attention_backend]

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        if self.dtype == "auto":  # the FP8 fields do nothing: the dump of old configs, unchanged
            return {k: v for k, v in data.items() if k not in _KV_FP8_FIELDS}
        if self.scales == "one":
            return {k: v for k, v in data.items() if k not in ("percentile", "margin")}
        return data


class NoiseConfig(Strict):
    """Relative Gaussian weight noise: w += relative_std * rms(w) * N(0, 1), per tensor, on the engine's copy."""

    relative_std: float = Field(0.0, ge=0)
    seed: int = 0


class VLLMOptions(Strict):
    """Options passed to vllm.LLM (only for engine: vllm)."""

    gpu_memory_utilization: float = Field(0.5, gt=0, le=1)
    kv_cache_memory_bytes: int | None = Field(None, gt=0)  # fixed KV-cache size, bytes (CPU default: 1 GiB)
    max_model_len: int | None = Field(None, gt=0)
    enforce_eager: bool = True


class RolloutConfig(Strict):
    """A rollout config (a candidate): how the rollout engine runs."""

    engine: Literal["hf", "vllm"] = "hf"
    dtype: Literal["float32", "bfloat16", "float16"] = "bfloat16"
    device: str = "cpu"  # hf engine only: "cpu", "cuda", "cuda:N"
    weights: WeightsRecipe | None = None  # None = weights in the engine dtype
    kv_cache: KVCacheConfig = KVCacheConfig()
    noise: NoiseConfig = NoiseConfig()
    weights_from: str | None = None  # checkpoint dir to load instead of the student's (stale weights)
    vllm: VLLMOptions = VLLMOptions()
    # hf engine on CUDA, how (not what) it decodes; null = the engine's default. Kept out of backtest run keys.
    cuda_graphs: bool | None = None  # captured decode (static cache, CUDA graphs); null: on CUDA yes
    compile: bool | None = None  # torch.compile the captured forward; null: unless the recipe fake-quantizes in it

    def key_dump(self) -> dict[str, Any]:
        """The JSON dump that keys this rollout's runs (ledger run keys and header). An FP8 cache under
        `attention_backend: fresh_prefill` with `scales: one` — the only FP8-KV recipe before #24 — keeps the key it
        had then (no FP8 fields), so the shipped ledgers' FP8-KV runs are found under it and nowhere else; every
        other FP8 recipe names its backend and scales, and never reuses a run of the old recipe. `cuda_graphs` and
        `compile` at their default (null) are left out, as in the ledgers written before they existed."""
        data = self.model_dump(mode="json")
        for option in ("cuda_graphs", "compile"):  # how (not what) the engine decodes, at its default: not in keys
            if data.get(option) is None:
                data.pop(option, None)
        kv = self.kv_cache
        if kv.dtype != "auto" and kv.attention_backend == "fresh_prefill" and kv.scales == "one":
            data["kv_cache"] = {k: v for k, v in data["kv_cache"].items() if k not in _KV_FP8_FIELDS}
        return data

    @classmethod
    def from_key_dump(cls, data: dict[str, Any]) -> RolloutConfig:
        """The rollout a run key's dump (`key_dump`, any ledger's) stands for: an FP8 `kv_cache` that names no
        `attention_backend` is the old recipe, `fresh_prefill` (never the new default)."""
        kv = data.get("kv_cache")
        if isinstance(kv, dict) and kv.get("dtype", "auto") != "auto" and "attention_backend" not in kv:
            data = {**data, "kv_cache": {**kv, "attention_backend": "fresh_prefill"}}
        return cls.model_validate(data)

    @property
    def is_perturbed(self) -> bool:
        """True when anything beyond the dtype differs from the plain student."""
        return (
            self.weights is not None
            or self.kv_cache.dtype != "auto"
            or self.noise.relative_std > 0
            or self.weights_from is not None
        )


class RolloutOnProbes(Strict):
    """The fields of a kind that measures one rollout config on the probe set against the reference (`measure`,
    `sensitivity`): the pair, its probe set, sampling, the reference, the candidate. Each kind narrows `kind` to its
    own name and adds its fields after these (the order a resolved config is written in)."""

    kind: str | None = None  # optional: names the config kind (`validate` dispatches on it); each kind's Literal
    pair: PairConfig
    probe: ProbeConfig
    sampling: SamplingConfig = SamplingConfig()
    reference: ReferenceConfig = ReferenceConfig()
    rollout: RolloutConfig  # the candidate: its engine and precision recipe
