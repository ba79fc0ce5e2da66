"""Reading and writing the calibration artifact `calibrations/<name>.yaml` (its schema: `calibration.schema`).

    cal = load_calibration("calibrations/toy.yaml")      # a CalibrationArtifact; CalibrationError naming file and field
    cal.budget.value, cal.budget.interval, cal.budget.kind  # nats/token
    write_calibration(cal, "calibrations/toy.yaml")       # the YAML only (its chart: `plots.plot_calibration`)
    ok, reason = calibration_matches(calibrate_config, cal) # may a demo reuse it for this config? (compatibility)

Loading is: read the YAML, check `schema_version` (a schema-1 artifact is refused with a message saying how to
regenerate it), `CalibrationArtifact.model_validate`. Writing is the inverse (`dump_calibration`): the keys the
artifact holds, in the schema's order, so a loaded artifact writes back the bytes it was read from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from admitcheck import fingerprint, io
from admitcheck.calibration.schema import (
    CURVE_FORMS,
    SCHEMA_VERSION,
    CalibrationArtifact,
    TrainingRecipe,
    protocol_keys,
)
from admitcheck.config import CalibrateConfig, PairConfig, ProbeConfig
from admitcheck.errors import AdmitcheckError, CalibrationError

__all__ = ["SCHEMA_VERSION", "CalibrationArtifact", "protocol_keys"]
M = TypeVar("M", bound=BaseModel)
# Recipe fields that define the training recipe a budget belongs to (steps, levels and seeds are effort, not recipe).
# sampling_coupling and ema (issue 36) are left out of a recipe's dump at their defaults: absent = the default
TRAINING_RECIPE_KEYS = ("loss", "student_logprobs", "lr", "lr_schedule", "tis_cap", "temperature", "grad_clip",
               "weight_decay", "max_new_tokens", "sampling_coupling", "ema", "grpo")  # fmt: skip


def fingerprint_pair(pair: PairConfig, probe: ProbeConfig | None = None) -> dict[str, Any]:
    """`fingerprint.pair_fingerprint`: canonical architecture and content hashes of student and teacher, the
    tokenizer, and the probe prompt set when `probe` is given."""
    return fingerprint.pair_fingerprint(pair, probe.prompts if probe is not None else None)


def protocol_of_screen(config: Any) -> dict[str, Any]:
    """`protocol_keys` of a ScreenConfig (or any config with sampling, probe and reference)."""
    return protocol_keys(config.sampling, config.probe, config.reference)


def plain(data: Any) -> Any:
    """Plain JSON/YAML types (str subclasses such as torch's version, tuples, numpy scalars become builtins)."""
    return json.loads(json.dumps(data, default=lambda o: o.item() if hasattr(o, "item") else str(o)))


def dump_yaml(data: Any) -> str:
    """The YAML every admitcheck output is written in (key order kept, unicode as is, 120 columns)."""
    return yaml.safe_dump(plain(data), sort_keys=False, allow_unicode=True, width=120)


def dump_calibration(cal: CalibrationArtifact) -> str:
    return dump_yaml(cal.dump())


def write_calibration(cal: CalibrationArtifact, path: str | Path) -> CalibrationArtifact:
    """Write the artifact atomically; returns it living at `path`. The chart is the caller's
    (`plots.plot_calibration`)."""
    path = Path(path)
    io.write_text_atomic(path, dump_calibration(cal))
    return cal.at(path)


def schema_error(exc: ValidationError, file: str) -> CalibrationError:
    """The first pydantic error as one CalibrationError naming the dotted field (a curve's form is not a field)."""
    err = exc.errors()[0]
    loc = [str(p) for i, p in enumerate(err["loc"]) if not (i == 1 and err["loc"][0] == "curve" and p in CURVE_FORMS)]
    msg = {"missing": "required field is missing", "extra_forbidden": "unknown key"}.get(err["type"], err["msg"])
    return CalibrationError(msg, file=file, field=".".join(loc) or "(top level)")


def read_output(path: Path, what: str) -> dict[str, Any]:
    """An output's YAML mapping (an artifact, a backtest report); a CalibrationError naming the file otherwise."""
    try:
        data = io.read_yaml(path)
    except AdmitcheckError as exc:
        raise CalibrationError(exc.message, file=str(path)) from None
    if not isinstance(data, dict):
        raise CalibrationError(f"not a {what} (expected a mapping)", file=str(path), field="(top level)")
    return data


def check_version(found: Any, supported: int, path: Path) -> None:
    if found != supported:
        raise CalibrationError(
            f"unsupported schema_version {found!r} (this admitcheck reads {supported})",
            file=str(path),
            field="schema_version",
        )


def validated(model: type[M], data: dict[str, Any], path: Path) -> M:
    """`model.model_validate(data)` living at `path`; a CalibrationError naming the file and the first bad field."""
    try:
        return model.model_validate(data).at(path)  # type: ignore[attr-defined]
    except ValidationError as exc:
        raise schema_error(exc, str(path)) from None


def load_calibration(path: str | Path) -> CalibrationArtifact:
    """Read and check an artifact; a CalibrationError naming the file and the first missing or bad field."""
    path = Path(path)
    data = read_output(path, "calibration artifact")
    version = data.get("schema_version")
    if version == 1:
        raise CalibrationError(
            "schema_version 1 (single unpaired runs, a Hill fit, τ grown by seed noise) is no longer read: "
            "regenerate it with `admitcheck calibrate CONFIG` (its config is under provenance.config; see "
            "docs/calibration.md)",
            file=str(path),
            field="schema_version",
        )
    if version is not None:  # missing: the schema names it
        check_version(version, SCHEMA_VERSION, path)
    return validated(CalibrationArtifact, data, path)


def prompt_hashes(config: CalibrateConfig) -> dict[str, str]:
    return {
        "probe": fingerprint.prompts_fingerprint(config.probe.prompts),
        "train": fingerprint.prompts_fingerprint(config.train.prompts),
        "eval": fingerprint.prompts_fingerprint(config.eval.prompts),
    }


def training_recipe_of(config: CalibrateConfig) -> dict[str, Any]:
    """The training recipe as stored (train prompts path excluded: `calibrate` stores it relative to the artifact)."""
    train = config.train.model_dump(mode="json", exclude={"prompts"})
    return {**train, "rollout": config.rollout.model_dump(mode="json"), "seed": config.seed}


def training_recipe_core(recipe: TrainingRecipe) -> dict[str, Any]:
    """The fields that define the recipe (`TRAINING_RECIPE_KEYS`, the base rollout) as set, each one unset as None,
    so that a field an older artifact lacks differs from any value a config gives it."""
    core = (*TRAINING_RECIPE_KEYS, "rollout")
    given = recipe.model_dump(mode="json", include=set(core), exclude_unset=True)
    return {k: given.get(k) for k in core}
