"""The one on-policy training loop, whatever its objective (OPD or GRPO), and its quality evaluation (REFERENCE
§1, §3.2).

    engine = HFEngine(student, RolloutConfig(dtype="float32", noise=NoiseConfig(relative_std=0.05, seed=0)), ...)
    evaluator = QualityEvaluator(teacher, eval_ids, eval_answers, EvalConfig(prompts="eval.jsonl"), tokens)
    result = train(student, teacher, engine, train_ids, TrainConfig(prompts="train.jsonl"), evaluator, seed=0)
    result.evals[0].reverse_kl, result.final.reverse_kl      # nats/token, held out, lower is better

One step: a batch of train prompts (each `group_size` times) -> the rollout engine (running the level's
perturbation) samples -> the objective's targets (the teacher scores the sampled tokens; GRPO: rewards and group
advantages) -> the student (trainer, float32) re-scores them with gradients -> the objective's loss -> AdamW step ->
the engine is re-synced from the student and its perturbation re-applied (`noise_step` = step: a fresh noise draw
per sync, the recipe re-quantized). With `staleness=k` the engine holds the weights of k steps earlier: batch j is
sampled from θ_{max(0, j−k)} under `noise_step` j (0 with `redraw_noise=False`) and rollout seed j, either at the
start of step j from a kept snapshot (`train.rollouts: sync`, the default) or, with `async`, on a background thread
(`rollout/background.py`) while steps j−k … j−1 train: batch t+k is queued with θ_t's snapshot when step t−1
ends, and a last sync alone leaves the engine as the synchronous loop does. The two are the same run bit for bit
(tests/test_async_rollouts.py); only the timings differ (async: `seconds_rollout` is the wait for the batch, the
part of its sampling not hidden behind the steps before; `seconds_sync` the snapshot). Staleness 0 is synchronous.

Objectives (`TrainConfig.loss`, calibration/objectives.py): "pg" `SampledTokenPG`, "gkd_reverse_kl"
`FullVocabReverseKL`, "grpo" `grpo.GRPO`; each gives its loss and its step log's extra fields.

The optimizer is AdamW at `lr` (constant, or cosine-decayed to 0 over the run), global grad-norm clip `grad_clip`.
Quality (`QualityEvaluator`, re-exported from calibration/evaluation.py with `EvaluatedQuality`): held-out reverse KL
student→teacher on the student's own samples in reference precision, with its standard errors. Issue 36's switches,
off by default (today's runs bit for bit): `train.sampling_coupling: gumbel` draws the rollouts by Gumbel-max with
per-token shared noise (rollout/sampling.py); `train.ema: d` evaluates an EMA of the weights (`EMAWeights`).

Determinism: every random draw is a pure function of (seed, purpose, step) (`derive_seed`): the train batch, the
engine's sampling uniforms, the noise (via `noise_step`). AdamW has no randomness, so a run is reproducible at a
fixed torch thread count (the calibration runs every run with 1 thread).
"""

from __future__ import annotations

import copy
import math
import time
from collections import deque
from collections.abc import Callable

import torch

# the evaluator lives in calibration/evaluation.py; `opd.QualityEvaluator` (and the two below) stay importable here
from admitcheck.calibration.evaluation import EvaluatedQuality, QualityEvaluator, exact_match
from admitcheck.calibration.grpo import Task
from admitcheck.calibration.objectives import objective_for
from admitcheck.calibration.runs import OPDResult, Quality, StepHook, StepLog, derive_seed
from admitcheck.config import RolloutConfig, SamplingConfig, TrainConfig
from admitcheck.measurement.metrics import k3_terms
from admitcheck.measurement.scorer import response_logprobs
from admitcheck.rollout.background import BackgroundRollouts

__all__ = [
    "EMAWeights",
    "EvaluatedQuality",
    "Quality",
    "QualityEvaluator",
    "exact_match",
    "train",
]  # evaluation's: re-exported


def quality_value(cfg: TrainConfig, q: Quality) -> float:
    """The quality a calibration fits (lower is better): the reverse KL for OPD losses; for `loss: grpo` the task
    error 1 − held-out reward, so that cost = quality − baseline quality = baseline reward − run reward."""
    if cfg.loss == "grpo":  # --- issue 15
        from admitcheck.calibration.grpo import task_error

        return task_error(q)
    return q.reverse_kl


