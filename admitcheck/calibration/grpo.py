"""The RL objective (`train.loss: grpo`): GRPO with a verifiable reward, trained by the same loop through the same
perturbed rollout engine as OPD (`opd.train`), so that one calibration protocol gives an RL budget beside the OPD
one (docs/rl.md).

    cfg = TrainConfig(prompts="train.jsonl", loss="grpo", batch_size=128, grpo=GRPOConfig(group_size=8))
    result = opd.train(student, None, engine, train_ids, cfg, evaluator, seed=0)   # the objective: GRPO(cfg.grpo)
    task_error(result.final)                                                      # 1 − held-out exact-match reward

One step: P = batch_size / G train prompts, each sampled G times by the rollout engine (its perturbation on) ->
reward R_i ∈ {0, 1} per response (`toy_reversal`: exact match of the reversed digits, `toy.check_answer`) -> one
advantage per response, normalised within its group: A_i = (R_i − mean_g) / (std_g + eps) with the unbiased std
(torch.std), eps 1e-6, as verl's `compute_grpo_outcome_advantage`; a group whose rewards are all equal gets A = 0 ->
the trainer (float32) re-scores the tokens with gradients -> the loss below -> one AdamW step (constant or cosine lr,
grad-norm clip) -> the engine is re-synced and its perturbation re-applied (the loop's, `opd.train`).

The loss, token-mean over the batch's N response tokens (masked tokens stay in N, as prime-rl's loss scale):
    L = (1/N) Σ_t w_t · ppo(ρ_t, A_t),   ppo(ρ, A) = max(−Aρ, −A·clip(ρ, 1 − ε_low, 1 + ε_high)),
    and for A < 0 additionally min(·, −A·c) (dual clip), verl `compute_policy_loss_vanilla`.
- correction none (verl `bypass_ppo_clip`): ρ = π_θ/μ against the engine's log-probs; w = 1. The clip is the only
  thing that reacts to mismatch: tokens whose π_θ/μ already left the trust region give no gradient.
- correction tis (verl decoupled `rollout_is: token|sequence`, TIS): ρ = π_θ/π_old with π_old the trainer's own
  log-probs before this step's update, w = min(π_old/μ, C) (token), or min(Π_t π_old/μ, C) per response (sequence),
  detached; log-ratios clamped to ±20 (verl SAFETY_BOUND).
- correction mis (prime-rl's masked importance sampling, `token_mask_low/high`, `sequence_mask_low/high`):
  ρ = π_θ/π_old, w = π_old/μ on kept tokens and 0 on masked ones; a token is masked when its π_old/μ is outside
  [mis_low, mis_high] (token), or a whole response when any of its tokens is (sequence).
One optimizer step per batch, so π_old equals π_θ in value: in tis and mis the PPO ratio is 1 and its clip never
acts, and every mode has the closed-form gradient ∇L = −(1/N) Σ_t g_t A_t ∇log π_θ(y_t) with g_t = w_t·[unclipped]·ρ_t
(`gradient_coefficients`, tested against autograd in tests/test_grpo.py).

Quality of an RL run: the held-out task reward (exact match of the student's own samples in reference precision,
`opd.QualityEvaluator`'s accuracy); the calibration fits `task_error` = 1 − reward (lower is better), so its cost
(quality − baseline quality) is baseline reward − run reward. The reverse KL to the teacher is reported beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from admitcheck.calibration.runs import Quality, StepLog
from admitcheck.config import GRPOConfig, SamplingConfig, TrainConfig
from admitcheck.errors import ConfigError
from admitcheck.pairs import toy
from admitcheck.pairs.answers import answer_in_reply, reply_text

SAFETY_BOUND = 20.0  # |log ratio| clamp before exp, nats (verl rollout_corr_helper.SAFETY_BOUND)
QUALITY_DEFINITION = (
    "1 − held-out task reward: exact-match failure rate of the student's own samples in reference precision "
    "(lower is better; cost = baseline reward − run reward); the reverse KL to the teacher is reported beside it"
)
QUALITY_DEFINITION_CONTAINS = QUALITY_DEFINITION.replace(  # grpo.reward answer_in_reply / eval.accuracy contains
    "exact-match failure rate", "answer-in-reply (whole word) failure rate"
)


# ------------------------------------------------------------------------------------------------ reward


def toy_reversal_reward(prompt_ids: list[int], response_ids: list[int]) -> float:
    """1.0 when the response (cut at <eos>) is the prompt's digits reversed, else 0.0 (`toy.check_answer`).

    Decodes with the toy's fixed vocabulary, as `toy.encode_prompt` encodes without loading the tokenizer."""
    if toy.EOS_ID in response_ids:
        response_ids = response_ids[: response_ids.index(toy.EOS_ID)]
    prompt = "".join(toy.VOCAB[i] for i in prompt_ids if i > toy.UNK_ID)
    response = "".join(toy.VOCAB[i] for i in response_ids if i > toy.UNK_ID)
    return float(toy.check_answer(prompt, response))


