"""admitcheck.calibration.grpo: the GRPO loss's gradient against its closed form (no correction, TIS, MIS; token and
sequence),
the verifiable reward, group-normalised advantages, the RL quality's sign convention, and the training loop.

The closed form is written out here token by token, independently of `grpo.gradient_coefficients`:
∇_logits L = −(1/N) Σ_t g_t A_t (e_{y_t} − softmax(logits_t)), the gradient of log_softmax(logits)[y_t].
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from admitcheck.calibration import grpo, opd
from admitcheck.calibration.runs import Quality
from admitcheck.config import GRPOConfig, RolloutConfig, TrainConfig
from admitcheck.errors import ConfigError
from admitcheck.pairs import toy

# ------------------------------------------------------------------------------------------------ the loss

# Log ratios ℓ = log π_θ − log μ chosen to hit every branch of every mode, none on a boundary (clip 0.8/1.2, dual-
# clip 3, TIS cap 1.5, MIS [0.5, 2]): r = 0.135, 0.61, 0.905, 1.05, 1.35, 4.48.
ELLS = (-2.0, -0.5, -0.1, 0.05, 0.3, 1.5)
ADVANTAGES = (1.3, -0.7, 0.0, -1.1)  # one per response: positive, negative, zero, negative


def _batch(seed: int = 0, B: int = 4, T: int = 6, V: int = 5):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g, dtype=torch.float64, requires_grad=True)
    tokens = torch.randint(V, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, 4:] = False  # a shorter response
    mask[3, 5:] = False
    perm = torch.stack([torch.randperm(T, generator=g) for _ in range(B)])
    ell = torch.tensor(ELLS, dtype=torch.float64)[perm % len(ELLS)]  # (B, T)
    ell[0] = torch.tensor([-0.1, 0.05, -0.1, 0.05, -0.1, 0.05])  # one response entirely inside [0.5, 2]
    lp = torch.log_softmax(logits, -1).gather(-1, tokens[..., None])[..., 0]  # (B, T) with grad
    rollout_lp = lp.detach() - ell  # so that log π_θ − log μ = ℓ exactly
    return logits, tokens, mask, lp, rollout_lp, ell, torch.tensor(ADVANTAGES, dtype=torch.float64)


def _coefficient(cfg: GRPOConfig, ell_row: list[float], mask_row: list[bool], t: int, adv: float) -> float:
    """g_t of one token, by hand (see the module docstring of admitcheck.calibration.grpo)."""
    r = math.exp(ell_row[t])
    if cfg.correction == "none":  # PPO clip on π_θ/μ, dual clip for A < 0
        if adv > 0:
            return r if r <= 1 + cfg.clip_ratio_high else 0.0
        if adv < 0:
            return r if 1 - cfg.clip_ratio_low <= r <= cfg.clip_ratio_c else 0.0
        return 0.0
    if cfg.correction == "tis":
        if cfg.correction_level == "token":
            return min(r, cfg.tis_cap)
        return min(math.exp(sum(e for e, m in zip(ell_row, mask_row) if m)), cfg.tis_cap)
    if cfg.correction_level == "token":  # mis
        return r if cfg.mis_low <= r <= cfg.mis_high else 0.0
    inside = all(cfg.mis_low <= math.exp(e) <= cfg.mis_high for e, m in zip(ell_row, mask_row) if m)
    return r if inside else 0.0


MODES = [
    GRPOConfig(),
    GRPOConfig(clip_ratio_low=0.3, clip_ratio_high=0.1, clip_ratio_c=2.0),
    GRPOConfig(correction="tis", tis_cap=1.5),
    GRPOConfig(correction="tis", correction_level="sequence", tis_cap=1.5),
    GRPOConfig(correction="mis", mis_low=0.5, mis_high=2.0),
    GRPOConfig(correction="mis", correction_level="sequence", mis_low=0.5, mis_high=2.0),
]


@pytest.mark.parametrize("cfg", MODES, ids=lambda c: f"{c.correction}-{c.correction_level}-{c.clip_ratio_high}")
def test_grpo_loss_gradient_equals_the_closed_form(cfg: GRPOConfig) -> None:
    logits, tokens, mask, lp, mu, ell, adv = _batch()
    loss, _ = grpo.GRPO(cfg).loss(lp, mu, adv, mask)
    (grad,) = torch.autograd.grad(loss, logits)
    n = int(mask.sum())
    p = torch.softmax(logits.detach(), -1)  # (B, T, V)
    want = torch.zeros_like(p)
    coefficients = []
    for b in range(mask.shape[0]):
        for t in range(mask.shape[1]):
            if not mask[b, t]:
                continue
            g = _coefficient(cfg, ell[b].tolist(), mask[b].tolist(), t, float(adv[b]))
            coefficients.append(g)
            want[b, t] = -g * float(adv[b]) / n * (torch.nn.functional.one_hot(tokens[b, t], p.shape[-1]) - p[b, t])
    # float64 throughout: the two sides differ only by rounding of a few dozen terms (~1e-15), so the default
    # float64 tolerance (rtol 1e-7, atol 1e-7) cannot hide a wrong coefficient (the smallest non-zero |g·A/N| is ~4e-3)
    torch.testing.assert_close(grad, want)
    assert any(c == 0 for c in coefficients) or cfg.correction == "tis"  # the clip / mask branches were exercised
    assert len(set(round(c, 9) for c in coefficients)) > 2


def test_the_closed_form_helper_matches_the_hand_written_one() -> None:
    _, _, mask, lp, mu, ell, adv = _batch(1)
    for cfg in MODES:
        g = grpo.gradient_coefficients(cfg, lp.detach(), mu, adv, mask)
        for b, t in mask.nonzero().tolist():
            want = _coefficient(cfg, ell[b].tolist(), mask[b].tolist(), t, float(adv[b]))
            if cfg.correction == "none" and adv[b] == 0:
                continue  # g is irrelevant where A = 0
            assert float(g[b, t]) == pytest.approx(want, rel=1e-12), (cfg, b, t)


def test_on_policy_the_loss_is_the_plain_policy_gradient() -> None:
    """μ = π_θ: every mode gives ∇L = −(1/N) Σ A ∇log π (ratio 1 is inside every clip, weight and range)."""
    logits, _tokens, mask, lp, _, _, adv = _batch(2)
    grads = []
    for cfg in MODES:
        loss, stats = grpo.GRPO(cfg).loss(lp, lp.detach(), adv, mask)
        grads.append(torch.autograd.grad(loss, logits, retain_graph=True)[0])
        assert stats["clipped"] == 0 and stats["masked"] == 0
    for g in grads[1:]:
        torch.testing.assert_close(g, grads[0])


# ------------------------------------------------------------------------------------------------ advantages


def test_group_advantages_are_mean_std_normalised_within_each_group() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])  # two groups of 4
    # group 1: mean 0.25, unbiased std sqrt((0.75² + 3·0.25²)/3) = 0.5 -> (1.5, −0.5, −0.5, −0.5)
    torch.testing.assert_close(grpo.group_advantages(rewards[:4], 4, eps=0.0), torch.tensor([1.5, -0.5, -0.5, -0.5]))
    adv = grpo.group_advantages(rewards, 4, eps=1e-6)  # group 2 is all equal: 0 / (0 + eps) = 0
    torch.testing.assert_close(adv, torch.tensor([0.75, -0.25, -0.25, -0.25, 0, 0, 0, 0]) / (0.5 + 1e-6))
    torch.testing.assert_close(grpo.group_advantages(rewards, 4, std_normalize=False)[:4],
                               torch.tensor([0.75, -0.25, -0.25, -0.25]))  # fmt: skip
    assert float(grpo.group_advantages(torch.rand(24), 6).view(4, 6).sum(1).abs().max()) < 1e-5


# ------------------------------------------------------------------------------------------------ reward


def _ids(text: str) -> list[int]:
    return toy.encode_prompt(text)[1:]  # without <bos>


def test_toy_reversal_reward_is_exact_match_of_the_reversed_digits() -> None:
    prompt = toy.encode_prompt("3 1 4 1 5 =")
    assert grpo.toy_reversal_reward(prompt, [*_ids("51413"), toy.EOS_ID]) == 1.0
    assert grpo.toy_reversal_reward(prompt, [*_ids("51413"), toy.EOS_ID, 5, 6]) == 1.0  # after <eos>: not read
    assert grpo.toy_reversal_reward(prompt, [*_ids("5141"), toy.EOS_ID]) == 0.0
    assert grpo.toy_reversal_reward(prompt, [*_ids("514133"), toy.EOS_ID]) == 0.0
    assert grpo.toy_reversal_reward(prompt, [*_ids("31415"), toy.EOS_ID]) == 0.0


def test_toy_reversal_reward_agrees_with_check_answer_through_the_tokenizer() -> None:
    tok = toy.make_tokenizer()
    g = torch.Generator().manual_seed(0)
    for _ in range(300):
        digits = "".join(str(int(d)) for d in torch.randint(10, (int(torch.randint(4, 8, (1,), generator=g)),),
                                                            generator=g))  # fmt: skip
        prompt_text = toy.format_prompt(digits)
        response = [*_ids(digits[::-1]), toy.EOS_ID]
        if torch.rand(1, generator=g) < 0.5:  # corrupt half of them: a digit changed, dropped or added
            i = int(torch.randint(len(digits), (1,), generator=g))
            response[i] = [toy.DIGIT0_ID + (response[i] - toy.DIGIT0_ID + 1) % 10, toy.EOS_ID, response[i]][i % 3]
        want = toy.check_answer(prompt_text, toy.toy_response_text(tok, response))
        assert grpo.toy_reversal_reward(tok(prompt_text)["input_ids"], response) == float(want)


def test_toy_reversal_reward_refuses_prompts_of_another_tokenizer() -> None:
    with pytest.raises(ConfigError, match=r"train\.grpo\.reward"):
        grpo.check_reward_prompts("toy_reversal", [[1, 40, 41, 14]])
    grpo.check_reward_prompts("toy_reversal", [toy.encode_prompt("1 2 3 =")])


# ------------------------------------------------------------------------------------------------ quality, config


def test_rl_quality_cost_is_baseline_reward_minus_run_reward() -> None:
    cfg = TrainConfig(prompts="-", loss="grpo")
    base, run = Quality(200, 0.4, 0.80, 100), Quality(200, 0.3, 0.65, 100)
    cost = opd.quality_value(cfg, run) - opd.quality_value(cfg, base)  # what calibrate computes
    assert cost == pytest.approx(0.80 - 0.65)
    assert opd.quality_value(TrainConfig(prompts="-"), run) == 0.3  # OPD: the reverse KL, unchanged
    with pytest.raises(ConfigError, match="answer"):
        opd.quality_value(cfg, Quality(0, 0.3, None, 10))


def test_grpo_config_rules() -> None:
    assert TrainConfig(prompts="-", loss="grpo").grpo == GRPOConfig()
    assert TrainConfig(prompts="-").grpo is None
    for bad in ({"loss": "grpo", "batch_size": 30}, {"loss": "grpo", "tis_cap": 2.0}, {"grpo": {}},
                {"loss": "grpo", "grpo": {"mis_low": 2.0, "mis_high": 1.0}}):  # fmt: skip
        with pytest.raises(ValueError):
            TrainConfig(prompts="-", **bad)


# ------------------------------------------------------------------------------------------------ the loop


def test_grpo_train_runs_resyncs_and_is_deterministic(tmp_path) -> None:
    from admitcheck import io
    from admitcheck.config import PairConfig
    from admitcheck.pairs.load import load_pair_tokenizer, tokenize_prompts
    from admitcheck.rollout.engines.hf import HFEngine
    from tests.test_opd import make_tiny_pair

    root = make_tiny_pair(tmp_path)
    tokens = load_pair_tokenizer(PairConfig(student=str(root / "student"), teacher=str(root / "teacher")))
    ids = tokenize_prompts(tokens, io.read_prompts(root / "prompts" / "train.jsonl"))
    cfg = TrainConfig(prompts="-", loss="grpo", steps=2, batch_size=8, max_new_tokens=6, grpo={"group_size": 4})
    runs = []
    for _ in range(2):
        student = io.load_causal_lm(root / "student")
        engine = HFEngine(student, RolloutConfig(dtype="float32"), eos_token_id=2, pad_token_id=0)
        result = opd.train(student, None, engine, ids, cfg, seed=3)  # the one loop, objective grpo.GRPO
        assert all(isinstance(s, grpo.GRPOStepLog) for s in result.steps) and len(result.steps) == 2
        assert max(s.k3 for s in result.steps) < 1e-6  # float32 engine re-synced from the trainer: no mismatch
        runs.append([s.loss for s in result.steps] + [float(p.detach().sum()) for p in student.parameters()])
    assert runs[0] == runs[1]


def test_grpo_stops_after_the_first_steps_of_its_schedule(tmp_path) -> None:
    """stop_after holds for GRPO as for OPD (the one loop), so a stale student of an RL recipe is θk, not the end of
    a full run (grpo.train ignored stop_after before issue 26: an RL staleness level measured θ0 against θ_steps)."""
    from admitcheck import io
    from admitcheck.config import PairConfig
    from admitcheck.pairs.load import load_pair_tokenizer, tokenize_prompts
    from admitcheck.rollout.engines.hf import HFEngine
    from tests.test_opd import make_tiny_pair

    root = make_tiny_pair(tmp_path)
    tokens = load_pair_tokenizer(PairConfig(student=str(root / "student"), teacher=str(root / "teacher")))
    ids = tokenize_prompts(tokens, io.read_prompts(root / "prompts" / "train.jsonl"))
    cfg = TrainConfig(prompts="-", loss="grpo", steps=3, batch_size=8, max_new_tokens=6, grpo={"group_size": 4})
    student = io.load_causal_lm(root / "student")
    engine = HFEngine(student, RolloutConfig(dtype="float32"), eos_token_id=2, pad_token_id=0)
    steps = []
    result = opd.train(student, None, engine, ids, cfg, seed=3, stop_after=1, on_step=lambda k, _m: steps.append(k))
    assert steps == [1] and len(result.steps) == 1


@pytest.mark.slow
def test_a_grpo_calibration_fits_the_task_error_with_cost_baseline_reward_minus_run_reward(tmp_path) -> None:
    import numpy as np

    from admitcheck.calibration.calibrate import calibrate
    from admitcheck.config import CalibrateConfig
    from tests.test_calibrate import tiny_config_dict
    from tests.test_opd import make_tiny_pair

    data = tiny_config_dict(make_tiny_pair(tmp_path / "pair"), tmp_path / "tiny_rl.yaml")
    data["train"] |= {"loss": "grpo", "grpo": {"group_size": 4}}
    data["levels"]["extra"] = []
    cal = calibrate(CalibrateConfig.model_validate(data))
    assert cal.quality.definition == grpo.QUALITY_DEFINITION
    assert cal.recipe.loss == "grpo" and cal.recipe.grpo.group_size == 4
    base_reward = np.mean([r.accuracy for r in cal.runs if r.kind == "baseline"])
    for r in cal.runs:
        assert r.quality == pytest.approx(1.0 - r.accuracy)
        assert r.quality_cost == pytest.approx(base_reward - r.accuracy)
        assert r.reverse_kl > 0  # reported beside the task reward


# ------------------------------------------------------------------------------------------------ answer_in_reply


def test_answer_in_reply_is_the_whole_word_rule() -> None:
    from admitcheck.pairs.answers import answer_in_reply

    assert answer_in_reply("Paris", "The capital of France is Paris.") and answer_in_reply("-3", "It is -3.")
    assert not answer_in_reply("6", "It has 16 letters.") and not answer_in_reply("3", "The answer is -3.")
    assert answer_in_reply("2 3 1", "2 3 1 5")  # contained: what follows the answer is not read
    assert not answer_in_reply("2 3 1", "2 3 15")


def test_answer_reward_reads_each_prompts_answer_through_the_tokenizer() -> None:
    from admitcheck.pairs.load import PairTokens

    tok = toy.make_tokenizer()
    tokens = PairTokens(tok, toy.EOS_ID, 0, len(toy.VOCAB))
    rows = [{"prompt": "3 1 4 =", "answer": "4 1 3"}, {"prompt": "9 9 ="}, {"prompt": "5 6 =", "answer": "6 5"}]
    cfg = TrainConfig(prompts="-", loss="grpo", grpo={"reward": "answer_in_reply"})
    kept = grpo.task_rows(rows, cfg)
    assert [r["prompt"] for r in kept] == ["3 1 4 =", "5 6 ="]  # the open prompt is not trained on
    assert grpo.task_rows(rows, TrainConfig(prompts="-", loss="grpo")) == rows  # toy_reversal reads no answer
    ids = [toy.encode_prompt(r["prompt"]) for r in kept]
    task = grpo.task_of(kept, ids, tokens, cfg)
    objective = grpo.GRPO(cfg.grpo, ids, task)
    assert objective.reward(ids[0], [*_ids("413"), toy.EOS_ID]) == 1.0
    assert objective.reward(ids[0], [*_ids("41"), toy.EOS_ID]) == 0.0
    assert objective.reward(ids[1], [*_ids("65"), toy.EOS_ID, *_ids("1")]) == 1.0  # after <eos>: not read
    with pytest.raises(ConfigError, match="answers"):  # no task: nothing to read the answers from
        grpo.GRPO(cfg.grpo, ids, None)
    with pytest.raises(ConfigError, match="prompt 1 has no 'answer'"):
        grpo.GRPO(cfg.grpo, [ids[0], toy.encode_prompt("9 9 =")], task)
    with pytest.raises(ConfigError, match="none has one"):
        grpo.task_rows([{"prompt": "9 9 ="}], cfg)


def test_an_answer_reward_needs_the_contains_accuracy_and_the_exact_one_the_toy_reward() -> None:
    import yaml

    from admitcheck.config import CalibrateConfig

    data = yaml.safe_load((Path(__file__).resolve().parents[1] / "examples" / "toy_calibrate_rl.yaml").read_text())
    rl = data["train"] | {"grpo": {**(data["train"].get("grpo") or {}), "reward": "answer_in_reply"}}
    ok = CalibrateConfig.model_validate({**data, "train": rl, "eval": {**data["eval"], "accuracy": "contains"}})
    assert ok.eval.accuracy == "contains" and ok.model_dump(mode="json")["eval"]["accuracy"] == "contains"
    for train, accuracy in ((rl, "exact"), (data["train"], "contains")):
        with pytest.raises(ValueError, match="held-out task reward must be the training's"):
            CalibrateConfig.model_validate({**data, "train": train, "eval": {**data["eval"], "accuracy": accuracy}})
    assert "accuracy" not in CalibrateConfig.model_validate(data).model_dump(mode="json")["eval"]  # old headers kept


@pytest.mark.slow
def test_an_answer_reward_calibration_run_and_its_staleness_probe_train_on_answered_prompts(tmp_path) -> None:
    """An answer_in_reply recipe on the toy with a third of the train prompts' answers removed: the run context keeps
    the answered rows only, a baseline and a staleness level run (the stale student's own GRPO steps read the task),
    and a screen's stale candidate (`stale_reference`) trains the same θ1 as the calibration's staleness level, bit
    for bit: one prompt set for both."""
    import json
    from types import SimpleNamespace

    import yaml

    from admitcheck.admission.staleness import stale_reference
    from admitcheck.calibration.artifact import training_recipe_of
    from admitcheck.calibration.levels import Level, load_context, run_one
    from admitcheck.calibration.schema import TrainingRecipe
    from admitcheck.config import CalibrateConfig
    from admitcheck.pairs.load import LoadedPair
    from tests.test_workers import small_config

    base = small_config(Path(__file__).resolve().parents[1] / "toy", tmp_path / "toy.yaml")
    data = yaml.safe_load(yaml.safe_dump(base.model_dump(mode="json")))
    rows = [json.loads(line) for line in Path(data["train"]["prompts"]).read_text().splitlines()]
    for r in rows[::3]:
        r.pop("answer")
    mixed = tmp_path / "train.jsonl"
    mixed.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data["train"] |= {"prompts": str(mixed), "loss": "grpo", "batch_size": 16,
                      "grpo": {"group_size": 4, "reward": "answer_in_reply"}}  # fmt: skip
    data["eval"] |= {"accuracy": "contains"}
    config = CalibrateConfig.model_validate(data)
    ctx = load_context(config)
    assert len(ctx.train_ids) == sum("answer" in r for r in rows) and ctx.task is not None
    for level in (Level("baseline", "baseline"), Level("stale-1", "staleness", staleness=1)):
        rec = run_one(ctx, config, level, 0)
        assert rec.quality == pytest.approx(1.0 - rec.accuracy) and 0.0 <= rec.accuracy <= 1.0
    seed = Level("stale", "staleness", staleness=1).seed(config.seed, 0)
    level_student = opd.stale_student(ctx.student, ctx.teacher, ctx.train_ids, config.train, config.rollout, 1, seed,
                                      ctx.tokens, task=ctx.task)  # fmt: skip
    recipe = TrainingRecipe.model_validate(training_recipe_of(config) | {"prompts": str(mixed)})
    calibration = SimpleNamespace(recipe=recipe, train_prompts=lambda: mixed)
    screened = stale_reference(calibration, SimpleNamespace(reference=config.reference), 1, LoadedPair(config.pair))
    a, b = level_student.state_dict(), screened.state_dict()
    assert all(torch.equal(a[k], b[k].to(a[k].dtype)) for k in a)
    assert any(not torch.equal(a[k], v) for k, v in ctx.student.state_dict().items())  # θ1 moved from θ0


def test_the_accuracy_rules_and_conflicting_answers() -> None:
    from admitcheck.calibration.evaluation import accuracy
    from admitcheck.pairs.load import PairTokens

    tok = toy.make_tokenizer()
    replies = [[*_ids("4135"), toy.EOS_ID], [*_ids("413"), toy.EOS_ID], [*_ids("41"), toy.EOS_ID]]
    assert accuracy(tok, toy.EOS_ID, replies, ["4 1 3"] * 3, "exact") == pytest.approx(1 / 3)
    # contains: "4 1 3 5" holds "4 1 3" followed by a space (lenient by design, docs/rl.md); "4 1" does not
    assert accuracy(tok, toy.EOS_ID, replies, ["4 1 3"] * 3, "contains") == pytest.approx(2 / 3)
    assert accuracy(tok, toy.EOS_ID, replies[:1], ["1 3 5"], "contains") == 1.0
    assert accuracy(tok, toy.EOS_ID, replies[:1], ["1 3 5"], "exact") == 0.0
    tokens = PairTokens(tok, toy.EOS_ID, 0, len(toy.VOCAB))
    cfg = TrainConfig(prompts="-", loss="grpo", grpo={"reward": "answer_in_reply"})
    rows = [{"prompt": "3 1 4 =", "answer": "4 1 3"}, {"prompt": "3 1 4 =", "answer": "9"}]
    with pytest.raises(ConfigError, match="repeats an earlier prompt with another answer"):
        grpo.task_of(rows, [toy.encode_prompt(r["prompt"]) for r in rows], tokens, cfg)
