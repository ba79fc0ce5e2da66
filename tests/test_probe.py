"""The one probe loop: seeds per batch, the engine's kept set replayed, kl_exact from full rows, early exit, guard."""

from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np
import pytest
import torch

from admitcheck.config import ProbeConfig, RolloutConfig, SamplingConfig
from admitcheck.measurement.probe import ProbeRun, probe_all, probe_batches, score_rollouts, truncates
from admitcheck.rollout.engines.hf import HFEngine
from tests.tiny import tiny_llama

NO_EOS = -1


@pytest.fixture(scope="module")
def model():
    return tiny_llama(initializer_range=0.2)


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(3, 64, (int(n),), generator=g).tolist() for n in torch.randint(4, 10, (48,), generator=g)]


PROBE = ProbeConfig(prompts="-", num_prompts=48, max_new_tokens=16, batch_size=16, seed=7)


def test_batches_use_seed_plus_offset_plus_index(model, prompts):
    engine = HFEngine(model, RolloutConfig(dtype="float32"), eos_token_id=NO_EOS, pad_token_id=0)
    batches = list(probe_batches(engine, model, prompts, PROBE, SamplingConfig(), full=False, seed_offset=3))
    assert [b.index for b in batches] == [0, 1, 2]
    direct = engine.sample(prompts[16:32], SamplingConfig(), 7 + 3 + 1, 16)
    assert torch.equal(batches[1].rollouts.token_ids, direct.token_ids)
    assert "kl_exact" not in batches[0].per_sequence  # no rows asked for, none given


@pytest.mark.parametrize("sampling", [SamplingConfig(top_p=0.9), SamplingConfig(top_k=20), SamplingConfig()])
def test_bf16_engine_with_truncation_is_finite_and_kl_exact_comes_with_it(model, prompts, sampling):
    """The kept set is replayed whenever the sampling truncates: a BF16 engine never puts a sampled token outside
    the reference's set (k3 = inf without the replay, seen on the toy), and kl_exact comes for free."""
    engine = HFEngine(model, RolloutConfig(dtype="bfloat16"), eos_token_id=NO_EOS, pad_token_id=0)
    run = probe_all(engine, model, prompts, PROBE, sampling, full=False)
    m = run.metrics(0.95)
    assert run.nonfinite == 0 and math.isfinite(m.values["k3"]) and m.values["k3"] > 0
    assert ("kl_exact" in m.values) == truncates(sampling)
    if truncates(sampling):  # the same KL(μ‖π): k3's interval holds kl_exact
        lo, hi = m.intervals["k3"]
        assert lo <= m.values["kl_exact"] <= hi, (m.values, m.intervals["k3"])


def test_without_replay_a_boundary_token_gets_minus_inf(model, prompts):
    """The failure the replay removes: re-deriving top-p from the reference's logits puts some BF16 sample outside."""
    sampling = SamplingConfig(top_p=0.9)
    engine = HFEngine(model, RolloutConfig(dtype="bfloat16"), eos_token_id=NO_EOS, pad_token_id=0)
    from admitcheck.measurement.scorer import score

    bad = 0
    for i in range(6):
        r = engine.sample(prompts, sampling, i, 16, return_full=True)
        plain = score(model, r.prompt_ids, r.token_ids, r.mask, sampling).logprobs
        bad += int((~torch.isfinite(plain) & r.mask).sum())
        replayed = score_rollouts(model, r, sampling, full=False).logprobs
        assert torch.isfinite(replayed[r.mask]).all()
    assert bad > 0  # otherwise this model never straddles the boundary and the test above proves nothing


def test_probe_run_pools_batches_and_stops_early(model, prompts):
    engine = HFEngine(model, RolloutConfig(dtype="float32", noise={"relative_std": 0.05}), eos_token_id=NO_EOS,
                      pad_token_id=0)  # fmt: skip
    run = ProbeRun()
    for batch in probe_batches(engine, model, prompts, PROBE, SamplingConfig(), full=True):
        run.add(batch)
        if batch.index == 1:
            break
    assert run.num_sequences == 32 and run.num_tokens == 32 * 16
    pooled, whole = run.pooled(0.9), run.metrics(0.9)
    assert pooled.values["kl_exact"] == whole.values["kl_exact"]
    assert pooled.intervals["k3"] == pytest.approx(whole.intervals["k3"], rel=1e-12)  # one interval per metric
    share, k_hat = run.tail("k3")
    s = run.sums()["k3"]
    assert share == pytest.approx(s.max() / s.sum()) and k_hat == -math.inf  # < 100 sequences: no tail fit
    np.testing.assert_array_equal(run.sums()["num_tokens"], np.full(32, 16.0))
    from admitcheck.measurement.metrics import Functional, winsorized_mean

    for key in ("k3", "kl_exact"):  # the functional of the sums so far: a level's x and a screen's mismatch
        fv = run.functional(Functional(key), 0.9)
        assert fv.value == pytest.approx(winsorized_mean((run.sums()[key] / 16.0)[None], 8.0)[0], rel=1e-12)
        assert fv.interval[0] <= fv.value <= fv.interval[1] and fv.num_sequences == 32 and fv.estimator == key


def test_guard_wraps_every_engine_and_reference_call(model, prompts):
    """`guard()` is a context around each engine and reference call: an error raised inside reaches it."""
    engine = HFEngine(model, RolloutConfig(dtype="float32"), eos_token_id=NO_EOS, pad_token_id=0)
    calls = []

    @contextmanager
    def guard():
        calls.append("enter")
        yield
        calls.append("exit")

    list(probe_batches(engine, model, prompts, PROBE, SamplingConfig(), full=False, max_batches=2, guard=guard))
    assert calls == ["enter", "exit"] * 4  # sample + score per batch

    class Boom(RuntimeError):
        pass

    seen = []

    @contextmanager
    def catching():
        try:
            yield
        except Boom as exc:
            seen.append(exc)
            raise ValueError("converted") from exc

    def failing_sample(*args, **kwargs):
        raise Boom("engine died")

    engine.sample = failing_sample
    with pytest.raises(ValueError, match="converted"):
        list(probe_batches(engine, model, prompts, PROBE, SamplingConfig(), full=False, guard=catching))
    assert len(seen) == 1
