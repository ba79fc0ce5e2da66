# long module: the backtest driver (inputs -> verdicts -> truth rounds -> rows -> report); its statistics: truth.py
"""Backtest: a calibration's verdicts on held-out candidates against full OPD runs with each candidate as the engine.

    cfg = io.load_config("examples/toy_backtest.yaml", BacktestConfig)
    bt = backtest(cfg, config_file="examples/toy_backtest.yaml", jobs=2)   # writes <output>.yaml, .md, .png
    bt.agreement.fraction, bt.candidates[0].truth.label        # a backtest_report.BacktestReport

For each candidate: the verdict `screen` gives (the screen config's probe, sampling, reference and policy, with the
backtest's candidates), and the truth: full OPD runs with the candidate's engine as the rollout engine, with the
calibration's recipe, eval and seeds (`levels.run_one` on a level of kind "rollout" or "staleness"), each paired with
the baseline's run of the same seed and looked at by `truth.sequential_truth` (more pairs until decided or
`truth.max_replicates`). Runs go to `<output stem>.ledger.jsonl` under the calibration ledger's header and run keys,
made by `calibration.campaign` (the runner `calibrate` uses): resumable, and parallel (`--jobs`, Ray) exactly like
`calibrate`. Runs the calibration's ledger already holds (its baseline, a level equal to a candidate) are reused when
this machine has the torch and transformers the calibration was made with (runs are then bit-identical), else run
again.

The report: per candidate the verdict, the measured mismatch, the cost the calibration curve predicts at it, the
observed cost with its interval, the truth and whether they agree (with why not); the confusion matrix and the
agreement over decided truths (Clopper–Pearson); each source family's mean residual (observed − predicted). The
Markdown (`report.backtest_markdown`) and the plot (`plots.plot_backtest`) are written beside the YAML by the command
(`report.write_backtest_companions`): the report itself is YAML.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from admitcheck import fingerprint, io
from admitcheck.admission import truth
from admitcheck.admission.backtest_report import (
    SCHEMA_VERSION,
    Agreement,
    BacktestProvenance,
    BacktestReport,
    CalibrationRef,
    CandidateRow,
    FamilyResidual,
    SampledCurve,
    TruthEntry,
    TruthRule,
    VerdictSummary,
    dump_backtest,
    load_backtest,
)
from admitcheck.admission.screen_report import ScreenReport
from admitcheck.calibration.artifact import plain, training_recipe_of
from admitcheck.calibration.campaign import Campaign, check_jobs, open_executor, run_key
from admitcheck.calibration.compatibility import calibration_matches
from admitcheck.calibration.ledger import (
    Ledger,
    LedgerHeader,
    header_difference,
    ledger_header,
    ledger_path,
    line_kind,
    read_run,
)
from admitcheck.calibration.levels import Level, load_context, replicate_seed
from admitcheck.calibration.record import RunRecord
from admitcheck.calibration.schema import CalibrationArtifact
from admitcheck.config import BacktestConfig, CalibrateConfig, CandidateConfig, ScreenConfig
from admitcheck.errors import AdmitcheckError, ConfigError

__all__ = ["SCHEMA_VERSION", "BacktestReport", "backtest", "load_backtest", "write_backtest"]
Progress = Callable[[str, int, int], None]
# the sources of mismatch a backtest reports residuals for (`plots.plot_backtest` gives each a colour)
FAMILIES = ("dtype", "noise", "fp8_weights", "int8", "fp8_kv", "staleness", "combination")


def family(cand: CandidateConfig) -> str:
    """The source of a candidate's mismatch: one of FAMILIES ("combination" when it has several)."""
    if cand.staleness is not None:
        return "staleness"
    r = cand.rollout
    assert r is not None
    parts = []
    if r.noise.relative_std > 0:
        parts.append("noise")
    if r.weights is not None:
        parts.append("int8" if r.weights.format == "int8" else "fp8_weights")
    if r.kv_cache.dtype != "auto":
        parts.append("fp8_kv")
    return "dtype" if not parts else parts[0] if len(parts) == 1 else "combination"


def candidate_level(cand: CandidateConfig) -> Level:
    """The calibration level whose runs are this candidate's truth runs (held out: not in any fit)."""
    if cand.staleness is not None:
        return Level(cand.name, "staleness", staleness=cand.staleness, fit=False)
    return Level(cand.name, "rollout", rollout=cand.rollout, fit=False)


