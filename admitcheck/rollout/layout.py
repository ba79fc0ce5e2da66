"""The token layout every engine and the reference scorer share, so that a response token sits at the same position,
with the same keys visible to it, when the engine samples it and when the reference re-scores it.

    ids, attn = left_pad(prompts, pad_token_id, device)      # (B, P) long each, prompts right-aligned
    positions = position_ids(attn)                           # (B, P) 0 … on real tokens, 0 on the left padding

Prompts are left-padded to the longest prompt P and the response follows at once; position ids are explicit,
cumsum(attention mask) − 1, so padding never shifts a real token. The logits that predict response token t are those
at position P − 1 + t (`measurement/scorer.py` keeps only those rows).
"""

from __future__ import annotations

import torch


def left_pad(
    prompts: list[list[int]], pad_token_id: int, device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor]:
    """B prompts -> (ids (B, P) long, attention mask (B, P) long), left-padded to the longest prompt P."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    P = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_token_id] * (P - len(p)) + list(p) for p in prompts], dtype=torch.long)
    attn = torch.tensor([[0] * (P - len(p)) + [1] * len(p) for p in prompts], dtype=torch.long)
    return ids.to(device), attn.to(device)


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, L) 0/1 mask -> (B, L) positions counting real tokens only (left padding sits at position 0)."""
    return (attention_mask.cumsum(-1) - 1).clamp_(min=0)
