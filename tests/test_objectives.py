"""admitcheck.calibration.objectives (and grpo.GRPO): each objective's loss on a tiny model against golden numbers.

The golden values are what the functions the objectives replaced (`opd.opd_loss`, `grpo.grpo_loss`, issue 26) gave on
this batch: the tiny pair of tests/test_opd.py, 8 train prompts sampled (seed 3, 6 tokens) by a float32 engine with
weight noise 0.3, the untrained student re-scoring them, one torch thread.
"""

from __future__ import annotations

import copy

import pytest
import torch

from admitcheck import io
from admitcheck.calibration import grpo
from admitcheck.calibration.objectives import FullVocabReverseKL, SampledTokenPG, objective_for
from admitcheck.calibration.runs import StepLog
from admitcheck.config import GRPOConfig, NoiseConfig, PairConfig, RolloutConfig, SamplingConfig, TrainConfig
from admitcheck.measurement.scorer import response_logprobs
from admitcheck.pairs.load import load_pair_tokenizer, tokenize_prompts
from admitcheck.rollout.engines.hf import HFEngine
from tests.test_opd import make_tiny_pair

GOLDEN = {  # the loss of the batch below, as the replaced functions computed it
    "pg": 7.898554801940918,
    "pg_rollout_tis": 7.914491176605225,  # student_logprobs: rollout, tis_cap 1.1
    "gkd_reverse_kl": 8.001524925231934,
    "grpo_none": 0.10312023758888245,
    "grpo_tis": 0.1031847894191742,  # tis_cap 1.05
    "grpo_mis": 0.12093739211559296,  # mis range [0.9, 1.1]: 2.3% of the tokens masked
}
GRPO_MODES = {
    "grpo_none": GRPOConfig(group_size=4),
    "grpo_tis": GRPOConfig(group_size=4, correction="tis", tis_cap=1.05),
    "grpo_mis": GRPOConfig(group_size=4, correction="mis", mis_low=0.9, mis_high=1.1),
}


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    root = make_tiny_pair(tmp_path_factory.mktemp("pair"))
    tokens = load_pair_tokenizer(PairConfig(student=str(root / "student"), teacher=str(root / "teacher")))
    ids = tokenize_prompts(tokens, io.read_prompts(root / "prompts" / "train.jsonl"))[:8]
    student, teacher = io.load_causal_lm(root / "student"), io.load_causal_lm(root / "teacher")
    noisy = RolloutConfig(dtype="float32", noise=NoiseConfig(relative_std=0.3, seed=1))
    engine = HFEngine(copy.deepcopy(student), noisy, eos_token_id=2, pad_token_id=0)
    ro = engine.sample(ids, SamplingConfig(), 3, 6)
    lp, full = response_logprobs(student, ro.prompt_ids, ro.token_ids, ro.mask, SamplingConfig(), full=True)
    return {"ids": ids, "teacher": teacher, "ro": ro, "lp": lp, "full": full}


def _train(**kw) -> TrainConfig:
    return TrainConfig(prompts="-", **kw)


@pytest.mark.parametrize(
    "name, objective",
    [
        ("pg", lambda t: SampledTokenPG(_train(), t)),
        ("pg_rollout_tis", lambda t: SampledTokenPG(_train(student_logprobs="rollout", tis_cap=1.1), t)),
        ("gkd_reverse_kl", lambda t: FullVocabReverseKL(t)),
    ],
)
def test_distillation_objectives_give_the_golden_loss(batch, name, objective) -> None:
    obj = objective(batch["teacher"])
    targets = obj.targets(batch["ids"], batch["ro"], SamplingConfig())  # the teacher scores the sampled tokens
    loss, fields = obj.step_loss(batch["lp"], batch["full"] if obj.full_vocab else None, batch["ro"], targets)
    assert float(loss.detach()) == pytest.approx(GOLDEN[name], rel=1e-6) and fields == {}
    assert obj.log_type is StepLog and obj.group_size == 1


@pytest.mark.parametrize("name", list(GRPO_MODES))
def test_grpo_objective_gives_the_golden_loss(batch, name) -> None:
    obj = grpo.GRPO(GRPO_MODES[name])
    rewards = torch.tensor([1.0, 0, 0, 1, 1, 1, 0, 0])  # two groups of 4
    adv = grpo.group_advantages(rewards, 4)
    loss, fields = obj.step_loss(batch["lp"], None, batch["ro"], (rewards, adv))
    assert float(loss.detach()) == pytest.approx(GOLDEN[name], rel=1e-6)
    assert fields["reward_mean"] == 0.5 and set(fields) == {"reward_mean", "clipped", "masked"}
    assert (fields["masked"] > 0) == (name == "grpo_mis")
    assert obj.log_type is grpo.GRPOStepLog and obj.group_size == 4


def test_grpo_targets_reward_each_response_and_normalise_within_groups(batch) -> None:
    obj = grpo.GRPO(GRPOConfig(group_size=4), batch["ids"])
    rewards, adv = obj.targets(batch["ids"], batch["ro"], SamplingConfig())
    want = [grpo.toy_reversal_reward(p, r) for p, r in zip(batch["ids"], batch["ro"].responses())]
    assert rewards.tolist() == want
    torch.testing.assert_close(adv, grpo.group_advantages(rewards, 4))


def test_objective_for_names_each_loss() -> None:
    from admitcheck.pairs import toy

    prompts = [toy.encode_prompt("1 2 3 =")]
    assert isinstance(objective_for(_train(), None, prompts), SampledTokenPG)
    assert isinstance(objective_for(_train(loss="gkd_reverse_kl"), None, prompts), FullVocabReverseKL)
    obj = objective_for(_train(loss="grpo", batch_size=8, grpo={"group_size": 4}), None, prompts)
    assert isinstance(obj, grpo.GRPO) and obj.group_size == 4