@dataclass(frozen=True)
class Inputs:
    """The configs a backtest stands on, loaded and checked against each other."""

    calibrate: CalibrateConfig
    calibrate_file: str
    screen: ScreenConfig  # with the backtest's candidates
    screen_file: str
    calibration: CalibrationArtifact


def load_inputs(config: BacktestConfig, config_file: str | None = None) -> Inputs:
    """Load the calibrate and screen configs and the calibration; ConfigError naming the field when they do not
    belong together or a candidate cannot be trained with (loads no model unless the pair's files were rewritten)."""
    from admitcheck.admission.checks import check_inputs, load_checked_calibration
    from admitcheck.rollout.precision import check_rollout_fits

    cal_file, scr_file = config.calibrate_config, config.screen_config
    for fld, path in (("calibrate_config", cal_file), ("screen_config", scr_file)):
        if not Path(path).is_file():
            raise ConfigError(f"file not found: {path}", file=config_file, field=fld)
    cal_cfg = io.load_config(cal_file, CalibrateConfig)
    scr = io.load_config(scr_file, ScreenConfig).model_copy(update={"candidates": list(config.candidates)})
    if scr.source != "engine":
        raise ConfigError("a backtest screens with engines, not logs (source: engine)", file=scr_file, field="source")
    check_inputs(scr, scr.candidates, scr_file)
    calibration = load_checked_calibration(scr, config_file=scr_file)
    ok, why = calibration_matches(cal_cfg, calibration)
    if ok:
        why = _recipe_difference(cal_cfg, calibration)
    if why:
        raise ConfigError(
            f"{calibration.path} was not made with this calibrate config ({why}): the truth runs must repeat the "
            "calibration's recipe, eval and seeds",
            file=config_file,
            field="calibrate_config",
        )
    for i, cand in enumerate(config.candidates):
        if cand.rollout is None:
            continue
        where = f"candidates.{i}.rollout"
        if cand.rollout.engine != "hf":
            raise ConfigError(
                "a backtest trains with each candidate as the rollout engine, re-synced from the trainer after "
                "every step: the hf engine (its recipe reproduces a vLLM config's numerics)",
                file=config_file,
                field=f"{where}.engine",
            )
        if cand.rollout.weights_from is not None:
            raise ConfigError(
                "a truth run cannot sample from a fixed checkpoint; use `staleness: k`",
                file=config_file,
                field=f"{where}.weights_from",
            )
        check_rollout_fits(cand.rollout, cal_cfg.pair.student, file=config_file, field=where)
    return Inputs(cal_cfg, cal_file, scr, scr_file, calibration)


def validate(config: BacktestConfig, *, config_file: str | None = None) -> dict[str, Any]:
    """`load_inputs` and a summary of what the backtest would do (what `admitcheck validate` prints)."""
    inputs = load_inputs(config, config_file)
    cal = inputs.calibration
    return {
        "calibration": str(cal.path),
        "budget": cal.budget.value,
        "tolerance": cal.tau,
        "candidates": [f"{c.name} ({family(c)})" for c in config.candidates],
        "looks": truth.look_counts(config.truth),
        "runs_at_most": (len(config.candidates) + 1) * config.truth.max_replicates,
    }


def _recipe_difference(config: CalibrateConfig, calibration: CalibrationArtifact) -> str:
    """The first field in which the calibrate config's full recipe (steps, seed, eval) differs from the artifact's."""
    mine = fingerprint.flatten({"recipe": {k: v for k, v in training_recipe_of(config).items() if k != "prompts"}})
    mine |= fingerprint.flatten({"eval": config.eval.model_dump(mode="json", exclude={"prompts"})})
    stored = calibration.recipe.model_dump(mode="json", exclude_unset=True, exclude={"prompts"})
    theirs = fingerprint.flatten({"recipe": stored})
    evals = calibration.quality.eval
    theirs |= fingerprint.flatten({"eval": evals.model_dump(mode="json", exclude_unset=True) if evals else None})
    for key in sorted(set(mine) | set(theirs)):
        if mine.get(key) != theirs.get(key):
            return f"{key}: artifact has {theirs.get(key)!r}, config has {mine.get(key)!r}"
    return ""


def output_path(config: BacktestConfig, calibration: CalibrationArtifact) -> Path:
    return (
        Path(config.output) if config.output else calibration.path.with_name(f"{calibration.path.stem}.backtest.yaml")
    )


# --------------------------------------------------------------------------------------------------- the flow


