"""The `plan` kind: each candidate's time-to-quality from the calibration's runs and its measured step time.

cfg = io.load_config("examples/toy_plan.yaml", PlanConfig)
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from admitcheck.config.base import Strict
from admitcheck.config.sections import RolloutConfig


class BenchRef(Strict):
    """A rollout speed-up read from a bench JSON (`bench/fp8_speed.py`): the decode step of `variant` against the
    BF16 one of the same model, context and batch, measured on the GPU the JSON names."""

    model: str = Field(min_length=1)  # a model shape of the bench, e.g. "qwen3_8b", "smollm2_135m"
    context: int = Field(gt=0)  # KV length the decode step attends over, tokens
    variant: str = Field(min_length=1)  # e.g. "fp8_w8a8_rowwise", "fp8_kv_triton" (the bench's variant names)
    batch: int | None = Field(None, gt=0)  # decode batch; default: the bench's only batch at that model and context


class StepTimeConfig(Strict):
    """A candidate's training-step time relative to the baseline's (docs/plan.md): the ratio itself, or from the
    rollout speed-up and the rollouts' share of a step (Amdahl; with `overlap`, async: step = max(rollout, rest))."""

    ratio: float | None = Field(None, gt=0)  # candidate step time / baseline step time, measured as a whole
    rollout_speedup: float | None = Field(None, gt=0)  # baseline rollout time / candidate rollout time
    bench: BenchRef | None = None  # rollout_speedup from the plan's bench JSON
    overlap: bool = False  # rollouts overlap the rest of the step (asynchronous: a staleness ≥ 1 candidate)

    @model_validator(mode="after")
    def _one_source(self) -> StepTimeConfig:
        given = [k for k in ("ratio", "rollout_speedup", "bench") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"step_time sets at most one of ratio, rollout_speedup, bench (got {given})")
        if self.overlap and self.ratio is not None:
            raise ValueError("step_time.ratio is the whole step's: overlap needs rollout_speedup or bench")
        return self


class PlanCandidate(Strict):
    """A candidate to plan: its mismatch x (the budget's scale, what `screen` measured) and/or the runs it matches
    (a rollout config, a staleness or a noise size with runs in the ledgers), and its step time."""

    name: str = Field(min_length=1)
    mismatch: float | None = Field(None, ge=0)  # x, nats/token; default: the mean x of the matched level's runs
    rollout: RolloutConfig | None = None  # runs with exactly this rollout config (a backtest's) give own curves
    staleness: int | None = Field(None, gt=0)  # runs at this staleness
    relative_std: float | None = Field(None, gt=0)  # runs at this weight-noise size
    step_time: StepTimeConfig = StepTimeConfig()  # default: the baseline's step time (ratio 1)

    @model_validator(mode="after")
    def _x_or_runs(self) -> PlanCandidate:
        given = [k for k in ("rollout", "staleness", "relative_std") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"a plan candidate matches at most one of rollout, staleness, relative_std ({given})")
        return self


class PlanConfig(Strict):
    """`admitcheck plan`: predicted time-to-quality of candidates from the calibration's (and backtests') runs."""

    kind: Literal["plan"] | None = None  # optional: names the config kind (`validate` dispatches on it)
    calibration: str  # the calibration artifact; its ledger (<stem>.ledger.jsonl beside it) has the learning curves
    ledgers: list[str] = []  # more ledgers of the same recipe and pair (a backtest's <stem>.ledger.jsonl)
    screen_result: str | None = None  # `admitcheck screen --json` output: its ADMIT verdicts become candidates
    bench: str | None = None  # a bench JSON (bench/fp8_speed.py) that candidates' step_time.bench reads
    rollout_share: float | None = Field(None, gt=0, lt=1)  # rollouts' share of a baseline training step; default:
    # the calibration's baseline runs' own (seconds_by_phase, measured on the machine that ran them)
    step_seconds: float | None = Field(None, gt=0)  # one baseline training step on the target machine, s; default:
    # times are in baseline steps
    confidence: float = Field(0.95, gt=0, lt=1)  # of the intervals over replicate pairs, two-sided
    candidates: list[PlanCandidate] = []

    @model_validator(mode="after")
    def _something_to_plan(self) -> PlanConfig:
        if not self.candidates and self.screen_result is None:
            raise ValueError("nothing to plan: list candidates, or give a screen_result")
        names = [c.name for c in self.candidates]
        if len(set(names)) != len(names):
            raise ValueError("candidate names must be unique")
        return self