def quality_definition(cfg: TrainConfig) -> str:
    """What `quality_value` means, for the artifact's quality.definition."""
    if cfg.loss == "grpo":  # --- issue 15
        from admitcheck.calibration.grpo import ANSWER_REWARDS, QUALITY_DEFINITION, QUALITY_DEFINITION_CONTAINS

        return QUALITY_DEFINITION_CONTAINS if cfg.grpo and cfg.grpo.reward in ANSWER_REWARDS else QUALITY_DEFINITION
    return (
        "held-out reverse KL student->teacher per token, exact over the vocab, on the student's own samples in "
        "reference precision (nats/token, lower is better)"
    )


def _batch_indices(n: int, batch_size: int, seed: int, step: int) -> list[int]:
    """The step's train prompts: a seeded draw without replacement (with replacement when the set is smaller)."""
    gen = torch.Generator().manual_seed(derive_seed(seed, "batch", step))
    if batch_size <= n:
        return torch.randperm(n, generator=gen)[:batch_size].tolist()
    return torch.randint(n, (batch_size,), generator=gen).tolist()


def train(
    student: torch.nn.Module,
    teacher: torch.nn.Module | None,
    engine,
    prompt_ids: list[list[int]],
    cfg: TrainConfig,
    evaluator: Callable[[torch.nn.Module, int], Quality] | None = None,
    *,
    eval_every: int = 0,
    staleness: int = 0,
    seed: int = 0,
    on_step: StepHook | None = None,
    stop_after: int | None = None,
    redraw_noise: bool = True,
    defer_evals: bool = False,
    task: Task | None = None,
) -> OPDResult:
    """Run `cfg.steps` steps of the objective `cfg.loss` names on `student` in place (see the module docstring);
    quality at 0, every `eval_every`, and the end. `teacher` may be None for GRPO (its reward needs none).

    `engine` must hold the student's starting weights with its perturbation applied at noise_step 0; `on_step(k,
    student)` is called after step k's optimizer step and engine sync (k = 1 … steps). `stop_after=n` runs only the
    first n steps of the recipe (the same schedule, so they equal the full run's first n steps). `redraw_noise=False`
    keeps the engine's step-0 noise draw for the whole run (systematic, like FP8 rounding: the same direction at
    every sync, scaled to the current weights) instead of a fresh draw after every sync. `cfg.rollouts: async` with
    `staleness` ≥ 1 samples ahead on a background thread (the same run); an exception there is raised here, and the
    thread is joined on every way out. `defer_evals`: the evaluations after step 0 score snapshots of the weights
    once the last step has run (the same values: an evaluation is a pure function of the weights), so none runs
    while rollouts sample ahead and the steps' timings are the training's alone (`eval.deferred`). The snapshots
    stay on the weights' device (one copy per evaluation until it is scored; the optimizer's state is dropped first).
    `task`: the train prompts' answers, for a GRPO reward that reads them (`grpo.task_of`).
    """
    objective = objective_for(cfg, teacher, prompt_ids, task)
    sampling = SamplingConfig(temperature=cfg.temperature, coupling=cfg.sampling_coupling)
    student.eval()  # no dropout: training mode is only about gradients here
    params = [p for p in student.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.lr_schedule == "cosine":  # the final iterate settles: less run-to-run noise in the final quality
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1.0 + math.cos(math.pi * s / cfg.steps)))
    steps = cfg.steps if stop_after is None else min(stop_after, cfg.steps)
    group = objective.group_size  # rollouts per drawn prompt, consecutive rows

    def batch_of(j: int) -> list[list[int]]:  # batch j's prompts, each `group` times
        return [
            prompt_ids[i]
            for i in _batch_indices(len(prompt_ids), cfg.batch_size // group, seed, j)
            for _ in range(group)
        ]

    def noise_of(j: int) -> int:  # the noise_step batch j is sampled under (the sync before it)
        return j if redraw_noise else 0

    def job(j: int) -> tuple:  # batch j as a background job; past the last step a sync alone (no prompts)
        return batch_of(j) if j < steps else None, sampling, derive_seed(seed, "rollout", j), cfg.max_new_tokens

    overlap = cfg.rollouts == "async" and staleness > 0  # staleness 0: nothing to sample ahead (synchronous)
    history: deque[dict[str, torch.Tensor]] = deque(maxlen=staleness + 1)  # the last k+1 clean states
    if staleness and not overlap:
        history.append(_snapshot(student))
    evals = [evaluator(student, 0)] if evaluator else []
    pending: list[tuple[int, dict[str, torch.Tensor]]] = []  # defer_evals: (step, weights) to evaluate at the end
    averaged = EMAWeights(student, cfg.ema) if cfg.ema is not None else None  # evaluated instead of the last iterate
    logs: list[StepLog] = []
    background = BackgroundRollouts(engine) if overlap else None
    try:
        if background is not None:  # batches 0 … k all sample θ0 (batch 0 with the engine as given)
            theta0 = _snapshot(student)
            for j in range(min(staleness, steps) + 1):
                background.submit(*job(j), weights=theta0 if j else None, noise_step=noise_of(j))
            del theta0  # the queued jobs hold it
        for step in range(steps):
            t0 = time.perf_counter()
            batch = batch_of(step)
            if background is not None:  # sampled while the steps before trained
                ro = background.result()
            else:
                ro = engine.sample(batch, sampling, derive_seed(seed, "rollout", step), cfg.max_new_tokens)
            t1 = time.perf_counter()
            targets = objective.targets(batch, ro, sampling)  # teacher scores, or rewards and advantages (GRPO)
            t2 = time.perf_counter()
            full = objective.full_vocab
            lp, full_lp = response_logprobs(student, ro.prompt_ids, ro.token_ids, ro.mask, sampling, full=full)
            loss, fields = objective.step_loss(lp, full_lp, ro, targets)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            clip = cfg.grad_clip if cfg.grad_clip is not None else float("inf")
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, clip))
            opt.step()
            if cfg.lr_schedule == "cosine":
                sched.step()
            if averaged is not None:
                averaged.update(student)
            t3 = time.perf_counter()
            if background is not None:  # θ_{step+1} is what batch step+1+k samples (the last job: a sync alone)
                j = step + 1 + staleness
                if j <= steps:
                    background.submit(*job(j), weights=_snapshot(student), noise_step=noise_of(j))
            elif staleness:
                history.append(_snapshot(student))
                engine.load_weights(history[0], noise_step=noise_of(step + 1))  # θ_{max(0, step+1−k)}
            else:
                engine.load_weights(student.state_dict(), noise_step=noise_of(step + 1))
            t4 = time.perf_counter()
            mismatch = _in_run_mismatch(lp.detach().cpu(), ro)
            seconds = (t1 - t0, t2 - t1, t3 - t2, t4 - t3)
            logs.append(objective.log_type(step + 1, float(loss.detach()), grad_norm, *mismatch, *seconds, **fields))
            if on_step is not None:
                on_step(step + 1, student)
            due = (eval_every and (step + 1) % eval_every == 0) or step + 1 == cfg.steps
            if evaluator and due:
                scored = averaged.model if averaged is not None else student
                if defer_evals:
                    pending.append((step + 1, _snapshot(scored)))
                else:
                    evals.append(evaluator(scored, step + 1))
        if background is not None:
            background.result()  # the last sync: the engine ends holding what the synchronous loop leaves in it
    finally:
        if background is not None:
            background.close()  # queued jobs cancelled, the running one finished, the thread joined
    if pending:  # after the last step and the rollouts' thread: off the steps' clock
        opt.state.clear()  # the optimizer's moments are not needed again: their memory for the evaluations
        scratch = copy.deepcopy(averaged.model if averaged is not None else student)
        while pending:
            step_done, state = pending.pop(0)  # each snapshot freed once scored
            scratch.load_state_dict(state)
            del state
            evals.append(evaluator(scratch, step_done))
        del scratch
    return OPDResult(logs, evals)


