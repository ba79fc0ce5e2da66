"""The `backtest` kind: a calibration's verdicts checked against full runs with each candidate, and the rule
that calls a candidate's truth.

    cfg = io.load_config("examples/toy_backtest.yaml", BacktestConfig)
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from admitcheck.config.base import Strict
from admitcheck.config.screen import CandidateConfig


class TruthConfig(Strict):
    """How a backtest decides each candidate's true quality cost: paired full OPD runs, looked at after
    `replicates` pairs and after every `step` more, at most `max_replicates` (Bonferroni over the looks)."""

    replicates: int = Field(4, ge=2)  # pairs (candidate run, baseline run of the same seed) before the first look
    step: int = Field(4, ge=1)  # pairs added per round to a candidate whose truth is still undecided
    max_replicates: int = Field(8, ge=2)  # then its truth is "ambiguous"
    confidence: float = Field(0.95, gt=0, lt=1)  # of the cost interval, two-sided, spent evenly over the looks

    @model_validator(mode="after")
    def _max_ge_first(self) -> TruthConfig:
        if self.max_replicates < self.replicates:
            raise ValueError("truth.max_replicates must be >= truth.replicates")
        return self


class BacktestConfig(Strict):
    """`admitcheck backtest`: a calibration's verdicts on held-out candidates against full OPD runs with them."""

    kind: Literal["backtest"] | None = None  # optional: names the config kind (`validate` dispatches on it)
    calibrate_config: str  # the calibrate config the calibration was made with: its recipe and seeds make the truth
    screen_config: str  # a screen config against that calibration: its probe and policy give the verdicts
    candidates: list[CandidateConfig] = Field(min_length=1)  # held-out candidates (the screen config's are not used)
    truth: TruthConfig = TruthConfig()
    output: str | None = None  # default: <calibration stem>.backtest.yaml beside the calibration

    @model_validator(mode="after")
    def _unique(self) -> BacktestConfig:
        names = [c.name for c in self.candidates]
        if len(set(names)) != len(names):
            raise ValueError("candidate names must be unique")
        return self
