# long module: a level is its engine, its measured x and its run; the three share the level's resolution and seeds
"""Calibration levels and one run of a level: its engine, its mismatch measured as a screen measures it, its OPD run.

    ctx = load_context(cfg, "examples/toy_calibrate.yaml")     # pair, prompts, models; checked, cached per process
    ks = measure_grid(ctx, cfg, [0.01, 0.1])                    # k3 (nats/token) of two weight-noise sizes
    record = run_one(ctx, cfg, Level("noise-1", "noise", relative_std=0.01), seed=0)
    record.mismatch, record.quality                             # x and final quality, nats/token (a RunRecord)

A run's start mismatch is `measure.measure_engine` on the probe set (the screen's sampling, seeds and metric) with the
level's engine at the run's starting weights (noise draw 0, the one the first training step uses) against the
reference (the student in reference precision); for staleness k, the engine in the reference's configuration on
the starting student against the student after k real OPD steps (`opd.stale_student`, as `screen` does). Its run
mismatch is the engine-vs-trainer k3 of every training step (`in_run_k3`; a window of them is the run-averaged x, which
`opd.run_mismatch` reproduces for a screen from a short stretch of the same training). Everything
runs with one torch thread (`one_thread`) so that runs are bit-identical in this process and in worker processes.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from admitcheck import io
from admitcheck.calibration import opd
from admitcheck.calibration.grpo import Task, train_prompts
from admitcheck.calibration.ledger import NoiseGrid
from admitcheck.calibration.phases import GpuSampler, PhaseClock
from admitcheck.calibration.record import LevelKind, LevelSpec, RunRecord
from admitcheck.calibration.runs import derive_seed
from admitcheck.calibration.workers import EngineKeep, kept, new_evaluator
from admitcheck.config import AutoNoiseLevels, CalibrateConfig, NoiseConfig, RolloutConfig
from admitcheck.errors import ConfigError
from admitcheck.measurement.measure import measure_engine
from admitcheck.measurement.metrics import Functional
from admitcheck.pairs.load import PairTokens, load_pair_tokenizer, tokenize_prompts
from admitcheck.rollout.floor import floor_rollout

GRID_STDS = (1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0)  # relative weight-noise sizes measured to place the auto grid
EXECUTION_OPTIONS = ("cuda_graphs", "compile")  # RolloutConfig fields added after ledgers were shipped
FULL_ROWS_BYTES = 1 << 28  # compare full distributions (kl_exact) only when a probe batch's (B, T, V) fits in this


@dataclass(frozen=True)
class Level:
    """One calibration perturbation of the rollout engine."""

    name: str
    kind: LevelKind
    relative_std: float = 0.0  # weight noise, relative to each tensor's RMS
    rollout: RolloutConfig | None = None  # a named rollout config (kind "rollout")
    staleness: int = 0  # optimizer steps the engine's weights lag behind (kind "staleness")
    target: float | None = None  # the k3 the auto grid aimed at, nats/token
    systematic: bool = False  # noise: the step-0 draw kept for the whole run (opd.train's redraw_noise=False)
    fit: bool = True  # in the curve fit (false: a held-out check of the curve's prediction)

    def spec(self) -> LevelSpec:
        """What determines this level's runs (not its name): the ledger's key."""
        rollout = self.rollout.key_dump() if self.rollout is not None else None  # old FP8-KV recipe: its old key
        if rollout is not None:  # how the engine decodes, at its default, is not part of the key (older ledgers)
            rollout = {k: v for k, v in rollout.items() if not (k in EXECUTION_OPTIONS and v is None)}
        return LevelSpec(self.kind, self.relative_std, rollout, self.staleness, self.systematic)

    def engine_rollout(self, base: RolloutConfig, seed: int) -> RolloutConfig:
        """The rollout config of the run's engine; weight noise is seeded by the run seed."""
        if self.kind == "noise":
            return base.model_copy(update={"noise": NoiseConfig(relative_std=self.relative_std, seed=seed)})
        return self.rollout if self.kind == "rollout" and self.rollout is not None else base

    def seed(self, base: int, replicate: int) -> int:
        """The run seed of replicate r: the same for every level (common random numbers), so that a level's run
        and the baseline's run r share the data order, the rollout sampling uniforms (coupled sampling) and the
        noise draw's seed, and their quality difference is a paired difference."""
        return replicate_seed(base, replicate)

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "kind": self.kind, "fit": self.fit}
        if self.kind == "noise":
            out |= {"relative_std": self.relative_std, "target": self.target}
        elif self.kind == "rollout" and self.rollout is not None:
            out["rollout"] = self.rollout.model_dump(mode="json")  # explicit: an FP8 cache names its recipe
        elif self.kind == "staleness":
            out["staleness"] = self.staleness
        return out


