"""The one place that decides whether a calibration applies: to a screen (`check_compatibility`: the same pair,
measurement protocol and objective, a budget that can admit, else a CalibrationError naming the field) and to a
calibrate config that could reuse it (`calibration_matches`: the same pair, protocol, metric and training recipe).
Both compare flattened fingerprints field by field (`fingerprint.strict_differences`); a screen's config is also
held to `rollout.limits.check_limits` (what no engine could do with it).

    warnings = check_compatibility(screen_config, load_calibration("calibrations/toy.yaml"))
    ok, why = calibration_matches(calibrate_config, "calibrations/toy.yaml")

Everything here reads config.json, tokenizer.json, prompt files and the artifact, never weights, so `validate`
refuses exactly what `screen` would refuse before it loads a model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from admitcheck import fingerprint, io
from admitcheck.calibration.artifact import (
    fingerprint_pair,
    load_calibration,
    prompt_hashes,
    protocol_keys,
    protocol_of_screen,
    training_recipe_core,
    training_recipe_of,
)
from admitcheck.calibration.schema import CalibrationArtifact, TrainingRecipe
from admitcheck.config import CalibrateConfig, ScreenConfig
from admitcheck.errors import AdmitcheckError, CalibrationError, ConfigError
from admitcheck.rollout.limits import check_limits

# config.json keys that fix the tensors' shapes or the network's wiring: a pair that differs in one of them is another
# model (the behaviour check could only fail), so it is refused without loading weights. Other architecture keys
# (rms_norm_eps, rope settings) are left to the behaviour check: a rebuilt pair may differ there and behave the same.
STRUCTURAL_KEYS = ("architectures", "model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
                   "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size", "tie_word_embeddings",
                   "hidden_act")  # fmt: skip


def objective_of(recipe: TrainingRecipe) -> str:
    """The objective a calibration's budget belongs to: "rl" for train.loss grpo, else "opd" (pg, gkd_reverse_kl)."""
    return "rl" if recipe.loss == "grpo" else "opd"


def check_compatibility(
    config: ScreenConfig, calibration: CalibrationArtifact, *, config_file: str | None = None
) -> list[str]:
    """Whether the screen's pair, protocol and objective are the calibration's and its budget can admit. Returns
    warnings (strict fingerprint differences the behaviour check must settle); raises a CalibrationError naming the
    first field that makes the calibration unusable: the tokenizer, the probe prompt set or the protocol (sampling
    temperature, top_p, top_k, probe.max_new_tokens, reference.dtype); the `objective` (an RL budget for an OPD
    gate, or the reverse); an architecture that differs in shape (`STRUCTURAL_KEYS`, parameter count); strict
    differences that an artifact without a behavioural fingerprint cannot settle; a budget whose lower bound is 0
    (nothing can be admitted by the bound) unless `policy.reject_only`. From logs, only the pair's models and
    tokenizer are compared (the logs come from the pipeline's own prompts and sampling), and `logs.checkpoint`,
    when given, must be a checkpoint of this student. A ConfigError for the limits of `rollout.limits.check_limits`.

    Weight hashes that differ are not refused here: a re-saved or rebuilt pair can be the same pair.
    `load_checked_calibration` then compares the models' behaviour (`fingerprint.check_behaviour`). The metric
    is the calibration's, whatever it is: the screen measures on its scale (`sequential.decision_estimator`).
    """

    logs = getattr(config, "source", "engine") == "logs"
    present = fingerprint_pair(config.pair, None if logs else config.probe)
    diffs = fingerprint.strict_differences(calibration.pair_fingerprint, present)
    mine: dict[str, Any] = {}
    theirs: dict[str, Any] = {}
    if not logs:
        mine |= protocol_of_screen(config)
        theirs |= calibration.protocol.flat()
    blocking = [d for d in diffs if d.field in ("pair.tokenizer", "pair.probe_prompts")]
    blocking += [
        fingerprint.Difference(k, theirs.get(k), mine.get(k))
        for k in sorted(set(mine) | set(theirs))
        if theirs.get(k) != mine.get(k)
    ]
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
    _check_objective(config, calibration, config_file)
    _check_staleness(config, calibration, config_file)
    structural = [d for d in diffs if _structural(d.field)]
    if structural:
        d = structural[0]
        side = d.field.split(".")[1]
        raise CalibrationError(
            f"this pair is not the calibration's: {d} (another architecture: the budget of {calibration.path} says "
            "nothing about it); use this pair's own calibration, or the pair the calibration was made with",
            file=config_file,
            field=f"pair.{side}",
        )
    notes = [str(d) for d in diffs if d.field not in ("pair.tokenizer", "pair.probe_prompts")]
    if notes and calibration.pair.behaviour is None:
        raise CalibrationError(
            f"{notes[0]}; the calibration stores no behavioural fingerprint to settle it: re-run calibrate",
            file=config_file,
            field="pair",
        )
    _check_budget_can_admit(config, calibration, config_file)
    if logs and config.logs is not None and config.logs.checkpoint:
        check_logs_checkpoint(config, calibration, config_file)
    if not logs:
        check_limits(config, file=config_file)
    return notes


