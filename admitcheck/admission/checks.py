# long module: every check a screen makes before a model loads (files, candidates, calibration, engines, logs)
"""What a screen checks before it measures, and the guards around each engine call: candidates, input files,
engines, the calibration (compatible, behaving as stored), and each candidate's KV-cache capacity.

    chosen = select_candidates(cfg, ["fp8_kv"])
    check_inputs(cfg, chosen, "screen.yaml")           # files and layers, named by field
    calibration, warnings = load_checked_calibration(cfg, config_file="screen.yaml")
    validate(cfg, config_file="screen.yaml")           # all of it, loads no model
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from admitcheck import fingerprint, io
from admitcheck.admission.checkpoint import check_checkpoint_inputs
from admitcheck.admission.screen_report import CalibrationSummary, RecipeSummary
from admitcheck.admission.sequential import (
    confidence_per_look,
    looks_plan,
)
from admitcheck.calibration.compatibility import check_compatibility, check_is_calibration, check_student_checkpoint
from admitcheck.calibration.schema import CalibrationArtifact
from admitcheck.config import CandidateConfig, RolloutConfig, ScreenConfig
from admitcheck.errors import AdmitcheckError, AdmitcheckWarning, CalibrationError, Collected, ConfigError, EngineError

if TYPE_CHECKING:
    from admitcheck.admission.run_x import LoggedRunAverage
    from admitcheck.measurement.logs import LoggedQuantity, StoredProtocol
    from admitcheck.measurement.metrics import Functional
    from admitcheck.rollout.capacity import CapacitySummary

# Re-exported: the verdict and the look plan were defined here before `admission` (cli, report, bench use them).


def select_candidates(config: ScreenConfig, names: list[str] | None) -> list[CandidateConfig]:
    """The candidates `--candidate NAME` picks (all when None); an unknown name is a ConfigError listing the known."""
    known = {c.name: c for c in config.candidates}
    for n in names or []:
        if n not in known:
            raise ConfigError(f"unknown candidate {n!r} (known: {', '.join(known)})", field="--candidate")
    return [known[n] for n in dict.fromkeys(names)] if names else list(config.candidates)


def with_logs(config: ScreenConfig, path: str | Path, log_format: str = "auto") -> ScreenConfig:
    """The config with `source: logs` reading `path` in `log_format` (what `--from-logs FILE --format F` means): the
    config's own logs section (`step`, `checkpoint`, `gates`) stays, its path and format are these."""
    if config.checkpoint is not None:  # (`--checkpoint`, or the config's) the logs' weights are theirs
        raise ConfigError(
            "checkpoint is what an engine screen measures at; a logs screen names the trainer checkpoint that "
            "scored them in logs.checkpoint",
            field="checkpoint",
        )
    logs = (config.logs.model_dump() if config.logs else {}) | {"path": str(Path(path).resolve()), "format": log_format}
    return ScreenConfig.model_validate(config.model_dump() | {"source": "logs", "logs": logs})


def check_inputs(config: ScreenConfig, chosen: list[CandidateConfig], file: str | None) -> list[dict] | None:
    """Files and dirs the screen needs exist (before any hashing or loading); the probe prompts, read (engine
    screens; None for logs)."""
    for fld, d in (("pair.student", config.pair.student), ("pair.teacher", config.pair.teacher)):
        if not (Path(d) / "config.json").is_file():
            raise ConfigError(f"not a model dir (no config.json): {d}", file=file, field=fld)
    # a missing or empty prompt set is named before any hash comparison
    prompts = probe_prompts(config, file) if config.source == "engine" else None
    if config.checkpoint is not None:
        check_checkpoint_inputs(config, chosen, file)
    for c in chosen:
        if c.rollout is not None and c.rollout.weights_from and not Path(c.rollout.weights_from).is_dir():
            raise ConfigError(
                f"checkpoint dir not found: {c.rollout.weights_from}",
                file=file,
                field=f"candidates.{c.name}.rollout.weights_from",
            )
    cap = config.capacity.model_config_path
    if cap and not Path(cap).is_file():
        raise ConfigError(f"file not found: {cap}", file=file, field="capacity.model_config_path")
    return prompts


