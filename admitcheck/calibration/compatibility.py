"""The one place that decides whether a calibration applies: to a screen (`check_compatibility`: the same pair
and measurement protocol, else a CalibrationError naming the field) and to a calibrate config that could reuse it
(`calibration_matches`: the same pair, protocol, metric and training recipe). Both compare flattened fingerprints
field by field (`fingerprint.strict_differences`).

    warnings = check_compatibility(screen_config, load_calibration("calibrations/toy.yaml"))
    ok, why = calibration_matches(calibrate_config, "calibrations/toy.yaml")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from admitcheck import fingerprint
from admitcheck.calibration.artifact import (
    Calibration,
    fingerprint_pair,
    load_calibration,
    prompt_hashes,
    protocol_keys,
    protocol_of_screen,
    recipe_core,
    recipe_of,
)
from admitcheck.config import CalibrateConfig, ScreenConfig
from admitcheck.errors import CalibrationError


def check_compatibility(config: ScreenConfig, calibration: Any, *, config_file: str | None = None) -> list[str]:
    """Whether the screen's pair and protocol are the calibration's. Returns warnings (strict fingerprint
    differences the behaviour check must settle); raises a CalibrationError naming the first field that makes the
    calibration unusable: the tokenizer, the probe prompt set or the protocol (sampling temperature, top_p, top_k,
    probe.max_new_tokens, reference.dtype). From logs, only the pair's models and tokenizer are compared (the logs
    come from the pipeline's own prompts and sampling).

    Architecture and weight hashes that differ are not refused here: a re-saved or rebuilt pair can be the same
    pair. `load_checked_calibration` then compares the models' behaviour (`fingerprint.check_behaviour`). The metric
    is the calibration's, whatever it is: the screen measures on its scale (`admission.decision_estimator`).
    """

    logs = config.source == "logs"
    present = fingerprint_pair(config.pair, None if logs else config.probe)
    diffs = fingerprint.strict_differences(calibration.pair_fingerprint, present)
    mine: dict[str, Any] = {}
    theirs: dict[str, Any] = {}
    if not logs:
        mine |= protocol_of_screen(config)
        theirs |= calibration.protocol
    blocking = [d for d in diffs if d.field in ("pair.tokenizer", "pair.probe_prompts")]
    blocking += [fingerprint.Difference(k, theirs.get(k), mine.get(k)) for k in sorted(set(mine) | set(theirs))
                 if theirs.get(k) != mine.get(k)]  # fmt: skip
    blocking.sort(key=lambda d: d.field != "metric")
    if blocking:
        d = blocking[0]
        name = "probe.prompts" if d.field == "pair.probe_prompts" else d.field.removeprefix("protocol.")
        raise CalibrationError(
            f"differs from the calibration {calibration.path}: it has {fingerprint.short_value(d.stored)}, this screen "
            f"{fingerprint.short_value(d.present)}; use a calibration of this pair and protocol, or screen with the "
            "calibration's settings",
            file=config_file,
            field=name,
        )
    return [str(d) for d in diffs if d.field not in ("pair.tokenizer", "pair.probe_prompts")]


def calibration_matches(config: CalibrateConfig, artifact: Calibration | str | Path) -> tuple[bool, str]:
    """(True, "") when `artifact` is valid for `config`: same pair (models, tokenizer, all prompt sets), protocol,
    metric and training recipe (`RECIPE_KEYS`, the base rollout); else (False, the first differing field).

    Steps, levels, seeds, eval size and tolerance are calibration effort: they may differ (so a quick demo setting
    can reuse a fuller shipped calibration of the same pair and recipe).
    """
    cal = artifact if isinstance(artifact, Calibration) else load_calibration(artifact)
    p = cal.data["pair"]
    stored = {k: p[k] for k in ("student", "teacher", "tokenizer")} | {"prompts": p["prompts"]}
    present = fingerprint_pair(config.pair) | {"prompts": prompt_hashes(config)}
    diffs = fingerprint.strict_differences(stored, present, prefix="pair.")
    if diffs:
        return False, str(diffs[0])
    theirs = cal.protocol | {"metric": cal.metric} | fingerprint.flatten({"recipe": recipe_core(cal.recipe)})
    mine = protocol_keys(config.sampling, config.probe, config.reference) | {"metric": config.metric}
    mine |= fingerprint.flatten({"recipe": recipe_core(recipe_of(config))})
    for key in sorted(set(mine) | set(theirs)):
        if mine.get(key) != theirs.get(key):
            return False, f"{key}: artifact has {theirs.get(key)!r}, config has {mine.get(key)!r}"
    return True, ""
