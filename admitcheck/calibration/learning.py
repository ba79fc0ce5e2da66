"""The learning curves in a calibration's ledger (and more ledgers of its recipe), by level, for `admitcheck plan`.

    header, runs = load_runs(cal, ["calibrations/toy.backtest.ledger.jsonl"], config_file="plan.yaml")
    levels = level_runs(cal, runs, cal.tau, 0.95, level_names(cal))   # baseline first, then by x
    lv = levels[1]; lv.name, lv.x, lv.curves, lv.efficiency        # paired with the baseline's runs by seed

A level is the ledger run key's level spec (kind, relative_std, rollout, staleness); its name comes from the
calibration's levels (`admission.plan` adds those of the backtest report beside a ledger). x is on the
budget's scale (`CalibrationArtifact.x_measure`, as `fit.run_x`). Quality is what the calibration fitted: the
reverse KL, or 1 − task reward for a GRPO recipe.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from admitcheck import io
from admitcheck.calibration.fit import run_x
from admitcheck.calibration.ledger import LedgerHeader, first_difference, ledger_path, line_kind, read_run
from admitcheck.calibration.record import LevelSpec, RunRecord
from admitcheck.calibration.schema import CalibrationArtifact
from admitcheck.calibration.timing import Efficiency, LearningCurve, steps_efficiency, summarize
from admitcheck.config import RolloutConfig
from admitcheck.errors import CalibrationError, ConfigError

BASELINE = "baseline"


@dataclass(frozen=True)
class LevelRuns:
    """One level's runs in the ledgers, paired by seed with the baseline's: x and efficiency over the pairs."""

    name: str
    spec: LevelSpec  # the ledger key's level, its rollout canonical (`canonical_spec`)
    x: float | None  # mean x over its runs on the budget's scale, nats/token (None: baseline)
    curves: list[LearningCurve]
    efficiency: Efficiency


def _records(path: Path, field_name: str, config_file: str | None) -> list[dict[str, Any]]:
    if not path.is_file():
        raise ConfigError(f"ledger not found: {path}", file=config_file, field=field_name)
    records = io.read_jsonl(path)
    if not records or line_kind(records[0]) != "header":
        raise ConfigError(f"{path} is not a calibration ledger (no header line)", file=config_file, field=field_name)
    return records


def load_runs(
    cal: CalibrationArtifact, ledgers: list[str], config_file: str | None
) -> tuple[LedgerHeader, list[RunRecord]]:
    """(header, runs): the calibration's ledger, then each of `ledgers` (same header: recipe, eval, seeds, pair);
    a run key in two ledgers is one run (the first kept). ConfigError naming `calibration` / `ledgers.i`."""
    assert cal.path is not None
    path = ledger_path(cal.path)
    records = _records(path, "calibration", config_file)
    header = LedgerHeader.read(records[0])
    runs = {r.key: r for r in (read_run(x, path, i) for i, x in enumerate(records[1:], 1) if line_kind(x) == "run")}
    for i, path in enumerate(ledgers):
        more = _records(Path(path), f"ledgers.{i}", config_file)
        theirs = LedgerHeader.read(more[0])
        diff = first_difference(
            {"pair": theirs.pair, "config": theirs.config}, {"pair": header.pair, "config": header.config}
        )
        if diff:
            raise ConfigError(
                f"{path} holds runs of another recipe or pair than the calibration's ledger ({diff} "
                "differs): their learning curves are not comparable",
                file=config_file,
                field=f"ledgers.{i}",
            )
        for j, r in enumerate(more[1:], start=1):
            if line_kind(r) == "run":
                run = read_run(r, Path(path), j)
                runs.setdefault(run.key, run)
    return header, list(runs.values())


def _level_name(spec: LevelSpec, names: dict[str, str]) -> str:
    key = spec_key(spec)
    if key in names:
        return names[key]
    if spec.kind == "noise":
        return f"noise σ {spec.relative_std:g}"
    if spec.kind == "staleness":
        return f"stale {spec.staleness}"
    import hashlib

    return "rollout " + hashlib.sha256(key.encode()).hexdigest()[:6]


def canonical_spec(spec: LevelSpec) -> LevelSpec:
    """A level spec with its rollout config through the schema (defaults filled in)."""
    rollout = spec.rollout
    if rollout is not None:
        rollout = RolloutConfig.from_key_dump(rollout).model_dump(mode="json")  # an old FP8-KV key: the old recipe
    return dataclasses.replace(spec, rollout=rollout)


def spec_key(spec: LevelSpec) -> str:
    """A level spec as a canonical JSON key (`canonical_spec`)."""
    return json.dumps(canonical_spec(spec).dump(), sort_keys=True)


def level_names(cal: CalibrationArtifact) -> dict[str, str]:
    """Level spec (JSON, `spec_key`) -> name: the calibration's levels (`admission.plan` adds the candidates of the
    backtest reports beside its ledgers)."""
    names = {}
    for lv in cal.levels:
        spec = LevelSpec(lv.kind, lv.relative_std or 0.0, lv.rollout, lv.staleness or 0)
        names[spec_key(spec)] = lv.name
    return names


def level_runs(
    cal: CalibrationArtifact, runs: list[RunRecord], tau: float, confidence: float, names: dict[str, str] | None = None
) -> list[LevelRuns]:
    """Every level with runs, its pairs' efficiencies (baseline first, efficiency 1 by definition)."""
    run_window = cal.protocol.run_window
    which, window = cal.x_measure, int(run_window if run_window is not None else 20)
    names = names or {}
    rl = cal.recipe.loss == "grpo"  # quality is 1 − task reward, as the calibration fitted it

    def curve(r: RunRecord) -> LearningCurve:
        return LearningCurve.from_evals(r.evals, task_error=rl)

    groups: dict[str, list[RunRecord]] = {}
    specs: dict[str, LevelSpec] = {}
    for r in runs:
        spec = canonical_spec(r.run_key.level)
        key = json.dumps(spec.dump(), sort_keys=True)
        groups.setdefault(key, []).append(r)
        specs.setdefault(key, spec)
    base = {r.run_key.seed: curve(r) for r in groups.get(spec_key(LevelSpec(BASELINE, 0.0, None, 0)), [])}
    if not base:
        raise CalibrationError("the calibration's ledger has no baseline runs", file=str(cal.path), field="runs")
    out = []
    for key, rs in groups.items():
        spec = specs[key]
        paired = [r for r in rs if r.run_key.seed in base]
        if not paired:
            continue
        curves = [curve(r) for r in paired]
        effs = [steps_efficiency(c, base[r.run_key.seed], tau) for c, r in zip(curves, paired)]
        x = None if spec.kind == BASELINE else float(np.mean([run_x(r, which, window) for r in paired]))
        out.append(LevelRuns(_level_name(spec, names), spec, x, curves, summarize(effs, confidence)))
    return sorted(out, key=lambda lv: (lv.x is not None, lv.x or 0.0))


def is_noise(spec: LevelSpec) -> bool:
    """A noise level, or a rollout level that is weight noise alone (a backtest's noise candidates)."""
    if spec.kind == "noise":
        return True
    if spec.kind != "rollout" or spec.rollout is None:
        return False
    r = RolloutConfig.from_key_dump(spec.rollout)
    return r.weights is None and r.kv_cache.dtype == "auto" and r.weights_from is None and r.noise.relative_std > 0