class EMAWeights:
    """An exponential moving average of a model's parameters (Block et al., arXiv 2310.11428: SGD noise amplified
    through autoregressive rollouts makes the last iterate's quality oscillate; an average of the last iterates
    does not): after every optimizer step θ̄ ← decay·θ̄ + (1 − decay)·θ, from θ̄ = θ0 (its weight decay^steps is
    ~0 after a run: 0.9^200 = 7e-10). With `train.ema` set, every evaluation after step 0 scores θ̄; the
    student trains on as before (the average never feeds back)."""

    def __init__(self, student: torch.nn.Module, decay: float) -> None:
        self.model, self.decay = copy.deepcopy(student).requires_grad_(False), float(decay)

    @torch.no_grad()
    def update(self, student: torch.nn.Module) -> None:
        mine = [p for p in self.model.parameters() if p.is_floating_point()]
        theirs = [p.detach() for p in student.parameters() if p.is_floating_point()]
        torch._foreach_lerp_(mine, theirs, 1.0 - self.decay)


def _snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _in_run_mismatch(trainer_lp: torch.Tensor, ro) -> tuple[float, float, float, int]:
    """(k3, k1, abs_diff, tokens) of the engine's log μ against the trainer's log π_θ on the batch, nats/token.

    The same token-mean formulas as `metrics.mismatch_metrics` (REFERENCE §2) without its intervals, which a
    per-step log does not need."""
    m = ro.mask
    ell = (trainer_lp.double() - ro.logprobs.double())[m]  # (N,) log r
    n = max(int(m.sum()), 1)
    k3 = float(k3_terms(ell).sum()) / n
    return k3, float((-ell).sum()) / n, float(ell.abs().sum()) / n, int(m.sum())


