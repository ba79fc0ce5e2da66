"""Stale candidates for `screen`: the reference after `staleness` OPD steps with the calibration's training recipe.

stale = stale_reference(calibration, screen_config, 2, LoadedPair(screen_config.pair))   # θ2, reference precision
"""

from __future__ import annotations

from admitcheck import io
from admitcheck.calibration.grpo import train_prompts
from admitcheck.calibration.levels import Level
from admitcheck.calibration.opd import cast_parameters, stale_student
from admitcheck.calibration.schema import CalibrationArtifact
from admitcheck.pairs.load import LoadedPair


def stale_reference(calibration: CalibrationArtifact, config, staleness: int, pair: LoadedPair):
    """For `screen`: the pair's student after `staleness` OPD steps with the calibration's recipe, and the seed a
    calibration level of that staleness uses (replicate 0), in the reference's precision. `config` is the screen's
    (pair, reference); `pair` the screen's `LoadedPair` (θ0 and the teacher in float32 on the reference's device,
    loaded once for every stale candidate; θ0 is the reference itself when that is float32)."""

    recipe = calibration.recipe
    path = calibration.train_prompts()
    tokens = pair.tokens
    cfg = recipe.train_config(str(path))
    ids, task = train_prompts(io.read_prompts(path, field="recipe.prompts"), tokens, cfg, file=str(path))
    device = config.reference.device
    teacher, start = pair.teacher("float32", device), pair.student("float32", device)
    seed = Level("stale", "staleness", staleness=staleness).seed(recipe.seed, 0)  # as the calibration
    stale = stale_student(start, teacher, ids, cfg, recipe.rollout, staleness, seed, tokens, task=task)
    return cast_parameters(stale, config.reference.dtype)
