"""The `sensitivity` kind: the mismatch of each unit (a layer's KV cache, attention, MLP) under the recipe.

cfg = io.load_config("examples/toy_sensitivity.yaml", SensitivityConfig)
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from admitcheck.config.sections import RolloutOnProbes

UnitKind = Literal["kv", "attn", "mlp"]


class SensitivityConfig(RolloutOnProbes):
    """`admitcheck sensitivity`: per-unit mismatch of `recipe` on the probe set."""

    kind: Literal["sensitivity"] | None = None  # `rollout`: the whole recipe, e.g. FP8 weights + FP8 KV cache
    units: list[UnitKind] = Field(["kv", "attn", "mlp"], min_length=1)
    layers: list[int] | None = None  # decoder layers to test; default all
    full_logprobs: bool = False  # also kl_exact per unit; costs (B, T, V) memory
    confidence: float = Field(0.95, gt=0, lt=1)