REWARDS: dict[str, Callable[[list[int], list[int]], float]] = {"toy_reversal": toy_reversal_reward}
ANSWER_REWARDS = ("answer_in_reply",)  # rewards that read each train prompt's "answer" (a `Task`)


@dataclass(frozen=True)
class Task:
    """What a reward that reads answers needs: each train prompt's answer, by the prompt's token ids, and the pair's
    tokens (tokenizer and EOS) to read a response's text."""

    answers: dict[tuple[int, ...], str]
    tokens: Any  # pairs.load.PairTokens

    def reward(self, prompt_ids: list[int], response_ids: list[int]) -> float:
        """answer_in_reply: 1.0 when the prompt's answer appears in the response's text as a whole word."""
        text = reply_text(self.tokens.tokenizer, self.tokens.eos_token_id, list(response_ids))
        return float(answer_in_reply(self.answers[tuple(prompt_ids)], text))


def task_rows(rows: list[dict], cfg: TrainConfig) -> list[dict]:
    """The train rows a recipe trains on: with a reward that reads answers, the rows that have one (SmolLM2's
    checkable prompts; its open instructions would only give all-zero groups); every row otherwise."""
    if cfg.loss != "grpo" or cfg.grpo is None or cfg.grpo.reward not in ANSWER_REWARDS:
        return rows
    kept = [r for r in rows if r.get("answer") not in (None, "")]
    if not kept:
        raise ConfigError(f"reward {cfg.grpo.reward} needs train prompts with an 'answer'; none has one",
                          field="train.grpo.reward")  # fmt: skip
    return kept


def task_of(rows: list[dict], prompt_ids: list[list[int]], tokens, cfg: TrainConfig) -> Task | None:
    """The `Task` of a recipe whose reward reads answers (`rows`: `task_rows`' rows, `prompt_ids` their token ids,
    in order), else None."""
    if cfg.loss != "grpo" or cfg.grpo is None or cfg.grpo.reward not in ANSWER_REWARDS:
        return None
    answers: dict[tuple[int, ...], str] = {}
    for i, (r, p) in enumerate(zip(rows, prompt_ids, strict=True)):
        if answers.setdefault(tuple(p), str(r["answer"])) != str(r["answer"]):
            raise ConfigError(f"answered train prompt {i} repeats an earlier prompt with another answer "
                              f"({answers[tuple(p)]!r} vs {r['answer']!r}): the reward cannot tell which",
                              field="train.prompts")  # fmt: skip
    return Task(answers, tokens)


def train_prompts(rows: list[dict], tokens, cfg: TrainConfig, *, file: str | None = None):
    """(token ids, task) of a recipe's train rows: the rows it trains on (`task_rows`) tokenized, and their `Task`
    (None unless the reward reads answers). What a screen's stale candidates and checkpoints train on."""
    from admitcheck.pairs.load import tokenize_prompts

    rows = task_rows(rows, cfg)
    ids = tokenize_prompts(tokens, rows, file=file)
    return ids, task_of(rows, ids, tokens, cfg)


def check_reward_prompts(reward: str, prompt_ids: list[list[int]], task: Task | None = None) -> None:
    """ConfigError unless the reward can read the prompts (toy_reversal: the toy tokenizer's ids; answer_in_reply: a
    `Task` holding every prompt's answer)."""
    if reward in ANSWER_REWARDS:
        if task is None:
            raise ConfigError(f"reward {reward} needs the train prompts' answers (the run was given none)",
                              field="train.grpo.reward")  # fmt: skip
        missing = [i for i, p in enumerate(prompt_ids) if tuple(p) not in task.answers]
        if missing:
            raise ConfigError(f"reward {reward}: train prompt {missing[0]} has no 'answer'", field="train.prompts")
    if reward == "toy_reversal":
        bad = [i for i, p in enumerate(prompt_ids) if not p or max(p) >= len(toy.VOCAB) or p[-1] != toy.EQ_ID]
        if bad:
            raise ConfigError(
                f"reward toy_reversal needs the toy pair's tokenizer and prompts ending in '=' (prompt {bad[0]} is "
                "not); other pairs have no verifiable reward yet",
                field="train.grpo.reward",
            )


