"""The probe loop: the rollout engine samples, the reference re-scores the same tokens, per-sequence sums come out.

    from admitcheck.measurement.probe import ProbeRun, probe_batches
    run = ProbeRun()
    for batch in probe_batches(engine, reference, prompt_ids, probe, sampling, full=True):
        run.add(batch)                                   # per-sequence sums (k3, kl_exact, ...) and log-probs
        pooled = run.pooled(0.99)                        # metrics over every sequence so far, bootstrap-t intervals
        if decided(pooled): break                        # a caller's sequential rule (screen: admission.look)
    run.metrics(0.95)                                    # everything, quantiles and position buckets included

The one scoring rule, used by measure, screen, sensitivity, the recipe search and prefix shift (docs/CONTRACTS.md,
"probe"): batch i of `batch_size` prompts samples with seed probe.seed + seed_offset + i; the reference (the
student in trainer precision) re-scores the engine's tokens by teacher forcing under the same temperature; when the
sampling truncates (top_k > 0 or top_p < 1) the engine is asked for its full processed rows and the reference
renormalises over the engine's kept set (REFERENCE §2: the trainer must apply the same kept set) — re-deriving the
set from the reference's own logits puts a token that straddles the boundary outside it, log π = −inf, k3 = inf
for a plain BF16 engine. An engine that cannot report rows (vLLM beyond 4,096 tokens of vocabulary) falls back to
the re-derived set. Where both sides have full rows, the per-sequence sums include kl_exact, the full-row
KL(μ‖π) at each position: the same quantity as k3 (E[k3 | prefix] = KL at that prefix) with far less variance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from admitcheck.config import ProbeConfig, SamplingConfig
from admitcheck.measurement.metrics import (
    Functional,
    FunctionalValue,
    MismatchMetrics,
    PooledMetrics,
    combine,
    functional_value,
    metrics_from_per_sequence,
    mismatch_metrics,
    pareto_k,
    per_sequence_sums,
    top_share,
)

Progress = Callable[[str, int, int], None]  # (label, batches done, batches at most)
Guard = Callable[[], AbstractContextManager]  # around an engine or reference call (screen: failures -> EngineError)


def truncates(sampling: SamplingConfig) -> bool:
    """True when the sampling transform keeps a subset of the vocabulary (top-k or top-p)."""
    return sampling.top_k > 0 or sampling.top_p < 1.0


def score_rollouts(reference, rollouts, sampling: SamplingConfig, *, full: bool):
    """The reference's `scorer.Scores` for the engine's tokens: the engine's kept set replayed when it reported
    its rows and the sampling truncates; full rows back when `full` and the engine gave them."""
    from admitcheck.measurement.scorer import score

    rows = rollouts.full_logprobs
    kept = torch.isfinite(rows) if truncates(sampling) and rows is not None else None  # (B, T, V) bool
    return score(
        reference,
        rollouts.prompt_ids,
        rollouts.token_ids,
        rollouts.mask,
        sampling,
        full=full and rows is not None,
        kept=kept,
    )


@dataclass(frozen=True)
class ProbeBatch:
    """One batch of the loop: what the engine sampled, the reference's scores and the per-sequence sums."""

    index: int  # batch index (seed = probe.seed + seed_offset + index)
    rollouts: Any  # engines.Rollouts
    scores: Any  # scorer.Scores
    per_sequence: dict[str, np.ndarray]  # metrics.per_sequence_sums; kl_exact when both sides have full rows
    engine_nonfinite: int  # non-finite log-probs on the engine side, masked tokens


def probe_batches(
    engine,
    reference,
    prompt_ids: list[list[int]],
    probe: ProbeConfig,
    sampling: SamplingConfig,
    *,
    full: bool,
    seed_offset: int = 0,
    max_batches: int | None = None,
    guard: Guard | None = None,
    label: str = "",
    progress: Progress | None = None,
) -> Iterator[ProbeBatch]:
    """Sample and score the probe prompts batch by batch (module docstring); stop early by leaving the loop.

    full: also compare full rows (kl_exact). Rows are asked for whenever the sampling truncates, whatever `full`
    says, because the kept set comes from them; then kl_exact is computed too (it costs no extra forward pass).
    """
    guarded = guard or nullcontext
    bs = probe.batch_size
    total = (len(prompt_ids) + bs - 1) // bs
    total = min(total, max_batches) if max_batches is not None else total
    rows = full or truncates(sampling)
    for i in range(total):
        chunk = prompt_ids[i * bs : (i + 1) * bs]
        seed = probe.seed + seed_offset + i
        with guarded():
            r = engine.sample(chunk, sampling, seed, probe.max_new_tokens, return_full=rows)
        with guarded():
            s = score_rollouts(reference, r, sampling, full=rows)
        both = r.full_logprobs is not None and s.full_logprobs is not None
        sums = per_sequence_sums(
            r.logprobs,
            s.logprobs,
            r.mask,
            rollout_full=r.full_logprobs if both else None,
            reference_full=s.full_logprobs if both else None,
        )
        engine_bad = int((~torch.isfinite(r.logprobs) & r.mask).sum())
        if progress:
            progress(label, i + 1, total)
        yield ProbeBatch(i, r, s, sums, engine_bad)


