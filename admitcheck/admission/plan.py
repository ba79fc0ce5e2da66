"""Plan: what the budget buys — each candidate's predicted time-to-quality, from the calibration's runs (docs/plan.md).

    cfg = io.load_config("examples/toy_plan.yaml", PlanConfig)
    p = plan(cfg, config_file="examples/toy_plan.yaml")    # loads no model: ledgers, artifact and JSON files only
    row = p.rows[0]                                        # sorted by predicted speed-up, fastest first
    row.speedup, row.speedup_interval, row.steps_ratio, row.step_time_ratio, row.source

Predicted time-to-quality ratio = (step time ratio) × (steps-to-target ratio). The steps ratio comes from the
learning curves (`evals`) of the runs in the calibration's ledger and any more ledgers of the same recipe (a
backtest's): per replicate pair the efficiency T_baseline / T_run (`calibration.timing`), target = the baseline
replicate's final quality + τ. A candidate that matches a level with runs (the same rollout config, staleness or
noise size) uses that level's own pairs ("measured"); any other is read off the noise levels at its mismatch x, in
log x as the budget curve ("noise curve"). The step time ratio is given, or comes from a rollout speed-up (given or
read from a bench JSON) and the rollouts' share of a baseline step: (1 − f) + f / s, or max(f / s, 1 − f) when
rollouts overlap the rest of the step (async).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from admitcheck import io
from admitcheck.admission.backtest_report import load_backtest
from admitcheck.admission.screen_report import load_screen_report
from admitcheck.admission.step_time import measured_rollout_share, step_time_ratio
from admitcheck.calibration.artifact import load_calibration
from admitcheck.calibration.learning import LevelRuns, is_noise, level_names, level_runs, load_runs, spec_key
from admitcheck.calibration.ledger import ledger_path
from admitcheck.calibration.record import LevelSpec
from admitcheck.calibration.schema import CalibrationArtifact
from admitcheck.calibration.timing import Efficiency, interpolate, mean_curve, pool, steps_to_target, summarize
from admitcheck.config import PlanCandidate, PlanConfig
from admitcheck.errors import CalibrationError, ConfigError

BASELINE = "baseline"


@dataclass(frozen=True)
class PlanRow:
    """One candidate's prediction; times in baseline steps, or seconds with `step_seconds`."""

    name: str
    x: float | None  # mismatch, nats/token
    source: str  # "measured: <level>" (its own pairs), "noise curve" (interpolated), "baseline"
    efficiency: Efficiency  # steps efficiency T_baseline / T_candidate over replicate pairs
    step_time_ratio: float  # candidate step time / baseline step time
    step_time_from: str
    speedup: float  # baseline time-to-quality / candidate's = efficiency / step time ratio
    speedup_interval: tuple[float, float]
    time_to_quality: float  # predicted, baseline steps (or s)
    time_to_quality_interval: tuple[float, float]
    noise_curve: Efficiency | None = None  # a measured row's efficiency read off the noise levels at its x instead

    @property
    def steps_ratio(self) -> float:
        return self.efficiency.steps_ratio


@dataclass(frozen=True)
class PlanCalibration:
    """What a plan read from its calibration: the target, the baseline's learning curves, the ledgers."""

    path: str
    name: str
    tau: float  # quality units
    x: str  # the budget's x: start or run
    eval_every: int  # training steps between held-out evaluations
    quality_unit: str
    evals_per_run: int
    steps: int  # a run's training steps
    baseline_replicates: int
    baseline_final_mean: float  # quality units
    baseline_steps_to_target: float  # steps the baseline takes to its final quality + τ (mean over replicates)
    baseline_steps_to_target_interval: list[float]
    ledgers: list[str]


@dataclass(frozen=True)
class Plan:
    rows: list[PlanRow]
    calibration: PlanCalibration
    levels: list[dict[str, Any]]  # the noise levels the curve interpolates between
    rollout_share: float | None
    time_unit: str  # "baseline steps" or "s"
    confidence: float
    warnings: list[str] = field(default_factory=list)
    curves: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)  # name -> (time, quality)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: ∞ (never reaches the target) and NaN (one pair: no interval) are None, as in screen's JSON."""
        rows = [asdict(r) | {"steps_ratio": r.steps_ratio} for r in self.rows]
        return _json_safe(
            {
                "rows": rows,
                "calibration": asdict(self.calibration),
                "levels": self.levels,
                "rollout_share": self.rollout_share,
                "time_unit": self.time_unit,
                "confidence": self.confidence,
                "warnings": self.warnings,
            }
        )


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return None if isinstance(obj, float) and not math.isfinite(obj) else obj