def load_checked_calibration(
    config: ScreenConfig, *, config_file: str | None = None, behaviour: bool = True, pair: Any = None
) -> CalibrationArtifact:
    """`artifact.load_calibration(config.calibration)` after `check_compatibility`. When the strict fingerprints
    differ and `behaviour` is set, both models are loaded (float32, CPU; from `pair`, the screen's `LoadedPair`, when
    given) and their log-probs on the calibration's fixed sequences compared (`fingerprint.check_behaviour`:
    CalibrationError when they drifted); the strict differences are then issued as `PairRewrittenWarning`s."""
    from admitcheck.calibration.artifact import load_calibration
    from admitcheck.pairs.load import LoadedPair

    check_is_calibration(config.calibration, file=config_file)  # a backtest report there: say so
    calibration = load_calibration(config.calibration)
    if calibration.x_measure != "start":  # the screen's probe measurement is at the start weights (a stale candidate
        # too): comparing it with a budget fitted on run-averaged mismatch would compare two different quantities
        raise CalibrationError(
            f"the budget of {calibration.path} is in run-averaged mismatch (budget.x: {calibration.x_measure}), but "
            "screen measures at the start weights; re-fit it with `levels.x: start` in its calibrate config (the "
            "finished runs are reused from the ledger): both fits are in its budget.by_x",
            file=config_file,
            field="calibration",
        )
    notes = check_compatibility(config, calibration, config_file=config_file)
    if config.checkpoint is not None:  # the pair is checked on pair.student; the checkpoint must be of its student
        check_student_checkpoint(config.checkpoint, calibration, config_file, "checkpoint")
    check_functional(calibration, config_file)  # after the pair, protocol and objective: those name the file first
    if notes and behaviour:
        stored = calibration.pair.behaviour
        if stored is None:
            raise CalibrationError(
                f"{notes[0]}; the calibration stores no behavioural fingerprint to settle it: re-run calibrate",
                file=config_file,
                field="pair",
            )
        pair = pair if pair is not None else LoadedPair(config.pair, file=config_file)
        student, teacher = pair.student("float32", "cpu"), pair.teacher("float32", "cpu")
        drift = fingerprint.check_behaviour(stored, student, teacher, budget=calibration.budget.value, file=config_file)
        del student, teacher
        warnings.warn(
            PairRewrittenWarning(
                f"the pair's files differ from the calibration's ({'; '.join(notes[:3])}"
                f"{'; …' if len(notes) > 3 else ''}) but it behaves the same (log-prob drift student "
                f"{drift.student:.2g}, teacher {drift.teacher:.2g} nats/token, within "
                f"{fingerprint.BEHAVIOUR_TOLERANCE:g} × budget)"
            ),
            stacklevel=2,
        )
    elif notes:
        warnings.warn(
            PairRewrittenWarning(
                f"the pair's files differ from the calibration's ({'; '.join(notes[:3])}); screen compares the "
                "models' behaviour before measuring"
            ),
            stacklevel=2,
        )
    return calibration


def check_functional(calibration: CalibrationArtifact, config_file: str | None) -> None:
    """A CalibrationError (exit 2) unless the artifact states its functional (`protocol.functional`): the screen's
    mismatch is that functional, so a budget fitted on another number (the uncapped token mean that artifacts
    written before issue #35 hold) cannot be compared with it."""
    if calibration.functional is None:
        raise CalibrationError(
            f"{calibration.path}: protocol.functional is absent: its levels' x is the uncapped {calibration.metric} "
            "token mean, but a screen measures the self-winsorized sequence mean (metrics.Functional, "
            "docs/statistics.md); re-measure the levels' x (`python bench/remeasure_levels.py`) and re-fit",
            file=config_file,
            field="calibration.protocol.functional",
        )


def functional_means(functional: Functional, sums: dict[str, Any], name: str, file: str | None) -> Any:
    """The functional's per-sequence means of a run's per-sequence sums; a CalibrationError when this candidate
    (engine or logs) cannot measure the functional's estimator: its mismatch would be another number."""
    if functional.estimator not in sums:
        raise CalibrationError(
            f"the budget's x is {functional.describe()}, but candidate {name!r} gives no full-vocabulary "
            "rows (kl_exact): its mismatch would be another number; screen it against a calibration on k3",
            file=file,
            field="calibration.protocol.functional",
        )
    return functional.sequence_means(sums)


