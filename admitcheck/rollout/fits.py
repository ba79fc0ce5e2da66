"""Whether a rollout config fits its model: layer indices and module globs against config.json and the safetensors
headers (no torch, no weights), so `validate` stays fast. `rollout.precision` re-exports these names.

    problems = rollout_problems(rollout, num_layers=2, module_names=["model.layers.0.mlp.up_proj", ...])
    check_config_rollouts(measure_config, file="measure.yaml")     # ConfigError naming rollout.kv_cache.skip_layers
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from admitcheck.config import RolloutConfig
from admitcheck.errors import ConfigError


def rollout_problems(rollout: RolloutConfig, num_layers: int, module_names: Sequence[str]) -> list[tuple[str, str]]:
    """(field, message) for every part of `rollout` that cannot apply to a model with `num_layers` decoder layers and
    these module names: a layer index out of range, a module glob that matches nothing. Skipped where the model does
    not say (num_layers 0, no names)."""
    out: list[tuple[str, str]] = []
    fields = [("kv_cache.skip_layers", rollout.kv_cache.skip_layers)]
    if rollout.weights is not None:
        fields.append(("weights.exclude_layers", rollout.weights.exclude_layers))
    for fld, layers in fields:
        bad = [i for i in layers if num_layers and not 0 <= i < num_layers]
        if bad:
            out.append(
                (fld, f"layer {bad[0]} is out of range: the model has {num_layers} decoder layers (0–{num_layers - 1})")
            )
    if rollout.weights is not None and module_names:
        for glob in rollout.weights.exclude:
            if not any(fnmatch.fnmatchcase(n, glob) for n in module_names):
                out.append(("weights.exclude", f"{glob!r} matches no module of the model (e.g. {module_names[0]!r})"))
    return out


def check_rollout_fits(
    rollout: RolloutConfig, model_dir: str | Path, *, file: str | None = None, field: str = "rollout"
) -> None:
    """A ConfigError naming `field`.<key> for the first of `rollout_problems` on the model in `model_dir`
    (`rollout.weights_from` when set). Reads config.json and the safetensors headers only."""
    from admitcheck import io

    layers, names = io.model_layout(rollout.weights_from or model_dir, file=file, field=field)
    problems = rollout_problems(rollout, layers, names)
    if problems:
        key, message = problems[0]
        raise ConfigError(message, file=file, field=f"{field}.{key}")


def config_rollouts(config: Any) -> list[tuple[str, RolloutConfig]]:
    """(field, rollout) of every rollout config in a measure, screen, calibrate or sensitivity config."""
    out = []
    if getattr(config, "rollout", None) is not None:
        out.append(("rollout", config.rollout))
    for c in getattr(config, "candidates", None) or []:
        if getattr(c, "rollout", None) is not None:
            out.append((f"candidates.{c.name}.rollout", c.rollout))
    levels = getattr(config, "levels", None)
    for lv in getattr(levels, "extra", None) or []:
        if lv.rollout is not None:
            out.append((f"levels.extra.{lv.name}.rollout", lv.rollout))
    return out


def check_config_rollouts(config: Any, *, file: str | None = None) -> None:
    """`check_rollout_fits` for every rollout of `config` against its student (what `validate` runs)."""
    for fld, rollout in config_rollouts(config):
        check_rollout_fits(rollout, config.pair.student, file=file, field=fld)
