"""The objectives the one training loop (`opd.train`) optimises, named by `TrainConfig.loss` (REFERENCE §1, §3.2).

    objective = objective_for(cfg, teacher, prompt_ids)    # SampledTokenPG | FullVocabReverseKL | grpo.GRPO
    targets = objective.targets(batch, rollouts, sampling)  # teacher scores, or rewards and advantages
    loss, fields = objective.step_loss(student_lp, student_full, rollouts, targets)   # fields: its step log's extras

An objective says how a step's batch is made (`group_size` rollouts of each drawn prompt), whether the trainer's
full (B, T, V) rows are needed (`full_vocab`), what the sampled tokens are compared against (`targets`, timed as the
step's "teacher" phase), the scalar loss (a mean over the batch's response tokens) and the step-log type it fills.
- `SampledTokenPG` ("pg"): per-token reverse-KL advantage A_t = −(log π_S(y_t) − log π_T(y_t)), where log π_S is the
  trainer's recompute (`student_logprobs: trainer`, verl) or the engine's log μ (`rollout`, Tinker: the mismatch
  enters the reward), in the importance-sampling loss −Σ_t w_t·A_t/N with w_t = π_θ/μ (truncated at `tis_cap` when
  set; the weight's value is detached, its gradient is that of log π_θ, so ∇ = −Σ min(r, C)·A·∇log π_θ / N).
- `FullVocabReverseKL` ("gkd_reverse_kl"): the exact full-vocabulary reverse KL Σ_v π_θ(v)(log π_θ(v) − log π_T(v))
  per position of the engine-sampled prefixes, back-propagated directly (the mismatch enters only through which
  prefixes are seen).
- `grpo.GRPO` ("grpo"): group-normalised verifiable reward in a PPO-clipped surrogate (calibration/grpo.py).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol

import torch

from admitcheck.calibration.grpo import GRPO, Task
from admitcheck.calibration.runs import StepLog
from admitcheck.config import GRPOConfig, SamplingConfig, TrainConfig
from admitcheck.measurement.scorer import Scores, score

if TYPE_CHECKING:
    from admitcheck.rollout.engines.base import Rollouts


class Objective(Protocol):
    """What the training loop asks of an objective (see the module docstring)."""

    group_size: int  # rollouts per drawn prompt, consecutive rows of the batch
    full_vocab: bool  # the trainer's (B, T, V) rows are needed
    log_type: type[StepLog]  # the step log it fills (its extra fields come from `step_loss`)

    def targets(self, batch: list[list[int]], rollouts: Rollouts, sampling: SamplingConfig) -> Any: ...

    def step_loss(
        self, student_lp: torch.Tensor, student_full: torch.Tensor | None, rollouts: Rollouts, targets: Any
    ) -> tuple[torch.Tensor, dict[str, float]]: ...


def reverse_kl_rows(student_full: torch.Tensor, teacher_full: torch.Tensor) -> torch.Tensor:
    """(B, T, V) log π_S, log π_T -> (B, T) KL(π_S ‖ π_T); tokens outside the student's kept set contribute 0.

    The masked entries (log π_S = −inf) are replaced before the product, not after: `torch.where(p > 0, p·(s − t), 0)`
    computes 0·(−inf) = nan in the branch it discards, and its gradient is nan all the same."""
    kept = student_full > -math.inf  # (B, T, V)
    safe_s = torch.where(kept, student_full, torch.zeros_like(student_full))
    safe_t = torch.where(kept, teacher_full, torch.zeros_like(teacher_full))
    terms = torch.where(kept, safe_s.exp() * (safe_s - safe_t), torch.zeros_like(student_full))
    return terms.sum(-1)


class SampledTokenPG:
    """`loss: pg`: the teacher's log-prob of each sampled token as a per-token reward, in an importance-sampled
    policy gradient (see the module docstring)."""

    group_size = 1
    full_vocab = False
    log_type = StepLog

    def __init__(self, cfg: TrainConfig, teacher: torch.nn.Module | None = None) -> None:
        self.student_logprobs, self.tis_cap, self.teacher = cfg.student_logprobs, cfg.tis_cap, teacher
        if teacher is not None:
            teacher.requires_grad_(False)

    def targets(self, batch: list[list[int]], rollouts: Rollouts, sampling: SamplingConfig) -> Scores:
        return score(self.teacher, rollouts.prompt_ids, rollouts.token_ids, rollouts.mask, sampling)

    def loss(
        self,
        student_lp: torch.Tensor,  # (B, T) log π_θ(y_t), with grad
        rollout_lp: torch.Tensor,  # (B, T) log μ(y_t) from the engine
        teacher_lp: torch.Tensor,  # (B, T) log π_T(y_t)
        mask: torch.Tensor,  # (B, T) bool
    ) -> torch.Tensor:
        m = mask.float()
        n = m.sum().clamp(min=1.0)
        own = student_lp.detach() if self.student_logprobs == "trainer" else rollout_lp
        advantage = -(own - teacher_lp)  # (B, T) nats
        ratio = torch.exp(student_lp.detach() - rollout_lp)  # (B, T) π_θ/μ
        if self.tis_cap is not None:
            ratio = ratio.clamp(max=self.tis_cap)
        surrogate = torch.exp(student_lp - student_lp.detach())  # value 1, gradient ∇log π_θ
        return -(ratio * surrogate * advantage * m).sum() / n

    def step_loss(
        self, student_lp: torch.Tensor, student_full: torch.Tensor | None, rollouts: Rollouts, targets: Scores
    ) -> tuple[torch.Tensor, dict[str, float]]:
        dev = student_lp.device  # the engine and the scorer hand back CPU tensors; the trainer may be on CUDA
        mu, mask = rollouts.logprobs.to(dev), rollouts.mask.to(dev)
        return self.loss(student_lp, mu, targets.logprobs.to(dev), mask), {}


class FullVocabReverseKL:
    """`loss: gkd_reverse_kl`: the exact reverse KL student → teacher over the whole vocabulary at every position of
    the engine-sampled responses (see the module docstring)."""

    group_size = 1
    full_vocab = True
    log_type = StepLog

    def __init__(self, teacher: torch.nn.Module | None = None) -> None:
        self.teacher = teacher
        if teacher is not None:
            teacher.requires_grad_(False)

    def targets(self, batch: list[list[int]], rollouts: Rollouts, sampling: SamplingConfig) -> Scores:
        return score(self.teacher, rollouts.prompt_ids, rollouts.token_ids, rollouts.mask, sampling, full=True)

    def loss(
        self,
        student_full: torch.Tensor,  # (B, T, V) log π_θ, with grad
        teacher_full: torch.Tensor,  # (B, T, V) log π_T
        mask: torch.Tensor,  # (B, T) bool
    ) -> torch.Tensor:
        m = mask.float()
        n = m.sum().clamp(min=1.0)
        return (reverse_kl_rows(student_full, teacher_full) * m).sum() / n

    def step_loss(
        self, student_lp: torch.Tensor, student_full: torch.Tensor | None, rollouts: Rollouts, targets: Scores
    ) -> tuple[torch.Tensor, dict[str, float]]:
        dev = student_lp.device
        return self.loss(student_full, targets.full_logprobs.to(dev), rollouts.mask.to(dev)), {}


def objective_for(
    cfg: TrainConfig, teacher: torch.nn.Module | None, prompt_ids: list[list[int]], task: Task | None = None
) -> SampledTokenPG | FullVocabReverseKL | GRPO:
    """The objective `cfg.loss` names; GRPO checks that its reward can read the train prompts (a ConfigError).
    `task`: the train prompts' answers, for a reward that reads them (`grpo.task_of`)."""
    if cfg.loss == "grpo":
        return GRPO(cfg.grpo if cfg.grpo is not None else GRPOConfig(), prompt_ids, task)
    if cfg.loss == "gkd_reverse_kl":
        return FullVocabReverseKL(teacher)
    return SampledTokenPG(cfg, teacher)