class PairRewrittenWarning(AdmitcheckWarning):
    """The pair's strict fingerprints differ from the calibration's (the CLI prints these in yellow)."""


def probe_prompts(config: ScreenConfig, file: str | None) -> list[dict]:
    prompts = io.read_prompts(config.probe.prompts, limit=config.probe.num_prompts)
    if len(prompts) < config.probe.min_prompts:
        raise ConfigError(
            f"probe.min_prompts is {config.probe.min_prompts} but {config.probe.prompts} holds only "
            f"{len(prompts)} prompts",
            file=file,
            field="probe.min_prompts",
        )
    return prompts


def check_engines(chosen: list[CandidateConfig], file: str | None) -> None:
    """A ConfigError naming `candidates.<name>.rollout...` when this machine's vLLM cannot run a candidate (vLLM
    candidates only; imports vllm, loads no model), so a screen stops before anything is measured."""
    for c in chosen:
        if c.rollout is None or c.rollout.engine != "vllm":
            continue
        from admitcheck.rollout.engines import vllm as vllm_engine

        check = getattr(vllm_engine, "check_rollout", None)
        if check is None:
            return
        try:
            check(c.rollout)
        except ConfigError as exc:
            where = f"candidates.{c.name}.{exc.field or 'rollout'}"
            raise ConfigError(exc.message, file=file, field=where) from None


def validate(
    config: ScreenConfig,
    *,
    config_file: str | None = None,
    candidates: list[str] | None = None,
    errors: list[AdmitcheckError] | None = None,
) -> dict[str, Any]:
    """Inputs on disk, calibration compatibility, engine support, logs file; no model loads. Returns what a screen
    would run. With `errors`, each check's error joins that list and the independent checks run on (the
    calibration's, which hashes the inputs, only when they are there); without, the first error is raised."""
    chosen = select_candidates(config, candidates)  # an unknown name: nothing to check the rest against
    prompts = None
    with Collected(errors) as inputs:
        prompts = check_inputs(config, chosen, config_file)
    calibration = None
    if inputs.ok:
        with Collected(errors):
            calibration = load_checked_calibration(config, config_file=config_file, behaviour=False)
    probes = None
    if config.source == "logs":
        from admitcheck.measurement.logs import read_logs

        with Collected(errors):
            logs = read_logs(config.logs.path, format=config.logs.format)
            looks, probes = 1, logs.num_sequences
    else:
        with Collected(errors):
            check_engines(chosen, config_file)
        if inputs.ok:  # check_inputs has read the probe prompts
            probes = len(prompts)
            looks = looks_plan(config, probes).looks
    if calibration is None or probes is None:
        return {}  # the errors say why
    return {
        "calibration": calibration_summary(calibration).model_dump(),
        "candidates": [c.name for c in chosen],
        "source": config.source,
        "probes_available": probes,
        "max_looks": looks,
        # engine screens: a confidence sequence (no split over looks); logs: α spent over the gate's runs
        "confidence_per_look": confidence_per_look(config.policy.confidence, config.logs.gates)
        if config.source == "logs"
        else config.policy.confidence,
    }


@contextmanager
def engine_errors(name: str) -> Iterator[None]:
    """Around an engine (or reference) call: out-of-memory and crashes become an EngineError (exit 3) naming the
    candidate. User errors (AdmitcheckError) pass through; bugs other than RuntimeError keep their traceback."""
    import torch

    try:
        yield
    except (MemoryError, torch.OutOfMemoryError) as exc:
        raise EngineError(f"out of memory: {exc}".split("\n")[0], field=f"candidates.{name}") from exc
    except RuntimeError as exc:
        raise EngineError(f"engine failed: {exc}".split("\n")[0], field=f"candidates.{name}") from exc


def engine_call(name: str, fn: Callable[[], Any]) -> Any:
    """`fn()` under `engine_errors(name)`."""
    with engine_errors(name):
        return fn()