def replicate_seed(base: int, replicate: int) -> int:
    """The seed every level's replicate `replicate` runs with (calibration top-level seed `base`)."""
    return derive_seed("replicate", base, replicate) % 1_000_000


def resolve_levels(config: CalibrateConfig, grid: NoiseGrid | None) -> list[Level]:
    """Baseline, the automatic noise grid (σ from `grid`), then the extra levels, in that order."""
    levels = [Level("baseline", "baseline")]
    auto = config.levels.auto_noise
    if auto is not None and grid is not None:
        targets = auto_noise_targets(auto)
        for i, (target, std) in enumerate(zip(targets, noise_for_mismatch(grid, targets)), start=1):
            levels.append(Level(f"noise-{i}", "noise", relative_std=std, target=float(target)))
    for lv in config.levels.extra:
        if lv.rollout is not None:
            levels.append(Level(lv.name, "rollout", rollout=lv.rollout, fit=lv.fit))
        elif lv.relative_std is not None:
            levels.append(Level(lv.name, "noise", relative_std=lv.relative_std, systematic=lv.systematic, fit=lv.fit))
        else:
            levels.append(Level(lv.name, "staleness", staleness=lv.staleness, fit=lv.fit))
    return levels


def auto_noise_targets(auto: AutoNoiseLevels) -> list[float]:
    """The automatic grid's target mismatches: `count` values, geometric from min_mismatch to max_mismatch."""
    return [float(v) for v in np.geomspace(auto.min_mismatch, auto.max_mismatch, auto.count)]


def noise_for_mismatch(grid: NoiseGrid, targets: Any) -> list[float]:
    """σ whose k3 is each target: piecewise-linear in (log σ, log k3) through the grid, made monotone, extended
    past its ends with the end slopes (at least 1). Rounded to 4 significant digits (stable run keys)."""
    s = np.log(np.asarray(grid.relative_std, dtype=np.float64))  # (n,)
    k = np.maximum.accumulate(np.log(np.maximum(np.asarray(grid.mismatch, dtype=np.float64), 1e-30)))  # (n,)
    k = k + 1e-9 * np.arange(k.size)  # strictly increasing for the inverse
    out = []
    for t in np.log(np.asarray(targets, dtype=np.float64)):
        if t < k[0]:
            slope = max((k[1] - k[0]) / (s[1] - s[0]), 1.0)
            ls = s[0] + (t - k[0]) / slope
        elif t > k[-1]:
            slope = max((k[-1] - k[-2]) / (s[-1] - s[-2]), 1.0)
            ls = s[-1] + (t - k[-1]) / slope
        else:
            ls = float(np.interp(t, k, s))
        out.append(float(f"{math.exp(ls):.4g}"))
    return out


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch.set_num_threads(1) for the block: identical numerics in-process and in workers, whatever the machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass
class RunContext:
    """What every run of a calibration shares (loaded once per process)."""

    tokens: PairTokens
    student: torch.nn.Module  # float32 starting weights on the trainer device; runs train deep copies
    reference: torch.nn.Module  # the student in reference precision, for mismatch measurements
    teacher: torch.nn.Module
    train_ids: list[list[int]]
    probe_ids: list[list[int]]
    eval_ids: list[list[int]]
    eval_answers: list[str] | None
    task: Task | None = None  # the train prompts' answers, for a GRPO reward that reads them (`grpo.task_of`)


_CACHE: dict[str, RunContext] = {}


def load_context(config: CalibrateConfig, config_file: str | None = None, device: str | None = None) -> RunContext:
    """Check and load the pair, prompt sets and models (ConfigError naming the field); cached per process.
    `device`: where the models go (default: the reference's device; "cpu" for work that must not need the GPU)."""
    device = None if device == config.reference.device else device  # one context, one cache entry, where they agree
    key = json.dumps([config.model_dump(mode="json", include={"pair", "probe", "train", "eval", "reference"}), device])
    if key in _CACHE:
        return _CACHE[key]
    _check_engines(config, config_file)
    tokens = load_pair_tokenizer(config.pair, file=config_file)
    sets = {}
    for name, section in (("train", config.train), ("probe", config.probe), ("eval", config.eval)):
        limit = section.num_prompts if name != "train" else None
        sets[name] = io.read_prompts(section.prompts, limit=limit, field=f"{name}.prompts")
    ids = {k: tokenize_prompts(tokens, sets[k], file=getattr(config, k).prompts) for k in ("probe", "eval")}
    # the rows an answer-reading reward trains on, and their answers (as a screen's stale candidates read them)
    ids["train"], task = train_prompts(sets["train"], tokens, config.train, file=config.train.prompts)
    dev, dtype = device or config.reference.device, config.reference.dtype
    student = io.load_causal_lm(config.pair.student, "float32", dev, file=config_file, field="pair.student")
    reference = io.load_causal_lm(config.pair.student, dtype, dev, file=config_file, field="pair.student")
    teacher = io.load_causal_lm(config.pair.teacher, "float32", dev, file=config_file, field="pair.teacher")
    answers = [str(r["answer"]) for r in sets["eval"]] if all("answer" in r for r in sets["eval"]) else None
    ctx = RunContext(tokens, student, reference, teacher, ids["train"], ids["probe"], ids["eval"], answers, task)
    _CACHE.clear()
    _CACHE[key] = ctx
    return ctx


