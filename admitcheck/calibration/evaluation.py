"""The quality of a student: held-out reverse KL student→teacher on its own samples, and that estimate's errors.

    evaluator = QualityEvaluator(teacher, eval_ids, eval_answers, EvalConfig(prompts="eval.jsonl"), tokens, sampling)
    q = evaluator(student, step)             # EvaluatedQuality: .reverse_kl (nats/token), .standard_error, ...
    q_other = evaluator(student, step, seed=7)   # the same weights, other eval draws

The student samples `samples` responses per held-out prompt in reference precision (an unperturbed HF engine, the
same eval seed in every run, so evaluations of different runs share their random numbers: paired); the teacher
scores them; quality = the exact reverse KL per token over all of them, plus exact-match accuracy when the prompts
carry an "answer". `eval.sampling_coupling` picks how the samples are drawn (rollout/sampling.py); the standard
errors are `quality_error`'s (issue 36). `opd.train` calls an evaluator at step 0, every `eval.every` and the end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from admitcheck.calibration.objectives import reverse_kl_rows
from admitcheck.calibration.quality_error import token_mean_error
from admitcheck.calibration.runs import Quality, derive_seed
from admitcheck.config import EvalConfig, ReferenceConfig, RolloutConfig, SamplingConfig
from admitcheck.measurement.scorer import score
from admitcheck.pairs.answers import answer_in_reply, reply_text

KL_ROWS_AT_ONCE = 8  # sequences per reduction on a GPU: its temporaries are 5 (rows, T, V) float32 tensors


def reverse_kl_on_device(student_full: torch.Tensor, teacher_full: torch.Tensor) -> torch.Tensor:
    """`reverse_kl_rows` of (B, T, V) rows where they are, returned on the CPU. On a GPU a few sequences at a time,
    so that its temporaries stay small beside the kept workers (the whole batch's would be ~3 GB on SmolLM2); on a
    CPU the whole batch at once, as always (the same values)."""
    if student_full.device.type == "cpu":
        return reverse_kl_rows(student_full, teacher_full)
    parts = [
        reverse_kl_rows(student_full[i : i + KL_ROWS_AT_ONCE], teacher_full[i : i + KL_ROWS_AT_ONCE])
        for i in range(0, student_full.shape[0], KL_ROWS_AT_ONCE)
    ]
    return torch.cat(parts).cpu()


def exact_match(tokenizer, eos_token_id: int, responses: list[list[int]], answers: list[str]) -> float:
    """Fraction of responses (cut at the first EOS, special tokens dropped) equal to the answer, whitespace ignored."""
    return accuracy(tokenizer, eos_token_id, responses, answers, "exact")


def accuracy(tokenizer, eos_token_id: int, responses: list[list[int]], answers: list[str], rule: str) -> float:
    """Fraction of responses that get their answer: `exact` (the whole reply, whitespace ignored) or `contains`
    (`answer_in_reply`)."""
    hits = 0
    for ids, answer in zip(responses, answers):
        text = reply_text(tokenizer, eos_token_id, ids)
        if rule == "exact":
            hits += "".join(text.split()) == "".join(str(answer).split())
        else:
            hits += answer_in_reply(str(answer), text)
    return hits / max(len(responses), 1)


@dataclass(frozen=True)
class EvaluatedQuality(Quality):
    """A `Quality` with its standard errors (`quality_error`, nats/token) and what they are computed from: every
    response's summed reverse KL and token count, `samples` consecutive responses to a prompt."""

    standard_error: float | None = None  # of the eval draws on these prompts (what another eval seed would move)
    prompt_clustered_error: float | None = None  # clustered by prompt: other prompts from the population too
    samples: int = 1
    kl_by_response: tuple[float, ...] = ()  # nats, summed over the response's tokens
    tokens_by_response: tuple[int, ...] = ()


class QualityEvaluator:
    """Quality on fixed held-out prompts: the student samples in reference precision (an unperturbed engine with
    the same seed every time, so evaluations of different runs share their random numbers), the teacher scores.
    The samples are drawn under `cfg.sampling_coupling` (inverse-CDF or Gumbel-max, rollout/sampling.py); the
    quality comes with its standard errors (`quality_error`: of the eval draws, and clustered by prompt)."""

    def __init__(
        self,
        teacher: torch.nn.Module,
        prompt_ids: list[list[int]],
        answers: list[str] | None,
        cfg: EvalConfig,
        tokens,  # measure.PairTokens
        sampling: SamplingConfig,
        reference: ReferenceConfig = ReferenceConfig(),
        execution: RolloutConfig | None = None,  # the runs' engine options (cuda_graphs, compile) also serve here
    ) -> None:
        self.teacher = teacher
        self.prompt_ids = [p for p in prompt_ids for _ in range(cfg.samples)]  # each prompt `samples` times
        self.answers = [a for a in answers for _ in range(cfg.samples)] if answers is not None else None
        self.cfg, self.tokens = cfg, tokens
        self.sampling = sampling.model_copy(update={"coupling": cfg.sampling_coupling})
        self.samples = cfg.samples
        dtype = reference.dtype if reference.dtype != "float64" else "float32"
        options = {"cuda_graphs": execution.cuda_graphs, "compile": execution.compile} if execution else {}
        self.rollout = RolloutConfig(engine="hf", dtype=dtype, device=reference.device, **options)
        self._engine = None
        self._start: tuple[dict[str, torch.Tensor], int, EvaluatedQuality] | None = None  # see __call__

    def __call__(self, student: torch.nn.Module, step: int, seed: int | None = None) -> EvaluatedQuality:
        """The quality of `student` at `step`; `seed` replaces `cfg.seed` (other eval draws of the same weights).

        The quality is a pure function of the weights and the seed (the evaluator's config fixed), so the start
        weights' evaluation — the same θ0 and eval seed in every run of a calibration (`quality_start` is one
        number across a whole ledger) — is computed once per evaluator and returned again while the weights are
        equal tensor for tensor (a kept worker's evaluator serves all its runs: issue 37, half of the evaluations)."""
        base_seed = self.cfg.seed if seed is None else seed
        state = student.state_dict()
        if self._start is not None and self._start[1] == base_seed and _same_tensors(self._start[0], state):
            return replace(self._start[2], step=step)
        result = self._evaluate(student, state, step, base_seed)
        if step == 0:
            self._start = ({k: v.detach().clone() for k, v in state.items()}, base_seed, result)
        return result

    def _evaluate(
        self, student: torch.nn.Module, state: dict[str, torch.Tensor], step: int, base_seed: int
    ) -> EvaluatedQuality:
        from admitcheck.rollout.engines.hf import HFEngine

        if self._engine is None:
            self._engine = HFEngine(
                student, self.rollout, eos_token_id=self.tokens.eos_token_id, pad_token_id=self.tokens.pad_token_id
            )
        else:
            self._engine.load_weights(state)
        kl_sum, kl_rows, n_rows, responses = 0.0, [], [], []
        for i in range(0, len(self.prompt_ids), self.cfg.batch_size):
            chunk = self.prompt_ids[i : i + self.cfg.batch_size]
            chunk_seed = derive_seed(base_seed, "eval", i)
            # the (B, T, V) rows stay where they were computed and are reduced there (issue 37: moved to the CPU and
            # reduced on one thread they were most of a GPU run's evaluation); on a CPU this is what it always was
            ro = self._engine.sample(
                chunk, self.sampling, chunk_seed, self.cfg.max_new_tokens, return_full=True, full_on_device=True
            )
            teacher = score(self.teacher, ro.prompt_ids, ro.token_ids, ro.mask, self.sampling, full=True,
                            full_on_device=True).full_logprobs  # fmt: skip
            kl = reverse_kl_on_device(ro.full_logprobs.to(teacher.device), teacher)  # (B, T) nats, on the CPU
            kl_sum += float(kl[ro.mask].double().sum())  # the quality's own sum, as before issue 36 (same bits)
            kl_rows += kl.double().masked_fill(~ro.mask, 0.0).sum(dim=1).tolist()  # (B,) per response
            n_rows += ro.mask.sum(dim=1).tolist()
            responses += ro.responses()
        acc = None
        if self.answers is not None:
            acc = accuracy(self.tokens.tokenizer, self.tokens.eos_token_id, responses, self.answers, self.cfg.accuracy)
        n_tok = int(sum(n_rows))
        err = token_mean_error(kl_rows, n_rows, self.samples) if n_tok > 0 else None  # a prompt's samples: consecutive
        draws, prompts = (_finite(err.draws), _finite(err.prompts)) if err is not None else (None, None)
        value = kl_sum / max(n_tok, 1)
        return EvaluatedQuality(step, value, acc, n_tok, draws, prompts, self.samples, tuple(kl_rows), tuple(n_rows))


def _same_tensors(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """The same keys, and every tensor equal in shape, dtype and value (on the tensors' own device)."""
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and torch.equal(a[k], b[k].to(a[k].device)) for k in a
    )


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
