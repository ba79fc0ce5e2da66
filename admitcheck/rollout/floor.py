"""The noise floor's rollout config: the candidate's engine kind in the reference's own precision, no precision recipe.

floor = floor_rollout(candidate.rollout, config.reference)   # what `screen` and `measure` measure beside it
"""

from __future__ import annotations

from admitcheck.config import ReferenceConfig, RolloutConfig


def floor_rollout(rollout: RolloutConfig, reference: ReferenceConfig) -> RolloutConfig:
    """The engine in the reference's own configuration: same engine kind, reference dtype, no recipe."""
    dtype = reference.dtype if reference.dtype != "float64" else "float32"
    if rollout.engine == "vllm" and dtype == "float32":
        dtype = "float32"  # vLLM-CPU runs float32; on GPUs users set bfloat16 references
    return RolloutConfig(
        engine=rollout.engine,
        dtype=dtype,
        device=rollout.device,
        vllm=rollout.vllm,
        cuda_graphs=rollout.cuda_graphs,
        compile=rollout.compile,
    )