def _level_names(cal: CalibrationArtifact, ledgers: list[str]) -> dict[str, str]:
    """Level spec (JSON, `learning.spec_key`) -> name: the calibration's levels, then the candidates of the backtest
    report beside each ledger (`<stem>.yaml` of `<stem>.ledger.jsonl`), when there is one."""
    names = level_names(cal)
    for path in map(Path, ledgers):
        report = path.with_name(path.name.removesuffix(".ledger.jsonl") + ".yaml")
        if not report.is_file() or report == path:
            continue
        try:
            rows = load_backtest(report).candidates
        except CalibrationError:  # not a backtest report (the calibration beside its own ledger)
            continue
        for row in rows:
            cand = row.candidate  # the candidate config as given (an old FP8-KV recipe names no attention backend)
            kind = "staleness" if cand.get("staleness") else "rollout"
            names.setdefault(spec_key(LevelSpec(kind, 0.0, cand.get("rollout"), cand.get("staleness") or 0)), row.name)
    return names


def _matches(cand: PlanCandidate, lv: LevelRuns) -> bool:
    s = lv.spec
    if cand.rollout is not None:
        mine = spec_key(replace(s, rollout=cand.rollout.model_dump(mode="json")))
        return s.kind == "rollout" and spec_key(s) == mine
    if cand.staleness is not None:
        return s.kind == "staleness" and s.staleness == cand.staleness
    if cand.relative_std is not None:
        return s.kind == "noise" and math.isclose(s.relative_std, cand.relative_std, rel_tol=1e-3)
    return False


# ------------------------------------------------------------------------------------------------- the plan


def _screen_candidates(config: PlanConfig, config_file: str | None) -> list[PlanCandidate]:
    """The config's candidates, then each ADMIT verdict of `screen_result` not among them (x: its mismatch); a
    config candidate of a verdict's name takes the verdict's mismatch when it gives none."""
    cands = list(config.candidates)
    if config.screen_result is None:
        return cands
    report = load_screen_report(config.screen_result, config_file=config_file, field="screen_result")
    by_name = {c.name: i for i, c in enumerate(cands)}
    for v in report.verdicts:
        if not v.admitted:
            continue
        if v.name in by_name:
            i = by_name[v.name]
            if cands[i].mismatch is None:
                cands[i] = cands[i].model_copy(update={"mismatch": v.mismatch})
        else:
            cands.append(PlanCandidate(name=v.name, mismatch=v.mismatch))
    return cands


