"""Prefix-shift diagnostic (REFERENCE §3.7): what per-token corrections (TIS) can and cannot undo.

    from admitcheck.rollout.engines.hf import HFEngine
    ref = HFEngine(student, RolloutConfig(dtype="float32"), eos_token_id=2, pad_token_id=0)
    noisy = RolloutConfig(dtype="float32", noise={"relative_std": 0.1})
    cand = HFEngine(student, noisy, eos_token_id=2, pad_token_id=0)
    rep = prefix_shift(ref, cand, teacher, prompt_ids, SamplingConfig(), seed=0, max_new_tokens=32)
    rep.diverged_share, rep.share_after_divergence, rep.prefix_gap, rep.prefix_gap_tis
    rep.to_dict()                                                   # JSON-ready (`prefix_shift_report`)

Coupled sampling: both engines draw token t of sequence b with the same uniform (`sampling.draw_uniforms`, inverse
CDF), so their responses are identical until the mismatch moves a CDF boundary across a uniform. Reported:
- first divergence position d (0 = first response token; sequences that never diverge are counted apart);
- share of candidate tokens generated after divergence (positions t > d: their prefix differs from the reference's);
- sequence-level log-ratio Σ_t ℓ_t, ℓ_t = log π(y_t|h_t) − log μ(y_t|h_t) on the candidate's tokens, π = the
  reference engine's model re-scoring by teacher forcing;
- the prefix gap: the teacher's per-token log-likelihood of the candidate's responses minus that of the reference's
  (nats/token; < 0: the candidate wandered into prefixes the teacher likes less), raw and reweighted per token by
  TIS weights min(r_t, C), r_t = exp(ℓ_t). A per-token weight corrects which token is drawn *at a prefix the
  candidate already reached*; it cannot move the prefix distribution back, so `prefix_gap_tis` stays near
  `prefix_gap`. The sequence-level weight exp(Σℓ) (self-normalised) does correct prefixes in expectation, at the
  cost its effective sample size shows (`seq_is_ess`).
Intervals: paired bootstrap over prompts (the sequences are the independent units).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch

from admitcheck.config import ProbeConfig, SamplingConfig
from admitcheck.measurement.prefix_shift_report import DivergenceQuantiles, PrefixShiftReport


@dataclass(frozen=True)
class _SequenceSums:
    """Per-sequence sums of one batch (or of all, concatenated), each (num_sequences,): the terms of the report."""

    n: np.ndarray  # candidate response tokens
    after: np.ndarray  # of them after the first divergence
    ell: np.ndarray  # Σ_t ℓ_t, the sequence log-ratio
    k3: np.ndarray
    tok_ref: np.ndarray  # teacher log-lik of the reference engine's tokens
    n_ref: np.ndarray  # the reference engine's response tokens
    tok: np.ndarray  # teacher log-lik of the candidate's tokens
    tok_w: np.ndarray  # ... weighted by the TIS weights
    w: np.ndarray  # TIS weights
    pre_ref: np.ndarray  # teacher log-lik per token of the reference engine's prefixes
    n_pre_ref: np.ndarray  # its valid prefixes (t ≥ 1)
    pre: np.ndarray  # ... of the candidate's prefixes
    n_pre: np.ndarray
    pre_w: np.ndarray  # ... weighted by the TIS weights
    w_pre: np.ndarray  # TIS weights of the valid prefixes

    @classmethod
    def of(cls, **sums: torch.Tensor) -> _SequenceSums:
        return cls(**{k: v.double().numpy() for k, v in sums.items()})

    @classmethod
    def concatenate(cls, parts: list[_SequenceSums]) -> _SequenceSums:
        return cls(**{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(cls)})

    def take(self, idx: np.ndarray) -> _SequenceSums:
        return _SequenceSums(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})


def _first_divergence(
    ref_tok: torch.Tensor, ref_mask: torch.Tensor, tok: torch.Tensor, mask: torch.Tensor
) -> np.ndarray:
    """(B,) first position where the two responses differ (a token, or one ended and the other not); -1 if never."""
    T = max(ref_tok.shape[1], tok.shape[1])

    def pad(x: torch.Tensor, value) -> torch.Tensor:
        return torch.nn.functional.pad(x, (0, T - x.shape[1]), value=value)

    a, am, b, bm = pad(ref_tok, -1), pad(ref_mask, False), pad(tok, -1), pad(mask, False)
    differs = (am != bm) | (am & bm & (a != b))  # (B, T)
    first = torch.where(differs.any(dim=1), differs.float().argmax(dim=1), torch.full((a.shape[0],), -1))
    return first.numpy()


def _bootstrap(stat, n: int, draws: int, seed: int) -> tuple[float, float]:
    """95% percentile interval of stat(idx) over `draws` resamples of n units."""
    rng = np.random.default_rng(seed)
    vals = np.array([stat(rng.integers(0, n, n)) for _ in range(draws)])
    vals = vals[np.isfinite(vals)]
    return (float(np.quantile(vals, 0.025)), float(np.quantile(vals, 0.975))) if vals.size else (np.nan, np.nan)


def prefix_shift(
    reference_engine,
    candidate_engine,
    teacher_model: torch.nn.Module,
    prompt_ids: list[list[int]],
    sampling: SamplingConfig,
    seed: int,
    max_new_tokens: int,
    *,
    reference_model: torch.nn.Module | None = None,
    batch_size: int = 32,
    tis_cap: float = 2.0,
    bootstrap: int = 200,
) -> PrefixShiftReport:
    """Coupled sampling of both engines on `prompt_ids` (batch i with seed + i); see the module docstring.

    `reference_model` re-scores the candidate's tokens (π); default: `reference_engine.model` (an HFEngine's copy).
    The teacher scores both engines' responses at temperature 1 with no truncation (its plain likelihood).
    """
    from admitcheck.measurement.probe import probe_batches
    from admitcheck.measurement.scorer import score

    pi_model = reference_model if reference_model is not None else reference_engine.model
    plain = SamplingConfig()
    first: list[np.ndarray] = []
    sums: list[_SequenceSums] = []  # one per batch

    # The candidate side is the one probe loop (its kept set replayed by π); the reference engine draws the same
    # batches with the same seeds beside it (coupled sampling).
    probe = ProbeConfig(
        prompts="-", num_prompts=len(prompt_ids), batch_size=batch_size, max_new_tokens=max_new_tokens, seed=seed
    )
    for batch in probe_batches(candidate_engine, pi_model, prompt_ids, probe, sampling, full=False):
        i, cand = batch.index, batch.rollouts
        chunk = prompt_ids[i * batch_size : (i + 1) * batch_size]
        ref = reference_engine.sample(chunk, sampling, seed + i, max_new_tokens)
        d = _first_divergence(ref.token_ids, ref.mask, cand.token_ids, cand.mask)  # (B,)
        m = cand.mask  # (B, T)
        pi = batch.scores.logprobs  # (B, T)
        ell = (pi - cand.logprobs.float()).masked_fill(~m, 0.0)  # (B, T) log r
        r = ell.exp()
        w = r.clamp(max=tis_cap).masked_fill(~m, 0.0)  # (B, T) TIS weights
        t_cand = score(teacher_model, cand.prompt_ids, cand.token_ids, m, plain).logprobs  # (B, T), 0 off mask
        t_ref = score(teacher_model, ref.prompt_ids, ref.token_ids, ref.mask, plain).logprobs
        f_cand, v_cand = _prefix_ll(t_cand, m)  # (B, T) teacher log-lik per token of h_t, valid where t >= 1
        f_ref, v_ref = _prefix_ll(t_ref, ref.mask)
        pos = torch.arange(m.shape[1]).unsqueeze(0)  # (1, T)
        dd = torch.from_numpy(d).unsqueeze(1)  # (B, 1)
        first.append(d)
        sums.append(
            _SequenceSums.of(
                n=m.sum(1),
                after=(m & (dd >= 0) & (pos > dd)).sum(1),
                ell=ell.sum(1),
                k3=(r - 1 - ell).masked_fill(~m, 0.0).sum(1),
                tok_ref=t_ref.sum(1),
                n_ref=ref.mask.sum(1),
                tok=t_cand.sum(1),
                tok_w=(t_cand * w).sum(1),
                w=w.sum(1),
                pre_ref=f_ref.sum(1),
                n_pre_ref=v_ref.sum(1),
                pre=f_cand.sum(1),
                n_pre=v_cand.sum(1),
                pre_w=(f_cand * w).sum(1),
                w_pre=(w * v_cand).sum(1),
            )
        )
    d = np.concatenate(first)
    S = _SequenceSums.concatenate(sums)  # each (num_sequences,)

    def gaps(idx: np.ndarray) -> dict[str, float]:
        s = S.take(idx)
        sw = np.exp(s.ell - s.ell.max())  # sequence IS weights, stabilised
        with np.errstate(all="ignore"):
            base_tok, base_pre = s.tok_ref.sum() / s.n_ref.sum(), s.pre_ref.sum() / s.n_pre_ref.sum()
            return {
                "token_gap": s.tok.sum() / s.n.sum() - base_tok,
                "token_gap_tis": s.tok_w.sum() / s.w.sum() - base_tok,
                "prefix_gap": s.pre.sum() / s.n_pre.sum() - base_pre,
                "prefix_gap_tis": s.pre_w.sum() / s.w_pre.sum() - base_pre,
                "prefix_gap_seq_is": (sw * s.pre).sum() / (sw * s.n_pre).sum() - base_pre,
            }

    point = gaps(np.arange(d.size))
    intervals = {k: _bootstrap(lambda idx, k=k: gaps(idx)[k], d.size, bootstrap, seed) for k in point}
    sw = np.exp(S.ell - S.ell.max())
    div = d[d >= 0]
    q = np.quantile(div, [0.1, 0.5, 0.9]) if div.size else [np.nan] * 3
    n = S.n.sum()
    return PrefixShiftReport(
        num_sequences=int(d.size),
        num_tokens=int(n),
        diverged_share=float((d >= 0).mean()),
        divergence_positions=div.astype(int).tolist(),
        divergence_quantiles=DivergenceQuantiles(p10=float(q[0]), p50=float(q[1]), p90=float(q[2])),
        share_after_divergence=float(S.after.sum() / n),
        seq_log_ratio_mean=float(S.ell.mean()),
        seq_log_ratio_std=float(S.ell.std()),
        k3=float(S.k3.sum() / n),
        tis_cap=tis_cap,
        teacher_ll_reference=float(S.tok_ref.sum() / S.n_ref.sum()),
        teacher_ll_candidate=float(S.tok.sum() / n),
        **{k: float(v) for k, v in point.items()},
        intervals=intervals,
        seq_is_ess=float(sw.sum() ** 2 / (sw.size * (sw**2).sum())),
    )


def _prefix_ll(teacher_lp: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) teacher log-probs (0 off mask) -> (f, valid): f_t = mean_{s<t} teacher_lp_s, the teacher's per-token
    log-likelihood of the prefix h_t, a function of h_t alone; valid = mask & t >= 1 (h_0 is the prompt: no gap)."""
    T = mask.shape[1]
    prefix_sum = teacher_lp.cumsum(1) - teacher_lp  # (B, T) Σ_{s<t}
    t = torch.arange(T).clamp(min=1).unsqueeze(0)  # (1, T)
    valid = mask & (torch.arange(T).unsqueeze(0) >= 1)
    return (prefix_sum / t).masked_fill(~valid, 0.0), valid


