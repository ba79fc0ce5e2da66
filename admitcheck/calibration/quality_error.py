"""The standard error of a held-out quality: of its eval draws, and of its prompt set (pure; issue 36).

    err = token_mean_error(kl_by_response, tokens_by_response, samples=8)    # QualityError(value, draws, prompts)
    diff = paired_difference_error(kl_run, tokens_run, kl_base, tokens_base, samples=8)

A quality is a token mean over every sampled response, q = Σ k / Σ n (k: a response's summed per-token reverse KL,
n: its tokens), over `samples` responses to each of m fixed prompts (consecutive rows). Its error is the ratio
estimator's (delta method, residuals r = (k − q n) / Σ n), in two senses:
- `draws`: the same weights scored with other eval draws on the same prompts — the within-prompt variance,
  SE² = Σ_prompts s/(s−1) Σ_j (r_ij − r̄_i)². This is the noise a calibration's runs carry (they share the prompts);
  bench/noise.py checks it against the spread over K eval seeds.
- `prompts`: clustered by prompt, SE² = m/(m−1) Σ_i (Σ_j r_ij)² — other prompts from the same population too
  (Miller, arXiv 2411.00640).
For two runs scored with the same eval seed on the same prompts (paired per prompt and per sample: Jordan, arXiv
2304.01910), the difference's errors use the residual differences, so what the two evaluations share cancels.
The training trajectory's spread (other training seeds) comes on top of both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class QualityError:
    """A token-mean quality (or a difference of two) and its standard errors, nats/token (nan: one sample/prompt)."""

    value: float
    draws: float  # other eval draws, the same prompts (within-prompt)
    prompts: float  # other prompts too (clustered by prompt)


def _residuals(kl: Sequence[float], tokens: Sequence[float]) -> tuple[float, list[float]]:
    total = float(sum(tokens))
    if total <= 0 or len(kl) != len(tokens):
        raise ValueError("need one KL sum and one token count per response, and some tokens")
    q = math.fsum(kl) / total
    return q, [(k - q * n) / total for k, n in zip(kl, tokens)]


def _errors(res: Sequence[float], samples: int) -> tuple[float, float]:
    """(within-prompt SE, prompt-clustered SE) of a sum of residuals grouped `samples` to a prompt."""
    if samples <= 0 or len(res) % samples:
        raise ValueError(f"{len(res)} responses are not whole groups of {samples} samples per prompt")
    groups = [res[i : i + samples] for i in range(0, len(res), samples)]
    m = len(groups)
    within = float("nan")
    if samples > 1:
        within = math.sqrt(sum(samples / (samples - 1) * sum((r - sum(g) / samples) ** 2 for r in g) for g in groups))
    clustered = math.sqrt(m / (m - 1) * sum(sum(g) ** 2 for g in groups)) if m > 1 else float("nan")
    return within, clustered


def token_mean_error(kl: Sequence[float], tokens: Sequence[float], samples: int) -> QualityError:
    """The token mean Σk/Σn of responses grouped `samples` to a prompt, and its standard errors."""
    q, res = _residuals(kl, tokens)
    return QualityError(q, *_errors(res, samples))


def paired_difference_error(
    kl_a: Sequence[float], tokens_a: Sequence[float], kl_b: Sequence[float], tokens_b: Sequence[float], samples: int
) -> QualityError:
    """q_a − q_b for two evaluations of the same prompts and eval seed (response i of one paired with response i of
    the other), and its standard errors."""
    if len(kl_a) != len(kl_b):
        raise ValueError("a paired difference needs the same responses (prompts × samples) in both evaluations")
    qa, ra = _residuals(kl_a, tokens_a)
    qb, rb = _residuals(kl_b, tokens_b)
    return QualityError(qa - qb, *_errors([x - y for x, y in zip(ra, rb)], samples))
