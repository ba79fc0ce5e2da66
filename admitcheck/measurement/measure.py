"""Measure a rollout config's mismatch against the reference on the probe set, beside the noise floor.

    from admitcheck.measurement import measure
    from admitcheck import io
    from admitcheck.config import MeasureConfig
    report = measure(io.load_config("examples/toy_measure.yaml", MeasureConfig))
    report.candidate.values["k3"], report.floor.values["k3"]     # nats/token

The flow: tokenize the probe prompts -> `probe.probe_batches` (the candidate engine samples batch i with seed + i,
the reference — the student in trainer precision — re-scores the same tokens by teacher forcing under the same
sampling transform and the engine's kept set) -> per-sequence sums -> metrics with bootstrap-t intervals. The floor
is the same engine kind in the reference's own dtype with no recipe.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from admitcheck import io
from admitcheck.config import MeasureConfig, ProbeConfig, ReferenceConfig, RolloutConfig, SamplingConfig
from admitcheck.errors import ConfigError
from admitcheck.measurement.metrics import MismatchMetrics
from admitcheck.measurement.prefix_shift_report import PrefixShiftReport
from admitcheck.measurement.probe import ProbeRun, probe_batches
from admitcheck.pairs.load import LoadedPair, PairTokens, check_devices, tokenize_prompts
from admitcheck.rollout.floor import floor_rollout

Progress = Callable[[str, int, int], None]  # (label, done, total)


def batches(items: list, size: int) -> Iterator[tuple[int, list]]:
    for i, start in enumerate(range(0, len(items), size)):
        yield i, items[start : start + size]


def measure_engine(
    engine,
    reference_model,
    prompt_ids: list[list[int]],
    probe: ProbeConfig,
    sampling: SamplingConfig,
    *,
    full: bool,
    label: str = "",
    progress: Progress | None = None,
    acc: ProbeRun | None = None,
    first_batch: int = 0,
) -> ProbeRun:
    """Every probe batch through the one probe loop (`probe.probe_batches`), accumulated in a ProbeRun."""
    acc = acc if acc is not None else ProbeRun()
    kw = dict(full=full, seed_offset=first_batch, label=label, progress=progress)
    for batch in probe_batches(engine, reference_model, prompt_ids, probe, sampling, **kw):
        acc.add(batch)
    return acc


@dataclass(frozen=True)
class EngineMeasurement:
    """One engine's mismatch against the reference on the probe set."""

    name: str
    rollout: RolloutConfig
    metrics: MismatchMetrics
    num_sequences: int
    num_tokens: int
    seconds_engine_start: float
    seconds_measure: float

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "rollout": self.rollout.model_dump(mode="json"),
            "metrics": self.metrics.to_dict(),
            "num_sequences": self.num_sequences,
            "num_tokens": self.num_tokens,
            "seconds_engine_start": round(self.seconds_engine_start, 3),
            "seconds_measure": round(self.seconds_measure, 3),
        }


@dataclass(frozen=True)
class MismatchReport:
    """`measure`'s result: the candidate and (when asked) the noise floor, both against the same reference."""

    candidate: EngineMeasurement
    floor: EngineMeasurement | None
    sampling: SamplingConfig
    probe: ProbeConfig
    reference: ReferenceConfig
    seconds_total: float
    prefix_shift: PrefixShiftReport | None = None  # `diagnostics: [prefix_shift]`: the diagnostic, when asked for

    def to_dict(self) -> dict:
        return {
            "diagnostics": {"prefix_shift": self.prefix_shift.to_dict()} if self.prefix_shift is not None else {},
            "candidate": self.candidate.to_dict(),
            "floor": self.floor.to_dict() if self.floor else None,
            "sampling": self.sampling.model_dump(mode="json"),
            "probe": self.probe.model_dump(mode="json"),
            "reference": self.reference.model_dump(mode="json"),
            "seconds_total": round(self.seconds_total, 3),
        }