def backtest(
    config: BacktestConfig,
    *,
    config_file: str | None = None,
    jobs: int = 1,
    executor: str = "local",
    ray_address: str | None = None,
    progress: Progress | None = None,
) -> BacktestReport:
    """Verdicts, truth runs (resumed from the ledger) and the report; see the module docstring."""
    t0 = time.perf_counter()
    check_jobs(jobs, config_file)
    inputs = load_inputs(config, config_file)
    cal_cfg, calibration = inputs.calibrate, inputs.calibration
    runner = open_executor(cal_cfg.resources, jobs=jobs, executor=executor, ray_address=ray_address)
    out = output_path(config, calibration)
    verdicts = _screened(inputs, out, progress)
    # checks the pair, prompts and engine before anything runs; on the CPU, as `calibrate` does: the context is cached
    # for the process, and on the GPU it held 3.25 GiB beside the workers (an H100 ran out of memory, 2026-12-06)
    load_context(cal_cfg, inputs.calibrate_file, device="cpu")
    header = ledger_header(cal_cfg)
    ledger = Ledger.open(ledger_path(out), header)
    reusable = _reusable_runs(calibration, header)
    try:
        counts = _rounds(inputs, Campaign(cal_cfg, inputs.calibrate_file, ledger, runner, progress), reusable, config)
    finally:
        runner.close()
    rows = _rows(inputs, config, ledger, counts, verdicts)
    return write_backtest(_report(inputs, config, out, rows, ledger, t0), out)


def screen_cache_path(out: Path) -> Path:
    """Where a backtest keeps its candidates' screen (`_screened`): `<output stem>.screen.json` beside the ledger."""
    return out.with_name(f"{out.stem}.screen.json")


