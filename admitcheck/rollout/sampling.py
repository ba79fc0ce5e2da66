"""The sampling transform that defines the rollout policy μ, shared by every engine and the reference scorer.

    logprobs = process_logits(logits, temperature=0.7, top_p=0.9, top_k=0)   # (B, V) float32
    tokens = sample_inverse_cdf(logprobs, uniforms)                          # (B,) long

μ is the distribution actually sampled from: raw logits / temperature, then top-k, then top-p (vLLM's order and
tie rules), renormalised over the kept set. The reference must replay the *same* transform on its own logits,
otherwise 0.3–0.4 nats/token of fake mismatch appear (TRL #6789, verl #6240). Sampling uses one uniform per
(sequence, position) drawn up front from a seeded generator, so two engines given the same seed draw with the
same random numbers (coupled sampling) and a sample does not depend on what else is in the batch.
"""

from __future__ import annotations

import torch


def process_logits(logits: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0) -> torch.Tensor:
    """(..., V) raw logits -> (..., V) float32 log-probs of the processed distribution (-inf outside the kept set)."""
    if temperature <= 0:
        raise ValueError("temperature must be > 0 (greedy decoding has no sampled distribution to compare)")
    x = logits.float() / temperature
    vocab = x.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(x, top_k, dim=-1).values[..., -1:]  # (..., 1)
        x = x.masked_fill(x < kth, float("-inf"))  # ties with the k-th logit are kept, as in vLLM
    if top_p < 1.0:
        # vLLM: sort ascending, drop the low tail whose cumulative mass is <= 1 - top_p, always keep the top token.
        sorted_x, order = torch.sort(x, dim=-1, descending=False)
        cum = torch.softmax(sorted_x, dim=-1).cumsum(dim=-1)
        drop_sorted = cum <= 1.0 - top_p
        drop_sorted[..., -1] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        x = x.masked_fill(drop, float("-inf"))
    return torch.log_softmax(x, dim=-1)


def sample_inverse_cdf(logprobs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """(B, V) processed log-probs and (B,) uniforms in (0, 1] -> (B,) token ids, by inverse CDF in vocab order.

    Inverse-CDF (rather than torch.multinomial) makes sampling a deterministic function of the uniforms, which is
    what coupled sampling needs: two engines with the same uniforms pick the same token unless their
    distributions differ enough to move the CDF across the uniform.
    """
    probs = logprobs.double().exp()  # (B, V)
    cum = probs.cumsum(dim=-1)  # (B, V)
    target = (uniforms.double() * cum[:, -1]).unsqueeze(-1)  # (B, 1), scaled so the rows need not sum to 1 exactly
    idx = torch.searchsorted(cum, target).squeeze(-1)  # first index with cum >= target
    return idx.clamp_(max=logprobs.shape[-1] - 1)


def draw_uniforms(num_sequences: int, num_positions: int, seed: int) -> torch.Tensor:
    """(num_sequences, num_positions) float64 uniforms in (0, 1], a pure function of the seed (CPU generator)."""
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    return 1.0 - torch.rand((num_sequences, num_positions), generator=gen, dtype=torch.float64)


# --- Gumbel-max coupling (issue 36) ----------------------------------------------------------------------------
# Inverse-CDF with one uniform per (sequence, position) flips a token whenever any vocabulary entry before it moves
# the CDF across the uniform; Gumbel-max with one noise value per (seed, sequence, position, token) keeps the argmax
# unless the perturbation reorders log μ + g near the top, so two nearby policies pick the same token far more often
# (near-maximal coupling for small perturbations). The noise is a counter-based hash of the four indices: no generator
# state, the same on any device and in any batch, so two engines and a replay see the same draws.

COUPLINGS = ("inverse_cdf", "gumbel")  # SamplingConfig.coupling's values
_M32 = 0xFFFFFFFF


def _mul32(a: torch.Tensor, c: int) -> torch.Tensor:
    """(a · c) mod 2^32 for int64 `a` in [0, 2^32) and a 32-bit constant, without int64 overflow (16-bit halves)."""
    lo, hi = c & 0xFFFF, c >> 16
    return (a * lo + (((a * hi) & 0xFFFF) << 16)) & _M32


def _fmix32(h: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's 32-bit finalizer (a bijection with full avalanche) on int64 tensors holding uint32 values."""
    h = h ^ (h >> 16)
    h = _mul32(h, 0x85EBCA6B)
    h = h ^ (h >> 13)
    h = _mul32(h, 0xC2B2AE35)
    return h ^ (h >> 16)


def seed_words(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A 64-bit seed's two keys for `hash_words` (0-dim int64 tensors holding uint32 values): the chain's start (its
    low then high half through fmix32) and the low half that keys the last round. A captured decode keeps them in
    device buffers, so a new seed is a copy, not a new graph."""
    s = int(seed) & ((1 << 64) - 1)
    h = _fmix32(torch.tensor((s & _M32) ^ 0x9E3779B9, dtype=torch.long))
    return _fmix32(h ^ ((s >> 32) & _M32)), torch.tensor(s & _M32, dtype=torch.long)


def hash_words(keys: tuple[torch.Tensor, torch.Tensor], *words: torch.Tensor) -> torch.Tensor:
    """A uint32 hash (in int64) of a seed's `seed_words` and broadcastable int64 index tensors, chained through
    fmix32; integer ops only (capturable in a CUDA graph; the same on any device)."""
    h, lo = keys
    for w in words:
        h = _fmix32(h ^ (w & _M32))
    return _fmix32(h ^ lo)  # a last round keyed by the seed again: neighbouring tokens decorrelate further


def gumbel_from_keys(keys: tuple[torch.Tensor, torch.Tensor], rows: torch.Tensor, position: torch.Tensor, vocab: int):
    """(B, V) float64 standard Gumbel noise of (seed, rows[b], position, token v), the seed as its `seed_words` and
    the position an int64 tensor of one element: what `gumbel_noise` computes, in tensor ops only."""
    dev = rows.device
    at = hash_words(keys, position.to(dev))
    h = hash_words(keys, rows.long().unsqueeze(1), at, torch.arange(vocab, dtype=torch.long, device=dev))
    u = (h.double() + 0.5) / 4294967296.0  # (B, V)
    return -torch.log(-torch.log(u))


def gumbel_noise(seed: int, rows: torch.Tensor, position: int, vocab: int) -> torch.Tensor:
    """(B, V) float64 standard Gumbel noise, a pure function of (seed, rows[b], position, token v) on `rows`'s device.

    u = (hash + ½) / 2^32 lies in (0, 1), so g = −log(−log u) is finite; its 2^-32 resolution is the only departure
    from an exact Gumbel (a bias below 1e-9 in any token's probability)."""
    keys = tuple(k.to(rows.device) for k in seed_words(seed))
    return gumbel_from_keys(keys, rows, torch.tensor(position, dtype=torch.long), vocab)


def sample_gumbel(logprobs: torch.Tensor, seed: int, rows: torch.Tensor, position: int) -> torch.Tensor:
    """(B, V) processed log-probs -> (B,) token ids argmax(log μ + g), g = `gumbel_noise(seed, rows, position, V)`.

    Gumbel-max samples exactly μ (tokens outside the kept set have log μ = −inf and are never chosen); row b of
    position t gets the same noise in every engine, whatever else is in the batch."""
    g = gumbel_noise(seed, rows.to(logprobs.device), position, logprobs.shape[-1])  # (B, V)
    return torch.argmax(logprobs.double() + g, dim=-1)