def _check_engines(config: CalibrateConfig, file: str | None) -> None:
    """Runs re-sync the engine from the trainer every step: the HF engine, no fixed checkpoint."""
    rollouts = [("rollout", config.rollout)]
    rollouts += [(f"levels.extra.{i}.rollout", lv.rollout) for i, lv in enumerate(config.levels.extra) if lv.rollout]
    for where, r in rollouts:
        if r.engine != "hf":
            raise ConfigError(
                "calibration runs use the hf engine (it is re-synced from the trainer after every "
                "step); measure a vllm config with `screen`",
                file=file,
                field=f"{where}.engine",
            )
        if r.weights_from is not None:
            raise ConfigError(
                "a calibration level cannot sample from a fixed checkpoint; use a staleness level",
                file=file,
                field=f"{where}.weights_from",
            )


def _engine(ctx: RunContext, model: torch.nn.Module, rollout: RolloutConfig):
    from admitcheck.rollout.engines.hf import HFEngine

    return HFEngine(model, rollout, eos_token_id=ctx.tokens.eos_token_id, pad_token_id=ctx.tokens.pad_token_id)


def level_functional(config: CalibrateConfig, vocab_size: int) -> Functional | None:
    """What a level's x is (`metrics.Functional`, written to the artifact's `protocol.functional`): the KL metrics'
    self-winsorized sequence mean of k3, the estimator every engine, every pipeline's logs and every training dashboard
    has (kl_exact needs full rows, which logs and large-vocabulary vLLM engines lack; docs/statistics.md §1). None for
    another metric (its x stays the uncapped token mean; a screen refuses it). `vocab_size` is kept for a calibration
    that would choose kl_exact where its rows fit."""
    if config.metric not in ("k3", "kl_exact"):
        return None
    return Functional("k3")


@dataclass(frozen=True)
class LevelMismatch:
    """A run's x (`level_mismatch`), nats/token: the calibration's functional with its interval, the uncapped token
    means beside it, and the probe's tokens; the fields of the run's record it fills (`dataclasses.asdict`)."""

    mismatch: float | None = None
    mismatch_interval: list[float] | None = None  # [lo, hi]
    k3: float | None = None
    kl_exact: float | None = None  # None where the probe kept no full rows
    probe_tokens: int = 0


def _measure(ctx: RunContext, config: CalibrateConfig, engine, reference) -> LevelMismatch:
    """The engine's mismatch against `reference` on the probe set, as `screen` measures it: the level's x is the
    calibration's functional through `ProbeRun.functional`, the screen's code path (k3 and kl_exact beside it)."""
    probe = config.probe
    functional = level_functional(config, ctx.tokens.vocab_size)
    full = probe.batch_size * probe.max_new_tokens * ctx.tokens.vocab_size * 4 <= FULL_ROWS_BYTES
    acc = measure_engine(engine, reference, ctx.probe_ids, probe, config.sampling, full=full)
    m = acc.metrics(config.confidence)
    if functional is not None:
        fv = acc.functional(functional, config.confidence)
        x, (lo, hi) = fv.value, fv.interval
    else:
        x, (lo, hi) = m.values[config.metric], m.intervals[config.metric]
    return LevelMismatch(
        mismatch=float(x),
        mismatch_interval=[float(lo), float(hi)],
        k3=float(m.values["k3"]),
        kl_exact=float(m.values["kl_exact"]) if "kl_exact" in m.values else None,
        probe_tokens=acc.num_tokens,
    )


def measure_grid(
    ctx: RunContext, config: CalibrateConfig, stds: list[float], progress: Callable | None = None
) -> list[float]:
    """k3 (nats/token) of the base engine with weight noise of each relative size, noise seed config.seed."""
    out = []
    with one_thread():
        for i, std in enumerate(stds):
            rollout = config.rollout.model_copy(update={"noise": NoiseConfig(relative_std=std, seed=config.seed)})
            engine = _engine(ctx, ctx.student, rollout)
            out.append(_measure(ctx, config, engine, ctx.reference).k3)
            engine.close()
            if progress:
                progress("auto-noise grid", i + 1, len(stds))
    return out