def cast_parameters(model: torch.nn.Module, dtype: str) -> torch.nn.Module:
    """Floating parameters to `dtype` in place, buffers (rotary inv_freq) untouched, as `from_pretrained` loads."""
    for p in model.parameters():
        if p.is_floating_point():
            p.data = p.data.to(getattr(torch, dtype))
    return model


def first_steps(
    student0: torch.nn.Module,
    teacher: torch.nn.Module | None,
    prompt_ids: list[list[int]],
    cfg: TrainConfig,
    rollout: RolloutConfig,
    *,
    steps: int,
    staleness: int = 0,
    seed: int,
    tokens,  # pairs.load.PairTokens
    task: Task | None = None,
) -> tuple[torch.nn.Module, OPDResult]:
    """(student, result) after the first `steps` real steps of recipe `cfg` (its schedule over the full `cfg.steps`,
    stopped) on a float32 copy of `student0`, through an HF engine of `rollout` `staleness` steps behind."""
    from admitcheck.rollout.engines.hf import HFEngine

    student = cast_parameters(copy.deepcopy(student0), "float32")
    engine = HFEngine(student, rollout, eos_token_id=tokens.eos_token_id, pad_token_id=tokens.pad_token_id)
    try:
        result = train(student, teacher, engine, prompt_ids, cfg, staleness=staleness, seed=seed, stop_after=steps,
                       task=task)  # fmt: skip
    finally:
        engine.close()
    return student, result


def stale_student(
    student0: torch.nn.Module,
    teacher: torch.nn.Module | None,
    prompt_ids: list[list[int]],
    cfg: TrainConfig,
    rollout: RolloutConfig,
    staleness: int,
    seed: int,
    tokens,  # pairs.load.PairTokens
    task: Task | None = None,
) -> torch.nn.Module:
    """A float32 copy of `student0` after `staleness` real OPD steps of recipe `cfg` (seed `seed`) whose rollouts
    all came from θ0 (an engine k steps behind holds θ0 for the first k steps): the θk of KL(π_θ0 ‖ π_θk).

    The first k steps of the run itself: its learning-rate schedule over its full `cfg.steps` (stopped after k), not
    a schedule of length k — a cosine of length 2 gives multipliers [1, 0.5] instead of ≈ [1, 1] and understated
    every staleness mismatch with k ≥ 2."""
    kw = {"steps": staleness, "staleness": staleness, "seed": seed, "tokens": tokens, "task": task}
    return first_steps(student0, teacher, prompt_ids, cfg, rollout, **kw)[0]


def run_mismatch(
    student0: torch.nn.Module,
    teacher: torch.nn.Module | None,
    prompt_ids: list[list[int]],
    cfg: TrainConfig,
    rollout: RolloutConfig,
    *,
    steps: int,
    staleness: int = 0,
    seed: int,
    tokens,  # pairs.load.PairTokens
    task: Task | None = None,
) -> float:
    """The run-averaged mismatch x_run of a rollout engine (`rollout`, rollouts `staleness` steps behind): the mean
    engine-vs-trainer k3 (nats/token) over the first `steps` real OPD steps of recipe `cfg` from `student0`.

    A calibration fitted on x_run (artifact `budget.x: run`) measured it exactly so, on the first
    `levels.run_window` steps of each run (replicate 0 has the seed `levels.replicate_seed(recipe seed, 0)`);
    a screen of a run-x budget would call this with the same recipe, window and seed (not wired: screens measure at
    the start weights and refuse a run-x budget, issue 24). `student0` is copied."""
    kw = {"steps": steps, "staleness": staleness, "seed": seed, "tokens": tokens, "task": task}
    _, result = first_steps(student0, teacher, prompt_ids, cfg, rollout, **kw)
    return sum(s.k3 for s in result.steps) / max(len(result.steps), 1)
