"""The toy pair's probe set as the engine benches use it (bench/vllm_engine.py, bench/fp8kv_engines.py).

setup = toy_probe_setup("toy", prompts=256, batch_size=64, max_new_tokens=64)
setup.student, setup.prompts, setup.probe, setup.sampling, setup.reference, setup.vllm_options
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ToyProbeSetup:
    student: str  # the toy student's HF dir (the engines' weights)
    prompts: list[list[int]]  # encoded probe prompts
    probe: Any  # ProbeConfig over those prompts
    sampling: Any  # SamplingConfig: temperature 1, full support
    reference: Any  # the FP32 student, the reference every row is scored against
    vllm_options: Any  # VLLMOptions with a 256 MiB KV cache (the toy needs little)


def toy_probe_setup(toy_dir: str, *, prompts: int, batch_size: int, max_new_tokens: int) -> ToyProbeSetup:
    """Build (or reuse) the toy pair in `toy_dir` and take the first `prompts` probe prompts."""
    from admitcheck.config import ProbeConfig, SamplingConfig, VLLMOptions
    from admitcheck.io import load_causal_lm
    from admitcheck.pairs.toy import build_toy_pair, encode_prompt

    summary = build_toy_pair(toy_dir)
    lines = Path(summary.probe_prompts).read_text().splitlines()[:prompts]
    encoded = [encode_prompt(json.loads(line)["prompt"]) for line in lines]
    probe = ProbeConfig(
        prompts=summary.probe_prompts, num_prompts=len(encoded), batch_size=batch_size, max_new_tokens=max_new_tokens
    )
    return ToyProbeSetup(
        student=summary.student_dir,
        prompts=encoded,
        probe=probe,
        sampling=SamplingConfig(temperature=1.0),
        reference=load_causal_lm(summary.student_dir, "float32"),
        vllm_options=VLLMOptions(kv_cache_memory_bytes=256 << 20),
    )
