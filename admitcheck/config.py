# long module: one pydantic schema per YAML kind, so every key a config may hold is in one file
"""pydantic schemas for every YAML admitcheck reads. Unknown keys are errors (a typo must not pass silently).

    cfg = admitcheck.io.load_config("examples/toy_measure.yaml", MeasureConfig)
    cfg.rollout.weights.format   # "fp8_e4m3"

Relative paths in a config are resolved against the config file's directory by `io.load_config`.
Constraints live in types; cross-field rules raise ValueError naming the fields (pydantic adds the path).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_serializer, model_validator
from pydantic_core import PydanticCustomError

Dtype = Literal["float32", "bfloat16", "float16", "float64"]
# What a budget was calibrated for: "opd" (train.loss pg or gkd_reverse_kl) or "rl" (train.loss grpo). A screen
# names the one it gates (`objective:`); a budget of the other objective is refused (their budgets differ: docs/rl.md)
Objective = Literal["opd", "rl"]
MetricName = Literal["k1", "k2", "k3", "kl_exact", "abs_diff_mean", "mult_prob_error", "chi2_token"]


def _unknown_key(key: object, known: list[str]) -> PydanticCustomError:
    """The error for a key no field has: its closest known spelling, else the keys this section knows."""
    close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.75)
    hint = f"did you mean {close[0]!r}?" if close else f"this section has {', '.join(known)}"
    text = f"unknown key: {hint} (config reference: README.md)"
    return PydanticCustomError("unknown_key", text.replace("{", "{{").replace("}", "}}"))


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="wrap")
    @classmethod
    def _unknown_keys_first(cls, data: Any, handler: Any) -> Any:
        """Unknown keys, at every level, come before any other error (a misspelt `candidats:` is named, not
        reported as `candidates` missing): `io.validation_error` shows the first error."""
        try:
            return handler(data)
        except ValidationError as exc:
            errors = []
            for e in exc.errors():
                kind: Any = e["type"]
                if kind == "extra_forbidden" and len(e["loc"]) == 1:  # a key of this model, not of a nested one
                    kind = _unknown_key(e["loc"][0], list(cls.model_fields))
                elif kind == "unknown_key":  # named by a nested model already: keep its message
                    kind = PydanticCustomError("unknown_key", e["msg"].replace("{", "{{").replace("}", "}}"))
                item = {"type": kind, "loc": e["loc"], "input": e.get("input")}
                if "ctx" in e and isinstance(kind, str):
                    item["ctx"] = e["ctx"]
                errors.append(item)
            errors.sort(key=lambda item: isinstance(item["type"], str))  # stable: unknown keys first, then the rest
            raise ValidationError.from_exception_data(exc.title, errors) from None


_NOISE_SWITCHES = {"coupling": "inverse_cdf", "sampling_coupling": "inverse_cdf", "ema": None}  # issue 36's defaults


def _without_defaults(model: BaseModel, data: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """A dump without the fields of `defaults` that sit at their default: switches added after artifacts and ledgers
    were shipped keep those files' dumps (and so their headers, run keys and re-fits) bit for bit."""
    drop = {k for k, v in defaults.items() if k in data and getattr(model, k) == v}
    return {k: v for k, v in data.items() if k not in drop}


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
        return _without_defaults(self, handler(self), _NOISE_SWITCHES)


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


class MeasureConfig(Strict):
    """`admitcheck measure`: one candidate's mismatch against the reference, beside the noise floor."""

    kind: Literal["measure"] | None = None  # optional: names the config kind (`validate` dispatches on it)
    pair: PairConfig
    probe: ProbeConfig
    sampling: SamplingConfig = SamplingConfig()
    reference: ReferenceConfig = ReferenceConfig()
    rollout: RolloutConfig
    floor: bool = True  # also measure the engine in the reference's configuration (the noise floor)
    full_logprobs: bool = True  # compare full distributions too (kl_exact); costs (B, T, V) memory
    confidence: float = Field(0.95, gt=0, lt=1)
    diagnostics: list[Literal["prefix_shift"]] = []  # prefix_shift: coupled sampling vs the reference (hf engine)


# ------------------------------------------------------------------------------------------------ calibration