def _structural(field: str) -> bool:
    """A `pair.<side>.architecture.<key>` or `pair.<side>.parameters` difference that no rebuild explains."""
    parts = field.split(".")
    if len(parts) == 3 and parts[2] == "parameters":
        return True
    return len(parts) >= 4 and parts[2] == "architecture" and parts[3] in STRUCTURAL_KEYS


def _check_objective(config: Any, calibration: CalibrationArtifact, file: str | None) -> None:
    want, have = getattr(config, "objective", "opd"), objective_of(calibration.recipe)
    if want != have:
        raise CalibrationError(
            f"this screen gates {want.upper()} training (objective: {want}), but {calibration.path} is a budget for "
            f"{have.upper()} (recipe.loss {calibration.recipe.loss!r}); the two objectives tolerate different "
            f"mismatch (docs/rl.md): use a calibration of {want.upper()}, or set objective: {have} if that is the "
            "training you gate",
            file=file,
            field="objective",
        )


def _check_staleness(config: Any, calibration: CalibrationArtifact, file: str | None) -> None:
    """A stale candidate's rollouts come from weights `staleness` optimizer steps old, in a run of the calibration's
    `recipe.steps`: at or beyond that, no step of the run has such weights."""
    steps = calibration.recipe.steps
    for cand in getattr(config, "candidates", None) or []:
        if steps is not None and cand.staleness is not None and cand.staleness >= steps:
            raise ConfigError(
                f"staleness {cand.staleness} is at or beyond the {steps} optimizer steps of the training recipe of "
                f"{calibration.path} (recipe.steps): no step of such a run has weights that old; use a staleness "
                f"below {steps}",
                file=file,
                field=f"candidates.{cand.name}.staleness",
            )


def check_is_calibration(path: str | Path, *, file: str | None = None, field: str = "calibration") -> None:
    """A CalibrationError naming what the file is when `path` is another admitcheck output (a backtest report)
    given where a calibration artifact belongs (`load_calibration` would report an unsupported schema version)."""
    try:
        data = io.read_yaml(Path(path))
    except (AdmitcheckError, OSError):
        return  # missing or unreadable: load_calibration names it
    if isinstance(data, dict) and data.get("kind") == "backtest":
        backtested = data.get("calibration")
        ref = backtested.get("path") if isinstance(backtested, dict) else backtested
        hint = f", e.g. the one it backtests: {Path(path).parent / ref}" if isinstance(ref, str) else ""
        raise CalibrationError(
            f"{path} is a backtest report (kind: backtest), not a calibration artifact; point {field} at a "
            f"calibration (admitcheck calibrate writes one){hint}",
            file=file,
            field=field,
        )


def _check_budget_can_admit(config: Any, calibration: CalibrationArtifact, file: str | None) -> None:
    """ADMIT needs the mismatch's upper bound below the budget's lower bound: with a lower bound of 0 (a budget
    below the smallest level, or too few runs to bound it away from 0) no candidate can be admitted by the bound."""
    b = calibration.budget
    if b.interval[0] > 0 or getattr(config.policy, "reject_only", False):
        return
    raise CalibrationError(
        f"the budget of {calibration.path} ({b.value:.3g} nats/token, {b.kind}) has lower confidence bound 0 "
        f"(interval [0, {b.interval[1]:.3g}]): no candidate can be admitted against it, since ADMIT needs the "
        "mismatch's upper bound below that lower bound. Re-calibrate with levels below the smallest one "
        "(levels.auto_noise.min_mismatch, or a small levels.extra relative_std) and more replicates "
        "(levels.replicates, levels.max_runs); or set policy.reject_only: true to gate on REJECT only",
        file=file,
        field="calibration",
    )


