"""calibration/quality_error.py: a quality's standard errors against Monte-Carlo spreads of simulated evaluations."""

from __future__ import annotations

import random
import statistics

import pytest

from admitcheck.calibration.quality_error import paired_difference_error, token_mean_error

PROMPTS, SAMPLES = 40, 6


def _evaluation(rng: random.Random, prompt_means: list[float], shift: float = 0.0):
    """Per-response (KL sums, token counts): prompt i's responses have mean KL/token prompt_means[i] + shift."""
    kl, tokens = [], []
    for mean in prompt_means:
        for _ in range(SAMPLES):
            n = rng.randint(4, 12)
            kl.append(sum(max(rng.gauss(mean + shift, 0.3), 0.0) for _ in range(n)))
            tokens.append(n)
    return kl, tokens


def test_value_is_the_token_mean_and_bad_groups_are_refused() -> None:
    err = token_mean_error([1.0, 3.0, 2.0, 2.0], [1, 3, 2, 2], samples=2)
    assert err.value == pytest.approx(1.0)
    with pytest.raises(ValueError, match="whole groups"):
        token_mean_error([1.0, 3.0, 2.0], [1, 3, 2], samples=2)
    with pytest.raises(ValueError, match="same responses"):
        paired_difference_error([1.0, 2.0], [1, 1], [1.0], [1], samples=1)


def test_draws_error_predicts_the_spread_over_eval_seeds_on_fixed_prompts() -> None:
    rng = random.Random(0)
    means = [rng.uniform(0.2, 1.5) for _ in range(PROMPTS)]  # a fixed prompt set with very different prompts
    runs = [token_mean_error(*_evaluation(rng, means), samples=SAMPLES) for _ in range(400)]
    spread = statistics.stdev(r.value for r in runs)
    draws = statistics.fmean(r.draws for r in runs)
    assert draws == pytest.approx(spread, rel=0.12)
    # the prompt-clustered error also counts the prompts' spread, which a fixed prompt set never redraws
    assert statistics.fmean(r.prompts for r in runs) > 2.5 * spread


def test_prompt_error_predicts_the_spread_over_prompt_sets() -> None:
    rng = random.Random(1)
    runs = []
    for _ in range(400):
        means = [rng.uniform(0.2, 1.5) for _ in range(PROMPTS)]  # new prompts every time
        runs.append(token_mean_error(*_evaluation(rng, means), samples=SAMPLES))
    spread = statistics.stdev(r.value for r in runs)
    assert statistics.fmean(r.prompts for r in runs) == pytest.approx(spread, rel=0.12)


def test_paired_difference_cancels_what_both_evaluations_share() -> None:
    rng = random.Random(2)
    means = [rng.uniform(0.2, 1.5) for _ in range(PROMPTS)]
    a = _evaluation(rng, means)
    same = paired_difference_error(*a, *a, samples=SAMPLES)
    assert same.value == 0.0 and same.draws == 0.0 and same.prompts == 0.0
    b = _evaluation(rng, means, shift=0.05)
    diff = paired_difference_error(*b, *a, samples=SAMPLES)
    assert diff.value == pytest.approx(
        token_mean_error(*b, samples=SAMPLES).value - token_mean_error(*a, samples=SAMPLES).value
    )
    assert 0 < diff.draws < 2 * token_mean_error(*a, samples=SAMPLES).draws