def measure_rollout(
    name: str,
    rollout: RolloutConfig,
    model_dir: str,
    tokens: PairTokens,
    reference_model,
    prompt_ids: list[list[int]],
    probe: ProbeConfig,
    sampling: SamplingConfig,
    *,
    full: bool,
    confidence: float = 0.95,
    progress: Progress | None = None,
) -> EngineMeasurement:
    from admitcheck.rollout.engines import build_engine

    t0 = time.perf_counter()
    engine = build_engine(rollout, model_dir, eos_token_id=tokens.eos_token_id, pad_token_id=tokens.pad_token_id)
    t1 = time.perf_counter()
    try:
        acc = measure_engine(
            engine, reference_model, prompt_ids, probe, sampling, full=full, label=name, progress=progress
        )
    finally:
        engine.close()
    t2 = time.perf_counter()
    return EngineMeasurement(
        name, rollout, acc.metrics(confidence), acc.num_sequences, acc.num_tokens, t1 - t0, t2 - t1
    )


def measure(
    config: MeasureConfig, *, config_file: str | None = None, progress: Progress | None = None
) -> MismatchReport:
    """The candidate's mismatch metrics beside the noise floor, on `config.probe`."""
    t0 = time.perf_counter()
    check_devices(config, file=config_file)
    pair = LoadedPair(config.pair, file=config_file)  # read once: the reference and the diagnostics share it
    tokens = pair.tokens
    prompts = io.read_prompts(config.probe.prompts, limit=config.probe.num_prompts)
    prompt_ids = tokenize_prompts(tokens, prompts, file=config.probe.prompts)
    if config.rollout.weights_from and not Path(config.rollout.weights_from).is_dir():
        raise ConfigError(
            f"checkpoint dir not found: {config.rollout.weights_from}", file=config_file, field="rollout.weights_from"
        )
    io.check_causal_lm(config.pair.teacher, file=config_file, field="pair.teacher")
    reference_model = pair.student(config.reference.dtype, config.reference.device)
    common = dict(full=config.full_logprobs, confidence=config.confidence, progress=progress)

    def measure_one(name: str, rollout: RolloutConfig) -> EngineMeasurement:
        return measure_rollout(
            name,
            rollout,
            config.pair.student,
            tokens,
            reference_model,
            prompt_ids,
            config.probe,
            config.sampling,
            **common,
        )

    candidate = measure_one("candidate", config.rollout)
    floor = measure_one("floor", floor_rollout(config.rollout, config.reference)) if config.floor else None
    shift = None
    if "prefix_shift" in config.diagnostics:
        from admitcheck.measurement.prefix_shift import load_prefix_shift_inputs, prefix_shift_for

        inputs = load_prefix_shift_inputs(config, config_file=config_file, pair=pair)
        shift = prefix_shift_for(config, config_file=config_file, inputs=inputs)
    return MismatchReport(
        candidate, floor, config.sampling, config.probe, config.reference, time.perf_counter() - t0, shift
    )


@dataclass(frozen=True)
class LogsMeasurement:
    """`measure --from-logs`: the metrics of a pipeline's logged log-probs (no model runs), with a framework's
    dashboard of the same tokens when asked for."""

    path: str  # the logs file, as given
    logs: Any  # `logs.LoggedLogprobs`: its format and the warnings its reader found
    metrics: MismatchMetrics
    dashboard: Any = None  # `dashboards.Dashboard` or None

    def to_dict(self) -> dict:
        doc = {"logs": self.path, "format": self.logs.format, "warnings": list(self.logs.warnings)}
        return doc | {
            "metrics": self.metrics.to_dict(),
            "dashboard": self.dashboard.to_dict() if self.dashboard else None,
        }


def measure_logs(path: str | Path, *, format: str = "auto", dashboard: str | None = None) -> LogsMeasurement:
    """The mismatch metrics of a logs file (`logs.read_logs`, errors naming `--from-logs`), and `dashboard`'s
    (a framework of `dashboards.FRAMEWORKS`) metrics of the same tokens."""
    from admitcheck.measurement.dashboards import dashboard as token_dashboard
    from admitcheck.measurement.logs import read_logs
    from admitcheck.measurement.metrics import mismatch_metrics

    logs = read_logs(path, format=format, field="--from-logs")
    m = mismatch_metrics(logs.rollout_logprobs, logs.trainer_logprobs, logs.mask)
    dash = None
    if dashboard:
        dash = token_dashboard(dashboard, logs.rollout_logprobs, logs.trainer_logprobs, logs.mask, groups=logs.groups)
    return LogsMeasurement(str(path), logs, m, dash)