def plan(config: PlanConfig, *, config_file: str | None = None) -> Plan:
    """Predicted time-to-quality of every candidate (module docstring); ConfigError / CalibrationError naming the
    file and field for inputs that do not fit together."""
    cal = load_calibration(config.calibration)
    header, runs = load_runs(cal, config.ledgers, config_file)
    tau = cal.tau
    levels = level_runs(cal, runs, tau, config.confidence, _level_names(cal, config.ledgers))
    base = levels[0]
    t_base_each = [steps_to_target(c, c.final + tau) for c in base.curves]
    t_base = summarize([t for t in t_base_each if t is not None], config.confidence)
    noise = [lv for lv in levels if is_noise(lv.spec)]
    pooled = pool([(lv.x, lv.efficiency) for lv in noise], config.confidence)
    share = config.rollout_share if config.rollout_share is not None else measured_rollout_share(runs)
    bench = io.read_json(config.bench) if config.bench is not None else None
    scale, unit = (config.step_seconds, "s") if config.step_seconds else (1.0, "baseline steps")
    warnings = []
    every = header.eval_every  # the run-relevant config as the calibration's ledger holds it
    if not every:
        warnings.append(
            "eval.every 0: each run has two evaluations (start and end), so steps-to-target is read off "
            "a straight line between them — coarse; calibrate with eval.every > 0 for real curves"
        )
    if config.rollout_share is None and share is not None:
        warnings.append(
            f"rollout share {share:.2f} measured on the calibration's own machine "
            "(seconds_by_phase): set rollout_share for the target machine"
        )
    grid = np.linspace(0.0, max(base.curves[0].steps), 101)
    base_mean = mean_curve(base.curves, grid)
    rows = [_row(BASELINE, None, "baseline", base.efficiency, 1.0, "-", t_base.mean, scale)]
    curves = {BASELINE: ((grid * scale).tolist(), base_mean.tolist())}
    for i, cand in enumerate(_screen_candidates(config, config_file)):
        where = f"candidates.{i}" if i < len(config.candidates) else "screen_result"
        own = next((lv for lv in levels if _matches(cand, lv)), None)
        x = cand.mismatch if cand.mismatch is not None else own.x if own is not None else None
        if x is None:
            what = "no runs in the ledgers match it" if cand.rollout or cand.staleness or cand.relative_std else ""
            raise ConfigError(
                f"candidate {cand.name!r} has no mismatch{': ' + what if what else ''}; give "
                "`mismatch` (what screen measured)",
                file=config_file,
                field=f"{where}.mismatch",
            )
        if own is not None:
            eff, source, curve = own.efficiency, f"measured: {own.name}", mean_curve(own.curves, grid)
        elif noise:
            eff, source, curve = interpolate(pooled, x), "noise curve", None
        else:
            raise CalibrationError("no noise levels in the ledgers to interpolate between", file=str(cal.path))
        ratio, how = step_time_ratio(cand.step_time, share, bench, file=config_file, field_name=f"{where}.step_time")
        row = _row(cand.name, x, source, eff, ratio, how, t_base.mean, scale)
        if own is not None and noise:  # beside its own: what the noise levels say at its x (one scale for all?)
            row = replace(row, noise_curve=interpolate(pooled, x))
        rows.append(row)
        if curve is not None:
            curves[cand.name] = ((grid * ratio * scale).tolist(), curve.tolist())
        elif eff.mean > 0:  # the baseline's curve, stretched by the predicted steps ratio
            curves[cand.name] = ((grid * ratio * scale / eff.mean).tolist(), base_mean.tolist())
    rows.sort(key=lambda r: -r.speedup if math.isfinite(r.speedup) else math.inf)
    info = PlanCalibration(
        path=str(cal.path),
        name=cal.name,
        tau=tau,
        x=cal.x_measure,
        eval_every=every,
        quality_unit=cal.quality_unit,
        evals_per_run=len(base.curves[0].steps),
        steps=max(base.curves[0].steps),
        baseline_replicates=base.efficiency.n,
        baseline_final_mean=float(np.mean([c.final for c in base.curves])),
        baseline_steps_to_target=t_base.mean,
        baseline_steps_to_target_interval=list(t_base.interval),
        ledgers=[str(ledger_path(cal.path)), *config.ledgers],
    )
    lv_info = [
        {"name": lv.name, "x": lv.x, **lv.efficiency.to_dict(), "pooled": e.to_dict()}
        for lv, (_, e) in zip(noise, pooled)
    ]
    return Plan(rows, info, lv_info, share, unit, config.confidence, warnings, curves)


def _row(name, x, source, eff: Efficiency, ratio: float, how: str, t_base: float, scale: float) -> PlanRow:
    lo, hi = eff.interval

    def over(e: float) -> float:
        return t_base * ratio * scale / e if e > 0 else math.inf

    return PlanRow(
        name,
        x,
        source,
        eff,
        ratio,
        how,
        eff.mean / ratio,
        (lo / ratio, hi / ratio),
        over(eff.mean),
        (over(hi), over(lo)),
    )


def validate(config: PlanConfig, *, config_file: str | None = None) -> dict[str, Any]:
    """What `admitcheck validate` prints for a plan config: every input read and checked (the plan is cheap)."""
    p = plan(config, config_file=config_file)
    return {
        "calibration": p.calibration.path,
        "ledgers": p.calibration.ledgers,
        "candidates": [r.name for r in p.rows if r.source != "baseline"],
        "warnings": p.warnings,
    }
