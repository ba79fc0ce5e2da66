# long module: one engine, two decode paths (eager loop; captured on CUDA) and two weight syncs (CPU; in place)
"""The transformers/torch rollout engine: its own batched decode loop over a KV cache, on CPU or CUDA.

    engine = HFEngine(student, RolloutConfig(dtype="bfloat16"), eos_token_id=2, pad_token_id=0)
    rollouts = engine.sample(prompt_ids, SamplingConfig(temperature=0.7), seed=0, max_new_tokens=64)
    engine.load_weights(trainer_student.state_dict(), noise_step=step)   # re-sync, re-apply the recipe
    engine.close()

Why not `model.generate()`: it silently adds top_k=50, cannot sample from our transform with coupled uniforms,
and gives no processed log-probs of the sampled tokens. (Speed is not the reason any more: with transformers 5.19,
batch 64, it was only 1.1-1.4x slower than this loop; see bench/decode.py.) Here a step is one model forward plus a
handful of (B, V) ops: `process_logits` (the shared sampling transform, so μ is exactly the distribution sampled
from), inverse-CDF sampling with the uniforms `draw_uniforms(B, max_new_tokens, seed)` (column t at step t,
consumed by every row, finished or not, so a row's draws do not depend on when others end), and writes into
preallocated outputs. The token layout (`rollout/layout.py`: left-padded prompts, explicit position ids) is the
scorer's too, so the engine in the reference's configuration reproduces the reference's log-probs to float32
rounding (<= 1e-6 nats: the 1-token decode and the teacher-forced forward run different kernel shapes, so they
agree to an ulp, not bitwise).

The engine owns a copy of the student in `rollout.dtype` on `rollout.device` and a float32 CPU copy of the clean
weights; `load_weights` replaces the clean weights and re-applies the rollout recipe (noise, weight quantization,
activation hooks: `admitcheck.rollout.precision`). The caller's model is never touched.

On CUDA the decode is captured (`admitcheck.rollout.engines.cuda_graph`): a static KV cache and one CUDA graph per
decode step, keyed by batch/prompt/length bucket and sampling, reused across calls, with the same transform and the
same uniforms (so the same tokens, up to the forward's kernels); `cuda_graphs=False` keeps the eager loop there too.
Gumbel-max sampling (`SamplingConfig.coupling: gumbel`, rollout/sampling.py) is captured too (issue 36): the step
hashes the seed's keys (device buffers, so a new seed is a copy, not a new graph), the row and the step's own
position counter into the eager loop's noise, in integer tensor ops, and takes the same argmax.
`fused=True` (Llama only, default off until measured on the GPU): the decode step's forward is `FusedLlamaForward`
(`fused_llama.py`: one GEMM for q|k|v and one for gate|up per layer, the projections' weights re-pointed as views
into the fused buffers at engine build, so every in-place weight write reaches it); on CPU the static decoder's
bodies then run eagerly (no graph), which reproduces the eager loop.
On CUDA the clean weights live on the GPU in float32 and `load_weights` copies in place (`torch._foreach_copy_`,
noise drawn on the GPU by generators seeded like the CPU recipe's, fake-quant on the GPU): no parameter is
re-allocated, so captured graphs stay valid. The CPU path is the eager loop, CPU noise draws, CPU clean copy.

FP8 KV cache (`admitcheck.rollout.kv_fp8`, vLLM V1's semantics): K and V are fake-quantized as they enter the cache,
except in `kv_cache.skip_layers`, and attention reads the quantized cache in the prefill and in every decode step;
with `attention_backend: flash_attn` or `triton_attn` the query is rounded to FP8 e4m3 too. Scales are 1.0, or per
layer from the trainer's weights (`scales: calibrated`), recomputed on the first `sample` after every weight sync.
`attention_backend: fresh_prefill` is the recipe before #24: the prefill attends over the fresh prompt K/V, queries
unquantized.
"""

from __future__ import annotations