@dataclass(frozen=True)
class PrefixShiftInputs:
    """What every candidate's prefix shift of one config shares, loaded once: the tokenizer facts, the probe prompts'
    ids, and the student and teacher in float32 on CPU (each engine makes its own copy of the student)."""

    tokens: Any
    prompt_ids: list[list[int]]
    student: torch.nn.Module
    teacher: torch.nn.Module


def load_prefix_shift_inputs(
    config, *, config_file: str | None = None, pair=None, prompt_ids: list[list[int]] | None = None
) -> PrefixShiftInputs:
    """The pair and probe prompts of a measure or screen config, for `prefix_shift_for` (one load per config); the
    command's `LoadedPair` when given (its tokenizer and float32 CPU models, shared with the rest of the command),
    and its probe prompts' ids when given (a screen's `ScreenInputs.prompt_ids`: not read again)."""
    from admitcheck import io
    from admitcheck.pairs.load import LoadedPair, tokenize_prompts

    pair = pair if pair is not None else LoadedPair(config.pair, file=config_file)
    if prompt_ids is None:
        prompts = io.read_prompts(config.probe.prompts, limit=config.probe.num_prompts)
        prompt_ids = tokenize_prompts(pair.tokens, prompts, file=config.probe.prompts)
    return PrefixShiftInputs(pair.tokens, prompt_ids, pair.student("float32", "cpu"), pair.teacher("float32", "cpu"))