def check_logs_checkpoint(config: ScreenConfig, calibration: CalibrationArtifact, file: str | None) -> None:
    """`logs.checkpoint`: the trainer checkpoint that scored the logs must be this pair's student after training
    (the calibration's student architecture and tokenizer; its weights have moved, so they are not compared)."""
    check_student_checkpoint(config.logs.checkpoint, calibration, file, "logs.checkpoint", "the trainer checkpoint")


def check_student_checkpoint(path: str, calibration: CalibrationArtifact, file: str | None, field: str,
                             what: str = "the checkpoint") -> None:  # fmt: skip
    """A checkpoint dir must be this pair's student after training: the calibration's student architecture
    (`STRUCTURAL_KEYS` of config.json) and, when it holds one, tokenizer; its weights have moved, so they are not
    compared. Reads config.json and the tokenizer files only (no weights)."""
    ckpt = Path(path)
    if not (ckpt / "config.json").is_file():
        raise ConfigError(f"not a model dir (no config.json): {ckpt}", file=file, field=field)
    stored = calibration.pair.student.architecture
    try:
        present = io.read_json(ckpt / "config.json")
    except ConfigError as exc:
        raise ConfigError(f"{ckpt / 'config.json'}: {exc.message}", file=file, field=field) from None
    if not isinstance(present, dict):
        raise ConfigError(f"{ckpt / 'config.json'} is not a JSON object", file=file, field=field)
    for key in STRUCTURAL_KEYS:  # the weights moved in training and are not hashed (a checkpoint can be large)
        if stored.get(key) != present.get(key):
            raise CalibrationError(
                f"{what} is not a checkpoint of this pair's student: {key} is "
                f"{present.get(key)!r} there, {stored.get(key)!r} in the calibration",
                file=file,
                field=field,
            )
    has_tokenizer = (ckpt / "tokenizer.json").is_file() or (ckpt / "tokenizer_config.json").is_file()
    if has_tokenizer and fingerprint.tokenizer_fingerprint(ckpt) != calibration.pair.tokenizer:
        raise CalibrationError(f"{what}'s tokenizer is not the calibration's", file=file, field=field)


def calibration_matches(config: CalibrateConfig, artifact: CalibrationArtifact | str | Path) -> tuple[bool, str]:
    """(True, "") when `artifact` is valid for `config`: same pair (models, tokenizer, all prompt sets), protocol,
    metric and training recipe (`TRAINING_RECIPE_KEYS`, the base rollout); else (False, the first differing field).

    Steps, levels, seeds, eval size and tolerance are calibration effort: they may differ (so a quick demo setting
    can reuse a fuller shipped calibration of the same pair and recipe).
    """
    cal = artifact if isinstance(artifact, CalibrationArtifact) else load_calibration(artifact)
    p = cal.pair.model_dump(mode="json", exclude_unset=True)
    stored = {k: p[k] for k in ("student", "teacher", "tokenizer")} | {
        "prompts": cal.pair.prompts.model_dump(mode="json", exclude_unset=True)
    }
    present = fingerprint_pair(config.pair) | {"prompts": prompt_hashes(config)}
    diffs = fingerprint.strict_differences(stored, present, prefix="pair.")
    if diffs:
        return False, str(diffs[0])
    theirs = cal.protocol.flat() | {"metric": cal.metric}
    theirs |= fingerprint.flatten({"recipe": training_recipe_core(cal.recipe)})
    mine = protocol_keys(config.sampling, config.probe, config.reference) | {"metric": config.metric}
    recipe = TrainingRecipe.model_validate(training_recipe_of(config))
    mine |= fingerprint.flatten({"recipe": training_recipe_core(recipe)})
    # what the quality scores (a GRPO recipe's quality is 1 − this accuracy); an older artifact's is exact
    theirs["eval.accuracy"] = cal.quality.eval.accuracy if cal.quality.eval is not None else "exact"
    mine["eval.accuracy"] = config.eval.accuracy
    for key in sorted(set(mine) | set(theirs)):
        if mine.get(key) != theirs.get(key):
            return False, f"{key}: artifact has {theirs.get(key)!r}, config has {mine.get(key)!r}"
    return True, ""