# ------------------------------------------------------------------------------------------------ advantages


def group_advantages(rewards: torch.Tensor, group_size: int, *, std_normalize: bool = True, eps: float = 1e-6):
    """(P·G,) rewards, groups of `group_size` consecutive rows -> (P·G,) advantages (R − mean_g)/(std_g + eps),
    std unbiased (N − 1), as verl; `std_normalize=False` gives R − mean_g (Dr. GRPO, prime-rl's default)."""
    r = rewards.double().view(-1, group_size)  # (P, G)
    adv = r - r.mean(dim=1, keepdim=True)
    if std_normalize:
        adv = adv / (r.std(dim=1, keepdim=True) + eps)
    return adv.reshape(-1).to(rewards.dtype if rewards.is_floating_point() else torch.float32)


# ------------------------------------------------------------------------------------------------ loss


def correction_weights(cfg: GRPOConfig, log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T) detached weight w_t of each token from ℓ = log π_old − log μ (see the module docstring); 0 off mask."""
    m = mask.to(log_ratio.dtype)
    ell = log_ratio.detach()
    if cfg.correction == "none":
        return m
    if cfg.correction == "tis":
        if cfg.correction_level == "token":
            w = torch.exp(ell.clamp(-SAFETY_BOUND, SAFETY_BOUND))
        else:
            seq = (ell * m).sum(dim=1, keepdim=True).clamp(-SAFETY_BOUND, SAFETY_BOUND)  # (B, 1) log Π r
            w = torch.exp(seq).expand_as(ell)
        return w.clamp(max=cfg.tis_cap) * m
    r = torch.exp(ell.clamp(-SAFETY_BOUND, SAFETY_BOUND))  # mis
    inside = (r >= cfg.mis_low) & (r <= cfg.mis_high)
    if cfg.correction_level == "sequence":
        inside = (inside | ~mask).all(dim=1, keepdim=True).expand_as(inside)
    return r * (inside & mask).to(r.dtype)


def _ppo_clip(ratio: torch.Tensor, adv: torch.Tensor, cfg: GRPOConfig) -> torch.Tensor:
    """verl's per-token clipped surrogate with dual clip (compute_policy_loss_vanilla), (B, T)."""
    loss1 = -adv * ratio
    loss2 = -adv * ratio.clamp(1.0 - cfg.clip_ratio_low, 1.0 + cfg.clip_ratio_high)
    clipped = torch.maximum(loss1, loss2)
    dual = torch.minimum(clipped, -adv * cfg.clip_ratio_c)
    return torch.where(adv < 0, dual, clipped)