def _screened(inputs: Inputs, out: Path, progress: Progress | None) -> list:
    """The held-out candidates' verdicts: screened once and kept in `screen_cache_path(out)` with what made them —
    the screen config (its candidates the backtest's), the calibration file's bytes, the pair's fingerprints and the
    torch/transformers installed — so that a backtest resumed in another session (a GPU's device time is short, and
    17 screens on SmolLM2 take minutes of it) reuses them while all of these are the same. Delete the file to screen
    again (an admitcheck whose screen changed keeps the same version string)."""
    import hashlib
    import json

    from admitcheck.admission.screen import screen

    made = {
        "screen": inputs.screen.model_dump(mode="json"),
        "calibration_sha256": hashlib.sha256(Path(inputs.calibration.path).read_bytes()).hexdigest(),
        "pair": ledger_header(inputs.calibrate).pair,
        "environment": {k: fingerprint.environment().get(k) for k in ("torch", "transformers")},
    }
    key = hashlib.sha256(json.dumps(made, sort_keys=True, default=str).encode()).hexdigest()
    path = screen_cache_path(out)
    kept = read_kept_screen(path)
    if kept is not None and kept.key == key:
        return list(kept.report.verdicts)
    report = screen(inputs.screen, config_file=inputs.screen_file, progress=progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Python's JSON, not strict JSON: an open interval's ∞ must come back as ∞ (`report.to_json` writes it null)
    text = json.dumps({"key": key, "report": report.to_dict()}, indent=1, allow_nan=True, default=_json_scalar)
    io.write_text_atomic(path, text + "\n")
    return list(report.verdicts)


class KeptScreen(BaseModel):
    """`<output stem>.screen.json`: a backtest's screen of its candidates and the key of what made it (`_screened`)."""

    model_config = ConfigDict(extra="forbid")
    key: str  # sha256 of the screen config, the calibration file, the pair's fingerprints, torch and transformers
    report: ScreenReport


def read_kept_screen(path: Path) -> KeptScreen | None:
    """The kept screen at `path` (`screen_cache_path`); None when there is none, or it is unreadable or of another
    schema (pydantic's ValidationError is a ValueError): the backtest then screens again and rewrites it."""
    import json

    if not path.is_file():
        return None
    try:
        return KeptScreen.model_validate(json.loads(path.read_text()))
    except ValueError:
        return None


def _json_scalar(obj: Any) -> Any:
    """numpy scalars as Python numbers; anything else json cannot write, as its string."""
    return obj.item() if hasattr(obj, "item") else str(obj)


def _seed(inputs: Inputs, r: int) -> int:
    return replicate_seed(inputs.calibrate.seed, r)


def _reusable_runs(calibration: CalibrationArtifact, header: LedgerHeader) -> dict[str, RunRecord]:
    """Runs of the calibration's ledger that this backtest may take as its own: same header (pair, run-relevant
    config), made with the torch and transformers installed here (else their numerics could differ)."""
    path = ledger_path(calibration.path)
    made = calibration.provenance.environment
    here = fingerprint.environment()
    if not path.is_file() or any(made.get(k) != here.get(k) for k in ("torch", "transformers")):
        return {}
    try:
        records = io.read_jsonl(path)
    except AdmitcheckError:  # a ledger that cannot be read is not reused; the runs are simply made again
        return {}
    if not records:
        return {}
    if header_difference(LedgerHeader.read(records[0]), header):  # the rule Ledger.open resumes by
        return {}
    runs = [read_run(r, path, i) for i, r in enumerate(records[1:], start=1) if line_kind(r) == "run"]
    return {r.key: r.reused(path.name) for r in runs}


def _rounds(inputs: Inputs, campaign: Campaign, reusable: dict[str, RunRecord], config: BacktestConfig) -> dict:
    """Run pairs until every candidate's truth is settled; returns the pairs each candidate needed."""
    ledger = campaign.ledger
    cands = list(config.candidates)
    counts = {c.name: truth.look_counts(config.truth)[0] for c in cands}
    baseline = Level("baseline", "baseline")
    tau = inputs.calibration.tau
    rounds = 0
    while True:
        wanted = [(candidate_level(c), r) for c in cands for r in range(counts[c.name])]
        wanted += [(baseline, r) for r in range(max(counts.values()))]
        campaign.run_round([(lv, _seed(inputs, r)) for lv, r in wanted], f"truth runs (round {rounds})", reusable)
        grown = False
        for c in cands:
            verdict, needed = truth.sequential_truth(_diffs(inputs, ledger, c, counts[c.name]), tau, config.truth)
            if verdict is None and needed is not None:
                counts[c.name], grown = needed, True
        if not grown:
            return counts
        rounds += 1


def _run(inputs: Inputs, ledger: Ledger, level: Level, r: int) -> RunRecord:
    return ledger.runs[run_key(level, _seed(inputs, r))]


def _diffs(inputs: Inputs, ledger: Ledger, cand: CandidateConfig, n: int) -> list[float]:
    base, lv = Level("baseline", "baseline"), candidate_level(cand)
    return [_run(inputs, ledger, lv, r).quality - _run(inputs, ledger, base, r).quality for r in range(n)]


def _rows(inputs: Inputs, config: BacktestConfig, ledger: Ledger, counts: dict, verdicts: list) -> list[CandidateRow]:
    cal, by_name = inputs.calibration, {v.name: v for v in verdicts}
    tau, budget = cal.tau, cal.budget
    rows = []
    for cand in config.candidates:
        v, lv, n = by_name[cand.name], candidate_level(cand), counts[cand.name]
        diffs = _diffs(inputs, ledger, cand, n)
        t, _ = truth.sequential_truth(diffs, tau, config.truth)
        assert t is not None
        xs = [float(_run(inputs, ledger, lv, r).mismatch) for r in range(n)]
        x = float(np.mean(xs))
        predicted = float(cal.predict_cost(x))
        agree = truth.agrees(v.decision, t.label)
        rows.append(
            CandidateRow(
                name=cand.name,
                family=family(cand),
                candidate=cand.model_dump(mode="json", exclude_none=True),
                verdict=VerdictSummary(**{k: getattr(v, k) for k in VerdictSummary.model_fields}),  # as screened
                # the truth runs' start mismatch (the calibration's probe protocol and metric), mean over runs
                x=x,
                x_runs=xs,
                within_factor_3=bool(budget.value / 3 <= v.mismatch <= 3 * budget.value),
                predicted_cost=predicted,
                truth=TruthEntry(**t.to_dict(), paired_costs=diffs),
                residual=t.cost - predicted,
                residual_over_tau=(t.cost - predicted) / tau,
                agrees=agree,
                why=_why(v, t, predicted, tau) if agree is False else None,
            )
        )
    return rows


def _why(v, t: truth.Truth, predicted: float, tau: float) -> str:
    """One line on why a verdict and its truth disagree."""
    seen = f"full runs cost {t.cost:.3g} [{t.interval[0]:.3g}, {t.interval[1]:.3g}] vs τ {tau:.3g}"
    if v.marginal:
        return (
            f"marginal verdict ({v.decision} by policy.undecided): the screen's interval "
            f"[{v.mismatch_interval[0]:.3g}, {v.mismatch_interval[1]:.3g}] overlaps the budget's "
            f"[{v.budget_interval[0]:.3g}, {v.budget_interval[1]:.3g}]; {seen}"
        )
    side = "below" if t.label == "admit" else "above"
    return (
        f"{seen} ({side} τ), but the curve predicts {predicted:.3g} at this mismatch: this source's cost "
        f"differs from weight noise at equal mismatch by {t.cost - predicted:+.3g}"
    )


def _families_and_agreement(rows: list[CandidateRow]) -> tuple[dict[str, FamilyResidual], Agreement]:
    """Per source family: the mean residual against the curve and the verdicts' agreement; overall agreement (all
    verdicts, and the non-marginal ones)."""
    fams = {}
    for name in FAMILIES:
        mine = [r for r in rows if r.family == name]
        if mine:
            # by seed: every candidate's cost at seed i shares the baseline run of seed i (truth.family_residual)
            costs, predicted = [r.truth.paired_costs for r in mine], [r.predicted_cost for r in mine]
            fams[name] = FamilyResidual(
                **truth.family_residual(costs, predicted),
                agree=sum(r.agrees is True for r in mine),
                disagree=sum(r.agrees is False for r in mine),
                ambiguous=sum(r.agrees is None for r in mine),
            )
    decided = [r for r in rows if not r.verdict.marginal]
    agreement = Agreement(
        **truth.agreement([r.verdict.decision for r in rows], [r.truth.label for r in rows]),
        decided_verdicts=Agreement(
            **truth.agreement([r.verdict.decision for r in decided], [r.truth.label for r in decided])
        ),
    )
    return fams, agreement


def _report(
    inputs: Inputs, config: BacktestConfig, out: Path, rows: list[CandidateRow], ledger: Ledger, t0: float
) -> BacktestReport:
    """The report of the rows; provenance.seconds counts from `t0` (the command's start) to now."""
    cal = inputs.calibration
    b = cal.budget
    fams, agreement = _families_and_agreement(rows)
    looks = truth.look_counts(config.truth)
    runs = [r for r in ledger.runs.values()]
    return BacktestReport(
        schema_version=SCHEMA_VERSION,
        kind="backtest",
        calibration=CalibrationRef(
            path=io.relative_path(cal.path, out.parent),
            name=cal.name,
            metric=cal.metric,
            budget=b.value,
            budget_interval=tuple(b.interval),
            tolerance=cal.tau,
            quality=cal.quality.definition,
            curve=_curve_points(cal, [r.x for r in rows]),
        ),
        truth_rule=TruthRule(
            replicates=config.truth.replicates,
            step=config.truth.step,
            max_replicates=config.truth.max_replicates,
            looks=looks,
            confidence=config.truth.confidence,
            confidence_per_look=truth.confidence_per_look(config.truth.confidence, len(looks)),
            rule="paired cost d_r = quality(candidate, seed r) − quality(baseline, seed r); Student-t interval of "
            "the mean at each look (Bonferroni over the looks); admit if its upper end ≤ τ, reject if its lower "
            "end > τ, else more pairs; ambiguous at max_replicates",
        ),
        agreement=agreement,
        within_factor_3=sum(r.within_factor_3 for r in rows),
        families=fams,
        candidates=rows,
        provenance=BacktestProvenance(
            environment=plain(fingerprint.environment() | {"cpu_threads": 1}),
            config=_portable(config, out.parent),
            runs=len(runs),
            runs_reused=sum(r.reused_from is not None for r in runs),
            run_cpu_seconds=round(sum(r.cpu_seconds for r in runs if r.reused_from is None), 1),
            seconds=round(time.perf_counter() - t0, 1),
        ),
    )


def _curve_points(cal: CalibrationArtifact, xs: list[float]) -> SampledCurve:
    """The calibration curve sampled on a log grid spanning the budget and the candidates (for the plot)."""
    lo = min([cal.budget.value / 30, *[x for x in xs if x > 0]]) / 2
    hi = max([cal.budget.value * 30, *xs]) * 2
    grid = np.geomspace(lo, hi, 60)
    return SampledCurve(x=[float(x) for x in grid], cost=[float(cal.predict_cost(float(x))) for x in grid])


def _portable(config: BacktestConfig, base: Path) -> dict[str, Any]:
    d = config.model_dump(mode="json", exclude_none=True)
    for k in ("calibrate_config", "screen_config", "output"):
        if d.get(k):
            d[k] = io.relative_path(d[k], base)
    return d


# --------------------------------------------------------------------------------------------------- artifact


def write_backtest(report: BacktestReport, path: str | Path) -> BacktestReport:
    """Write the report atomically as YAML (its Markdown and chart: `report.write_backtest_companions`)."""
    path = Path(path)
    io.write_text_atomic(path, dump_backtest(report))
    return report.at(path)


# --------------------------------------------------------------------------------------------------- re-made verdicts


def rejudge(report: BacktestReport, calibration: CalibrationArtifact, undecided: str = "reject") -> BacktestReport:
    """The backtest's verdicts re-made against another calibration of the same runs (a re-fitted budget), no run
    made: each candidate's final screen interval (as stored) against the new budget's interval — ADMIT when its upper
    end is below the budget's lower end, REJECT when its lower end is above the upper end, else marginal (decided by
    `undecided`, the screen config's `policy.undecided`); the predicted costs and residuals from the new curve; the
    truths unchanged (they depend on τ only, which the same baseline runs give). A screen run against the new budget
    might have stopped at another look: this uses the interval it had when it stopped, so a candidate it decided
    early against the old budget can come out marginal here."""
    from admitcheck.admission.sequential import budget_band

    tau = calibration.tau
    if abs(tau - report.calibration.tolerance) > 1e-9 * max(tau, 1.0):
        raise ConfigError(
            f"τ {tau:.6g} differs from the backtest's {report.calibration.tolerance:.6g}: the truths would change",
            file=str(calibration.path),
            field="tolerance.value",
        )
    b = calibration.gate_budget()
    b_lo, b_hi = budget_band(b)
    rows = []
    for r in report.candidates:
        v = r.verdict
        lo, hi = v.mismatch_interval
        if hi < b_lo:
            decision, marginal = "ADMIT", False
            reason = f"{v.estimator} upper bound {hi:.3g} < budget lower bound {b_lo:.3g} (re-made)"
        elif lo > b_hi:
            decision, marginal = "REJECT", False
            reason = f"{v.estimator} lower bound {lo:.3g} > budget upper bound {b_hi:.3g} (re-made)"
        else:
            below = v.mismatch < b.value
            decision = "ADMIT" if undecided == "admit" and below else "REJECT"
            marginal = True
            reason = f"marginal (re-made): [{lo:.3g}, {hi:.3g}] overlaps the budget's [{b_lo:.3g}, {b_hi:.3g}]"
        predicted = float(calibration.predict_cost(r.x))
        label = r.truth.label
        agree = truth.agrees(decision, label)
        why = None
        if agree is False:
            t = r.truth
            seen = f"full runs cost {t.cost:.3g} [{t.interval[0]:.3g}, {t.interval[1]:.3g}] vs τ {tau:.3g}"
            why = (
                f"marginal verdict ({decision} by policy.undecided): the screen's interval [{lo:.3g}, {hi:.3g}] "
                f"overlaps the budget's [{b_lo:.3g}, {b_hi:.3g}]; {seen}"
                if marginal
                else f"{seen}, but the curve predicts {predicted:.3g} at this mismatch: this source's cost differs "
                f"from weight noise at equal mismatch by {t.cost - predicted:+.3g}"
            )
        verdict = v.model_copy(
            update={
                "decision": decision,
                "marginal": marginal,
                "reason": reason,
                "ratio_to_budget": v.mismatch / b.value if b.value > 0 else float("inf"),
            }
        )
        rows.append(
            r.model_copy(
                update={
                    "verdict": verdict,
                    "within_factor_3": bool(b.value / 3 <= v.mismatch <= 3 * b.value),
                    "predicted_cost": predicted,
                    "residual": r.truth.cost - predicted,
                    "residual_over_tau": (r.truth.cost - predicted) / tau,
                    "agrees": agree,
                    "why": why,
                }
            )
        )
    fams, agreement = _families_and_agreement(rows)
    out = report.path or calibration.path
    path = io.relative_path(calibration.path, out.parent) if calibration.path and out else report.calibration.path
    ref = report.calibration.model_copy(
        update={
            "path": path,
            "budget": b.value,
            "budget_interval": tuple(b.interval),
            "curve": _curve_points(calibration, [r.x for r in rows]),
        }
    )
    rejudged = {
        "calibration": str(calibration.path.name) if calibration.path else None,
        "rule": "verdicts re-made from the stored screen intervals against the re-fitted budget; no run made",
    }
    return report.model_copy(  # the report's path (when it has one) stays
        update={
            "calibration": ref,
            "agreement": agreement,
            "within_factor_3": sum(r.within_factor_3 for r in rows),
            "families": fams,
            "candidates": rows,
            "provenance": report.provenance.model_copy(update={"rejudged": rejudged}),
        }
    )