class GRPOConfig(Strict):
    """The RL objective of `train.loss: grpo` (admitcheck.calibration.grpo, docs/rl.md): G rollouts per prompt, a
    verifiable
    reward, group-normalised advantages (r − mean_g)/(std_g + eps), a clipped importance ratio, an optional
    rollout correction. Defaults are verl's (clip 0.2/0.2, dual-clip 3, TIS cap 2) and prime-rl's MIS range."""

    reward: Literal["toy_reversal"] = "toy_reversal"  # 1 when the response is the prompt's digits reversed, else 0
    group_size: int = Field(8, ge=2)  # G rollouts per prompt; train.batch_size = prompts per step × G
    std_normalize: bool = True  # divide by the group std (GRPO, verl default); false = Dr. GRPO (mean only)
    std_epsilon: float = Field(1e-6, gt=0)  # added to the unbiased group std (verl compute_grpo_outcome_advantage)
    clip_ratio_low: float = Field(0.2, gt=0, lt=1)  # PPO clip: ratio kept in [1 − low, 1 + high]
    clip_ratio_high: float = Field(0.2, gt=0)
    clip_ratio_c: float = Field(3.0, gt=1)  # dual-clip bound for negative advantages (verl clip_ratio_c)
    correction: Literal["none", "tis", "mis"] = "none"  # none: PPO clip on π_θ/μ; tis: min(w, cap); mis: mask
    correction_level: Literal["token", "sequence"] = "token"  # weight/mask per token, or per whole response
    tis_cap: float = Field(2.0, gt=0)  # TIS: weight min(π/μ, cap) (verl rollout_is_threshold)
    mis_low: float = Field(0.125, ge=0)  # MIS: tokens (sequences) with π/μ outside [low, high] are masked
    mis_high: float = Field(8.0, gt=0)  # (prime-rl token_mask_low/high defaults 0.125 and 8)

    @model_validator(mode="after")
    def _range(self) -> GRPOConfig:
        if self.mis_low >= self.mis_high:
            raise ValueError("mis_low must be less than mis_high")
        return self