import copy
import inspect
from pathlib import Path

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from admitcheck.config import RolloutConfig, SamplingConfig
from admitcheck.rollout.engines.base import Rollouts
from admitcheck.rollout.engines.cuda_graph import COMPILE_OPTIONS, CapturedDecoder, DecodeShape, add_noise_on_device
from admitcheck.rollout.engines.fused_llama import FusedLlamaForward, check_fusable, fuse_projections
from admitcheck.rollout.kv_fp8 import KVRecipe, calibrate_scales, use_query_quant
from admitcheck.rollout.layout import left_pad, position_ids
from admitcheck.rollout.sampling import draw_uniforms, process_logits, sample_gumbel, sample_inverse_cdf


class _BufferLayer(DynamicLayer):
    """A DynamicLayer over buffers preallocated for the whole decode: a step writes (B, H, 1, D), never re-copies.

    DynamicLayer grows by torch.cat, an O(length) copy of the whole cache per step and layer (~20% of a tiny model's
    decode step on CPU). `keys`/`values` are views of the filled prefix, so masks and lengths work unchanged.
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        B, H, _, D = key_states.shape
        self._k = key_states.new_empty(B, H, self.capacity, D)  # (B, H, capacity, D)
        self._v = value_states.new_empty(B, H, self.capacity, value_states.shape[-1])
        self.keys, self.values = self._k[:, :, :0], self._v[:, :, :0]
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, end = self.keys.shape[-2], self.keys.shape[-2] + key_states.shape[-2]
        self._k[:, :, start:end] = key_states
        self._v[:, :, start:end] = value_states
        self.keys, self.values = self._k[:, :, :end], self._v[:, :, :end]
        return self.keys, self.values


def cache_kwarg(model: torch.nn.Module) -> str:
    """The keyword the model's forward takes its KV cache by: `cache` in newer transformers 5.x, where the old
    `past_key_values` still works but warns (FutureWarning) on every call; `past_key_values` before."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class RolloutCache(DynamicCache):
    """The engine's KV cache: preallocated full-attention layers, and an update hook that fake-quantizes K/V to FP8
    as they enter the cache (`KVRecipe`: dtype, skip layers, per-layer scales). With `prefill_reads_cache` (vLLM)
    the prompt's pass attends over the quantized K/V too; otherwise (`fresh_prefill`) over the fresh ones. Decode
    steps always read the quantized cache, the current token's K/V included. Sliding-window and other special layers
    of the model's config are kept as transformers builds them."""

    def __init__(self, config, capacity: int, recipe: KVRecipe | None = None) -> None:
        super().__init__(config=config)
        self.layers = [_BufferLayer(capacity) if type(layer) is DynamicLayer else layer for layer in self.layers]
        self.recipe = recipe or KVRecipe()

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        if not self.recipe.quantized(layer_idx):
            return super().update(key_states, value_states, layer_idx, *args, **kwargs)
        prefill = layer_idx >= len(self.layers) or self.layers[layer_idx].get_seq_length() == 0
        keys, values = super().update(
            *self.recipe.quantize(key_states, value_states, layer_idx), layer_idx, *args, **kwargs
        )  # (B, H, S, D): the cache now holds quantized K/V
        if prefill and not self.recipe.prefill_reads_cache:
            return key_states, value_states  # fresh_prefill: the prompt attends over its unquantized K/V
        return keys, values


def _clean_copy(state: dict[str, torch.Tensor], device: torch.device | None = None) -> dict[str, torch.Tensor]:
    """A float32 copy of a state dict on CPU (or `device`), never aliasing the source."""
    dev = device or "cpu"
    return {
        k: v.detach().to(dev, torch.float32 if v.is_floating_point() else v.dtype, copy=True) for k, v in state.items()
    }


