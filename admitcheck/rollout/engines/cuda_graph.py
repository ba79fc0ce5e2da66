"""The HF engine's captured decode on CUDA: a static KV cache and one CUDA graph per decode step.

    decoder = CapturedDecoder(model, "past_key_values", shape, sampling, KVRecipe(), eos_token_id=2, pad_token_id=0,
                              forward=torch.compile(model, dynamic=False))
    tokens, logprobs, mask, full = decoder.run(ids, prompt_mask, uniforms, max_new_tokens)   # (B, T) on the GPU

A 30-layer model of 135M parameters is launch-bound at batch 64 (~45 small kernels a layer; REFERENCE §5): the eager
loop spends ~20 ms a step launching what the GPU does in well under 1. Here everything with a fixed shape is
allocated once per `DecodeShape` (batch bucket, prompt bucket, new-token bucket): the KV cache (B, H, P + T, D) per
layer, the sampling uniforms, the outputs, a boolean (B, 1, 1, P + T) attention mask. Two graphs replay it:

- the prefill graph: the eager forward over the left-padded (B, P) prompts (4-D mask: causal, padding masked, a pad
  row attends to itself so no NaN reaches the cache), K/V written to columns [0, P);
- the step graph: the sampling transform on the previous logits (`process_logits`, inverse CDF with column `step` of
  the seeded uniforms: the eager engine's exact transform and draws), the bookkeeping of the eager loop (pad after
  EOS, log-prob 0, mask, `alive`), the mask column for the new token, then the forward of the sampled token, which
  writes its K/V at `write_pos` (a device tensor), and the step counters advance on the GPU. The same graph is
  replayed for every step; the host only checks `alive` every `CHECK_EVERY` steps.

The forward inside the step graph is `forward` (the model itself: eager kernels, or `torch.compile(model)`: inductor
kernels, ~2x fewer launches; or `fused_llama.FusedLlamaForward`, one GEMM for q|k|v and one for gate|up, compiled or
not); either way the captured kernels read the engine's parameters in place (the fused forward: the buffers the
parameters are views of), so a weight sync by `copy_` (never re-allocation) keeps every graph valid. The FP8 KV cache
has the eager `RolloutCache`'s recipe (`KVRecipe`): K/V fake-quantized as they enter the cache (except `skip_layers`),
the prefill attends over the quantized prompt K/V (vLLM; the fresh ones for `fresh_prefill`), each decode step reads the
quantized cache. Its per-layer scales are the engine's (L, 3) tensor, updated in place at a weight sync. Activation
fake-quant hooks and the query rounding (an attention-module hook, `kv_fp8.use_query_quant`) run inside the forward and
are captured with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from admitcheck.rollout.kv_fp8 import KVRecipe
from admitcheck.rollout.layout import position_ids
from admitcheck.rollout.precision import noised
from admitcheck.rollout.sampling import gumbel_from_keys, process_logits, sample_inverse_cdf, seed_words

CHECK_EVERY = 8  # decode steps between host checks of "all rows finished?" (each one is a device sync)
COMPILE_OPTIONS: dict = {}  # inductor options of the compiled forward (torch.compile(options=...))
WARMUP_CALLS = 3  # un-captured calls on a side stream before capture (compile, cuBLAS workspaces, lazy init)


def bucket(n: int, quantum: int) -> int:
    """n rounded up to a power of two >= quantum, or to a multiple of 4·quantum past it (few shapes, little waste)."""
    b = quantum
    while b < n and b < 4 * quantum:
        b *= 2
    return b if b >= n else -(-n // (4 * quantum)) * (4 * quantum)


@dataclass(frozen=True)
class DecodeShape:
    """What a captured decoder is keyed by (besides sampling): everything that fixes a tensor shape."""

    batch: int  # B, the batch bucket (rows past the real batch decode a 1-token dummy prompt)
    prompt: int  # P, the prompt bucket (left padding up to it)
    new_tokens: int  # T, the new-token bucket (the outputs' width; a call may ask for fewer)
    full: bool  # whether the (B, T, V) processed log-probs are kept

    @classmethod
    def of(cls, batch: int, prompt: int, new_tokens: int, full: bool) -> DecodeShape:
        return cls(bucket(batch, 8), bucket(prompt, 32), bucket(new_tokens, 32), full)


class StaticRolloutCache:
    """K/V buffers (B, H_kv, capacity, D) per layer, written in place: the prefill fills columns [0, S), each decode
    step writes one column at `write_pos` (a (1,) device tensor the step graph advances). Duck-types the one method
    a transformers decoder layer calls (`update`); the attention mask is always passed as a prepared 4-D tensor, so
    nothing asks the cache for lengths."""

    is_compileable = True

    def __init__(self, config, batch: int, capacity: int, dtype: torch.dtype, device, recipe: KVRecipe) -> None:
        n = config.num_hidden_layers
        heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        shape = (batch, heads, capacity, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n)]  # (B, H, L, D) each
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n)]
        self.write_pos = torch.zeros(1, dtype=torch.long, device=device)  # (1,) column of the next decode write
        self.recipe = recipe  # its scales tensor is the engine's: updated in place, read by the graphs
        self.prefill = False  # Python flag: True while the prefill graph is being recorded (never inside a compile)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        if self.recipe.quantized(layer_idx):
            k, v = self.recipe.quantize(key_states, value_states, layer_idx)
        else:
            k, v = key_states, value_states
        if self.prefill:
            S = key_states.shape[-2]
            self.keys[layer_idx][:, :, :S].copy_(k)
            self.values[layer_idx][:, :, :S].copy_(v)
            if self.recipe.quantized(layer_idx) and self.recipe.prefill_reads_cache:
                return k, v  # vLLM: the prompt attends over the quantized K/V it wrote to the cache
            return key_states, value_states  # fresh_prefill (or no FP8): the fresh prompt K/V
        self.keys[layer_idx].index_copy_(2, self.write_pos, k)
        self.values[layer_idx].index_copy_(2, self.write_pos, v)
        return self.keys[layer_idx], self.values[layer_idx]  # (B, H, L, D); unwritten columns are masked


class CapturedDecoder:
    """Static buffers and the prefill + step CUDA graphs for one (DecodeShape, sampling) on one model."""

    def __init__(
        self,
        model: torch.nn.Module,
        cache_kwarg: str,
        shape: DecodeShape,
        sampling: tuple[float, float, int],  # (temperature, top_p, top_k)
        kv: KVRecipe,  # the FP8 KV recipe (`KVRecipe()`: none)
        *,
        eos_token_id: int,
        pad_token_id: int,
        forward=None,  # the decode forward: the model, FusedLlamaForward(model), or torch.compile of either
        pool=None,  # a CUDA graph memory pool shared with the engine's other decoders
        coupling: str = "inverse_cdf",  # or "gumbel": Gumbel-max with the seed's keys in buffers (`run(seed=)`)
    ) -> None:
        self.model, self.forward = model, (forward if forward is not None else model)
        self.cache_kwarg, self.shape, self.sampling = cache_kwarg, shape, sampling
        self.eos, self.pad = int(eos_token_id), int(pad_token_id)
        dev = next(model.parameters()).device
        dtype = next(model.parameters()).dtype
        B, P, T = shape.batch, shape.prompt, shape.new_tokens
        V = model.config.vocab_size
        L = P + T  # the last step's forward writes column P + T - 1
        self.cache = StaticRolloutCache(model.config, B, L, dtype, dev, kv)
        self.ids = torch.full((B, P), self.pad, dtype=torch.long, device=dev)  # (B, P) left-padded prompts
        self.prompt_mask = torch.zeros(B, P, dtype=torch.long, device=dev)  # (B, P)
        self.prefill_mask = torch.zeros(B, 1, P, P, dtype=torch.bool, device=dev)  # (B, 1, P, P) True = attend
        self.prefill_pos = torch.zeros(B, P, dtype=torch.long, device=dev)  # (B, P)
        self.attn = torch.zeros(B, 1, 1, L, dtype=torch.bool, device=dev)  # (B, 1, 1, L) decode mask
        self.logits = torch.zeros(B, V, dtype=dtype, device=dev)  # (B, V) the last forward's logits
        self.tok_in = torch.full((B, 1), self.pad, dtype=torch.long, device=dev)  # (B, 1) the token fed next
        self.pos = torch.zeros(B, 1, dtype=torch.long, device=dev)  # (B, 1) its position id
        self.step = torch.zeros(1, dtype=torch.long, device=dev)  # (1,) the output column of this step
        self.uniforms = torch.ones(B, T, dtype=torch.float64, device=dev)  # (B, T)
        self.coupling = coupling
        self.keys = (torch.zeros((), dtype=torch.long, device=dev), torch.zeros((), dtype=torch.long, device=dev))
        self.rows = torch.arange(B, dtype=torch.long, device=dev)  # (B,) the Gumbel noise's sequence index
        self.tokens = torch.full((B, T), self.pad, dtype=torch.long, device=dev)  # (B, T)
        self.logprobs = torch.zeros(B, T, dtype=torch.float32, device=dev)  # (B, T)
        self.mask = torch.zeros(B, T, dtype=torch.bool, device=dev)  # (B, T)
        self.alive = torch.ones(B, dtype=torch.bool, device=dev)  # (B,)
        self.full = torch.zeros(B, T, V, dtype=torch.float32, device=dev) if shape.full else None  # (B, T, V)
        self.pool = pool
        self.prefill_graph = self.step_graph = None  # until `capture`: `run` calls the bodies eagerly (CPU tests)

    # ------------------------------------------------------------------------------------------- graph bodies

    def _prefill(self) -> None:
        self.cache.prefill = True
        try:
            out = self.model(
                input_ids=self.ids,
                attention_mask=self.prefill_mask,
                position_ids=self.prefill_pos,
                **{self.cache_kwarg: self.cache},
                use_cache=True,
                logits_to_keep=1,
            ).logits  # (B, 1, V)
        finally:
            self.cache.prefill = False
        self.logits.copy_(out[:, -1])

    def _step(self) -> None:
        temperature, top_p, top_k = self.sampling
        logp = process_logits(self.logits, temperature, top_p, top_k)  # (B, V) float32
        col = self.step.view(1, 1).expand(self.alive.shape[0], 1)  # (B, 1)
        if self.coupling == "gumbel":  # the eager loop's `sample_gumbel`, the seed and position from buffers
            g = gumbel_from_keys(self.keys, self.rows, self.step, logp.shape[-1])  # (B, V) float64
            tok = torch.argmax(logp.double() + g, dim=-1)  # (B,)
        else:
            tok = sample_inverse_cdf(logp, self.uniforms.gather(1, col).squeeze(1))  # (B,)
        tok_lp = logp.gather(1, tok.unsqueeze(1)).squeeze(1)  # (B,)
        done = ~self.alive  # finished before this step: pad, log-prob 0, mask False
        tok = tok.masked_fill(done, self.pad)
        self.tokens.scatter_(1, col, tok.unsqueeze(1))
        self.logprobs.scatter_(1, col, tok_lp.masked_fill(done, 0.0).unsqueeze(1))
        self.mask.scatter_(1, col, self.alive.unsqueeze(1))
        if self.full is not None:
            self.full.index_copy_(1, self.step, logp.masked_fill(done.unsqueeze(1), 0.0).unsqueeze(1))
        self.alive &= tok != self.eos
        self.tok_in.copy_(tok.unsqueeze(1))
        self.attn.index_fill_(3, self.cache.write_pos, True)  # the new token's own column
        out = self.forward(
            input_ids=self.tok_in,
            attention_mask=self.attn,
            position_ids=self.pos,
            **{self.cache_kwarg: self.cache},
            use_cache=True,
        ).logits  # (B, 1, V)
        self.logits.copy_(out[:, -1])
        self.cache.write_pos += 1
        self.pos += 1
        self.step += 1

    # ------------------------------------------------------------------------------------------- capture, run

    def _reset(self) -> None:
        P = self.shape.prompt
        self.cache.write_pos.fill_(P)
        self.step.zero_()
        self.alive.fill_(True)
        self.tokens.fill_(self.pad)
        self.logprobs.zero_()
        self.mask.zero_()
        self.attn.zero_()
        self.attn[:, 0, 0, :P] = self.prompt_mask.bool()
        self.pos.copy_(self.prompt_mask.sum(dim=1, keepdim=True))

    def capture(self) -> None:
        """Warm up on a side stream (compiles `forward` on the first call), then record both graphs."""
        self.prompt_mask[:, -1] = 1  # a valid dummy batch: one token per row
        self._set_prefill_inputs()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(WARMUP_CALLS):
                self._prefill()
                self._reset()
                self._step()
        torch.cuda.current_stream().wait_stream(stream)
        self.pool = self.pool if self.pool is not None else torch.cuda.graph_pool_handle()
        self.prefill_graph, self.step_graph = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        # Captured on this decoder's own side stream (not torch's one default capture stream, which two threads
        # would share) and thread_local: only this thread is kept from unsafe CUDA calls while it captures, so a
        # trainer on another thread (`train.rollouts: async`) goes on; in one thread the same as the defaults.
        kw = {"pool": self.pool, "stream": stream, "capture_error_mode": "thread_local"}
        with torch.cuda.graph(self.prefill_graph, **kw):
            self._prefill()
        self._reset()
        with torch.cuda.graph(self.step_graph, **kw):
            self._step()
        torch.cuda.synchronize()

    def _set_prefill_inputs(self) -> None:
        m = self.prompt_mask.bool()  # (B, P)
        P = m.shape[1]
        causal = torch.ones(P, P, dtype=torch.bool, device=m.device).tril()  # (P, P) query i sees keys <= i
        eye = torch.eye(P, dtype=torch.bool, device=m.device)
        self.prefill_mask.copy_((causal & m[:, None, :] | eye).unsqueeze(1))  # a pad row attends to itself only
        self.prefill_pos.copy_(position_ids(self.prompt_mask))

    def run(
        self,
        ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        uniforms: torch.Tensor | None,
        max_new_tokens: int,
        seed: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, int]:
        """(b, p) left-padded prompts and mask, (b, T) uniforms (inverse-CDF) or the seed (Gumbel) -> the
        (B, T_bucket) output buffers and the number of steps run (rows past b and columns past the steps are junk:
        the caller crops)."""
        b, p = ids.shape
        self.ids.fill_(self.pad)
        self.prompt_mask.zero_()
        self.prompt_mask[b:, -1] = 1  # dummy rows: one valid pad token each
        self.ids[:b, -p:] = ids
        self.prompt_mask[:b, -p:] = prompt_mask
        self._set_prefill_inputs()
        if self.coupling == "gumbel":
            if seed is None:
                raise ValueError("a Gumbel decoder's run needs the seed")
            for buf, key in zip(self.keys, seed_words(seed), strict=True):
                buf.copy_(key)
        else:
            self.uniforms[:b, : uniforms.shape[1]] = uniforms
        prefill = self.prefill_graph.replay if self.prefill_graph is not None else self._prefill
        step = self.step_graph.replay if self.step_graph is not None else self._step
        prefill()
        self._reset()
        steps = max_new_tokens
        for t in range(max_new_tokens):
            step()
            if t + 1 < max_new_tokens and (t + 1) % CHECK_EVERY == 0 and not bool(self.alive[:b].any()):
                steps = t + 1
                break
        return self.tokens, self.logprobs, self.mask, self.full, steps


def add_noise_on_device(
    targets: list[tuple[str, torch.Tensor, torch.Tensor]], relative_std: float, seed: int, step: int
) -> None:
    """For (name, parameter, clean float32 source) on one device: parameter = w + relative_std · rms(w) · N(0, 1),
    w = clean rounded to the parameter's dtype (what `apply_noise` sees), the normal drawn on that device by a
    generator seeded like the CPU recipe's: on CPU the same numbers, on CUDA the same law from another stream. In
    place: no parameter is re-allocated."""
    for name, p, clean in targets:  # as on CPU: noise on the weight in the engine's dtype
        p.copy_(noised(clean.to(p.dtype), relative_std, seed, step, name, draw_on=p.device))