def gradient_coefficients(
    cfg: GRPOConfig, student_lp: torch.Tensor, rollout_lp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """(B, T) g_t with ∇L = −(1/N) Σ_t g_t A_t ∇log π_θ(y_t), written out case by case (the closed form the loss
    must reproduce; one optimizer step per batch, so π_old = π_θ in value)."""
    ell = (student_lp - rollout_lp).double()
    adv = advantages.double()[:, None].expand_as(ell)
    w = correction_weights(cfg, ell, mask).double()
    if cfg.correction != "none":
        return w  # ρ = π_θ/π_old = 1: inside every clip range
    r = torch.exp(ell.clamp(-SAFETY_BOUND, SAFETY_BOUND))
    lo, hi, c = 1.0 - cfg.clip_ratio_low, 1.0 + cfg.clip_ratio_high, cfg.clip_ratio_c
    pos = (adv > 0) & (r <= hi)  # A > 0: −A·min(r, clip(r)) moves while r ≤ 1 + ε_high
    neg = (adv < 0) & (r >= lo) & (r <= c)  # A < 0: |A|·max(r, clip(r)) moves while r ≥ 1 − ε_low, until dual c
    return torch.where(pos | neg, r, torch.zeros_like(r)) * w


# ------------------------------------------------------------------------------------------------ the objective


@dataclass(frozen=True)
class GRPOStepLog(StepLog):
    """An OPD step log plus the RL step's reward and how much of the batch the clip or the mask silenced."""

    reward_mean: float = 0.0  # mean reward of the step's rollouts
    clipped: float = 0.0  # share of tokens with A ≠ 0 that the PPO clip gave no gradient
    masked: float = 0.0  # share of tokens MIS masked


class GRPO:
    """`loss: grpo`, an objective of the training loop (`opd.train`, `objectives.Objective`): each drawn prompt is
    sampled `group_size` times, rewarded, its advantages normalised within the group; the loss is the clipped
    surrogate above. `prompt_ids`: the train prompts, checked readable by the reward (a ConfigError)."""

    full_vocab = False
    log_type = GRPOStepLog

    def __init__(self, cfg: GRPOConfig, prompt_ids: list[list[int]] | None = None, task: Task | None = None) -> None:
        if prompt_ids is not None:
            check_reward_prompts(cfg.reward, prompt_ids, task)
        elif cfg.reward in ANSWER_REWARDS and task is None:
            check_reward_prompts(cfg.reward, [], task)  # the ConfigError: nothing to read answers from
        self.cfg, self.group_size = cfg, cfg.group_size
        self.reward = task.reward if cfg.reward in ANSWER_REWARDS else REWARDS[cfg.reward]

    def targets(self, batch: list[list[int]], rollouts, sampling: SamplingConfig) -> tuple[torch.Tensor, torch.Tensor]:
        """(B,) rewards and (B,) group-normalised advantages of the batch's responses (groups: consecutive rows)."""
        rewards = torch.tensor([self.reward(p, r) for p, r in zip(batch, rollouts.responses())])  # (B,)
        g = self.cfg
        return rewards, group_advantages(rewards, g.group_size, std_normalize=g.std_normalize, eps=g.std_epsilon)

    def loss(
        self,
        student_lp: torch.Tensor,  # (B, T) log π_θ(y_t), with grad
        rollout_lp: torch.Tensor,  # (B, T) log μ(y_t) from the engine
        advantages: torch.Tensor,  # (B,) one per response
        mask: torch.Tensor,  # (B, T) bool
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The scalar loss of one batch and its stats (clipped: share of tokens the PPO clip zeroes; masked: share of
        tokens with weight 0 from MIS)."""
        cfg = self.cfg
        m = mask.to(student_lp.dtype)
        n = m.sum().clamp(min=1.0)
        adv = advantages.to(student_lp.dtype)[:, None].expand_as(student_lp)  # (B, T)
        if cfg.correction == "none":
            ratio = torch.exp((student_lp - rollout_lp).clamp(-SAFETY_BOUND, SAFETY_BOUND))  # π_θ/μ
        else:
            ratio = torch.exp(student_lp - student_lp.detach())  # π_θ/π_old: value 1, gradient ∇log π_θ
        w = correction_weights(cfg, student_lp.detach() - rollout_lp, mask)
        loss = (_ppo_clip(ratio, adv, cfg) * w).sum() / n
        g = gradient_coefficients(cfg, student_lp.detach(), rollout_lp, advantages, mask)
        moving = mask & (adv != 0)
        stats = {
            "clipped": float(((g == 0) & moving & (w > 0)).sum() / moving.sum().clamp(min=1)),
            "masked": float(((w == 0) & mask).sum() / n) if cfg.correction == "mis" else 0.0,
        }
        return loss, stats

    def step_loss(
        self, student_lp: torch.Tensor, student_full: torch.Tensor | None, rollouts, targets
    ) -> tuple[torch.Tensor, dict[str, float]]:
        rewards, adv = targets
        dev = student_lp.device  # the engine hands back CPU tensors; the trainer may be on CUDA
        loss, stats = self.loss(student_lp, rollouts.logprobs.to(dev), adv.to(dev), rollouts.mask.to(dev))
        return loss, {"reward_mean": float(rewards.mean()), **stats}


# ------------------------------------------------------------------------------------------------ quality


def task_error(q: Quality) -> float:
    """The RL run's quality as a calibration fits it (lower is better): 1 − held-out task reward, so that the
    calibration's cost, quality − baseline quality, is baseline reward − run reward (higher cost = worse)."""
    if q.accuracy is None:
        raise ConfigError(
            "loss grpo needs eval prompts with an 'answer' (the held-out task reward)", field="eval.prompts"
        )
    return 1.0 - q.accuracy
