"""pydantic schemas for every YAML admitcheck reads, one module per config kind (`config.screen`,
`config.calibrate`, ...; the sections they share `config.sections`, the base `config.base`, the table of kinds
`config.kinds`), every public name re-exported here. Unknown keys are errors (a typo must not pass silently).

    cfg = admitcheck.io.load_config("examples/toy_measure.yaml", MeasureConfig)
    cfg.rollout.weights.format   # "fp8_e4m3"

Relative paths in a config are resolved against the config file's directory by `io.load_config`.
Constraints live in types; cross-field rules raise ValueError naming the fields (pydantic adds the path).
"""

from __future__ import annotations

from admitcheck.config.backtest import BacktestConfig, TruthConfig
from admitcheck.config.base import NOISE_SWITCHES, Dtype, MetricName, Objective, Strict, without_defaults
from admitcheck.config.calibrate import (
    AutoNoiseLevels,
    CalibrateConfig,
    EvalConfig,
    GRPOConfig,
    LevelConfig,
    LevelsConfig,
    ResourcesConfig,
    ToleranceConfig,
    TrainConfig,
)
from admitcheck.config.kinds import CONFIG_KINDS, KINDS, ConfigKind, config_kind, schema_for
from admitcheck.config.measure import MeasureConfig
from admitcheck.config.plan import BenchRef, PlanCandidate, PlanConfig, StepTimeConfig
from admitcheck.config.recipe import RecipeSearchConfig
from admitcheck.config.screen import (
    CandidateConfig,
    CapacityConfig,
    LogsSource,
    PolicyConfig,
    ScreenConfig,
    ScreenProbeConfig,
)
from admitcheck.config.sections import (
    KV_BACKENDS,
    AttentionBackend,
    KVBackend,
    KVCacheConfig,
    NoiseConfig,
    PairConfig,
    ProbeConfig,
    ReferenceConfig,
    RolloutConfig,
    SamplingConfig,
    VLLMOptions,
    WeightsRecipe,
)
from admitcheck.config.sensitivity import SensitivityConfig, UnitKind

__all__ = [
    "CONFIG_KINDS",
    "KINDS",
    "KV_BACKENDS",
    "NOISE_SWITCHES",
    "AttentionBackend",
    "AutoNoiseLevels",
    "BacktestConfig",
    "BenchRef",
    "CalibrateConfig",
    "CandidateConfig",
    "CapacityConfig",
    "ConfigKind",
    "Dtype",
    "EvalConfig",
    "GRPOConfig",
    "KVBackend",
    "KVCacheConfig",
    "LevelConfig",
    "LevelsConfig",
    "LogsSource",
    "MeasureConfig",
    "MetricName",
    "NoiseConfig",
    "Objective",
    "PairConfig",
    "PlanCandidate",
    "PlanConfig",
    "PolicyConfig",
    "ProbeConfig",
    "RecipeSearchConfig",
    "ReferenceConfig",
    "ResourcesConfig",
    "RolloutConfig",
    "SamplingConfig",
    "ScreenConfig",
    "ScreenProbeConfig",
    "SensitivityConfig",
    "StepTimeConfig",
    "Strict",
    "ToleranceConfig",
    "TrainConfig",
    "TruthConfig",
    "UnitKind",
    "VLLMOptions",
    "WeightsRecipe",
    "config_kind",
    "schema_for",
    "without_defaults",
]