@dataclass
class ProbeRun:
    """Everything a probe loop measured: per-sequence sums per batch and both sides' (B, T) log-probs.

    The (B, T) sides give the token quantiles and position buckets of `metrics`; the full rows are not kept
    (kl_exact comes from the per-sequence sums). Attributes rollout_lp, reference_lp, masks, token_ids are lists
    of per-batch CPU tensors (what `logs.write_measurement_logs` reads).
    """

    per_sequence: list[dict[str, np.ndarray]] = field(default_factory=list)
    rollout_lp: list[torch.Tensor] = field(default_factory=list)
    reference_lp: list[torch.Tensor] = field(default_factory=list)
    masks: list[torch.Tensor] = field(default_factory=list)
    token_ids: list[torch.Tensor] = field(default_factory=list)
    engine_nonfinite: int = 0

    def add(self, batch: ProbeBatch) -> None:
        self.per_sequence.append(batch.per_sequence)
        self.rollout_lp.append(batch.rollouts.logprobs.float().cpu())
        self.reference_lp.append(batch.scores.logprobs.float().cpu())
        self.masks.append(batch.rollouts.mask.cpu())
        self.token_ids.append(batch.rollouts.token_ids.cpu())
        self.engine_nonfinite += batch.engine_nonfinite

    @property
    def num_sequences(self) -> int:
        return sum(m.shape[0] for m in self.masks)

    @property
    def num_tokens(self) -> int:
        return int(sum(int(m.sum()) for m in self.masks))

    @property
    def nonfinite(self) -> int:
        """Non-finite log-probs on either side, masked tokens."""
        return int(sum(float(p["nonfinite"].sum()) for p in self.per_sequence))

    def sums(self) -> dict[str, np.ndarray]:
        """Every sequence's sums so far (`metrics.combine`); kl_exact only when every batch had full rows."""
        return combine(self.per_sequence)

    def pooled(self, confidence: float = 0.95) -> PooledMetrics:
        """The metrics per-sequence sums determine, with studentized-bootstrap intervals at `confidence`."""
        return metrics_from_per_sequence(self.sums(), confidence)

    def functional(self, functional: Functional, confidence: float = 0.95) -> FunctionalValue:
        """The calibration's functional over every sequence so far (`metrics.functional_value`): what a level's x
        and a screen's mismatch both are."""
        return functional_value(self.sums(), functional, confidence)

    def tail(self, key: str) -> tuple[float, float]:
        """(top share, Pareto k̂) of `key`'s per-sequence sums: the heavy-tail diagnostics of `admission`."""
        s = self.sums()[key]
        return top_share(s), pareto_k(s)

    def metrics(self, confidence: float = 0.95) -> MismatchMetrics:
        """All metrics over every sequence (quantiles and position buckets from the padded sides)."""
        T = max(m.shape[1] for m in self.masks)

        def pad(ts: list[torch.Tensor], value: float | bool = 0.0) -> torch.Tensor:
            return torch.cat([torch.nn.functional.pad(t, (0, T - t.shape[1]), value=value) for t in ts])

        sides = pad(self.rollout_lp), pad(self.reference_lp), pad(self.masks, False)
        whole = mismatch_metrics(*sides, confidence=confidence)
        pooled = self.pooled(confidence)
        if "kl_exact" not in pooled.values:
            return whole
        values = {**whole.values, "kl_exact": pooled.values["kl_exact"]}
        intervals = {**whole.intervals, "kl_exact": pooled.intervals["kl_exact"]}
        return MismatchMetrics(
            values=values,
            intervals=intervals,
            num_sequences=whole.num_sequences,
            num_tokens=whole.num_tokens,
            nonfinite=whole.nonfinite,
            confidence=confidence,
            position_buckets=whole.position_buckets,
            per_sequence=self.sums(),
        )


def probe_all(engine, reference, prompt_ids, probe: ProbeConfig, sampling: SamplingConfig, **kw) -> ProbeRun:
    """Every batch of `probe_batches` into one ProbeRun (keyword arguments as there)."""
    run = ProbeRun()
    for batch in probe_batches(engine, reference, prompt_ids, probe, sampling, **kw):
        run.add(batch)
    return run
