"""What one screen reads, read once at the edge and handed down as one typed object (`ScreenInputs`): the checked
calibration, the loaded pair, the probe prompts' ids or the logged log-probs, the look plan and the per-look
confidence. Nothing below it opens a file the inputs already hold.

    inputs = read_screen_inputs(cfg, config_file="screen.yaml", candidates=["fp8_kv"])
    report = screen_with(inputs)                       # admission.screen: the verdicts, from these inputs only
    inputs = read_screen_inputs(cfg, from_logs="rollouts.jsonl")   # `--from-logs`: inputs.logs, one verdict
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from admitcheck import io
from admitcheck.admission.checkpoint import at_checkpoint
from admitcheck.admission.checks import (
    check_engines,
    check_inputs,
    load_checked_calibration,
    select_candidates,
    with_logs,
)
from admitcheck.admission.sequential import LookPlan, confidence_per_look, looks_plan
from admitcheck.calibration.schema import CalibrationArtifact
from admitcheck.config import CandidateConfig, ScreenConfig
from admitcheck.errors import AdmitcheckWarning
from admitcheck.measurement.logs import LoggedLogprobs
from admitcheck.pairs.load import LoadedPair


@dataclass(frozen=True)
class ScreenInputs:
    """Everything a screen reads, each read once (`read_screen_inputs`)."""

    config: ScreenConfig  # with `source: logs` and its logs section when `--from-logs` gave them
    file: str | None  # the config file, for errors that name a field
    chosen: tuple[CandidateConfig, ...]  # the candidates `--candidate` picked (all by default)
    calibration: CalibrationArtifact  # compatible with the config, the pair behaving as stored
    pair: LoadedPair  # the one tokenizer and model loader of the screen (compatibility, reference, staleness)
    plan: LookPlan  # in probe batches; (1, 1, 1) for logs: one look at every sequence
    confidence: float  # per look: the policy's (a confidence sequence); logs: spent over `logs.gates` runs
    prompt_ids: tuple[list[int], ...] = ()  # the probe prompts, tokenized (engine screens)
    logs: LoggedLogprobs | None = None  # a pipeline's logged log-probs (logs screens)
    seconds: float = 0.0  # spent reading them, s


class Reading(TypedDict, total=False):
    """How a screen's inputs are read: `read_screen_inputs`'s keywords, which `screen.screen` and `screen.screen_run`
    pass on as they are (`**reading: Unpack[Reading]`)."""

    config_file: str | None  # the config file, for errors that name a field
    candidates: list[str] | None  # the candidates to screen by name (all by default)
    from_logs: str | Path | None  # `--from-logs`: a pipeline's logged log-probs instead of the engines
    log_format: str  # their format (`logs.read_logs`)
    engines: bool  # check that this machine runs each candidate's engine


def read_screen_inputs(
    config: ScreenConfig,
    *,
    config_file: str | None = None,
    candidates: list[str] | None = None,
    from_logs: str | Path | None = None,
    log_format: str = "auto",
    engines: bool = True,
) -> ScreenInputs:
    """The screen's inputs in the order a user's errors are named: the logs (`--from-logs` wired here, once), the
    candidates, files, the calibration (its compatibility, the pair's behaviour), then for an engine screen the
    engines (`engines`: this machine's vLLM runs each candidate), devices, the probe prompts' ids and the plan."""
    from admitcheck.measurement.logs import read_logs
    from admitcheck.pairs.load import check_devices, tokenize_prompts

    t0 = time.perf_counter()
    logs = None
    if from_logs is not None:  # the config's logs section (step, checkpoint, gates) stays
        config = with_logs(config, from_logs, log_format)
        logs = read_logs(from_logs, format=log_format, field="--from-logs")
        for w in logs.warnings:  # what the reader found (the command prints them in yellow)
            warnings.warn(AdmitcheckWarning(w), stacklevel=2)
    elif config.source == "logs":
        logs = read_logs(config.logs.path, format=config.logs.format)
    chosen = tuple(select_candidates(config, candidates))
    prompts = check_inputs(config, list(chosen), config_file)
    pair = LoadedPair(config.pair, file=config_file)  # read once, shared
    calibration = load_checked_calibration(config, config_file=config_file, pair=pair)
    if config.checkpoint is not None:  # checked against the calibration: from here on the student is the checkpoint
        config, pair = at_checkpoint(config, pair)
    common = dict(config=config, file=config_file, chosen=chosen, calibration=calibration, pair=pair)
    if logs is not None:  # α spent over the gate's runs, as over looks
        confidence = confidence_per_look(config.policy.confidence, config.logs.gates)
        return ScreenInputs(**common, plan=LookPlan(1, 1, 1), confidence=confidence, logs=logs,
                            seconds=time.perf_counter() - t0)  # fmt: skip
    if engines:
        check_engines(list(chosen), config_file)
    check_devices(config, file=config_file)
    prompt_ids = tokenize_prompts(pair.tokens, prompts, file=config.probe.prompts)
    io.check_causal_lm(config.pair.teacher, file=config_file, field="pair.teacher")
    return ScreenInputs(
        **common,
        plan=looks_plan(config, len(prompts)),
        confidence=config.policy.confidence,  # a confidence sequence: valid at every look, no α split
        prompt_ids=tuple(prompt_ids),
        seconds=time.perf_counter() - t0,
    )
