"""What every rollout engine is: the `Engine` protocol and the `Rollouts` it returns (engines import this, never the
package `__init__`, so the package can build any engine without an import circle).

    rollouts: Rollouts = engine.sample(prompt_ids, sampling, seed=0, max_new_tokens=64)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from admitcheck.config import SamplingConfig


@dataclass(frozen=True)
class Rollouts:
    """What an engine sampled. B sequences, T = the longest response in this batch (right-padded)."""

    prompt_ids: list[list[int]]  # B prompts as token ids (no padding)
    token_ids: torch.Tensor  # (B, T) long, response tokens, pad_token_id after the end
    logprobs: torch.Tensor  # (B, T) float32, log μ(y_t | h_t) of the sampled tokens under the processed dist; 0 at pad
    mask: torch.Tensor  # (B, T) bool, True on response tokens (the EOS token included), False on padding
    finish_reasons: list[str]  # B of "stop" (emitted EOS) or "length" (hit max_new_tokens)
    full_logprobs: torch.Tensor | None = None  # (B, T, V) float32 processed log-probs, when asked for

    @property
    def num_tokens(self) -> int:
        return int(self.mask.sum())

    def responses(self) -> list[list[int]]:
        """The B responses as lists of token ids, padding removed."""
        return [row[m].tolist() for row, m in zip(self.token_ids, self.mask)]


@runtime_checkable
class Engine(Protocol):
    """A rollout engine: samples responses from its (possibly perturbed) copy of the student."""

    def sample(
        self,
        prompts: list[list[int]],
        sampling: SamplingConfig,
        seed: int,
        max_new_tokens: int,
        *,
        return_full: bool = False,
    ) -> Rollouts:
        """Sample one response per prompt; same seed and prompts -> same tokens."""
        ...

    def load_weights(self, weights: dict[str, torch.Tensor] | str | Path) -> None:
        """Replace the engine's weights (a state dict or a checkpoint dir) and re-apply the rollout recipe."""
        ...

    def close(self) -> None:
        """Release the engine's resources."""
        ...