class TrainConfig(Strict):
    """The OPD training recipe of every calibration run (REFERENCE §1, §3.6): the budget belongs to this recipe."""

    prompts: str  # JSONL train prompts
    steps: int = Field(100, gt=0)  # optimizer steps per run
    batch_size: int = Field(32, gt=0)  # rollouts per step
    max_new_tokens: int = Field(32, gt=0)  # response cap during training, tokens
    lr: float = Field(3e-4, gt=0)  # AdamW learning rate
    lr_schedule: Literal["constant", "cosine"] = "constant"  # cosine: lr · ½(1 + cos(π·step/steps)), to 0 at the end
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float | None = Field(1.0, gt=0)  # global grad-norm clip; null = off
    loss: Literal["pg", "gkd_reverse_kl", "grpo"] = "pg"  # sampled-token PG, full-vocab reverse KL, or RL (GRPO)
    student_logprobs: Literal["trainer", "rollout"] = "trainer"  # advantage from trainer recompute (verl) or engine
    tis_cap: float | None = Field(None, gt=0)  # truncated importance sampling: weight min(pi/mu, C); null = plain ratio
    temperature: float = Field(1.0, gt=0)  # rollout sampling temperature during training
    grpo: GRPOConfig | None = None  # the RL objective's settings (loss: grpo only; filled with defaults there)
    # How (not what) a run with staleness k >= 1 executes: "async" samples batch t+k on a background thread while
    # step t trains (bit-identical to "sync", which samples each batch at the start of its step from the kept
    # snapshot). Staleness 0 has nothing to sample ahead: both are the synchronous loop. Never dumped: out of
    # ledger headers, run keys and the artifact's recipe, so a calibration may switch it and resume.
    rollouts: Literal["sync", "async"] = Field("sync", exclude=True)
    # --- issue 36: less noise per run; left out of dumps (headers, run keys, recipes) at their defaults
    sampling_coupling: Literal["inverse_cdf", "gumbel"] = "inverse_cdf"  # training rollouts (SamplingConfig.coupling)
    ema: float | None = Field(None, gt=0, lt=1)  # final quality on an EMA of the weights, decay per step; null = off

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        return _without_defaults(self, handler(self), _NOISE_SWITCHES)

    @model_validator(mode="before")
    @classmethod
    def _grpo_defaults(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("loss") == "grpo" and data.get("grpo") is None:
            return {**data, "grpo": {}}
        return data

    @model_validator(mode="after")
    def _grpo_fields(self) -> TrainConfig:
        if self.loss != "grpo" and self.grpo is not None:
            raise ValueError("a grpo section needs loss: grpo")
        if self.loss == "grpo":
            if self.tis_cap is not None:
                raise ValueError("loss grpo: set the correction under grpo (correction: tis, tis_cap), not tis_cap")
            if self.batch_size % self.grpo.group_size:
                raise ValueError(f"batch_size {self.batch_size} must be a multiple of grpo.group_size")
        return self


class EvalConfig(Strict):
    """Quality: held-out reverse KL student->teacher per token on the student's own samples (reference precision)."""

    prompts: str  # JSONL eval prompts
    num_prompts: int = Field(128, gt=0)
    samples: int = Field(1, gt=0)  # responses sampled per prompt (the quality is their token mean: less eval noise)
    max_new_tokens: int = Field(32, gt=0)
    batch_size: int = Field(64, gt=0)
    every: int = Field(0, ge=0)  # also evaluate every N steps (0 = only start and end)
    seed: int = 12345  # eval sampling seed, the same for every run
    sampling_coupling: Literal["inverse_cdf", "gumbel"] = "inverse_cdf"  # issue 36; left out of dumps at default

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        return _without_defaults(self, handler(self), _NOISE_SWITCHES)


class AutoNoiseLevels(Strict):
    """An automatic grid of weight-noise sizes whose measured mismatch spans [min_mismatch, max_mismatch]."""

    count: int = Field(6, ge=2)  # noise levels besides the baseline
    min_mismatch: float = Field(1e-4, gt=0)  # nats/token, k3
    max_mismatch: float = Field(1.0, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> AutoNoiseLevels:
        if self.max_mismatch <= self.min_mismatch:
            raise ValueError("max_mismatch must be greater than min_mismatch")
        return self


class LevelConfig(Strict):
    """One extra calibration level: a named rollout config, a fixed noise size, or a staleness."""

    name: str = Field(min_length=1)
    rollout: RolloutConfig | None = None  # a real precision recipe
    relative_std: float | None = Field(None, gt=0)  # weight noise of this relative size
    staleness: int | None = Field(None, gt=0)  # rollouts from weights this many optimizer steps old
    systematic: bool = False  # relative_std only: one noise draw kept for the whole run (FP8-like), not one per sync
    fit: bool = True  # false: a held-out check, reported beside the curve's prediction but not fitted

    @model_validator(mode="after")
    def _exactly_one(self) -> LevelConfig:
        given = [k for k in ("rollout", "relative_std", "staleness") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"a level sets exactly one of rollout, relative_std, staleness (got {given or 'none'})")
        if self.systematic and self.relative_std is None:
            raise ValueError("systematic: true needs relative_std (it keeps one weight-noise draw for the run)")
        return self


class LevelsConfig(Strict):
    """The levels, and the replicate pairs run at each (every replicate pairs a level run with a baseline run)."""

    auto_noise: AutoNoiseLevels | None = AutoNoiseLevels()  # null = no automatic grid
    extra: list[LevelConfig] = []
    replicates: int = Field(2, ge=2)  # paired replicates of every level (and of the baseline) before adapting
    interval_factor: float = Field(2.0, gt=1)  # stop adding replicates once the budget's interval hi/lo is below
    max_runs: int = Field(30, gt=0)  # cap on all runs (baseline, levels, checks) including adaptive replicates
    pairs_per_round: int = Field(1, ge=1)  # replicate pairs each adaptive round adds at each wanted level: a round is
    # one wave of parallel runs, so more pairs per round fill more workers (the budget depends on it, not on --jobs)
    x: Literal["auto", "start", "run"] = "auto"  # the mismatch fitted: at the start weights, run-averaged, or chosen
    run_window: int = Field(20, gt=0)  # steps averaged for the run x (the first N of each run; a screen replays them)
    # candidates whose verdicts the rounds should decide: each one's screened mismatch upper bound (nats/token, the
    # calibration's functional: a screen report's `upper`); the model's pairs go where B's interval leaves one undecided
    decide: list[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = []

    @model_validator(mode="after")
    def _not_empty(self) -> LevelsConfig:
        if self.auto_noise is None and not self.extra:
            raise ValueError("no levels: set auto_noise or list levels under extra")
        names = [lv.name for lv in self.extra]
        if len(set(names)) != len(names):
            raise ValueError("level names under extra must be unique")
        return self


class ToleranceConfig(Strict):
    """τ, the quality cost allowed: the user's goal, relative to the baseline quality or absolute (never from noise)."""

    relative: float = Field(0.05, gt=0)  # τ = relative × mean baseline quality
    absolute: float | None = Field(None, gt=0)  # nats/token; overrides relative


class ResourcesConfig(Strict):
    """What one calibration run asks of a Ray cluster (`--executor ray`; the local executor ignores it)."""

    num_cpus: float = Field(1.0, gt=0)  # CPUs per run (fractions allowed)
    num_gpus: float = Field(0.0, ge=0)  # GPUs per run; a fraction (0.25) lets several small-pair runs share a GPU


class CalibrateConfig(Strict):
    """`admitcheck calibrate`: short OPD runs at controlled mismatch levels -> curve -> budget."""

    kind: Literal["calibrate"] | None = None  # optional: names the config kind (`validate` dispatches on it)
    pair: PairConfig
    probe: ProbeConfig  # how each level's mismatch is measured: a screen must use the same protocol
    sampling: SamplingConfig = SamplingConfig()
    reference: ReferenceConfig = ReferenceConfig()
    metric: MetricName = "k3"  # the budget's scale; screen measures on it (k3/kl_exact: kl_exact where full rows exist)
    rollout: RolloutConfig = RolloutConfig(dtype="float32")  # the unperturbed engine the levels perturb
    train: TrainConfig
    eval: EvalConfig
    levels: LevelsConfig = LevelsConfig()
    tolerance: ToleranceConfig = ToleranceConfig()
    bootstrap: int = Field(500, ge=50)  # bootstrap resamples for the budget interval
    confidence: float = Field(0.95, gt=0, lt=1)
    output: str | None = None  # artifact path; default calibrations/<pair name>.yaml next to the config
    seed: int = 0  # base seed of the runs (run seed = seed + replicate index)
    resources: ResourcesConfig = ResourcesConfig()  # per run, on Ray; where runs execute never changes their numbers

    @model_validator(mode="after")
    def _staleness_within_the_run(self) -> CalibrateConfig:
        for lv in self.levels.extra:
            if lv.staleness is not None and lv.staleness >= self.train.steps:
                raise ValueError(
                    f"levels.extra.{lv.name}.staleness {lv.staleness} is at or beyond train.steps {self.train.steps}: "
                    "the rollouts would come from weights older than the run; use a staleness below train.steps"
                )
        return self

    @model_validator(mode="after")
    def _coupling_needs_the_hf_engine(self) -> CalibrateConfig:
        # Gumbel-max coupling (issue 36) lives in the HF engine's decode loop; vLLM draws its own random numbers
        if self.train.sampling_coupling == "gumbel" and self.rollout.engine != "hf":
            raise ValueError(
                f"train.sampling_coupling gumbel needs rollout.engine hf (rollout.engine is {self.rollout.engine}, "
                "which samples with its own random numbers)"
            )
        return self


# ------------------------------------------------------------------------------------------------ screening


class CandidateConfig(Strict):
    """One named candidate: a rollout config, or a staleness (rollouts k optimizer steps behind)."""

    name: str = Field(min_length=1)
    rollout: RolloutConfig | None = None
    staleness: int | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _one(self) -> CandidateConfig:
        if (self.rollout is None) == (self.staleness is None):
            raise ValueError("a candidate sets exactly one of rollout or staleness")
        return self


class ScreenProbeConfig(ProbeConfig):
    """Sequential probing: at least min_prompts, then more batches until decided, at most num_prompts."""

    min_prompts: int = Field(32, gt=0)

    @model_validator(mode="after")
    def _min_le_max(self) -> ScreenProbeConfig:
        if self.min_prompts > self.num_prompts:
            raise ValueError("probe.min_prompts must be <= probe.num_prompts")
        return self


class PolicyConfig(Strict):
    """The screen's decision rule (docs/statistics.md): ADMIT when the mismatch's confidence sequence (valid at every
    look, no split of α over the looks) lies below the budget's lower bound, REJECT when above its upper bound."""

    confidence: float = Field(0.95, gt=0, lt=1)  # two-sided level of the mismatch bounds over all looks
    # what a marginal verdict (undecided at probe.num_prompts) gets; `admit` lets the
    # point estimate decide, and the verdict is marked error_control: false
    undecided: Literal["reject", "admit"] = "reject"
    # a budget whose lower confidence bound is 0 (no level below it, or too few runs) can never ADMIT by the bound:
    # screen and validate refuse it, unless this opts into a gate that can only REJECT (docs: README, screen configs)
    reject_only: bool = False


class CapacityConfig(Strict):
    """Memory the KV-capacity column assumes (REFERENCE §4)."""

    gpu_memory_gib: float = Field(80.0, gt=0)
    utilization: float = Field(0.9, gt=0, le=1)
    activation_reserve_gib: float = Field(2.0, ge=0)
    model_config_path: str | None = None  # config.json of the deployed model; default: the student's


class LogsSource(Strict):
    """A pipeline's logged log-probs (`source: logs`, or `--from-logs FILE`, which keeps `step` and `checkpoint`)."""

    path: str  # JSONL (rollout_logprobs, trainer_logprobs[, mask]) per sequence, or Parquet with those columns
    format: Literal["auto", "admitcheck", "prime-rl", "verl", "trl", "nemo-rl"] = "auto"  # auto: from the columns
    step: int | None = Field(None, ge=0)  # the pipeline's training step the logs are from (checked against the rows)
    checkpoint: str | None = None  # the trainer checkpoint (HF dir) that scored them: must be this pair's student
    gates: int = Field(1, ge=1)  # how many times the pipeline runs this gate on its logs (e.g. once per checked
    # step): each verdict is made at 1 − α/gates (Bonferroni), so the chance that any of them is wrong stays ≤ α


class ScreenConfig(Strict):
    """`admitcheck screen`: verdicts for candidates against a calibration."""

    kind: Literal["screen"] | None = None  # optional: names the config kind (`validate` dispatches on it)
    pair: PairConfig
    calibration: str  # the calibration artifact (YAML)
    objective: Objective = "opd"  # the training the gate is for; the calibration's recipe must be of it
    probe: ScreenProbeConfig
    sampling: SamplingConfig = SamplingConfig()
    reference: ReferenceConfig = ReferenceConfig()
    candidates: list[CandidateConfig] = Field(min_length=1)
    policy: PolicyConfig = PolicyConfig()
    capacity: CapacityConfig = CapacityConfig()
    source: Literal["engine", "logs"] = "engine"
    logs: LogsSource | None = None
    full_logprobs: bool = True
    diagnostics: list[Literal["prefix_shift"]] = []  # prefix_shift per rollout candidate (hf engines)

    @model_validator(mode="after")
    def _check(self) -> ScreenConfig:
        names = [c.name for c in self.candidates]
        if len(set(names)) != len(names):
            raise ValueError("candidate names must be unique")
        if self.source == "logs" and self.logs is None:
            raise ValueError("source: logs needs a logs: {path: ...} section")
        return self


# ------------------------------------------------------------------------------------------------ backtest


class TruthConfig(Strict):
    """How a backtest decides each candidate's true quality cost: paired full OPD runs, looked at after
    `replicates` pairs and after every `step` more, at most `max_replicates` (Bonferroni over the looks)."""

    replicates: int = Field(4, ge=2)  # pairs (candidate run, baseline run of the same seed) before the first look
    step: int = Field(4, ge=1)  # pairs added per round to a candidate whose truth is still undecided
    max_replicates: int = Field(8, ge=2)  # then its truth is "ambiguous"
    confidence: float = Field(0.95, gt=0, lt=1)  # of the cost interval, two-sided, spent evenly over the looks

    @model_validator(mode="after")
    def _max_ge_first(self) -> TruthConfig:
        if self.max_replicates < self.replicates:
            raise ValueError("truth.max_replicates must be >= truth.replicates")
        return self


class BacktestConfig(Strict):
    """`admitcheck backtest`: a calibration's verdicts on held-out candidates against full OPD runs with them."""

    kind: Literal["backtest"] | None = None  # optional: names the config kind (`validate` dispatches on it)
    calibrate_config: str  # the calibrate config the calibration was made with: its recipe and seeds make the truth
    screen_config: str  # a screen config against that calibration: its probe and policy give the verdicts
    candidates: list[CandidateConfig] = Field(min_length=1)  # held-out candidates (the screen config's are not used)
    truth: TruthConfig = TruthConfig()
    output: str | None = None  # default: <calibration stem>.backtest.yaml beside the calibration

    @model_validator(mode="after")
    def _unique(self) -> BacktestConfig:
        names = [c.name for c in self.candidates]
        if len(set(names)) != len(names):
            raise ValueError("candidate names must be unique")
        return self


# ------------------------------------------------------------------------------------------------ plan


class BenchRef(Strict):
    """A rollout speed-up read from a bench JSON (`bench/fp8_speed.py`): the decode step of `variant` against the
    BF16 one of the same model, context and batch, measured on the GPU the JSON names."""

    model: str = Field(min_length=1)  # a model shape of the bench, e.g. "qwen3_8b", "smollm2_135m"
    context: int = Field(gt=0)  # KV length the decode step attends over, tokens
    variant: str = Field(min_length=1)  # e.g. "fp8_w8a8_rowwise", "fp8_kv_triton" (the bench's variant names)
    batch: int | None = Field(None, gt=0)  # decode batch; default: the bench's only batch at that model and context


class StepTimeConfig(Strict):
    """A candidate's training-step time relative to the baseline's (docs/plan.md): the ratio itself, or from the
    rollout speed-up and the rollouts' share of a step (Amdahl; with `overlap`, async: step = max(rollout, rest))."""

    ratio: float | None = Field(None, gt=0)  # candidate step time / baseline step time, measured as a whole
    rollout_speedup: float | None = Field(None, gt=0)  # baseline rollout time / candidate rollout time
    bench: BenchRef | None = None  # rollout_speedup from the plan's bench JSON
    overlap: bool = False  # rollouts overlap the rest of the step (asynchronous: a staleness ≥ 1 candidate)

    @model_validator(mode="after")
    def _one_source(self) -> StepTimeConfig:
        given = [k for k in ("ratio", "rollout_speedup", "bench") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"step_time sets at most one of ratio, rollout_speedup, bench (got {given})")
        if self.overlap and self.ratio is not None:
            raise ValueError("step_time.ratio is the whole step's: overlap needs rollout_speedup or bench")
        return self


class PlanCandidate(Strict):
    """A candidate to plan: its mismatch x (the budget's scale, what `screen` measured) and/or the runs it matches
    (a rollout config, a staleness or a noise size with runs in the ledgers), and its step time."""

    name: str = Field(min_length=1)
    mismatch: float | None = Field(None, ge=0)  # x, nats/token; default: the mean x of the matched level's runs
    rollout: RolloutConfig | None = None  # runs with exactly this rollout config (a backtest's) give own curves
    staleness: int | None = Field(None, gt=0)  # runs at this staleness
    relative_std: float | None = Field(None, gt=0)  # runs at this weight-noise size
    step_time: StepTimeConfig = StepTimeConfig()  # default: the baseline's step time (ratio 1)

    @model_validator(mode="after")
    def _x_or_runs(self) -> PlanCandidate:
        given = [k for k in ("rollout", "staleness", "relative_std") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"a plan candidate matches at most one of rollout, staleness, relative_std ({given})")
        return self


class PlanConfig(Strict):
    """`admitcheck plan`: predicted time-to-quality of candidates from the calibration's (and backtests') runs."""

    kind: Literal["plan"] | None = None  # optional: names the config kind (`validate` dispatches on it)
    calibration: str  # the calibration artifact; its ledger (<stem>.ledger.jsonl beside it) has the learning curves
    ledgers: list[str] = []  # more ledgers of the same recipe and pair (a backtest's <stem>.ledger.jsonl)
    screen_result: str | None = None  # `admitcheck screen --json` output: its ADMIT verdicts become candidates
    bench: str | None = None  # a bench JSON (bench/fp8_speed.py) that candidates' step_time.bench reads
    rollout_share: float | None = Field(None, gt=0, lt=1)  # rollouts' share of a baseline training step; default:
    # the calibration's baseline runs' own (seconds_by_phase, measured on the machine that ran them)
    step_seconds: float | None = Field(None, gt=0)  # one baseline training step on the target machine, s; default:
    # times are in baseline steps
    confidence: float = Field(0.95, gt=0, lt=1)  # of the intervals over replicate pairs, two-sided
    candidates: list[PlanCandidate] = []

    @model_validator(mode="after")
    def _something_to_plan(self) -> PlanConfig:
        if not self.candidates and self.screen_result is None:
            raise ValueError("nothing to plan: list candidates, or give a screen_result")
        names = [c.name for c in self.candidates]
        if len(set(names)) != len(names):
            raise ValueError("candidate names must be unique")
        return self


# ------------------------------------------------------------------------------------------------- config kinds

UnitKind = Literal["kv", "attn", "mlp"]


class SensitivityConfig(Strict):
    """`admitcheck sensitivity`: per-unit mismatch of `recipe` on the probe set."""

    kind: Literal["sensitivity"] | None = None  # optional: names the config kind (`validate` dispatches on it)
    pair: PairConfig
    probe: ProbeConfig
    sampling: SamplingConfig = SamplingConfig()
    reference: ReferenceConfig = ReferenceConfig()
    rollout: RolloutConfig  # the whole recipe, e.g. FP8 weights + FP8 KV cache (a measure config's key)
    units: list[UnitKind] = Field(["kv", "attn", "mlp"], min_length=1)
    layers: list[int] | None = None  # decoder layers to test; default all
    full_logprobs: bool = False  # also kl_exact per unit; costs (B, T, V) memory
    confidence: float = Field(0.95, gt=0, lt=1)


class RecipeSearchConfig(Strict):
    """`admitcheck recipe`: the cheapest admitted restriction of `recipe`, screened against `calibration`."""

    kind: Literal["recipe"] | None = None  # optional: names the config kind (`validate` dispatches on it)
    name: str = Field("recipe", min_length=1)  # the candidate name in the YAML written for `screen`
    pair: PairConfig
    calibration: str
    probe: ScreenProbeConfig
    sampling: SamplingConfig = SamplingConfig()
    reference: ReferenceConfig = ReferenceConfig()
    policy: PolicyConfig = PolicyConfig()
    capacity: CapacityConfig = CapacityConfig()
    rollout: RolloutConfig  # the whole recipe the search starts from
    units: list[UnitKind] = Field(["kv", "attn", "mlp"], min_length=1)
    layers: list[int] | None = None


ConfigKind = Literal["measure", "calibrate", "screen", "sensitivity", "recipe", "backtest", "plan"]  # KINDS' keys
# The config kinds, each with its schema (its `kind:` key names it): `validate`, the detection and --kind read this.
KINDS: dict[ConfigKind, type[BaseModel]] = {
    "measure": MeasureConfig,
    "calibrate": CalibrateConfig,
    "screen": ScreenConfig,
    "sensitivity": SensitivityConfig,
    "recipe": RecipeSearchConfig,
    "backtest": BacktestConfig,
    "plan": PlanConfig,
}
CONFIG_KINDS: tuple[str, ...] = tuple(KINDS)


def config_kind(data: Any) -> tuple[str, str]:
    """(kind, how) of a config's parsed YAML: its top-level `kind:` when it has one ("named by kind:"), else
    detected from the keys only one kind has ("detected from its keys"): calibrate_config → backtest, calibration
    with candidates or screen_result but no probe → plan, candidates → screen, train → calibrate, calibration
    without candidates → recipe, units or layers → sensitivity, else measure. When some top-level keys are unknown
    to that kind, the kind they fit best is taken instead (a key one letter off a kind's own counts half), so
    `candidats:` in a screen config is still a screen config and the misspelt key is what gets named. A config
    whose keys fit two kinds (a sensitivity config without `units`) should name its kind."""
    if isinstance(data, dict) and data.get("kind") is not None:
        return str(data["kind"]), "named by kind:"
    keys = {str(k) for k in data} if isinstance(data, dict) else set()
    if "calibrate_config" in keys:
        kind = "backtest"
    elif "calibration" in keys and "probe" not in keys and keys & {"candidates", "screen_result"}:
        kind = "plan"
    elif "candidates" in keys:
        kind = "screen"
    elif "train" in keys:
        kind = "calibrate"
    elif "calibration" in keys:
        kind = "recipe"
    elif keys & {"units", "layers"}:
        kind = "sensitivity"
    else:
        kind = "measure"

    def misfit(name: str) -> float:
        known = list(schema_for(name).model_fields)
        return sum(
            0.5 if difflib.get_close_matches(k, known, n=1, cutoff=0.75) else 1.0 for k in keys if k not in known
        )

    if misfit(kind):
        kind = min((kind, *CONFIG_KINDS), key=misfit)  # ties keep the rule's kind (first)
    return kind, "detected from its keys"


def schema_for(kind: str) -> type[BaseModel]:
    """The pydantic schema of a config kind (ValueError for an unknown one)."""
    if kind not in KINDS:
        raise ValueError(f"unknown config kind {kind!r} (known: {', '.join(KINDS)})")
    return KINDS[kind]
