"""Rollout engines: the `Engine` protocol, the `Rollouts` they return, and `build_engine` to pick one from a config.

    engine = build_engine(rollout_config, model_dir="toy/student", eos_token_id=2, pad_token_id=0)
    rollouts = engine.sample(prompt_ids, SamplingConfig(temperature=1.0), seed=0, max_new_tokens=64)

Every engine reports the same `Rollouts`, with the same sampling semantics (`admitcheck.rollout.sampling`): the sampled
tokens' log-probs are under the distribution actually sampled from (temperature, top-k, top-p, renormalised).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from admitcheck.config import RolloutConfig, SamplingConfig


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


def build_engine(
    rollout: RolloutConfig,
    model_dir: str | Path,
    *,
    eos_token_id: int,
    pad_token_id: int,
) -> Engine:
    """The engine `rollout.engine` names, loaded from `model_dir` (or `rollout.weights_from` when set). A rollout
    whose layer indices or module globs do not fit the model is a ConfigError naming the field, before any load."""
    from admitcheck.rollout.precision import check_rollout_fits

    check_rollout_fits(rollout, model_dir)
    if rollout.engine == "hf":
        from admitcheck.rollout.engines.hf import HFEngine

        return HFEngine.from_pretrained(rollout, model_dir, eos_token_id=eos_token_id, pad_token_id=pad_token_id)
    if rollout.engine == "vllm":
        from admitcheck.rollout.engines.vllm import VLLMEngine

        return VLLMEngine.from_pretrained(rollout, model_dir, eos_token_id=eos_token_id, pad_token_id=pad_token_id)
    raise ValueError(f"unknown engine {rollout.engine!r}")
