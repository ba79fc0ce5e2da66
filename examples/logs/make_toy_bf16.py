"""Writes examples/logs/toy_bf16.jsonl, the logs `examples/toy_screen_logs.yaml` screens: what a pipeline rolling
out with a BF16 engine and re-scoring in float32 would log, made on the shipped toy pair (64 probe prompts, the
toy calibration's protocol: temperature 1, max_new_tokens 64).

    python examples/logs/make_toy_bf16.py          # from the repository root; a few seconds on one CPU core
"""

from pathlib import Path

import torch

from admitcheck import io
from admitcheck.config import PairConfig, ProbeConfig, RolloutConfig, SamplingConfig
from admitcheck.measurement.logs import write_measurement_logs
from admitcheck.measurement.measure import measure_engine
from admitcheck.pairs.load import load_pair_tokenizer, tokenize_prompts
from admitcheck.rollout.engines import build_engine

ROOT = Path(__file__).resolve().parents[2]

if __name__ == "__main__":
    torch.set_num_threads(1)  # the numbers of the shipped file
    pair = PairConfig(student=str(ROOT / "toy/student"), teacher=str(ROOT / "toy/teacher"))
    tokens = load_pair_tokenizer(pair)
    probe = ProbeConfig(prompts=str(ROOT / "toy/prompts/probe.jsonl"), num_prompts=64, max_new_tokens=64)
    ids = tokenize_prompts(tokens, io.read_prompts(probe.prompts, limit=probe.num_prompts))
    reference = io.load_causal_lm(pair.student, "float32", "cpu")
    ids_kw = {"eos_token_id": tokens.eos_token_id, "pad_token_id": tokens.pad_token_id}
    engine = build_engine(RolloutConfig(engine="hf", dtype="bfloat16"), pair.student, **ids_kw)
    run = measure_engine(engine, reference, ids, probe, SamplingConfig(), full=False)
    print(write_measurement_logs(ROOT / "examples/logs/toy_bf16.jsonl", run), "sequences written")