def _cast_parameters(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Cast floating parameters only, as `from_pretrained(dtype=...)` does: rotary `inv_freq` stays float32.

    `model.to(bfloat16)` would also round the non-persistent rotary buffers, and then a BF16 engine would not match a
    BF16 reference loaded with `from_pretrained` (a fake floor). Assigning `.data` keeps tied parameters tied.
    """
    for p in model.parameters():
        if p.is_floating_point() and p.dtype != dtype:
            p.data = p.data.to(dtype)


class HFEngine:
    """Rollout engine over a private copy of a transformers causal LM (see the module docstring)."""

    def __init__(
        self,
        model: torch.nn.Module,
        rollout: RolloutConfig,
        *,
        eos_token_id: int,
        pad_token_id: int,
        _owned: bool = False,  # from_pretrained hands over a model nobody else holds: no second copy
        cuda_graphs: bool | None = None,  # None: rollout.cuda_graphs, else captured on CUDA, the eager loop on CPU
        compile_forward: bool | None = None,  # None: rollout.compile, else compile unless the recipe fake-quantizes
        fused: bool = False,  # the decode step through FusedLlamaForward (fused q|k|v, gate|up GEMMs; Llama only)
    ) -> None:
        self.rollout = rollout
        self.eos_token_id = int(eos_token_id)
        self.pad_token_id = int(pad_token_id)
        self.device = torch.device(rollout.device)
        self.dtype = getattr(torch, rollout.dtype)
        on_cuda = self.device.type == "cuda"
        cuda_graphs = rollout.cuda_graphs if cuda_graphs is None else cuda_graphs
        self.cuda_graphs = on_cuda if cuda_graphs is None else bool(cuda_graphs) and on_cuda
        self._compile_choice = rollout.compile if compile_forward is None else compile_forward
        self.compile_forward = self._compile_default(rollout)
        self._decoders: dict[tuple, CapturedDecoder] = {}
        self._compiled = None
        self.fused = bool(fused)
        self._fused_forward: FusedLlamaForward | None = None
        self._clean = _clean_copy(model.state_dict(), self.device if on_cuda else None)
        self.model = model if _owned else copy.deepcopy(model)
        self.model.requires_grad_(False).eval()
        _cast_parameters(self.model, self.dtype)  # before the move: a BF16 engine never holds FP32 weights on the GPU
        self.model.to(self.device)
        if self.fused:  # after the last move: from here on every weight write is in place, into the fused buffers
            fuse_projections(self.model)
        self._cache_kwarg = cache_kwarg(self.model)
        self._handles: list = []
        n_layers = self.model.config.num_hidden_layers
        self._kv_scales = torch.ones(n_layers, 3, dtype=torch.float32, device=self.device)  # (L, 3) q, k, v; in place
        self._scales_stale = True  # calibrated scales are recomputed on the first `sample` after a weight sync
        self._apply_recipe(noise_step=0)

    def _compile_default(self, rollout: RolloutConfig) -> bool:
        """Compile the captured forward unless asked otherwise or the recipe fake-quantizes inside it (FP8 KV, FP8
        activations): inductor's fused kernels round x / scale differently by an ulp, which moves values across FP8
        grid points (measured on an H200, tiny model: W8A8 97.9% of the eager loop's tokens, k3 11x the BF16 floor;
        FP8 KV 100%, k3 1.14x the floor), while eager kernels in the graph match the eager loop (k3 ~1e-8)."""
        if not self.cuda_graphs:
            return False
        if self._compile_choice is not None:
            return bool(self._compile_choice)
        acts = rollout.weights is not None and rollout.weights.activations != "none"
        return not acts and rollout.kv_cache.dtype == "auto"

    @classmethod
    def from_pretrained(
        cls, rollout: RolloutConfig, model_dir: str | Path, *, eos_token_id: int, pad_token_id: int
    ) -> HFEngine:
        """Load `rollout.weights_from` (when set) or `model_dir` in float32 on CPU, then build the engine."""
        from admitcheck.io import load_causal_lm

        source = rollout.weights_from or model_dir
        field = "rollout.weights_from" if rollout.weights_from else "pair.student"
        model = load_causal_lm(source, "float32", "cpu", field=field)
        return cls(model, rollout, eos_token_id=eos_token_id, pad_token_id=pad_token_id, _owned=True)

    def load_weights(self, weights: dict[str, torch.Tensor] | str | Path, noise_step: int = 0) -> None:
        """New clean weights (a state dict or an HF checkpoint dir); the recipe is re-applied with `noise_step`."""
        if isinstance(weights, (str, Path)):
            from admitcheck.io import load_causal_lm

            weights = load_causal_lm(weights, "float32", "cpu", field="weights").state_dict()
        if self.device.type == "cuda" and weights.keys() == self._clean.keys():
            with torch.no_grad():  # in place: the clean float32 copy on the GPU, then the recipe on the GPU
                keys = list(self._clean)
                torch._foreach_copy_([self._clean[k] for k in keys], [weights[k].detach() for k in keys])
            self._apply_recipe(noise_step, rehook=False)
            return
        self._clean = _clean_copy(weights, self.device if self.device.type == "cuda" else None)
        self._apply_recipe(noise_step)

    def reconfigure(self, rollout: RolloutConfig) -> None:
        """Put the engine under another precision recipe of the same dtype and device, in place: its clean weights
        are restored and the new recipe applied (no reload, no copy). The KV dtype is read by every `sample` call."""
        if rollout.dtype != self.rollout.dtype or rollout.device != self.rollout.device:
            raise ValueError("reconfigure keeps the engine's dtype and device")
        self.rollout = rollout
        self._decoders = {}  # captured with the old KV dtype and hooks
        self._compiled = None
        self._fused_forward = None
        self.compile_forward = self._compile_default(rollout)
        use_query_quant(self.model, KVRecipe())  # the next `sample` sets the new recipe's query rounding
        self._apply_recipe(noise_step=0)

    def _apply_recipe(self, noise_step: int, rehook: bool = True) -> None:
        self._scales_stale = True  # new weights: the trainer's K/V scales change with them
        if self.device.type == "cuda":
            self._apply_recipe_on_device(noise_step, rehook)
            return
        for handle in self._handles:
            handle.remove()
        self._handles = []
        missing, unexpected = self.model.load_state_dict(self._clean, strict=False)  # copy_ casts dtype and device
        tied = {name for name in missing if name.endswith("lm_head.weight")}
        if set(missing) - tied or unexpected:
            raise ValueError(f"state dict does not fit the model: missing {missing[:3]}, unexpected {unexpected[:3]}")
        if self.rollout.weights is not None or self.rollout.noise.relative_std > 0:
            from admitcheck.rollout.precision import apply_rollout_recipe

            self._handles = list(apply_rollout_recipe(self.model, self.rollout, noise_step))

    def _apply_recipe_on_device(self, noise_step: int, rehook: bool) -> None:
        """The recipe on CUDA, in place: clean weights copied into the existing parameters, noise drawn on the GPU,
        weights fake-quantized there. `rehook=False` (a weight sync) keeps the activation hooks as they are, so a
        compiled forward sees the same module and captured graphs the same memory."""
        if rehook:
            for handle in self._handles:
                handle.remove()
            self._handles = []
        targets = self.model.state_dict(keep_vars=True)  # name -> the model's own tensor (tied: both names)
        missing = [k for k in targets if k not in self._clean and not k.endswith("lm_head.weight")]
        unexpected = [k for k in self._clean if k not in targets]
        if missing or unexpected:
            raise ValueError(f"state dict does not fit the model: missing {missing[:3]}, unexpected {unexpected[:3]}")
        noise = self.rollout.noise
        noised = {}
        if noise.relative_std > 0:  # named_parameters: a tied parameter once, under its first name (as on CPU)
            noised = {n: p for n, p in self.model.named_parameters() if p.is_floating_point() and p.ndim >= 2}
        seen = {id(p) for p in noised.values()}
        plain = []
        for name, t in targets.items():
            if name in self._clean and id(t) not in seen:
                seen.add(id(t))
                plain.append((t, self._clean[name]))
        with torch.no_grad():
            if plain:
                torch._foreach_copy_([t for t, _ in plain], [c for _, c in plain])
            targets_noised = [(n, p, self._clean[n]) for n, p in noised.items()]
            add_noise_on_device(targets_noised, noise.relative_std, noise.seed, noise_step)
        recipe = self.rollout.weights
        if recipe is not None:
            from admitcheck.rollout.precision import apply_weight_recipe

            weights_only = recipe.model_copy(update={"activations": "none"})  # the hooks in place stay
            handles = apply_weight_recipe(self.model, recipe if rehook else weights_only)
            if rehook:
                self._handles = list(handles)

    def close(self) -> None:
        self._decoders = {}
        self._compiled = None
        self._fused_forward = None
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self.model = None  # type: ignore[assignment]
        self._clean = {}
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    @property
    def kv_scales(self) -> torch.Tensor:
        """(L, 3) float32 q, k, v scales the FP8 cache uses now (ones unless `kv_cache.scales: calibrated`)."""
        return self._kv_scales.detach().cpu().clone()

    def _kv_recipe(self, ids: torch.Tensor, prompt_mask: torch.Tensor) -> KVRecipe:
        """The KV recipe of this call; calibrated scales are recomputed first when the weights changed since."""
        kv = self.rollout.kv_cache
        if kv.dtype != "auto" and kv.scales == "calibrated" and self._scales_stale:
            scales = calibrate_scales(
                self.model, self._clean, ids, prompt_mask, position_ids(prompt_mask), kv, cache_kwarg=self._cache_kwarg
            )
            self._kv_scales.copy_(scales)  # in place: captured graphs read this memory
            self._scales_stale = False
        recipe = KVRecipe.of(kv, self._kv_scales)
        use_query_quant(self.model, recipe)
        return recipe

    def _new_cache(self, capacity: int, recipe: KVRecipe) -> RolloutCache:
        return RolloutCache(self.model.config, capacity, recipe)

    def sample(
        self,
        prompts: list[list[int]],
        sampling: SamplingConfig,
        seed: int,
        max_new_tokens: int,
        *,
        return_full: bool = False,
        full_on_device: bool = False,
    ) -> Rollouts:
        """One response per prompt, at most `max_new_tokens` long; same seed and prompts -> same tokens.
        `full_on_device`: the (B, T, V) rows of `return_full` stay on the engine's device (the held-out evaluation
        reduces them there: a GPU's (B, T, V) float32 rows are ~0.6 GB a batch of 64 on SmolLM2), else on CPU."""
        with torch.inference_mode():
            tokens, logprobs, mask, full = self._decode(prompts, sampling, seed, max_new_tokens, return_full)
        if full is not None and not full_on_device:
            full = full.cpu()
        # Clones outside inference mode: inference tensors cannot be saved for backward (the OPD trainer feeds the
        # token ids to a graph-building forward).
        stopped = ((tokens == self.eos_token_id) & mask).any(dim=1).tolist()
        return Rollouts(
            prompt_ids=[list(p) for p in prompts],
            token_ids=tokens.clone(),
            logprobs=logprobs.clone(),
            mask=mask.clone(),
            finish_reasons=["stop" if s else "length" for s in stopped],
            full_logprobs=full.clone() if full is not None else None,
        )

    def _decode(
        self, prompts: list[list[int]], sampling: SamplingConfig, seed: int, max_new_tokens: int, return_full: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        dev, T = self.device, int(max_new_tokens)
        if T <= 0:
            raise ValueError("max_new_tokens must be > 0")
        ids, prompt_mask = left_pad(prompts, self.pad_token_id, dev)  # (B, P)
        B, P = ids.shape
        recipe = self._kv_recipe(ids, prompt_mask)
        if self.cuda_graphs or self.fused:  # the static decoder (captured on CUDA), either coupling
            return self._decode_captured(ids, prompt_mask, sampling, seed, T, return_full, recipe)
        attn = torch.ones(B, P + T, dtype=torch.long, device=dev)  # (B, P + T); a growing prefix is passed each step
        attn[:, :P] = prompt_mask
        next_pos = prompt_mask.sum(dim=1, keepdim=True)  # (B, 1) position of the first response token
        gumbel = sampling.coupling == "gumbel"  # noise per (seed, row, position, token), drawn per step
        uniforms = None if gumbel else draw_uniforms(B, T, seed).to(dev)  # (B, T) float64
        rows = torch.arange(B, device=dev)  # (B,) the sequence index of the Gumbel noise
        tokens = torch.full((B, T), self.pad_token_id, dtype=torch.long, device=dev)  # (B, T)
        logprobs = torch.zeros(B, T, dtype=torch.float32, device=dev)  # (B, T)
        mask = torch.zeros(B, T, dtype=torch.bool, device=dev)  # (B, T)
        full = None
        alive = torch.ones(B, dtype=torch.bool, device=dev)  # (B,) not finished before this step
        cache = self._new_cache(P + T, recipe)
        check_every = 1 if dev.type == "cpu" else 8  # "all finished?" costs a device sync on CUDA
        temperature, top_p, top_k = sampling.temperature, sampling.top_p, sampling.top_k

        logits = self.model(
            input_ids=ids,
            attention_mask=prompt_mask,
            position_ids=position_ids(prompt_mask),
            **{self._cache_kwarg: cache},
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]  # (B, V)
        steps = T
        for t in range(T):
            logp = process_logits(logits, temperature, top_p, top_k)  # (B, V) float32
            if full is None and return_full:
                full = torch.zeros(B, T, logp.shape[-1], dtype=torch.float32, device=dev)  # (B, T, V)
            tok = sample_gumbel(logp, seed, rows, t) if gumbel else sample_inverse_cdf(logp, uniforms[:, t])  # (B,)
            tok_lp = logp.gather(1, tok.unsqueeze(1)).squeeze(1)  # (B,)
            done = ~alive  # (B,) finished before this step: pad, log-prob 0, mask False
            mask[:, t] = alive
            tokens[:, t] = tok.masked_fill(done, self.pad_token_id)
            logprobs[:, t] = tok_lp.masked_fill(done, 0.0)
            if full is not None:
                full[:, t] = logp.masked_fill(done.unsqueeze(1), 0.0)
            alive &= tok != self.eos_token_id
            if t == T - 1 or ((t + 1) % check_every == 0 and not bool(alive.any())):
                steps = t + 1
                break
            logits = self.model(
                input_ids=tokens[:, t : t + 1],
                attention_mask=attn[:, : P + t + 1],
                position_ids=next_pos + t,
                **{self._cache_kwarg: cache},
                use_cache=True,
            ).logits[:, -1]  # (B, V)
        n = int(mask[:, :steps].sum(dim=1).max())  # longest response (checks every few steps may overshoot)
        out = [x[:, :n].cpu() for x in (tokens, logprobs, mask)]
        return out[0], out[1], out[2], (full[:, :n] if full is not None else None)  # on the device: `sample` moves it

    def _step_forward(self) -> torch.nn.Module:
        """The forward of the static decoder's step: the model or the fused forward, compiled when `compile_forward`."""
        base = self.model
        if self.fused:
            check_fusable(self.model)  # with the recipe's hooks as they are now (a fused group shares one input)
            if self._fused_forward is None:
                self._fused_forward = FusedLlamaForward(self.model)
            base = self._fused_forward
        if not self.compile_forward:
            return base
        if self._compiled is None:
            self._compiled = torch.compile(base, dynamic=False, options=dict(COMPILE_OPTIONS) or None)
        return self._compiled

    def _decode_captured(
        self,
        ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        sampling: SamplingConfig,
        seed: int,
        T: int,
        full: bool,
        recipe: KVRecipe,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The same decode through a CapturedDecoder (built, and captured when `cuda_graphs`, on the first call of its
        bucket; uncaptured its bodies run eagerly: the fused forward on CPU)."""
        B, P = ids.shape
        key = (DecodeShape.of(B, P, T, full), (sampling.temperature, sampling.top_p, sampling.top_k), sampling.coupling)
        decoder = self._decoders.get(key)
        if decoder is None:
            decoder = CapturedDecoder(
                self.model,
                self._cache_kwarg,
                key[0],
                key[1],
                recipe,  # its scales are the engine's (L, 3) tensor: a sync updates them in place
                eos_token_id=self.eos_token_id,
                pad_token_id=self.pad_token_id,
                forward=self._step_forward(),
                coupling=sampling.coupling,
            )
            if self.cuda_graphs:
                decoder.capture()
            self._decoders[key] = decoder
        gumbel = sampling.coupling == "gumbel"  # noise from the seed in the step itself: no uniforms
        uniforms = None if gumbel else draw_uniforms(B, T, seed).to(self.device)  # (B, T) float64, the eager loop's
        tokens, logprobs, mask, fulls, steps = decoder.run(ids, prompt_mask, uniforms, T, seed=seed)
        n = int(mask[:B, :steps].sum(dim=1).max())
        out = [x[:B, :n].cpu() for x in (tokens, logprobs, mask)]
        return out[0], out[1], out[2], (fulls[:B, :n] if fulls is not None else None)  # the graph's buffer: `sample`
        # copies it (to CPU, or clones it on the device) before the next replay overwrites it
