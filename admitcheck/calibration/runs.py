"""The records of one training run (OPD or GRPO): per-step logs, quality evaluations, and the seed derivation.

result: OPDResult = opd.train(...)     # .steps (StepLog), .evals (Quality), .initial, .final, .seconds()
seed = derive_seed(base_seed, "batch", step)
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

StepHook = Callable[[int, torch.nn.Module], None]  # (optimizer steps done, student) after each step's sync


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from any parts, stable across processes and platforms (never Python's salted hash)."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


@dataclass(frozen=True)
class Quality:
    """Held-out quality of the student at one step (samples drawn in reference precision, no perturbation)."""

    step: int
    reverse_kl: float  # nats/token: mean over response tokens of KL(π_S(·|h_t) ‖ π_T(·|h_t)), exact over the vocab
    accuracy: float | None  # exact-match fraction of the sampled responses vs the prompts' "answer"; None without
    num_tokens: int  # response tokens the mean is over


@dataclass(frozen=True)
class StepLog:
    """One optimizer step: loss, in-run engine-vs-trainer mismatch on that batch (nats/token), timings (s)."""

    step: int
    loss: float
    grad_norm: float  # global norm before clipping
    k3: float  # mean(r − 1 − ℓ), ℓ = log π_θ − log μ on the batch's sampled tokens
    k1: float  # mean(log μ − log π_θ)
    abs_diff: float  # mean |ℓ|
    tokens: int  # response tokens in the batch
    seconds_rollout: float  # train.rollouts async: the wait for the batch sampled in the background
    seconds_teacher: float
    seconds_backward: float  # trainer forward + backward + optimizer step
    seconds_sync: float  # engine re-sync and perturbation re-applied (async: the snapshot handed to the engine)


@dataclass(frozen=True)
class OPDResult:
    """A finished run: every step's log and every quality evaluation (the first at step 0, the last at the end)."""

    steps: list[StepLog]
    evals: list[Quality]

    @property
    def initial(self) -> Quality:
        return self.evals[0]

    @property
    def final(self) -> Quality:
        return self.evals[-1]

    def seconds(self) -> dict[str, float]:
        """Total seconds per phase over all steps."""
        keys = ("seconds_rollout", "seconds_teacher", "seconds_backward", "seconds_sync")
        return {k.removeprefix("seconds_"): sum(getattr(s, k) for s in self.steps) for k in keys}

    def to_dict(self) -> dict:
        return {"steps": [asdict(s) for s in self.steps], "evals": [asdict(q) for q in self.evals]}
