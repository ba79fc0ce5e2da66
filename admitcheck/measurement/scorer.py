"""Reference scoring by teacher forcing: log π(y_t | h_t) of tokens someone else sampled, under the same transform.

    scores = score(reference_model, rollouts.prompt_ids, rollouts.token_ids, rollouts.mask, sampling, full=True)
    scores.logprobs          # (B, T) float32 on CPU, 0 where mask is False
    lp, full = response_logprobs(student, prompt_ids, token_ids, mask, sampling)   # keeps the autograd graph

Layout: the engines' (`rollout/layout.py`: prompts left-padded to the longest prompt, the response right after them,
explicit position ids = cumsum(attention mask) - 1). So a response token sits at the same position, with the same
keys visible to it, as when the engine sampled it, and the engine in the reference's configuration reproduces these
log-probs to float32 rounding (<= 1e-6 nats, 1 ulp).
The logits that predict response token t are those at position P - 1 + t; only those T rows go through the
lm_head (`logits_to_keep`) and the sampling transform, never the (B, L, V) block over the prompt.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from admitcheck.config import SamplingConfig
from admitcheck.rollout.layout import left_pad, position_ids
from admitcheck.rollout.sampling import process_logits


@dataclass(frozen=True)
class Scores:
    """Reference log-probs of the sampled tokens (and optionally full rows), on CPU."""

    logprobs: torch.Tensor  # (B, T) float32, log π(y_t | h_t) under the processed distribution; 0 where mask False
    full_logprobs: torch.Tensor | None = None  # (B, T, V) float32 processed log-probs; 0 where mask False


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def response_logprobs(
    model: torch.nn.Module,
    prompt_ids: list[list[int]],
    token_ids: torch.Tensor,
    mask: torch.Tensor,
    sampling: SamplingConfig,
    *,
    full: bool = False,
    kept: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Processed log-probs of `token_ids` (B, T) given their prompts, by one teacher-forced forward.

    Runs under the caller's grad mode and module mode (the OPD trainer backpropagates through it). Returns
    (B, T) float32 sampled-token log-probs, 0 where `mask` is False, and the (B, T, V) float32 processed rows when
    `full` (0 where `mask` is False), both on the model's device.

    `kept` (B, T, V) bool, optional: renormalise over this kept set (the engine's, e.g. `isfinite(rollouts.
    full_logprobs)`) instead of re-deriving top-k/top-p from the reference's own logits. Re-deriving it is the
    default and what a trainer does; but where the engine's and the reference's logits straddle the top-k/top-p
    boundary a sampled token can fall outside the reference's set and get log π = -inf (seen with a BF16 engine).
    """
    device = model_device(model)
    token_ids = token_ids.to(device)
    mask = mask.to(device)
    B, T = token_ids.shape
    if T == 0:
        empty = torch.zeros(B, 0, device=device)
        return empty, (empty.unsqueeze(-1) if full else None)
    ids, attn = left_pad(prompt_ids, 0, device)  # (B, P)
    # The last response token predicts nothing we score: feed P + T - 1 tokens, keep the logits of the last T.
    input_ids = torch.cat([ids, token_ids[:, :-1]], dim=1)  # (B, P + T - 1)
    attn = torch.cat([attn, torch.ones_like(token_ids[:, :-1])], dim=1)  # causal: the tail never reaches a scored token
    out = model(
        input_ids=input_ids,
        attention_mask=attn,
        position_ids=position_ids(attn),
        use_cache=False,
        logits_to_keep=T,
    )
    if kept is None:
        logp = process_logits(out.logits, sampling.temperature, sampling.top_p, sampling.top_k)  # (B, T, V) float32
    else:
        x = out.logits.float() / sampling.temperature  # (B, T, V)
        logp = torch.log_softmax(x.masked_fill(~kept.to(device), float("-inf")), dim=-1)
    lp = logp.gather(-1, token_ids.unsqueeze(-1)).squeeze(-1).masked_fill(~mask, 0.0)  # (B, T)
    return lp, (logp.masked_fill(~mask.unsqueeze(-1), 0.0) if full else None)


@torch.no_grad()
def score(
    model: torch.nn.Module,
    prompt_ids: list[list[int]],
    token_ids: torch.Tensor,
    mask: torch.Tensor,
    sampling: SamplingConfig,
    *,
    full: bool = False,
    batch_size: int | None = None,
    kept: torch.Tensor | None = None,
    full_on_device: bool = False,
) -> Scores:
    """`response_logprobs` without gradients, `batch_size` sequences per forward, results on CPU (`full_on_device`:
    the (B, T, V) rows on the model's device, for a caller that reduces them there).

    Each batch is cut to its longest response, so a batch of short answers costs what short answers cost.
    `kept` (B, T, V) bool: the engine's kept set, as in `response_logprobs`.
    """
    B, T = token_ids.shape
    if len(prompt_ids) != B or mask.shape != token_ids.shape:
        raise ValueError(f"{len(prompt_ids)} prompts, token_ids {tuple(token_ids.shape)}, mask {tuple(mask.shape)}")
    step = batch_size or max(B, 1)
    logprobs = torch.zeros(B, T, dtype=torch.float32)  # (B, T)
    full_rows: torch.Tensor | None = None  # (B, T, V), allocated once V is known
    for s in range(0, B, step):
        m = mask[s : s + step].bool()
        cols = m.any(dim=0).nonzero()
        if cols.numel() == 0:
            continue
        n = int(cols.max()) + 1  # this batch's longest response
        kept_b = kept[s : s + step, :n] if kept is not None else None
        lp, rows = response_logprobs(
            model, prompt_ids[s : s + step], token_ids[s : s + step, :n], m[:, :n], sampling, full=full, kept=kept_b
        )
        logprobs[s : s + step, :n] = lp.cpu()
        if rows is not None:
            if full_rows is None:
                where = rows.device if full_on_device else torch.device("cpu")
                full_rows = torch.zeros(B, T, rows.shape[-1], dtype=torch.float32, device=where)
            full_rows[s : s + step, :n] = rows.to(full_rows.device)
    if full and full_rows is None:  # nothing to score: zeros of the model's vocabulary width
        full_rows = torch.zeros(B, T, model.get_output_embeddings().weight.shape[0], dtype=torch.float32)
    return Scores(logprobs, full_rows)
