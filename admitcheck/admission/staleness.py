"""Stale candidates for `screen`: the reference after `staleness` OPD steps with the calibration's training recipe.

stale = stale_reference(calibration, screen_config, 2, reference=theta0)   # θ2, in the reference's precision
"""

from __future__ import annotations

import torch

from admitcheck import io
from admitcheck.calibration.levels import Level
from admitcheck.calibration.opd import cast_parameters, stale_student
from admitcheck.calibration.schema import CalibrationArtifact
from admitcheck.pairs.load import load_pair_tokenizer, tokenize_prompts


def stale_reference(
    calibration: CalibrationArtifact, config, staleness: int, *, reference: torch.nn.Module | None = None
):
    """For `screen`: the pair's student after `staleness` OPD steps with the calibration's recipe, and the seed a
    calibration level of that staleness uses (replicate 0), in the reference's precision. `config` is the screen's
    (pair, reference); `reference` the loaded θ0 (optional)."""

    recipe = calibration.recipe
    path = calibration.train_prompts()
    tokens = load_pair_tokenizer(config.pair, check_teacher=False)
    ids = tokenize_prompts(tokens, io.read_prompts(path, field="recipe.prompts"), file=str(path))
    cfg = recipe.train_config(str(path))
    device = config.reference.device
    teacher = io.load_causal_lm(config.pair.teacher, "float32", device, field="pair.teacher")
    start = reference if reference is not None else io.load_causal_lm(config.pair.student, "float32", device)
    seed = Level("stale", "staleness", staleness=staleness).seed(recipe.seed, 0)  # as the calibration
    stale = stale_student(start, teacher, ids, cfg, recipe.rollout, staleness, seed, tokens)
    return cast_parameters(stale, config.reference.dtype)
