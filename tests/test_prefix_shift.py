"""Prefix shift under weight noise on the toy pair (REFERENCE §3.7): coupled engines agree exactly without noise,
diverge with it, the share of tokens after divergence grows with noise, and TIS weights min(r, 2) close most of the
token-level teacher gap but leave the prefix gap in place."""

from __future__ import annotations

import pytest

from admitcheck import io
from admitcheck.config import PairConfig, RolloutConfig, SamplingConfig
from admitcheck.measurement.prefix_shift import prefix_shift
from tests.test_sensitivity import FP8

pytestmark = pytest.mark.slow
NOISE = (0.0, 0.05, 0.1, 0.3)  # relative weight-noise sizes


@pytest.fixture(scope="module")
def reports(toy_pair_dir):
    from admitcheck.pairs.load import load_pair_tokenizer, tokenize_prompts
    from admitcheck.rollout.engines.hf import HFEngine

    d = toy_pair_dir
    tok = load_pair_tokenizer(PairConfig(student=str(d / "student"), teacher=str(d / "teacher")))
    ids = tokenize_prompts(tok, io.read_prompts(d / "prompts" / "probe.jsonl", limit=128))
    student = io.load_causal_lm(d / "student", "float32", "cpu")
    teacher = io.load_causal_lm(d / "teacher", "float32", "cpu")
    kw = {"eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id}
    ref = HFEngine(student, RolloutConfig(dtype="float32"), **kw)
    out = {}
    for sigma in NOISE:
        cand = HFEngine(student, RolloutConfig(dtype="float32", noise={"relative_std": sigma}), **kw)
        out[sigma] = prefix_shift(ref, cand, teacher, ids, SamplingConfig(), seed=0, max_new_tokens=32)
        cand.close()
    return out


def test_no_noise_is_identical(reports):
    r = reports[0.0]
    assert r.diverged_share == 0.0 and r.share_after_divergence == 0.0
    assert max(abs(r.k3), abs(r.prefix_gap), abs(r.token_gap), abs(r.seq_log_ratio_mean)) < 1e-5  # float32 rounding


def test_noise_diverges(reports):
    r = reports[0.1]
    assert r.diverged_share > 0.2
    assert r.divergence_positions and min(r.divergence_positions) >= 0
    assert r.seq_log_ratio_mean < 0  # candidate tokens are less likely under the reference
    d = r.to_dict()
    assert set(d["intervals"]) == {"token_gap", "token_gap_tis", "prefix_gap", "prefix_gap_tis", "prefix_gap_seq_is"}


def test_share_after_divergence_grows_with_noise(reports):
    shares = [reports[s].share_after_divergence for s in NOISE]
    assert shares == sorted(shares) and shares[-1] > shares[1] + 0.2, shares
    diverged = [reports[s].diverged_share for s in NOISE]
    assert diverged == sorted(diverged), diverged


def test_tis_leaves_the_prefix_gap(reports):
    r = reports[0.3]
    _lo, hi = r.intervals["prefix_gap_tis"]
    assert r.prefix_gap < 0 and hi < 0  # the candidate's prefixes are worse for the teacher, significantly
    assert abs(r.tis_closes) < 0.25, r.tis_closes  # per-token TIS closes (almost) none of the prefix gap ...
    assert r.tis_closes_token > 0.5, r.tis_closes_token  # ... while it closes most of the token-level gap


@pytest.mark.slow
def test_prefix_shift_for_a_measure_config(toy_pair_dir):
    from admitcheck.config import MeasureConfig
    from admitcheck.measurement.prefix_shift import prefix_shift_for

    d = toy_pair_dir
    cfg = MeasureConfig(
        pair={"student": str(d / "student"), "teacher": str(d / "teacher")},
        probe={"prompts": str(d / "prompts" / "probe.jsonl"), "num_prompts": 64, "max_new_tokens": 32},
        rollout=FP8,
    )
    rep = prefix_shift_for(cfg)
    assert rep.num_sequences == 64 and 0 < rep.diverged_share < 1 and rep.k3 > 0
