"""Every error a config holds, found without loading a model (torchtune's `tune validate`, collecting):

    result = validate("examples/toy_screen.yaml")
    for e in result.errors:                 # AdmitcheckErrors, `file: field: message`
        print(e)
    result.info                             # what the command would run (the `admitcheck validate` table)

The order: the YAML and the config kind (nothing else can be checked without them), every schema error with its
field path, then the inputs, limits, pair and calibration compatibility of that kind. A check that needs an earlier
one (the calibration's, which hashes the pair dirs the input check found missing) is skipped when that one failed,
so one cause is named once. `admitcheck validate` (cli.py) prints them and exits 2 if there is any.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from admitcheck import io
from admitcheck.config import CONFIG_KINDS, config_kind, schema_for
from admitcheck.errors import AdmitcheckError, Collected, ConfigError


@dataclass(frozen=True)
class Validation:
    """What `validate` found: the config's kind (None when it could not be told) and how it was told, what the
    command would run (`info`, complete only without errors) and every error, in the order above."""

    kind: str | None
    kind_from: str
    info: dict[str, Any] = field(default_factory=dict)
    errors: tuple[AdmitcheckError, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.errors


def validate(
    config: str | Path, *, kind: str | None = None, candidates: list[str] | None = None, strict: bool = False
) -> Validation:
    """All errors of the config at `config` (any kind; `kind` overrides its `kind:` key and the detection);
    `candidates` limits a screen config's checks to those, `strict` refuses logs that measure another quantity than
    the budget's protocol (else a warning)."""
    path, file = Path(config), str(config)
    try:
        data = io.read_yaml(path)
    except AdmitcheckError as exc:
        return Validation(None, "", errors=(exc,))
    name, how = (kind, "named by --kind") if kind else config_kind(data)
    if name not in CONFIG_KINDS:
        error = ConfigError(
            f"unknown config kind {name!r} (known: {', '.join(CONFIG_KINDS)})",
            file=file,
            field="--kind" if kind else "kind",
        )
        return Validation(None, how, errors=(error,))
    cfg, schema = io.config_errors(data, schema_for(name), base=path.resolve().parent, file=file)
    if cfg is None:
        return Validation(name, how, errors=tuple(schema))
    errors: list[AdmitcheckError] = []
    info = _checks(name, cfg, file, errors, candidates=candidates, strict=strict)
    return Validation(name, how, info if not errors else {}, tuple(errors))


def _checks(
    name: str, cfg: Any, file: str, errors: list[AdmitcheckError], *, candidates: list[str] | None, strict: bool
) -> dict[str, Any]:
    """The checks after the schema, for a config of kind `name`; each error joins `errors`."""
    if name in ("backtest", "plan"):
        if name == "plan":
            from admitcheck.admission.plan import validate as validate_other
        else:
            from admitcheck.admission.backtest import validate as validate_other
        with Collected(errors):
            return validate_other(cfg, config_file=file)
        return {}
    if (Path(cfg.pair.student) / "config.json").is_file():  # else the pair check below names it
        from admitcheck.rollout.fits import check_config_rollouts

        with Collected(errors):
            check_config_rollouts(cfg, file=file)
    if name == "screen":
        from admitcheck.admission.checks import validate as validate_screen

        before = len(errors)
        with Collected(errors):
            info = validate_screen(cfg, config_file=file, candidates=candidates, errors=errors)
        if len(errors) > before:
            return {}
        if cfg.source == "logs":  # what the logs measure, beside the budget's protocol (warned, or refused)
            from admitcheck.admission.checks import logs_against_protocol

            with Collected(errors):
                info["logged"] = logs_against_protocol(cfg, strict=strict, file=file).to_dict()
        if cfg.policy.reject_only:
            info["gate"] = "reject-only (policy.reject_only): no candidate can be admitted by the bound"
        return info
    from admitcheck.pairs.load import check_pair
    from admitcheck.rollout.limits import check_limits

    with Collected(errors):
        check_limits(cfg, file=file)  # before the tokenizers load: lengths, memory, vLLM kept sets
    with Collected(errors) as pair:
        check_pair(cfg.pair, file=file)
    prompt_sets = [("probe.prompts", cfg.probe.prompts)]
    if hasattr(cfg, "train"):
        prompt_sets += [("train.prompts", cfg.train.prompts), ("eval.prompts", cfg.eval.prompts)]
    counts, train_rows = {}, None
    for f, p in prompt_sets:
        with Collected(errors):
            rows = io.read_prompts(p, field=f)
            counts[f] = len(rows)
            train_rows = rows if f == "train.prompts" else train_rows
    if train_rows is not None:  # a reward that reads answers trains on the answered ones
        from admitcheck.calibration.grpo import task_rows

        with Collected(errors):
            trained = task_rows(train_rows, cfg.train)
            if len(trained) != len(train_rows):
                counts["train.prompts with an answer (trained on)"] = len(trained)
    info = {"pair": cfg.pair.name or Path(cfg.pair.student).name, "prompts": counts}  # any config kind with a pair
    if name == "calibrate" and cfg.levels.decide_from:  # the screens whose candidates the rounds decide
        from admitcheck.admission.decide_from import decide_bounds, plan_decide

        with Collected(errors):
            sources = plan_decide(cfg, file)  # nothing screened: a screen config not screened yet has no bounds
            info["decide"] = decide_bounds(cfg, sources)
            info["to screen"] = [
                f"{s.path} (candidates: {', '.join(s.candidates)})" for s in sources if s.bounds is None
            ]
    if name == "recipe" and pair.ok:  # the search screens with these fields (one ScreenSession): the same refusals
        from admitcheck.calibration.artifact import load_calibration
        from admitcheck.calibration.compatibility import check_compatibility, check_is_calibration

        with Collected(errors):
            check_is_calibration(cfg.calibration, file=file)
            calibration = load_calibration(cfg.calibration)
            check_compatibility(cfg, calibration, config_file=file)
            info["calibration"] = str(calibration.path)
    return info
