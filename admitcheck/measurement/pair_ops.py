"""The SmolLM2 build's model operations (`pairs.smollm2.ModelOps`): sampling through the project's HF engine and the
exact KL between two models on the same tokens through the scorer. The pair stage sits before the rollout and
measurement stages, so the build is handed these by its caller (`pairs.build_pair`'s callers: the `pair` command).

    from admitcheck.measurement.pair_ops import MODEL_OPS
    build_smollm2_pair("smollm2", device="cuda", ops=MODEL_OPS)
"""

from __future__ import annotations

import torch

from admitcheck.config import RolloutConfig, SamplingConfig
from admitcheck.measurement.scorer import score
from admitcheck.pairs.smollm2 import ModelOps
from admitcheck.rollout.engines.hf import HFEngine


def batched_kl(model_a, model_b, prompt_ids, responses, batch_size: int) -> float:
    """Mean over response tokens of the exact KL(π_a ‖ π_b), both models teacher-forced on the same tokens."""
    sampling = SamplingConfig()
    total, count = 0.0, 0
    for s in range(0, len(prompt_ids), batch_size):
        p, r = prompt_ids[s : s + batch_size], responses[s : s + batch_size]
        T = max(len(x) for x in r)
        if T == 0:
            continue
        tok = torch.tensor([x + [0] * (T - len(x)) for x in r])
        mask = torch.tensor([[t < len(x) for t in range(T)] for x in r])
        a = score(model_a, p, tok, mask, sampling, full=True).full_logprobs  # (B, T, V)
        b = score(model_b, p, tok, mask, sampling, full=True).full_logprobs
        pa = a.exp()
        kl = torch.where(pa > 0, pa * (a - b), torch.zeros_like(pa)).sum(-1)  # (B, T)
        total, count = total + float(kl[mask].double().sum()), count + int(mask.sum())
    return total / max(count, 1)


def sample_responses(model, prompt_ids, tokens, max_new_tokens: int, seed: int, device: str, temperature: float = 1.0):
    """Responses (id lists) from the project's HF engine in float32 on `device`; greedy when temperature is 0."""
    rollout = RolloutConfig(engine="hf", dtype="float32", device=device)
    engine = HFEngine(model, rollout, eos_token_id=tokens.eos_token_id, pad_token_id=tokens.pad_token_id)
    out: list[list[int]] = []
    try:
        for s in range(0, len(prompt_ids), 64):
            chunk = prompt_ids[s : s + 64]
            if temperature == 0:  # greedy: top_k 1 keeps only the argmax
                sampling = SamplingConfig(temperature=1.0, top_k=1)
            else:
                sampling = SamplingConfig(temperature=temperature)
            out += engine.sample(chunk, sampling, seed + s, max_new_tokens).responses()
    finally:
        engine.close()
    return out


MODEL_OPS = ModelOps(sample=sample_responses, kl=batched_kl)
