"""Screening: measure candidate rollout configs sequentially and ADMIT or REJECT each against the budget B.

    from admitcheck import io
    from admitcheck.config import ScreenConfig
    from admitcheck.admission.screen import screen
    from admitcheck.admission.inputs import read_screen_inputs
    from admitcheck.admission.session import ScreenSession
    from admitcheck.admission.checks import validate
    cfg = io.load_config("examples/toy_screen.yaml", ScreenConfig)
    validate(cfg)                                      # inputs + calibration compatibility, loads no model
    result = screen(cfg, candidates=["fp8_kv"])        # ScreenReport; result.exit_code is 0 or 1
    v = result.verdicts[0]; v.decision, v.estimator, v.mismatch, v.mismatch_interval, v.decided_by, v.margin
    screen(cfg, from_logs="rollouts.jsonl")            # one verdict from a pipeline's logged log-probs
    inputs = read_screen_inputs(cfg); screen_with(inputs)   # the inputs read once (admission.inputs), then judged
    ScreenSession(inputs).screen_candidate(cfg.candidates[0])   # one reference, many candidates

This module orchestrates; the decision rule (look plan, per-look level, heavy-tail rule, the budget's interval,
verdict) is `admitcheck.admission.sequential`, pure; the measurement is the one probe loop,
`admitcheck.measurement.probe`. Batch i samples
probe prompts [i·bs, (i+1)·bs) with seed probe.seed + i, as `measure` does; after the batch that reaches
probe.min_prompts and after every later one, the studentized-bootstrap interval of the decision estimator (kl_exact
where the engine gives full rows, else the calibration's metric) over all sequences so far is one look of
`sequential.look`, until decided or probe.num_prompts. A staleness-k candidate's mismatch is KL(π_θ0 ‖ π_θk) on
tokens the start weights sample, θk = the student after k real OPD steps with the calibration's recipe. One
reference model and one noise floor per engine kind (on the first-look probes) serve every candidate.

A candidate whose engine fails (EngineError: vLLM would not start, out of memory) does not lose the others: the rest
are screened, then `screen` raises a `PartialScreenError` (an EngineError, exit 3) naming the first failed candidate,
with the partial ScreenReport (verdicts obtained, `failures` by name) in its `partial` attribute, for the reports.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Unpack

from admitcheck.admission.checks import LoggedVsProtocol, calibration_summary
from admitcheck.admission.inputs import Reading, ScreenInputs, read_screen_inputs
from admitcheck.admission.screen_report import (
    CandidateDiagnostics,
    MeasuredWeights,
    PartialScreenError,
    PolicySummary,
    ScreenReport,
)
from admitcheck.admission.sequential import (
    Decision,
    Verdict,
    looks_plan,
)
from admitcheck.admission.session import Progress, ScreenSession
from admitcheck.config import ScreenConfig
from admitcheck.errors import EngineError

# Re-exported: the verdict and the look plan were defined here before `admission` (cli, report, bench use them).
__all__ = [
    "Decision",
    "ScreenReport",
    "ScreenRun",
    "ScreenSession",
    "Verdict",
    "looks_plan",
    "screen",
    "screen_run",
    "screen_with",
]


def _diagnostics(inputs: ScreenInputs) -> dict[str, CandidateDiagnostics]:
    """`diagnostics: [prefix_shift]`: coupled sampling of each hf rollout candidate against the reference (the
    screen's `LoadedPair` and probe prompts: nothing read again)."""
    config = inputs.config
    if "prefix_shift" not in config.diagnostics:
        return {}
    from admitcheck.measurement.prefix_shift import load_prefix_shift_inputs, prefix_shift_for

    coupled = [c for c in inputs.chosen if c.rollout is not None and c.rollout.engine == "hf"]
    if not coupled:
        return {}
    shared = load_prefix_shift_inputs(config, pair=inputs.pair, prompt_ids=list(inputs.prompt_ids))  # once for all
    return {
        c.name: CandidateDiagnostics(
            prefix_shift=prefix_shift_for(config, c.rollout, config_file=inputs.file, inputs=shared)
        )
        for c in coupled
    }


# ------------------------------------------------------------------------------------------------ screening


def screen(config: ScreenConfig, *, progress: Progress | None = None, **reading: Unpack[Reading]) -> ScreenReport:
    """Verdicts for the chosen candidates (all by default) against `config.calibration`; see the module docstring.
    `from_logs` (+ `log_format`, see `logs.read_logs`) screens a pipeline's logged log-probs instead of sampling.
    The inputs are read once (`inputs.read_screen_inputs`, its keywords `reading`), then `screen_with` judges."""
    return screen_with(read_screen_inputs(config, **reading), progress)


def screen_with(inputs: ScreenInputs, progress: Progress | None = None) -> ScreenReport:
    """The `ScreenReport` of inputs read once: a verdict per chosen candidate, or one from the logs; a
    `PartialScreenError` (its `partial` report beside it) when a candidate's engine failed."""
    t0 = time.perf_counter()
    config = inputs.config
    session = ScreenSession(inputs)
    verdicts: list[Verdict] = []
    failures: dict[str, str] = {}
    if inputs.logs is not None:
        verdicts, setup = [session.screen_logs()], 0.0
    else:
        setup = inputs.seconds + time.perf_counter() - t0
        for c in inputs.chosen:
            try:
                verdicts.append(session.screen_candidate(c, progress))
            except EngineError as exc:  # this candidate has no verdict; the others keep theirs
                failures[c.name] = _failure_message(exc, c.name)
    result = ScreenReport(
        verdicts=verdicts,
        calibration=calibration_summary(session.calibration),
        floor=session.floors,
        policy=PolicySummary(
            **config.policy.model_dump(), confidence_per_look=session.confidence, max_looks=session.plan.looks
        ),
        source=config.source,
        seconds_setup=setup,
        seconds_total=inputs.seconds + time.perf_counter() - t0,
        failures=failures,
        diagnostics=_diagnostics(inputs) if config.source == "engine" else {},
        weights=measured_weights(config),
    )
    if failures:
        raise _partial_failure(result, inputs.file)
    return result


def measured_weights(config: ScreenConfig) -> MeasuredWeights:
    """Which weights a screen's inputs measured at (`inputs.at_checkpoint` made the checkpoint the pair's student)."""
    if config.source == "logs":
        return MeasuredWeights(at="logs", student=config.logs.checkpoint, step=config.logs.step)
    if config.checkpoint is not None:
        return MeasuredWeights(at="checkpoint", student=config.checkpoint, step=config.checkpoint_step)
    return MeasuredWeights(at="start", student=config.pair.student)


@dataclass(frozen=True)
class ScreenRun:
    """What `admitcheck screen` shows: the report (partial when an engine failed: `failure` is then the error the
    command exits with, after the reports), what logged log-probs measure beside the budget's protocol, and one
    framework dashboard per verdict when asked for."""

    report: ScreenReport
    logged: LoggedVsProtocol | None = None  # `checks.logs_against_protocol`
    dashboards: dict[str, Any] = field(default_factory=dict)  # verdict name -> `dashboards.Dashboard`
    failure: PartialScreenError | None = None


def screen_run(
    config: ScreenConfig,
    *,
    strict: bool = False,
    dashboard: str | None = None,
    progress: Progress | None = None,
    checkpoint: str | Path | None = None,
    checkpoint_step: int | None = None,
    **reading: Unpack[Reading],
) -> ScreenRun:
    """The screen command as one library call: the inputs read once (`--from-logs`: its reader's warnings issued),
    the logs' quantity beside the budget's protocol (`strict`: a ConfigError when they differ), the verdicts (a
    `PartialScreenError` kept beside the partial report), and `dashboard`'s metrics per verdict. `checkpoint`
    (+ `checkpoint_step`): measure at a checkpoint of the student instead of the start weights."""
    from admitcheck.admission.checkpoint import with_checkpoint
    from admitcheck.admission.checks import logs_against_protocol

    config = with_checkpoint(config, checkpoint, checkpoint_step)  # `--checkpoint DIR --checkpoint-step N`
    inputs = read_screen_inputs(config, **reading)
    logged = None
    if inputs.logs is not None:
        logged = logs_against_protocol(
            inputs.config, strict=strict, file=inputs.file, logs=inputs.logs, calibration=inputs.calibration
        )
    failure = None
    try:
        report = screen_with(inputs, progress)
    except PartialScreenError as exc:  # a candidate's engine failed: the verdicts obtained are reported
        report, failure = exc.partial, exc
    dashes = _dashboards(dashboard, report, inputs.logs) if dashboard else {}
    return ScreenRun(report, logged, dashes, failure)


def _dashboards(framework: str, report: ScreenReport, logs) -> dict[str, Any]:
    """One dashboard per verdict: exact from the logs' tokens, or from each engine verdict's token means."""
    from admitcheck.measurement.dashboards import dashboard, dashboard_from_metrics

    out = {}
    for v in report.verdicts:
        if v.source == "logs" and logs is not None:
            out[v.name] = dashboard(
                framework, logs.rollout_logprobs, logs.trainer_logprobs, logs.mask, groups=logs.groups
            )
        else:
            out[v.name] = dashboard_from_metrics(framework, v.metrics, v.tokens)
    return out


def _failure_message(exc: EngineError, name: str) -> str:
    """The engine error on one line, with where it happened when that is not the candidate itself (its floor)."""
    where = (exc.field or "").removeprefix(f"candidates.{name}").lstrip(".").removeprefix("candidates.")
    return f"{where}: {exc.message}" if where else exc.message


def _partial_failure(result: ScreenReport, file: str | None) -> PartialScreenError:
    """The EngineError (exit 3) naming the first failed candidate; `partial` carries the result for the reports."""
    name, message = next(iter(result.failures.items()))
    others = [n for n in result.failures if n != name]
    kept = ", ".join(v.name for v in result.verdicts) or "none"
    also = f"; also failed: {', '.join(others)}" if others else ""
    return PartialScreenError(
        f"{message}{also} (verdicts obtained: {kept})", result, file=file, field=f"candidates.{name}"
    )
