"""The `recipe` kind: the cheapest admitted restriction of a recipe, screened against a calibration.

cfg = io.load_config("examples/toy_recipe.yaml", RecipeSearchConfig)
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from admitcheck.config.base import Strict
from admitcheck.config.screen import CapacityConfig, PolicyConfig, ScreenProbeConfig
from admitcheck.config.sections import PairConfig, ReferenceConfig, RolloutConfig, SamplingConfig
from admitcheck.config.sensitivity import UnitKind


class RecipeSearchConfig(Strict):
    """`admitcheck recipe`: the cheapest admitted restriction of `recipe`, screened against `calibration`."""

    kind: Literal["recipe"] | None = None  # optional: names the config kind (`validate` dispatches on it)
    name: str = Field("recipe", min_length=1)  # the candidate name in the YAML written for `screen`
    pair: PairConfig
    calibration: str
    probe: ScreenProbeConfig
    sampling: SamplingConfig = SamplingConfig()
    reference: ReferenceConfig = ReferenceConfig()
    policy: PolicyConfig = PolicyConfig()
    capacity: CapacityConfig = CapacityConfig()
    rollout: RolloutConfig  # the whole recipe the search starts from
    units: list[UnitKind] = Field(["kv", "attn", "mlp"], min_length=1)
    layers: list[int] | None = None
