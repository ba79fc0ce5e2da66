"""Scorer: teacher-forced log-probs under the sampling transform, layout independence, batching, gradients."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM

from admitcheck.config import SamplingConfig
from admitcheck.measurement.scorer import Scores, response_logprobs, score
from admitcheck.rollout.layout import left_pad, position_ids
from admitcheck.rollout.sampling import process_logits
from tests.tiny import VOCAB, tiny_llama

T_ONE = SamplingConfig(temperature=1.0)
T_CUT = SamplingConfig(temperature=0.7, top_p=0.9, top_k=5)


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    return tiny_llama()


def batch(seed: int = 0, T: int = 9) -> tuple[list[list[int]], torch.Tensor, torch.Tensor]:
    """4 prompts of different lengths, (4, T) responses, prefix masks of different lengths (one empty)."""
    gen = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, VOCAB, (k,), generator=gen).tolist() for k in (2, 6, 1, 4)]
    tokens = torch.randint(3, VOCAB, (4, T), generator=gen)
    lengths = torch.tensor([T, 3, 0, 6])
    mask = torch.arange(T) < lengths.unsqueeze(1)  # (4, T)
    return prompts, tokens.masked_fill(~mask, 0), mask


def naive_logprobs(model, prompt: list[int], response: list[int], sampling: SamplingConfig) -> torch.Tensor:
    """One unpadded sequence, full logits, no logits_to_keep: the textbook teacher forcing."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1]  # (n, V) the logits predicting each response token
    lp = process_logits(logits, sampling.temperature, sampling.top_p, sampling.top_k)
    return lp.gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1)


def test_layout_helpers():
    ids, attn = left_pad([[5, 6], [7]], pad_token_id=9, device="cpu")
    assert ids.tolist() == [[5, 6], [9, 7]] and attn.tolist() == [[1, 1], [0, 1]]
    assert position_ids(torch.tensor([[0, 0, 1, 1, 1]])).tolist() == [[0, 0, 0, 1, 2]]
    with pytest.raises(ValueError):
        left_pad([[1], []], 0, "cpu")


@pytest.mark.parametrize("sampling", [T_ONE, T_CUT], ids=["t1", "t0.7-p0.9-k5"])
def test_padded_batch_matches_each_sequence_scored_alone(model, sampling):
    prompts, tokens, mask = batch()
    s = score(model, prompts, tokens, mask, sampling)
    assert isinstance(s, Scores) and s.full_logprobs is None and s.logprobs.dtype == torch.float32
    for row in range(4):
        n = int(mask[row].sum())
        assert (s.logprobs[row, n:] == 0).all()
        if n:
            alone = naive_logprobs(model, prompts[row], tokens[row, :n].tolist(), sampling)
            torch.testing.assert_close(s.logprobs[row, :n], alone, atol=1e-5, rtol=0)  # -inf (outside top-k) too


def test_full_rows_are_normalised_and_hold_the_sampled_entries(model):
    prompts, tokens, mask = batch()
    s = score(model, prompts, tokens, mask, T_CUT, full=True)
    rows = s.full_logprobs[mask]  # (N, V)
    assert s.full_logprobs.shape == (4, 9, VOCAB)
    assert torch.allclose(rows.logsumexp(-1), torch.zeros(len(rows)), atol=1e-5)
    assert (torch.isfinite(rows).sum(-1) <= 5).all()
    assert (s.full_logprobs[~mask] == 0).all()
    picked = s.full_logprobs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1).masked_fill(~mask, 0)
    assert torch.equal(picked, s.logprobs)


def test_batch_size_and_trimming_do_not_change_the_numbers(model):
    prompts, tokens, mask = batch(T=12)
    mask[:, 10:] = False  # a tail nobody reaches: each batch is cut to its own longest response
    whole = score(model, prompts, tokens, mask, T_ONE, full=True)
    split = score(model, prompts, tokens, mask, T_ONE, full=True, batch_size=1)
    assert (whole.logprobs - split.logprobs).abs().max() <= 1e-5
    assert (whole.full_logprobs - split.full_logprobs).abs().max() <= 1e-5
    none = score(model, prompts, tokens, torch.zeros_like(mask), T_ONE, full=True)
    assert (none.logprobs == 0).all() and (none.full_logprobs == 0).all()


def test_response_logprobs_keeps_the_graph_for_training():
    student = tiny_llama(seed=1).train()
    prompts, tokens, mask = batch()
    lp, full = response_logprobs(student, prompts, tokens, mask, T_ONE, full=True)
    assert lp.requires_grad and full is not None and full.requires_grad
    loss = -lp.sum() / mask.sum() + full[mask].exp().mul(full[mask]).sum() / mask.sum()  # a PG term and an entropy
    loss.backward()
    grads = [p.grad for p in student.parameters() if p.grad is not None]
    assert len(grads) == len(list(student.parameters()))
    assert all(torch.isfinite(g).all() for g in grads)
    assert student.lm_head.weight.grad.abs().sum() > 0 and student.model.embed_tokens.weight.grad.abs().sum() > 0


def test_gradients_flow_from_engine_rollouts():
    """Rollouts come out of torch.inference_mode; their tensors must still feed a graph-building forward."""
    from admitcheck.config import RolloutConfig
    from admitcheck.rollout.engines.hf import HFEngine

    student = tiny_llama(seed=1).train()
    eng = HFEngine(student, RolloutConfig(dtype="float32"), eos_token_id=2, pad_token_id=0)
    r = eng.sample([[5, 6, 7], [8]], T_ONE, seed=0, max_new_tokens=6)
    lp, _ = response_logprobs(student, r.prompt_ids, r.token_ids, r.mask, T_ONE)
    lp.sum().backward()
    assert student.lm_head.weight.grad is not None and student.training


def test_score_runs_without_gradients_and_returns_cpu(model):
    prompts, tokens, mask = batch()
    with torch.enable_grad():
        s = score(model, prompts, tokens, mask, T_ONE)
    assert not s.logprobs.requires_grad and s.logprobs.device.type == "cpu"
    with pytest.raises(ValueError):
        score(model, prompts[:2], tokens, mask, T_ONE)
