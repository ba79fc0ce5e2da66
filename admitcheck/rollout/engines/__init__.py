"""Rollout engines: the `Engine` protocol, the `Rollouts` they return, and `build_engine` to pick one from a config.

    engine = build_engine(rollout_config, model_dir="toy/student", eos_token_id=2, pad_token_id=0)
    rollouts = engine.sample(prompt_ids, SamplingConfig(temperature=1.0), seed=0, max_new_tokens=64)

Every engine reports the same `Rollouts`, with the same sampling semantics (`admitcheck.rollout.sampling`): the sampled
tokens' log-probs are under the distribution actually sampled from (temperature, top-k, top-p, renormalised).
"""

from __future__ import annotations

from admitcheck.rollout.engines.base import Engine, Rollouts

__all__ = ["Engine", "Rollouts", "build_engine"]

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from admitcheck.config import RolloutConfig


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
