"""admitcheck.calibration.opd and .objectives: the OPD losses (closed forms), the loop's sync / staleness /
determinism, quality evaluation.

Tiny models built in-process (`make_tiny_pair`, shared with test_calibrate.py): a 2-layer, 64-wide teacher with a
sharpened lm_head and a 2-layer, 32-wide student over the toy pair's 16-token vocabulary, both untrained.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch

from admitcheck import io
from admitcheck.calibration import opd
from admitcheck.calibration.objectives import FullVocabReverseKL, SampledTokenPG
from admitcheck.config import EvalConfig, NoiseConfig, PairConfig, RolloutConfig, SamplingConfig, TrainConfig
from admitcheck.pairs.load import load_pair_tokenizer, tokenize_prompts
from admitcheck.rollout.engines.hf import HFEngine


def make_tiny_pair(root: Path, seed: int = 0) -> Path:
    """teacher/, student/ (HF dirs with the toy tokenizer) and prompts/{train,probe,eval}.jsonl under `root`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from admitcheck.pairs.toy import format_prompt, make_tokenizer

    tok = make_tokenizer()
    for name, hidden, model_seed, sharpen in (("teacher", 64, seed + 1, 40.0), ("student", 32, seed + 2, 1.0)):
        config = LlamaConfig(
            vocab_size=16, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
            num_attention_heads=hidden // 32, num_key_value_heads=hidden // 32, head_dim=32,
            max_position_embeddings=64, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0,
        )  # fmt: skip
        torch.manual_seed(model_seed)
        model = LlamaForCausalLM(config).float()
        with torch.no_grad():
            model.lm_head.weight.mul_(sharpen)  # a confident teacher: the student has something to learn
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
    rng = random.Random(seed)
    for split, n in (("train", 64), ("probe", 16), ("eval", 16)):
        rows = ["".join(rng.choice("0123456789") for _ in range(rng.randint(2, 5))) for _ in range(n)]
        lines = [json.dumps({"prompt": format_prompt(d), "answer": " ".join(reversed(d))}) for d in rows]
        (root / "prompts").mkdir(parents=True, exist_ok=True)
        (root / "prompts" / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = make_tiny_pair(tmp_path_factory.mktemp("tiny_pair"))
    tokens = load_pair_tokenizer(PairConfig(student=str(root / "student"), teacher=str(root / "teacher")))
    train_rows = io.read_prompts(root / "prompts" / "train.jsonl")
    eval_rows = io.read_prompts(root / "prompts" / "eval.jsonl")
    return {
        "root": root,
        "tokens": tokens,
        "student": io.load_causal_lm(root / "student"),
        "teacher": io.load_causal_lm(root / "teacher"),
        "train_ids": tokenize_prompts(tokens, train_rows),
        "eval_ids": tokenize_prompts(tokens, eval_rows),
        "answers": [r["answer"] for r in eval_rows],
    }


def _engine(tiny, model, rollout=None) -> HFEngine:
    rollout = rollout or RolloutConfig(dtype="float32")
    return HFEngine(model, rollout, eos_token_id=tiny["tokens"].eos_token_id, pad_token_id=tiny["tokens"].pad_token_id)


def _cfg(**kw) -> TrainConfig:
    return TrainConfig(**{"prompts": "-", "steps": 3, "batch_size": 8, "max_new_tokens": 6, **kw})


# ------------------------------------------------------------------------------------------------ losses


def _random_batch(seed: int = 0, B: int = 3, T: int = 5, V: int = 7):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g, requires_grad=True)
    teacher_full = torch.log_softmax(torch.randn(B, T, V, generator=g), -1)
    tokens = torch.randint(V, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[0, 3:] = False
    rollout_lp = torch.log_softmax(torch.randn(B, T, V, generator=g), -1).gather(-1, tokens[..., None])[..., 0]
    return logits, teacher_full, tokens, mask, rollout_lp


@pytest.mark.parametrize("student_logprobs", ["trainer", "rollout"])
@pytest.mark.parametrize("tis_cap", [None, 1.5])
def test_pg_loss_gradient_is_the_importance_weighted_policy_gradient(student_logprobs, tis_cap) -> None:
    logits, teacher_full, tokens, mask, mu = _random_batch()
    full = torch.log_softmax(logits, -1)
    lp = full.gather(-1, tokens[..., None])[..., 0]  # (B, T)
    teacher_lp = teacher_full.gather(-1, tokens[..., None])[..., 0]
    cfg = _cfg(student_logprobs=student_logprobs, tis_cap=tis_cap)
    (grad,) = torch.autograd.grad(SampledTokenPG(cfg).loss(lp, mu, teacher_lp, mask), logits, retain_graph=True)
    # closed form: −Σ_t w_t A_t ∇log π_θ(y_t) / N with w = min(π/μ, C), A = −(log π_S − log π_T)
    own = lp.detach() if student_logprobs == "trainer" else mu
    w = torch.exp(lp.detach() - mu)
    w = w.clamp(max=tis_cap) if tis_cap else w
    coef = -(w * -(own - teacher_lp) * mask) / mask.sum()  # (B, T)
    (want,) = torch.autograd.grad((coef * lp).sum(), logits)
    torch.testing.assert_close(grad, want)


def test_gkd_loss_is_the_exact_reverse_kl() -> None:
    logits, teacher_full, _tokens, mask, _mu = _random_batch(1)
    full = torch.log_softmax(logits, -1)
    loss = FullVocabReverseKL().loss(full, teacher_full, mask)
    p = full.exp()
    want = ((p * (full - teacher_full)).sum(-1)[mask]).mean()
    torch.testing.assert_close(loss, want)
    (g1,) = torch.autograd.grad(loss, logits, retain_graph=True)
    (g2,) = torch.autograd.grad(want, logits)
    torch.testing.assert_close(g1, g2)


def test_pg_gradient_estimates_the_reverse_kl_gradient() -> None:
    """On-policy (μ = π_θ), the sampled-token PG gradient is an unbiased estimate of ∇ KL(π_θ ‖ π_T) per position."""
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(1, 1, 5, generator=g, requires_grad=True)
    teacher = torch.log_softmax(torch.randn(1, 1, 5, generator=g), -1)
    full = torch.log_softmax(logits, -1)
    n = 20000
    tokens = torch.multinomial(full.detach()[0, 0].exp(), n, replacement=True, generator=g).view(n, 1)
    lp = full.expand(n, 1, 5).gather(-1, tokens[..., None])[..., 0]  # (n, 1)
    t_lp = teacher.expand(n, 1, 5).gather(-1, tokens[..., None])[..., 0]
    mask = torch.ones(n, 1, dtype=torch.bool)
    (pg,) = torch.autograd.grad(SampledTokenPG(_cfg()).loss(lp, lp.detach(), t_lp, mask), logits, retain_graph=True)
    (exact,) = torch.autograd.grad((full.exp() * (full - teacher)).sum(), logits)
    torch.testing.assert_close(pg, exact, atol=0.03, rtol=0.1)


# ------------------------------------------------------------------------------------------------ the loop


class RecordingEngine:
    """An HF engine that records what it is synced to (noise step, and which weights)."""

    def __init__(self, inner: HFEngine) -> None:
        self.inner, self.syncs = inner, []

    def sample(self, *args, **kwargs):
        return self.inner.sample(*args, **kwargs)

    def load_weights(self, weights, noise_step: int = 0) -> None:
        self.syncs.append((noise_step, {k: v.clone() for k, v in weights.items()}))
        self.inner.load_weights(weights, noise_step=noise_step)

    def close(self) -> None:
        self.inner.close()


def _states(tiny, steps: int) -> list[dict[str, torch.Tensor]]:
    """The student's weights after 0 … steps steps of the same seeded run (no staleness)."""
    student = opd.cast_parameters(__import__("copy").deepcopy(tiny["student"]), "float32")
    out = [{k: v.clone() for k, v in student.state_dict().items()}]
    opd.train(student, tiny["teacher"], _engine(tiny, student), tiny["train_ids"], _cfg(steps=steps), seed=5,
              on_step=lambda k, m: out.append({n: v.clone() for n, v in m.state_dict().items()}))  # fmt: skip
    return out


def test_engine_is_resynced_every_step_with_a_fresh_noise_draw(tiny) -> None:
    import copy

    student = copy.deepcopy(tiny["student"])
    noisy = RolloutConfig(dtype="float32", noise=NoiseConfig(relative_std=0.01, seed=1))
    engine = RecordingEngine(_engine(tiny, student, noisy))
    result = opd.train(student, tiny["teacher"], engine, tiny["train_ids"], _cfg(steps=3), seed=5)
    assert [s for s, _ in engine.syncs] == [1, 2, 3]
    for key, value in engine.syncs[-1][1].items():  # the last sync holds the trained student's weights
        torch.testing.assert_close(value, student.state_dict()[key])
    assert len(result.steps) == 3 and all(s.k3 > 0 for s in result.steps)  # noise shows as in-run mismatch
    assert all(s.seconds_rollout > 0 and s.seconds_backward > 0 for s in result.steps)


def test_systematic_noise_keeps_the_step_zero_draw_for_the_whole_run(tiny) -> None:
    """redraw_noise=False (a `systematic: true` level): every sync re-applies noise_step 0's draw, so the engine's
    perturbation points the same way all run (FP8-like); the fresh default draws at steps 1, 2, 3 instead."""
    import copy

    student = copy.deepcopy(tiny["student"])
    noisy = RolloutConfig(dtype="float32", noise=NoiseConfig(relative_std=0.01, seed=1))
    engine = RecordingEngine(_engine(tiny, student, noisy))
    opd.train(student, tiny["teacher"], engine, tiny["train_ids"], _cfg(steps=3), seed=5, redraw_noise=False)
    assert [s for s, _ in engine.syncs] == [0, 0, 0]
    fresh = _engine(tiny, copy.deepcopy(tiny["student"]), noisy)
    fresh.load_weights(student.state_dict(), noise_step=0)  # the trained weights with the step-0 draw
    for (name, a), b in zip(engine.inner.model.state_dict().items(), fresh.model.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name)


def test_calibrated_kv_scales_follow_every_weight_sync_of_a_run(tiny) -> None:
    """kv_cache.scales: calibrated re-computes the per-layer scales from the trainer's weights at every sync (NeMo-RL
    does it at every refit): step k's rollout uses the scales of the weights after step k − 1."""
    import copy
    import itertools

    from admitcheck.config import KVCacheConfig

    student = copy.deepcopy(tiny["student"])
    kv = KVCacheConfig(dtype="fp8_e4m3", scales="calibrated")
    engine = _engine(tiny, student, RolloutConfig(dtype="bfloat16", kv_cache=kv))
    used = []
    opd.train(student, tiny["teacher"], engine, tiny["train_ids"], _cfg(steps=3, lr=3e-2), seed=5,
              on_step=lambda k, _s: used.append(engine.kv_scales))  # fmt: skip
    assert all((u != 1).all() for u in used)
    assert all((a - b).abs().max() > 0 for a, b in itertools.pairwise(used))  # recomputed (new weights, new batch)


def test_unperturbed_engine_matches_the_trainer(tiny) -> None:
    import copy

    student = copy.deepcopy(tiny["student"])
    result = opd.train(student, tiny["teacher"], _engine(tiny, student), tiny["train_ids"], _cfg(steps=2), seed=5)
    assert all(abs(s.k3) < 1e-9 and abs(s.k1) < 1e-6 for s in result.steps)


def test_staleness_k_holds_the_weights_of_k_steps_earlier(tiny) -> None:
    import copy

    k, steps = 2, 4
    clean = _states(tiny, steps)
    student = copy.deepcopy(tiny["student"])
    engine = RecordingEngine(_engine(tiny, student))
    opd.train(student, tiny["teacher"], engine, tiny["train_ids"], _cfg(steps=steps), staleness=k, seed=5)
    stale_run = _states_of_stale(tiny, k, steps)
    for i, (_, synced) in enumerate(engine.syncs, start=1):  # after step i the engine holds θ_{max(0, i−k)}
        want = stale_run[max(0, i - k)]
        for key in want:
            torch.testing.assert_close(synced[key], want[key])
    torch.testing.assert_close(stale_run[1]["lm_head.weight"], clean[1]["lm_head.weight"])  # both sampled θ0
    assert not torch.equal(stale_run[2]["lm_head.weight"], clean[2]["lm_head.weight"])  # θ0 vs θ1 rollouts


def _states_of_stale(tiny, k: int, steps: int) -> list[dict[str, torch.Tensor]]:
    import copy

    student = copy.deepcopy(tiny["student"])
    out = [{n: v.clone() for n, v in student.state_dict().items()}]
    opd.train(student, tiny["teacher"], _engine(tiny, student), tiny["train_ids"], _cfg(steps=steps), staleness=k,
              seed=5, on_step=lambda i, m: out.append({n: v.clone() for n, v in m.state_dict().items()}))  # fmt: skip
    return out


def test_stale_student_is_the_first_k_steps_of_a_stale_run(tiny) -> None:
    k = 2
    run = _states_of_stale(tiny, k, 4)
    stale = opd.stale_student(tiny["student"], tiny["teacher"], tiny["train_ids"], _cfg(steps=50),
                              RolloutConfig(dtype="float32"), k, 5, tiny["tokens"])  # fmt: skip
    for key, value in stale.state_dict().items():
        torch.testing.assert_close(value, run[k][key], rtol=0, atol=0)


def test_stale_student_trains_with_the_runs_own_schedule(tiny) -> None:
    """Issue #21 point 5: under a cosine schedule over the run's 50 steps, θ2 is the first 2 steps of that run (lr
    multipliers ≈ [1, 1]), not 2 steps of a cosine of length 2 (multipliers [1, 0.5])."""
    import copy

    cfg = _cfg(steps=50, lr_schedule="cosine", lr=3e-3)
    student = copy.deepcopy(tiny["student"])
    opd.train(student, tiny["teacher"], _engine(tiny, student), tiny["train_ids"], cfg, staleness=2, seed=5,
              stop_after=2)  # fmt: skip
    stale = opd.stale_student(tiny["student"], tiny["teacher"], tiny["train_ids"], cfg, RolloutConfig(dtype="float32"),
                              2, 5, tiny["tokens"])  # fmt: skip
    for key, value in stale.state_dict().items():
        torch.testing.assert_close(value, student.state_dict()[key], rtol=0, atol=0)
    short = copy.deepcopy(tiny["student"])  # the old, truncated schedule moves the weights less
    opd.train(short, tiny["teacher"], _engine(tiny, short), tiny["train_ids"], cfg.model_copy(update={"steps": 2}),
              staleness=2, seed=5)  # fmt: skip
    moved = sum(float((stale.state_dict()[k] - v).abs().sum()) for k, v in tiny["student"].state_dict().items())
    moved_short = sum(float((short.state_dict()[k] - v).abs().sum()) for k, v in tiny["student"].state_dict().items())
    assert moved > 1.1 * moved_short  # Adam moves ≈ lr per step: ≈ (1 + 1) / (1 + 0.5) at most


def test_gkd_reverse_kl_has_finite_gradients_on_truncated_rows() -> None:
    """Rows with −inf entries (tokens outside a top-k/top-p kept set): the loss and its gradient stay finite
    (`torch.where(p > 0, p·(s − t), 0)` gave nan gradients: 0·(−inf) in the discarded branch)."""
    logits, teacher_full, _tokens, mask, _mu = _random_batch(2)
    logits = logits.clone().requires_grad_(True)
    cut = torch.zeros_like(logits, dtype=torch.bool)
    cut[..., -2:] = True  # the last two tokens are outside the kept set everywhere
    masked = logits.masked_fill(cut, -math.inf)
    full = torch.log_softmax(masked, -1)
    loss = FullVocabReverseKL().loss(full, teacher_full, mask)
    (grad,) = torch.autograd.grad(loss, logits)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    p = full.exp()
    kept = ~cut
    want = (torch.where(kept, p * (full - teacher_full), 0.0).sum(-1)[mask]).mean()
    torch.testing.assert_close(loss, want.detach())


def test_same_seed_same_run_and_another_seed_differs(tiny) -> None:
    def losses(seed: int) -> list[float]:
        import copy

        student = copy.deepcopy(tiny["student"])
        result = opd.train(student, tiny["teacher"], _engine(tiny, student), tiny["train_ids"], _cfg(), seed=seed)
        return [s.loss for s in result.steps]

    assert losses(1) == losses(1)
    assert losses(1) != losses(2)


def test_quality_is_zero_against_itself_and_training_improves_it(tiny) -> None:
    import copy

    sampling = SamplingConfig()
    ecfg = EvalConfig(prompts="-", max_new_tokens=6, batch_size=16, samples=2)
    self_eval = opd.QualityEvaluator(tiny["student"], tiny["eval_ids"], tiny["answers"], ecfg, tiny["tokens"], sampling)
    q = self_eval(tiny["student"], 0)
    assert abs(q.reverse_kl) < 1e-6 and q.num_tokens > 0 and 0 <= q.accuracy <= 1
    evaluator = opd.QualityEvaluator(tiny["teacher"], tiny["eval_ids"], tiny["answers"], ecfg, tiny["tokens"],
                                     sampling)  # fmt: skip
    student = copy.deepcopy(tiny["student"])
    cfg = _cfg(steps=12, loss="gkd_reverse_kl", lr=1e-2, batch_size=16)
    result = opd.train(student, tiny["teacher"], _engine(tiny, student), tiny["train_ids"], cfg, evaluator,
                       eval_every=6, seed=0)  # fmt: skip
    assert [e.step for e in result.evals] == [0, 6, 12]
    assert result.final.reverse_kl < 0.8 * result.initial.reverse_kl


def test_run_mismatch_replays_the_first_steps_of_a_run(tiny) -> None:
    """opd.run_mismatch (what a screen calls for the run-averaged x) equals the mean in-run k3 of the same recipe's
    first steps inside a full run (stop_after keeps the full run's schedule), for a stale and a noisy engine."""
    import copy

    from admitcheck.config import NoiseConfig

    cfg = _cfg(steps=6, lr_schedule="cosine")
    for rollout, k in (
        (RolloutConfig(dtype="float32"), 1),
        (RolloutConfig(dtype="float32", noise=NoiseConfig(relative_std=0.05, seed=3)), 0),
    ):
        student = copy.deepcopy(tiny["student"])
        full = opd.train(student, tiny["teacher"], _engine(tiny, student, rollout), tiny["train_ids"], cfg,
                         staleness=k, seed=4)  # fmt: skip
        want = sum(s.k3 for s in full.steps[:3]) / 3
        got = opd.run_mismatch(tiny["student"], tiny["teacher"], tiny["train_ids"], cfg, rollout, steps=3,
                               staleness=k, seed=4, tokens=tiny["tokens"])  # fmt: skip
        assert got == want and got > 0  # bit-identical: the same seeded steps on one thread


# ------------------------------------------------------------------------------------------------ issue 36: less noise


def test_noise_switches_stay_out_of_dumps_at_their_defaults() -> None:
    """Ledger headers, run keys and artifact recipes are dumps of these configs: today's must not change."""
    assert "sampling_coupling" not in _cfg().model_dump() and "ema" not in _cfg().model_dump()
    assert "coupling" not in SamplingConfig().model_dump()
    assert "sampling_coupling" not in EvalConfig(prompts="-").model_dump()
    on = _cfg(sampling_coupling="gumbel", ema=0.9).model_dump()
    assert on["sampling_coupling"] == "gumbel" and on["ema"] == 0.9
    assert EvalConfig(prompts="-", sampling_coupling="gumbel").model_dump()["sampling_coupling"] == "gumbel"
    with pytest.raises(ValueError):
        _cfg(ema=1.0)


def test_run_record_carries_the_quality_standard_error_and_old_lines_still_load() -> None:
    from admitcheck.calibration.record import RunRecord

    old = {"kind": "run", "key": "k", "seed": 3, "quality": 0.41}  # a line written before the field existed
    assert RunRecord.model_validate(old).quality_se is None
    assert RunRecord.model_validate(old).line() == old
    new = RunRecord(seed=3, quality=0.41, quality_se=0.004).keyed("k")
    assert RunRecord.model_validate(json.loads(json.dumps(new.line()))).quality_se == 0.004


def test_quality_carries_its_standard_error_and_eval_coupling_changes_the_draws(tiny) -> None:
    ecfg = EvalConfig(prompts="-", max_new_tokens=6, batch_size=16, samples=4)
    args = (tiny["teacher"], tiny["eval_ids"], None, ecfg, tiny["tokens"], SamplingConfig())
    q = opd.QualityEvaluator(*args)(tiny["student"], 0)
    assert q.standard_error is not None and 0 < q.standard_error < q.prompt_clustered_error
    assert len(q.kl_by_response) == 4 * len(tiny["eval_ids"]) and sum(q.tokens_by_response) == q.num_tokens
    assert math.fsum(q.kl_by_response) / q.num_tokens == pytest.approx(q.reverse_kl, rel=1e-12)
    other = opd.QualityEvaluator(*args)(tiny["student"], 0, seed=99)  # other eval draws, the same weights
    assert other.reverse_kl != q.reverse_kl
    gumbel = dict(zip(("teacher", "prompt_ids", "answers", "cfg", "tokens", "sampling"), args))
    gumbel["cfg"] = ecfg.model_copy(update={"sampling_coupling": "gumbel"})
    g = opd.QualityEvaluator(**gumbel)(tiny["student"], 0)
    assert g.kl_by_response != q.kl_by_response
    one = opd.QualityEvaluator(*args[:3], ecfg.model_copy(update={"samples": 1}), *args[4:])(tiny["student"], 0)
    assert one.standard_error is None and one.prompt_clustered_error is not None  # no within-prompt spread to see


def test_gumbel_training_rollouts_are_a_reproducible_other_run(tiny) -> None:
    import copy

    def losses(**kw) -> list[float]:
        student = copy.deepcopy(tiny["student"])
        return [s.loss for s in opd.train(student, tiny["teacher"], _engine(tiny, student), tiny["train_ids"],
                                          _cfg(**kw), seed=1).steps]  # fmt: skip

    assert losses(sampling_coupling="gumbel") == losses(sampling_coupling="gumbel")
    assert losses(sampling_coupling="gumbel") != losses()


def test_ema_weights_are_the_exponential_average_and_the_final_quality_scores_them(tiny) -> None:
    import copy

    student = copy.deepcopy(tiny["student"])
    ema = opd.EMAWeights(student, 0.75)
    theta0 = [p.detach().clone() for p in student.parameters()]
    with torch.no_grad():
        for p in student.parameters():
            p.add_(1.0)
    ema.update(student)
    for avg, t0 in zip(ema.model.parameters(), theta0):
        assert torch.allclose(avg, t0 + 0.25, atol=1e-6)  # 0.75 θ0 + 0.25 (θ0 + 1)
    seen = []

    def evaluator(model, step):
        seen.append((step, [p.detach().clone() for p in model.parameters()]))
        return opd.Quality(step, 0.0, None, 1)

    student = copy.deepcopy(tiny["student"])
    mine = opd.EMAWeights(student, 0.5)  # the same average, kept by hand after every step
    cfg = _cfg(ema=0.5, steps=4, lr=1e-2)
    opd.train(student, tiny["teacher"], _engine(tiny, student), tiny["train_ids"], cfg, evaluator, seed=0,
              on_step=lambda k, s: mine.update(s))  # fmt: skip
    final_step, final_weights = seen[-1]
    assert final_step == 4
    assert all(torch.equal(a, b) for a, b in zip(final_weights, mine.model.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(final_weights, student.parameters()))  # not the last iterate
    assert all(torch.equal(a, b) for a, b in zip(seen[0][1], tiny["student"].parameters()))  # step 0: θ0


def test_the_start_weights_evaluation_is_computed_once_and_is_the_computed_one(tiny) -> None:
    """Issue 37: the step-0 evaluation (θ0, the eval seed: one number across a ledger) is computed once per
    evaluator; another run's θ0 — equal tensors in another module — gets the same result without sampling again;
    changed weights, another seed or another evaluator's fresh computation agree with what is returned."""
    import copy

    ecfg = EvalConfig(prompts="-", max_new_tokens=6, batch_size=16, samples=2)
    args = (tiny["teacher"], tiny["eval_ids"], None, ecfg, tiny["tokens"], SamplingConfig())
    ev = opd.QualityEvaluator(*args)
    calls = []
    compute = ev._evaluate
    ev._evaluate = lambda *a: calls.append(a[2]) or compute(*a)  # count the real evaluations (a[2]: the step)
    first = ev(copy.deepcopy(tiny["student"]), 0)
    again = ev(copy.deepcopy(tiny["student"]), 0)  # the next run's start weights
    assert calls == [0] and again == first
    fresh = opd.QualityEvaluator(*args)(tiny["student"], 0)
    assert fresh == first  # the same bits as a computation
    moved = copy.deepcopy(tiny["student"])
    with torch.no_grad():
        next(moved.parameters()).add_(1e-3)
    q = ev(moved, 0)
    assert calls == [0, 0] and q.reverse_kl != first.reverse_kl
    ev(tiny["student"], 0, seed=99)
    assert len(calls) == 3  # another seed is another evaluation
    later = ev(copy.deepcopy(tiny["student"]), 5)  # θ0's weights labelled with a later step: θ0's quality
    assert later.step == 5 and later.reverse_kl == first.reverse_kl and later.kl_by_response == first.kl_by_response