def level_mismatch(
    ctx: RunContext, config: CalibrateConfig, level: Level, seed: int, keep: EngineKeep | None = None
) -> LevelMismatch:
    """The run's x: its engine at the starting weights (staleness: θ0 against θk) measured on the probe set; the
    engine is `keep`'s when given (a worker's kept engine, retargeted), else built and closed here."""
    make = keep.engine if keep is not None else _engine
    if level.kind != "staleness":
        engine = make(ctx, ctx.student, level.engine_rollout(config.rollout, seed))
        reference = ctx.reference
    else:
        stale = opd.stale_student(
            ctx.student,
            ctx.teacher,
            ctx.train_ids,
            config.train,
            config.rollout,
            level.staleness,
            seed,
            ctx.tokens,
            task=ctx.task,
        )
        reference = opd.cast_parameters(stale, config.reference.dtype)
        engine = make(ctx, ctx.student, floor_rollout(config.rollout, config.reference))
    try:
        return _measure(ctx, config, engine, reference)
    finally:
        if keep is None:
            engine.close()


def run_task(config: CalibrateConfig, config_file: str | None, level: Level, seed: int) -> RunRecord:
    """`run_one` as an executor task (in this process, a pool worker or a Ray actor) with the process's context and
    kept engines (`workers.kept`): a worker's first run loads them, and its setup seconds say so."""
    started = time.perf_counter()
    ctx = load_context(config, config_file)
    return run_one(ctx, config, level, seed, keep=kept(ctx), started=started)


_NOT_MEASURED = LevelMismatch()


def run_one(
    ctx: RunContext,
    config: CalibrateConfig,
    level: Level,
    seed: int,
    keep: EngineKeep | None = None,
    started: float | None = None,
) -> RunRecord:
    """Measure the level's mismatch, then one OPD run under it; the record of both (no timings in fields that the
    artifact keeps, so a resumed calibration writes the same artifact). `keep`: a worker's kept engines and
    evaluator (the same record, bit for bit on CPU); None builds and closes them here. `started`: the
    perf_counter the task began at (its context load counts as setup)."""
    t0, c0 = started if started is not None else time.perf_counter(), time.process_time()
    clock = PhaseClock()
    clock.seconds["setup"] = time.perf_counter() - t0
    with one_thread(), GpuSampler(config.rollout.device) as gpu:
        torch.manual_seed(seed)
        x = _NOT_MEASURED  # the baseline is paired with itself: its x is never used, so it is not measured
        if level.kind != "baseline":
            with clock.phase("probe"):
                x = level_mismatch(ctx, config, level, seed, keep)
        with clock.phase("setup"):
            student = copy.deepcopy(ctx.student)
            rollout = level.engine_rollout(config.rollout, seed)
            engine = keep.engine(ctx, student, rollout) if keep is not None else _engine(ctx, student, rollout)
            evaluator = keep.evaluator(ctx, config) if keep is not None else new_evaluator(ctx, config)
        try:
            result = opd.train(
                student,
                ctx.teacher,
                engine,
                ctx.train_ids,
                config.train,
                clock.timed("evaluation", evaluator),
                eval_every=config.eval.every,
                staleness=level.staleness,
                seed=seed,
                redraw_noise=not level.systematic,
                defer_evals=config.eval.deferred,
                task=ctx.task,
            )
        finally:
            if keep is None:
                engine.close()
    if keep is not None:
        keep.runs += 1
    steps = result.steps
    return RunRecord(
        seed=seed,
        relative_std=level.relative_std if level.kind == "noise" else None,
        staleness=level.staleness or None,
        **dataclasses.asdict(x),
        quality=opd.quality_value(config.train, result.final),  # reverse KL, or 1 − task reward (grpo)
        quality_start=opd.quality_value(config.train, result.initial),
        quality_se=getattr(result.final, "standard_error", None) if config.train.loss != "grpo" else None,
        reverse_kl=result.final.reverse_kl,
        accuracy=result.final.accuracy,
        accuracy_start=result.initial.accuracy,
        steps=len(steps),
        evals=[[q.step, q.reverse_kl, q.accuracy] for q in result.evals],
        in_run_k3_mean=sum(s.k3 for s in steps) / len(steps),
        in_run_k3=[s.k3 for s in steps],  # per step: the run-averaged x is a mean over a window of these
        loss_first=steps[0].loss,
        loss_last=steps[-1].loss,
        seconds=round(time.perf_counter() - t0, 2),
        cpu_seconds=round(time.process_time() - c0, 2),
        seconds_by_phase={k: round(v, 2) for k, v in result.seconds().items()},
        seconds_setup=clock.get("setup"),
        seconds_probe=clock.get("probe"),
        seconds_evaluation=clock.get("evaluation"),
        gpu_utilization=gpu.mean_percent,
        worker_run=keep.runs if keep is not None else None,
        finished_at=round(time.time(), 2),
    )