def candidate_capacity(config: ScreenConfig, cand: CandidateConfig) -> CapacitySummary:
    """KV-cache capacity of the candidate on the configured GPU (staleness changes no memory: plain BF16)."""
    from admitcheck.rollout.capacity import capacity_summary

    cap = config.capacity
    path = Path(cap.model_config_path or Path(config.pair.student) / "config.json")
    try:
        return capacity_summary(io.read_json_as_is(path), cand.rollout or RolloutConfig(), cap)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"cannot size the KV cache from this model config ({type(exc).__name__}: {exc})",
            file=str(path),
            field="capacity.model_config_path",
        ) from None


def calibration_summary(calibration: CalibrationArtifact) -> CalibrationSummary:
    """What a screen's report says of the calibration it judged against."""
    b, r = calibration.budget, calibration.recipe
    return CalibrationSummary(
        path=str(calibration.path),
        pair=calibration.name,
        metric=calibration.metric,
        budget=b.value,
        budget_interval=tuple(b.interval),
        budget_kind=b.kind,
        tolerance=calibration.tau,
        recipe=RecipeSummary(
            loss=r.loss, student_logprobs=r.student_logprobs, lr=r.lr, tis_cap=r.tis_cap, temperature=r.temperature
        ),
    )


@dataclass(frozen=True)
class BudgetProtocolSummary:
    """The budget's measurement protocol as its artifact stores it, in the words a logs screen is compared in."""

    prompts: str  # "<n> probe prompts"
    x: str  # the weights the budget's mismatch is measured at: start or run
    max_new_tokens: int | None
    sampling: dict[str, Any]  # as stored


@dataclass(frozen=True)
class LoggedVsProtocol:
    """What a screen's logs measure beside the budget's protocol (`logs_against_protocol`; JSON: `to_dict`)."""

    quantity: LoggedQuantity
    budget_protocol: BudgetProtocolSummary
    differences: list[str]
    step: int | None  # the config's logs.step
    stored: StoredProtocol  # the protocol the differences are of, typed (not in the JSON: budget_protocol is)
    run_average: LoggedRunAverage | None = None  # the logs per step against the run-averaged budget (`run_x`)

    def to_dict(self) -> dict[str, Any]:
        """The quantity's fields, then the protocol, the differences, the step and the run-averaged comparison
        (`screen --json`'s `logged`)."""
        rest = {"budget_protocol": asdict(self.budget_protocol), "differences": self.differences, "step": self.step}
        rest |= {"run_average": asdict(self.run_average)} if self.run_average is not None else {}
        return asdict(self.quantity) | rest


def logs_against_protocol(
    cfg: Any, *, strict: bool, file: str | None, logs: Any = None, calibration: Any = None
) -> LoggedVsProtocol:
    """What a screen's logs measure (`logs.logged_quantity`) beside the budget's protocol; each difference is a
    warning, or with `strict` a ConfigError (exit 2). `logs` and `calibration` as a screen read them
    (`ScreenInputs`), else read here."""
    from admitcheck.admission import run_x
    from admitcheck.calibration.artifact import load_calibration
    from admitcheck.measurement.logs import logged_quantity, protocol_differences, read_logs

    logs = logs if logs is not None else read_logs(cfg.logs.path, format=cfg.logs.format)
    calibration = calibration if calibration is not None else load_calibration(cfg.calibration)
    quantity = logged_quantity(logs)
    stored = calibration.protocol.stored()
    try:
        diffs = protocol_differences(quantity, stored, step=cfg.logs.step)
    except ConfigError as exc:
        raise ConfigError(exc.message, file=file, field=exc.field) from None
    budget = BudgetProtocolSummary(
        prompts=f"{stored.num_prompts} probe prompts",
        x=stored.x,
        max_new_tokens=stored.max_new_tokens,
        sampling=calibration.protocol.sampling.model_dump(mode="json", exclude_unset=True),  # as stored
    )
    if diffs and strict:
        raise ConfigError(
            "the logs measure another quantity than the budget's protocol (--strict): " + "; ".join(diffs),
            file=file,
            field="logs.path",
        )
    for d in diffs:
        warnings.warn(AdmitcheckWarning(f"logs vs the budget's protocol: {d}"), stacklevel=2)
    return LoggedVsProtocol(quantity, budget, diffs, cfg.logs.step, stored, run_x.logged_run_average(logs, calibration))
