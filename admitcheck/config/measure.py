"""The `measure` kind: one candidate's mismatch against the reference, beside the noise floor.

cfg = io.load_config("examples/toy_measure.yaml", MeasureConfig)
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from admitcheck.config.sections import RolloutOnProbes


class MeasureConfig(RolloutOnProbes):
    """`admitcheck measure`: one candidate's mismatch against the reference, beside the noise floor."""

    kind: Literal["measure"] | None = None
    floor: bool = True  # also measure the engine in the reference's configuration (the noise floor)
    full_logprobs: bool = True  # compare full distributions too (kl_exact); costs (B, T, V) memory
    confidence: float = Field(0.95, gt=0, lt=1)
    diagnostics: list[Literal["prefix_shift"]] = []  # prefix_shift: coupled sampling vs the reference (hf engine)
