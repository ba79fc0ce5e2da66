"""rollout/sampling.py's Gumbel-max coupling (issue 36): a pure, batch-independent noise function that samples
exactly μ and couples nearby distributions far better than inverse-CDF with shared uniforms."""

from __future__ import annotations

import math

import pytest
import torch

from admitcheck.rollout.sampling import (
    _mul32,
    gumbel_noise,
    process_logits,
    sample_gumbel,
    sample_inverse_cdf,
)

N = 60_000  # (sequence, position) draws per frequency check


def _chi2_p(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson χ² goodness-of-fit p-value over the kept tokens (Wilson–Hilferty normal approximation)."""
    keep = probs > 0
    expected = probs[keep] * counts.sum()
    stat = float(((counts[keep] - expected) ** 2 / expected).sum())
    k = int(keep.sum()) - 1
    z = ((stat / k) ** (1 / 3) - (1 - 2 / (9 * k))) / math.sqrt(2 / (9 * k))
    return 0.5 * math.erfc(z / math.sqrt(2))


def _mu() -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    return process_logits(torch.randn(1, 40, generator=g) * 2.0, temperature=0.8, top_p=0.95, top_k=30)[0]  # (V,)


def test_mul32_is_multiplication_mod_2_32() -> None:
    a = torch.tensor([0, 1, 12345, 0xFFFFFFFF, 0x80000000, 0xDEADBEEF])
    for c in (0x85EBCA6B, 0xC2B2AE35, 3):
        assert _mul32(a, c).tolist() == [(int(x) * c) % 2**32 for x in a]


def test_gumbel_noise_is_a_pure_function_of_seed_row_position_and_token() -> None:
    rows = torch.arange(8)
    g = gumbel_noise(11, rows, 5, 16)  # (8, 16)
    assert torch.equal(g, gumbel_noise(11, rows, 5, 16))
    assert torch.equal(g[3:5], gumbel_noise(11, torch.tensor([3, 4]), 5, 16))  # whatever else is in the batch
    assert torch.equal(g[:, :10], gumbel_noise(11, rows, 5, 10))  # token v's noise does not depend on V
    for other in (gumbel_noise(12, rows, 5, 16), gumbel_noise(11, rows, 6, 16), gumbel_noise(11, rows + 8, 5, 16)):
        assert not torch.isclose(g, other).any()  # another seed, position or sequence: other noise everywhere
    assert torch.isfinite(g).all()


def test_gumbel_noise_is_standard_gumbel() -> None:
    g = gumbel_noise(0, torch.arange(4000), 0, 64).flatten()
    assert abs(float(g.mean()) - 0.5772) < 0.01  # Euler–Mascheroni
    assert abs(float(g.std()) - math.pi / math.sqrt(6)) < 0.01
    u = torch.exp(-torch.exp(-g))  # the Gumbel CDF: uniform if g is Gumbel
    hist = torch.histc(u, bins=20, min=0, max=1)
    assert _chi2_p(hist, torch.full((20,), 0.05)) > 1e-3


def test_gumbel_max_samples_exactly_the_processed_distribution() -> None:
    logp = _mu()
    probs = logp.exp()
    assert (probs == 0).sum() > 0  # top-k / top-p dropped tokens: they must never be drawn
    rows = torch.arange(N)
    tok = sample_gumbel(logp.expand(N, -1), 7, rows, 0)
    counts = torch.bincount(tok, minlength=logp.numel()).double()
    assert counts[probs == 0].sum() == 0
    assert _chi2_p(counts, probs.double()) > 1e-3
    # the check can fail: the same counts against a slightly different distribution are rejected
    shifted = torch.softmax(logp.double() + 0.15 * torch.linspace(-1, 1, logp.numel()), -1)
    assert _chi2_p(counts, shifted) < 1e-6


def test_gumbel_max_keeps_the_token_under_a_small_move_that_flips_inverse_cdf() -> None:
    """Mass δ moved from the first token to the last: the total variation is δ. Inverse-CDF shifts the CDF by δ at
    every vocabulary entry in between, so almost any uniform crosses a boundary somewhere (P(flip) ≈ Σ|F − G|);
    Gumbel-max flips with probability ≤ 2 TV / (1 + TV), within a factor 2 of a maximal coupling."""
    V, delta = 64, 0.005
    p = torch.full((V,), 1.0 / V, dtype=torch.float64)
    q = p.clone()
    q[0] -= delta
    q[-1] += delta
    lp, lq = p.log().float().expand(N, -1), q.log().float().expand(N, -1)
    rows = torch.arange(N)
    flip_gumbel = float((sample_gumbel(lp, 1, rows, 0) != sample_gumbel(lq, 1, rows, 0)).double().mean())
    u = 1.0 - torch.rand(N, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    flip_cdf = float((sample_inverse_cdf(lp, u) != sample_inverse_cdf(lq, u)).double().mean())
    tv = delta
    assert flip_gumbel <= 2 * tv / (1 + tv) + 0.005
    cdf_shift = float((p.cumsum(0) - q.cumsum(0)).abs().sum())  # Σ|F − G| ≈ (V − 1) δ
    assert flip_cdf == pytest.approx(min(cdf_shift, 1.0), rel=0.1)
    assert flip_cdf > 10 * flip_gumbel


def test_the_config_names_exactly_the_couplings_sampling_has() -> None:
    from typing import get_args

    from admitcheck.config import EvalConfig, SamplingConfig, TrainConfig
    from admitcheck.rollout.sampling import COUPLINGS

    for model, field in (
        (SamplingConfig, "coupling"),
        (TrainConfig, "sampling_coupling"),
        (EvalConfig, "sampling_coupling"),
    ):
        assert get_args(model.model_fields[field].annotation) == COUPLINGS
