"""What a worker process keeps across the runs it is handed: the rollout engines and the quality evaluator.

    keep = kept(ctx)                                        # this process's keep for the loaded context
    engine = keep.engine(ctx, ctx.student, rollout)         # built on first use, retargeted after (no rebuild)
    evaluator = keep.evaluator(ctx, config)                 # one per eval setup; its engine is reloaded per run
    keep.runs                                               # runs this process has made with it

A campaign's worker (the driver itself with `--jobs 1`, a process of the local pool, a Ray actor) loads the pair
once (`levels.load_context`, cached per process) and keeps one engine per execution key: the rollout config
without its weight noise (a noise level's seed and size change the weights, not the engine). A run retargets the
kept engine: the rollout config is swapped (same key: only the noise differs) and the run's starting weights loaded
with the recipe re-applied (`HFEngine.load_weights`), exactly what a fresh engine does at construction — on CPU the
records are bit-identical to building every engine anew (tests/test_workers.py); on CUDA the in-place weight copy
keeps the parameters' memory, so captured decode graphs (and a compiled forward) survive from run to run.

A worker holds at most `MAX_KEPT_ENGINES` engines, one per distinct rollout recipe it met most recently (the base
config, each rollout level's, the reference floor of staleness levels), each a model copy in the engine's dtype plus
a float32 clean copy (SmolLM2-135M: ~0.8 GB, more with its captured decode graphs); the least recently used is
closed when another is needed. Why a bound: a backtest hands each worker up to 13 recipes (18 candidates), and on
2026-12-06 four such workers on an H100 grew to ~19 GiB each where a calibration's hold ~15.6 GiB, and ran out of
memory. An evicted recipe is rebuilt when it comes back, which gives the records a kept one gives (tested).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from admitcheck.calibration import opd
from admitcheck.config import CalibrateConfig, RolloutConfig, SamplingConfig

if TYPE_CHECKING:
    from admitcheck.calibration.levels import RunContext
    from admitcheck.rollout.engines.hf import HFEngine


def engine_key(rollout: RolloutConfig) -> str:
    """What a kept engine is built for: the rollout config without its weight noise."""
    return json.dumps(rollout.model_dump(mode="json", exclude={"noise"}), sort_keys=True)


MAX_KEPT_ENGINES = 4  # a calibration's recipes (base, float32 floor, one or two rollout levels) all stay kept


@dataclass
class EngineKeep:
    """Engines and evaluators kept by one process for one context (see the module docstring)."""

    engines: dict[str, Any] = field(default_factory=dict)  # engine_key -> HFEngine, least recently used first
    max_engines: int = MAX_KEPT_ENGINES
    evaluators: dict[str, opd.QualityEvaluator] = field(default_factory=dict)
    runs: int = 0  # runs made with this keep (a record's `worker_run` is this after the run)

    def engine(self, ctx: RunContext, model: torch.nn.Module, rollout: RolloutConfig) -> HFEngine:
        """An engine under `rollout` holding `model`'s weights with the recipe applied at noise step 0, as
        `HFEngine(model, rollout, ...)` would build it; the kept one when there is one."""
        key = engine_key(rollout)
        engine = self.engines.pop(key, None)
        if engine is None:
            from admitcheck.rollout.engines.hf import HFEngine

            while len(self.engines) >= max(1, self.max_engines):  # the least recently used makes room
                self.engines.pop(next(iter(self.engines))).close()
            tokens = ctx.tokens
            engine = HFEngine(model, rollout, eos_token_id=tokens.eos_token_id, pad_token_id=tokens.pad_token_id)
            self.engines[key] = engine
            return engine
        self.engines[key] = engine  # now the most recently used
        engine.rollout = rollout  # same key: only the noise (size, seed) differs, which load_weights applies
        engine.load_weights(model.state_dict(), noise_step=0)
        return engine

    def evaluator(self, ctx: RunContext, config: CalibrateConfig) -> opd.QualityEvaluator:
        """The run's quality evaluator: the same eval prompts, seeds and engine options for every run of a config,
        so one evaluator (its engine reloaded with the run's student at each evaluation) serves them all."""
        # what new_evaluator reads of the config
        what = {"eval": config.eval.model_dump(mode="json"), "reference": config.reference.model_dump(mode="json"),
                "temperature": config.train.temperature, "cuda_graphs": config.rollout.cuda_graphs,
                "compile": config.rollout.compile}  # fmt: skip
        key = json.dumps(what, sort_keys=True)
        if key not in self.evaluators:
            self.evaluators[key] = new_evaluator(ctx, config)
        return self.evaluators[key]

    def close(self) -> None:
        for engine in self.engines.values():
            engine.close()
        self.engines, self.evaluators = {}, {}


_KEPT: list[tuple[RunContext, EngineKeep]] = []  # this process's one (context, keep), as levels.load_context


def kept(ctx: RunContext) -> EngineKeep:
    """This process's keep for `ctx`; a new context (another config's pair) drops the old keep and its engines."""
    if _KEPT and _KEPT[0][0] is ctx:
        return _KEPT[0][1]
    for _, old in _KEPT:
        old.close()
    _KEPT[:] = [(ctx, EngineKeep())]
    return _KEPT[0][1]


def new_evaluator(ctx: RunContext, config: CalibrateConfig) -> opd.QualityEvaluator:
    """A quality evaluator for `config`'s runs (its engine is built at its first evaluation)."""
    sampling = SamplingConfig(temperature=config.train.temperature)
    return opd.QualityEvaluator(
        ctx.teacher, ctx.eval_ids, ctx.eval_answers, config.eval, ctx.tokens, sampling, config.reference,
        execution=config.rollout,
    )  # fmt: skip
