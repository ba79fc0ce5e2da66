"""Re-fit a calibration artifact from its ledger with this admitcheck's estimator: no run made, no model loaded.

    cal = refit("calibrations/toy.yaml")                     # reads calibrations/toy.ledger.jsonl; writes nothing
    write_calibration(cal, "calibrations/toy.yaml")          # the caller writes it (and its chart)
    pooled = refit_pooled(["calibrations/smollm2.yaml", "calibrations/smollm2-seed1000.yaml", ...], out)

The artifact's levels, runs (level, replicate, seed) and resolved config say which ledger record each run is; the
records are read from `<stem>.ledger.jsonl` (the records themselves, not the artifact's copies, so a re-measured
ledger is what is fitted), then `fit.fit_runs` and `calibrate.build_artifact` make the artifact a `calibrate` of the
finished ledger would make — except that the pair's fingerprints, the adaptive protocol and the provenance are the
old artifact's (the models are not loaded), with `provenance.refit` saying when and with what. `refit_pooled` fits
the runs of several calibrations of one pair and recipe as one calibration: every calibration's replicates are
their own seeds (their replicate ids offset by 1000 × its position), their levels their own (names prefixed by the
calibration's file stem), one baseline.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from admitcheck import io
from admitcheck.calibration.artifact import load_calibration, plain
from admitcheck.calibration.calibrate import budget_warnings, build_artifact
from admitcheck.calibration.campaign import run_key
from admitcheck.calibration.fit import PlacedRun, fit_runs
from admitcheck.calibration.ledger import LedgerHeader, ledger_path, line_kind, read_run
from admitcheck.calibration.levels import Level
from admitcheck.calibration.record import RunRecord
from admitcheck.calibration.schema import CalibrationArtifact, Provenance
from admitcheck.config import CalibrateConfig, RolloutConfig
from admitcheck.errors import CalibrationError

REPLICATE_OFFSET = 1000  # refit_pooled: calibration k's replicate r is replicate r + k × this


def _config(cal: CalibrationArtifact) -> CalibrateConfig:
    """The resolved config the artifact stores, its paths (stored relative to the artifact) made absolute."""
    config = CalibrateConfig.model_validate(cal.provenance.config)  # no validator reads a path
    base = cal.path.parent if cal.path is not None else Path.cwd()

    def absolute(model: Any, keys: tuple[str, ...]) -> dict[str, str]:  # the relative paths of `model`, made absolute
        paths = {k: getattr(model, k) for k in keys}
        return {k: str((base / v).resolve()) for k, v in paths.items() if v and not Path(v).is_absolute()}

    sections = {"pair": ("student", "teacher", "tokenizer"), "probe": ("prompts",), "train": ("prompts",),
                "eval": ("prompts",)}  # fmt: skip
    update: dict[str, Any] = {s: getattr(config, s).model_copy(update=absolute(getattr(config, s), keys))
                              for s, keys in sections.items()}  # fmt: skip
    return config.model_copy(update=update | absolute(config, ("output",)))


def _levels(cal: CalibrationArtifact, prefix: str = "") -> list[Level]:
    out = []
    for e in cal.levels:
        rollout = RolloutConfig.model_validate(e.rollout) if e.rollout is not None else None
        name = e.name if e.kind == "baseline" else prefix + e.name
        out.append(
            Level(
                name,
                e.kind,
                relative_std=e.relative_std or 0.0,
                rollout=rollout,
                staleness=e.staleness or 0,
                target=e.target,
                fit=e.fit,
            )
        )
    return out


def _ledger_lines(cal: CalibrationArtifact) -> tuple[Path, list[dict[str, Any]]]:
    path = ledger_path(cal.path)
    if not path.is_file():
        raise CalibrationError("no ledger beside the artifact: nothing to re-fit", file=str(path))
    return path, io.read_jsonl(path)


def _records(cal: CalibrationArtifact) -> dict[str, RunRecord]:
    path, lines = _ledger_lines(cal)
    return {r.key: r for r in (read_run(x, path, i) for i, x in enumerate(lines) if line_kind(x) == "run")}


def ledger_functional(cal: CalibrationArtifact) -> dict[str, Any] | None:
    """What the ledger's level x are, as its header says (`bench/remeasure_levels.py` or a `calibrate` of this
    admitcheck writes it); None for an older ledger (the uncapped token mean): the artifact then claims none."""
    first = _ledger_lines(cal)[1][0]
    return LedgerHeader.read(first).functional if line_kind(first) == "header" else None


def _placed(cal: CalibrationArtifact, levels: list[Level], offset: int = 0, prefix: str = "") -> list[PlacedRun]:
    by = {lv.name: lv for lv in levels}
    records = _records(cal)
    out = []
    for r in cal.runs:
        lv = by[r.level if r.kind == "baseline" else prefix + r.level]
        key = run_key(lv, r.seed)
        if key not in records:
            raise CalibrationError(f"run {r.level}/seed {r.seed} is not in the ledger", file=str(ledger_path(cal.path)))
        out.append(PlacedRun(lv, int(r.replicate or 0) + offset, records[key]))
    return out


def ledger_runs(cal: CalibrationArtifact) -> tuple[CalibrateConfig, list[Level], list[PlacedRun]]:
    """The artifact's resolved config, levels and runs placed on their ledger records (`compare`'s shared-seed
    interval refits from them); CalibrationError when the ledger is absent or lacks a run."""
    config = _config(cal)
    levels = _levels(cal)
    return config, levels, _placed(cal, levels)


def _finish(
    old: CalibrationArtifact, config: CalibrateConfig, out: Path, levels, fitted, runs: int, note: dict, functional
):
    proto = old.budget.protocol
    stop = proto.stopped if proto is not None else ""
    factor = proto.interval_factor if proto is not None else config.levels.interval_factor
    warnings = budget_warnings(fitted.estimate, factor, runs, stop)
    grid = old.auto_noise.model_dump() if old.auto_noise is not None else None
    adaptive = proto.model_dump(exclude_unset=True) if proto is not None else None
    cal = build_artifact(config, out, levels, fitted, grid, old.pair.model_dump(mode="json", exclude_unset=True),
                         adaptive=adaptive, warnings=warnings, functional=functional)  # fmt: skip
    from admitcheck import __version__

    refit = {
        "admitcheck": __version__,
        "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    kept = old.provenance.model_dump(mode="json", exclude_unset=True)  # the calibration's own, and where it was refit
    provenance = Provenance.model_validate(plain(kept | {"refit": refit | note}))
    return cal.model_copy(update={"provenance": provenance}).at(out)


def refit(path: str | Path) -> CalibrationArtifact:
    """The artifact at `path` re-fitted from its ledger (module docstring); written by the caller."""
    old = load_calibration(path)
    config = _config(old)
    levels = _levels(old)
    placed = _placed(old, levels)
    rounds = old.budget.protocol.rounds if old.budget.protocol is not None else 0
    fitted = fit_runs(config, levels, placed, looks=rounds + 1)
    note = {"from": ledger_path(Path(path)).name, "rule": "re-fitted from the ledger's records, no run made"}
    return _finish(old, config, Path(path), levels, fitted, len(placed), note, ledger_functional(old))


def refit_pooled(paths: list[str | Path], out: str | Path, name: str | None = None) -> CalibrationArtifact:
    """One calibration from the runs of several (same pair and recipe; their seeds differ): see the module
    docstring. The first artifact gives the config, pair and provenance; `name` the pooled artifact's."""
    cals = [load_calibration(p) for p in paths]
    first = cals[0]
    config = _config(first)
    if name is not None:
        config = config.model_copy(update={"pair": config.pair.model_copy(update={"name": name})})
    levels: list[Level] = []
    placed: list[PlacedRun] = []
    looks = 0
    for k, cal in enumerate(cals):
        prefix = f"{Path(cal.path).stem}:" if k else ""  # the file's name: the pooled calibrations share the pair's
        mine = _levels(cal, prefix=prefix)
        if k:  # one baseline level: the first calibration's
            base = next(lv for lv in levels if lv.kind == "baseline")
            mine = [lv if lv.kind != "baseline" else base for lv in mine]
        placed += _placed(cal, mine, offset=k * REPLICATE_OFFSET, prefix=prefix)
        levels += [lv for lv in mine if lv.kind != "baseline" or not levels]
        looks += (cal.budget.protocol.rounds if cal.budget.protocol is not None else 0) + 1
    functionals = {repr(ledger_functional(c)) for c in cals}
    if len(functionals) > 1:
        raise CalibrationError(
            "the pooled calibrations' ledgers measure their x as different functionals", file=str(out)
        )
    fitted = fit_runs(config, levels, placed, looks=looks)
    note: dict[str, Any] = {
        "pooled": [str(c.path.name) for c in cals],
        "rule": "the runs of these calibrations fitted as one (each one's replicates their own seeds)",
    }
    return _finish(first, config, Path(out), levels, fitted, len(placed), note, ledger_functional(first))
