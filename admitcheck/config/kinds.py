"""The config kinds, one record per kind in `KINDS` (its schema; its `kind:` key names it), and how a YAML's kind
is named or detected (`config_kind`).

    config_kind({"candidates": [], "pair": {}})   # ("screen", "detected from its keys")
    schema_for("screen")                       # ScreenConfig
"""

from __future__ import annotations

import difflib
from typing import Any, Literal

from pydantic import BaseModel

from admitcheck.config.backtest import BacktestConfig
from admitcheck.config.calibrate import CalibrateConfig
from admitcheck.config.measure import MeasureConfig
from admitcheck.config.plan import PlanConfig
from admitcheck.config.recipe import RecipeSearchConfig
from admitcheck.config.screen import ScreenConfig
from admitcheck.config.sensitivity import SensitivityConfig

ConfigKind = Literal["measure", "calibrate", "screen", "sensitivity", "recipe", "backtest", "plan"]  # KINDS' keys
# The config kinds, each with its schema (its `kind:` key names it): `validate`, the detection and --kind read this.
KINDS: dict[ConfigKind, type[BaseModel]] = {
    "measure": MeasureConfig,
    "calibrate": CalibrateConfig,
    "screen": ScreenConfig,
    "sensitivity": SensitivityConfig,
    "recipe": RecipeSearchConfig,
    "backtest": BacktestConfig,
    "plan": PlanConfig,
}
CONFIG_KINDS: tuple[str, ...] = tuple(KINDS)


def config_kind(data: Any) -> tuple[str, str]:
    """(kind, how) of a config's parsed YAML: its top-level `kind:` when it has one ("named by kind:"), else
    detected from the keys only one kind has ("detected from its keys"): calibrate_config → backtest, calibration
    with candidates or screen_result but no probe → plan, candidates → screen, train → calibrate, calibration
    without candidates → recipe, units or layers → sensitivity, else measure. When some top-level keys are unknown
    to that kind, the kind they fit best is taken instead (a key one letter off a kind's own counts half), so
    `candidats:` in a screen config is still a screen config and the misspelt key is what gets named. A config
    whose keys fit two kinds (a sensitivity config without `units`) should name its kind."""
    if isinstance(data, dict) and data.get("kind") is not None:
        return str(data["kind"]), "named by kind:"
    keys = {str(k) for k in data} if isinstance(data, dict) else set()
    if "calibrate_config" in keys:
        kind = "backtest"
    elif "calibration" in keys and "probe" not in keys and keys & {"candidates", "screen_result"}:
        kind = "plan"
    elif "candidates" in keys:
        kind = "screen"
    elif "train" in keys:
        kind = "calibrate"
    elif "calibration" in keys:
        kind = "recipe"
    elif keys & {"units", "layers"}:
        kind = "sensitivity"
    else:
        kind = "measure"

    def misfit(name: str) -> float:
        known = list(schema_for(name).model_fields)
        return sum(
            0.5 if difflib.get_close_matches(k, known, n=1, cutoff=0.75) else 1.0 for k in keys if k not in known
        )

    if misfit(kind):
        kind = min((kind, *CONFIG_KINDS), key=misfit)  # ties keep the rule's kind (first)
    return kind, "detected from its keys"


def schema_for(kind: str) -> type[BaseModel]:
    """The pydantic schema of a config kind (ValueError for an unknown one)."""
    if kind not in KINDS:
        raise ValueError(f"unknown config kind {kind!r} (known: {', '.join(KINDS)})")
    return KINDS[kind]
