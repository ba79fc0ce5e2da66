"""The `screen` kind: candidates, the probe's sequential plan, the policy, KV capacity and a pipeline's logs as
the source.

    cfg = io.load_config("examples/toy_screen.yaml", ScreenConfig)
    cfg.candidates[0].rollout, cfg.policy.confidence, cfg.source
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from admitcheck.config.base import Objective, Strict
from admitcheck.config.sections import PairConfig, ProbeConfig, ReferenceConfig, RolloutConfig, SamplingConfig


class CandidateConfig(Strict):
    """One named candidate: a rollout config, or a staleness (rollouts k optimizer steps behind)."""

    name: str = Field(min_length=1)
    rollout: RolloutConfig | None = None
    staleness: int | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _one(self) -> CandidateConfig:
        if (self.rollout is None) == (self.staleness is None):
            raise ValueError("a candidate sets exactly one of rollout or staleness")
        return self


class ScreenProbeConfig(ProbeConfig):
    """Sequential probing: at least min_prompts, then more batches until decided, at most num_prompts."""

    min_prompts: int = Field(32, gt=0)

    @model_validator(mode="after")
    def _min_le_max(self) -> ScreenProbeConfig:
        if self.min_prompts > self.num_prompts:
            raise ValueError("probe.min_prompts must be <= probe.num_prompts")
        return self


class PolicyConfig(Strict):
    """The screen's decision rule (docs/statistics.md): ADMIT when the mismatch's confidence sequence (valid at every
    look, no split of α over the looks) lies below the budget's lower bound, REJECT when above its upper bound."""

    confidence: float = Field(0.95, gt=0, lt=1)  # two-sided level of the mismatch bounds over all looks
    # what a marginal verdict (undecided at probe.num_prompts) gets; `admit` lets the
    # point estimate decide, and the verdict is marked error_control: false
    undecided: Literal["reject", "admit"] = "reject"
    # a budget whose lower confidence bound is 0 (no level below it, or too few runs) can never ADMIT by the bound:
    # screen and validate refuse it, unless this opts into a gate that can only REJECT (docs: README, screen configs)
    reject_only: bool = False


class CapacityConfig(Strict):
    """Memory the KV-capacity column assumes (REFERENCE §4)."""

    gpu_memory_gib: float = Field(80.0, gt=0)
    utilization: float = Field(0.9, gt=0, le=1)
    activation_reserve_gib: float = Field(2.0, ge=0)
    model_config_path: str | None = None  # config.json of the deployed model; default: the student's


class LogsSource(Strict):
    """A pipeline's logged log-probs (`source: logs`, or `--from-logs FILE`, which keeps `step` and `checkpoint`)."""

    path: str  # JSONL (rollout_logprobs, trainer_logprobs[, mask]) per sequence, or Parquet with those columns
    format: Literal["auto", "admitcheck", "prime-rl", "verl", "trl", "nemo-rl"] = "auto"  # auto: from the columns
    step: int | None = Field(None, ge=0)  # the pipeline's training step the logs are from (checked against the rows)
    checkpoint: str | None = None  # the trainer checkpoint (HF dir) that scored them: must be this pair's student
    gates: int = Field(1, ge=1)  # how many times the pipeline runs this gate on its logs (e.g. once per checked
    # step): each verdict is made at 1 − α/gates (Bonferroni), so the chance that any of them is wrong stays ≤ α


class ScreenConfig(Strict):
    """`admitcheck screen`: verdicts for candidates against a calibration."""

    kind: Literal["screen"] | None = None  # optional: names the config kind (`validate` dispatches on it)
    pair: PairConfig
    calibration: str  # the calibration artifact (YAML)
    objective: Objective = "opd"  # the training the gate is for; the calibration's recipe must be of it
    probe: ScreenProbeConfig
    sampling: SamplingConfig = SamplingConfig()
    reference: ReferenceConfig = ReferenceConfig()
    candidates: list[CandidateConfig] = Field(min_length=1)
    policy: PolicyConfig = PolicyConfig()
    capacity: CapacityConfig = CapacityConfig()
    source: Literal["engine", "logs"] = "engine"
    logs: LogsSource | None = None
    full_logprobs: bool = True
    diagnostics: list[Literal["prefix_shift"]] = []  # prefix_shift per rollout candidate (hf engines)
    # a student checkpoint (HF dir) of this pair to measure at instead of pair.student (`--checkpoint`): the
    # reference and every candidate's engine load it; the pair's fingerprints are still checked on pair.student
    checkpoint: str | None = None
    checkpoint_step: int | None = Field(None, ge=0)  # the training step it was saved at (reported with the verdicts)

    @model_validator(mode="after")
    def _check(self) -> ScreenConfig:
        names = [c.name for c in self.candidates]
        if len(set(names)) != len(names):
            raise ValueError("candidate names must be unique")
        if self.source == "logs" and self.logs is None:
            raise ValueError("source: logs needs a logs: {path: ...} section")
        if self.checkpoint_step is not None and self.checkpoint is None:
            raise ValueError("checkpoint_step names the step of a checkpoint: set checkpoint too")
        if self.checkpoint is not None and self.source == "logs":
            raise ValueError("checkpoint is what an engine screen measures at; logs name theirs in logs.checkpoint")
        return self
