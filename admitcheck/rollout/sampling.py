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