def prefix_shift_for(
    config,
    rollout=None,
    *,
    config_file: str | None = None,
    tis_cap: float = 2.0,
    inputs: PrefixShiftInputs | None = None,
) -> PrefixShiftReport:
    """The diagnostic for a measure or screen config (`diagnostics: [prefix_shift]`): the reference engine is the
    HF engine in the reference's dtype with no recipe; the candidate is `rollout` (default `config.rollout`).
    Uses probe.num_prompts prompts, probe.batch_size, probe.seed and probe.max_new_tokens. Pass `inputs`
    (`load_prefix_shift_inputs`) to screen many candidates without reloading the pair."""
    from admitcheck.rollout.engines.hf import HFEngine
    from admitcheck.rollout.floor import floor_rollout

    rollout = rollout or config.rollout
    inputs = inputs or load_prefix_shift_inputs(config, config_file=config_file)
    tokens, prompt_ids, student, teacher = inputs.tokens, inputs.prompt_ids, inputs.student, inputs.teacher
    ids = {"eos_token_id": tokens.eos_token_id, "pad_token_id": tokens.pad_token_id}
    ref_rollout = floor_rollout(rollout, config.reference).model_copy(update={"engine": "hf"})
    ref = HFEngine(student, ref_rollout, **ids)
    cand = HFEngine(student, rollout, **ids) if rollout.engine == "hf" else None
    if cand is None:
        from admitcheck.rollout.engines import build_engine

        cand = build_engine(rollout, config.pair.student, **ids)  # vLLM: coupled only if it samples the same way
    try:
        p = config.probe
        return prefix_shift(
            ref,
            cand,
            teacher,
            prompt_ids,
            config.sampling,
            p.seed,
            p.max_new_tokens,
            batch_size=p.batch_size,
            tis_cap=tis_cap,
        )
    finally:
        ref.close()
        cand.close()
