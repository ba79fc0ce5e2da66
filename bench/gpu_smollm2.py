"""GPU figures for the SmolLM2 pair: decode speed of the HF engine vs `transformers.generate()`, and one OPD step's
time by phase (rollout, teacher scoring, trainer forward+backward, engine sync), on CUDA.

    python bench/gpu_smollm2.py --pair smollm2 --out bench_smollm2.json    # after `admitcheck pair smollm2 smollm2`

Decode: the teacher (30 layers) in BF16, batch 64 chat prompts, 128 new tokens at temperature 1; each side is
warmed up once, then timed over `--repeats` calls (torch.cuda.synchronize around each). ms per step = wall time /
decode steps (the longest response); tokens/s counts response tokens actually produced (EOS included).
OPD: the 24-layer student in float32 as trainer, a BF16 engine, the float32 teacher, batch 64 x 64 tokens, PG loss;
the median of steps 2..N (step 1 carries warm-up).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from admitcheck import io
from admitcheck.calibration.opd import train
from admitcheck.config import PairConfig, RolloutConfig, SamplingConfig, TrainConfig
from admitcheck.pairs.load import load_pair_tokenizer, tokenize_prompts
from admitcheck.rollout.engines.hf import HFEngine


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def bench_decode(pair: Path, batch: int, new_tokens: int, repeats: int, device: str) -> dict:
    tokens = load_pair_tokenizer(PairConfig(student=str(pair / "teacher"), teacher=str(pair / "teacher")))
    rows = io.read_prompts(pair / "prompts" / "probe.jsonl", batch)
    ids = tokenize_prompts(tokens, rows)
    model = io.load_causal_lm(pair / "teacher", "float32", "cpu")
    sampling = SamplingConfig(temperature=1.0)
    engine = HFEngine(model, RolloutConfig(engine="hf", dtype="bfloat16", device=device),
                      eos_token_id=tokens.eos_token_id, pad_token_id=tokens.pad_token_id)  # fmt: skip
    out: dict = {"batch": batch, "max_new_tokens": new_tokens, "repeats": repeats}
    t0 = time.perf_counter()
    engine.sample(ids, sampling, 0, new_tokens)
    _sync()
    out["engine_first_call_s"] = time.perf_counter() - t0
    times, steps, toks = [], [], []
    for r in range(repeats):
        _sync()
        t0 = time.perf_counter()
        ro = engine.sample(ids, sampling, r + 1, new_tokens)
        _sync()
        times.append(time.perf_counter() - t0)
        steps.append(ro.token_ids.shape[1])
        toks.append(ro.num_tokens)
    engine.close()
    out["engine"] = {"s_per_call": statistics.median(times), "ms_per_step": 1e3 * sum(times) / sum(steps),
                     "tokens_per_s": sum(toks) / sum(times), "steps": steps, "tokens": toks}  # fmt: skip
    # transformers.generate on the same BF16 model, prompts left-padded, same cap, T=1, no top-k
    tok = tokens.tokenizer
    tok.padding_side = "left"
    gm = model.to(device=device, dtype=torch.bfloat16).eval()
    enc = tok([r["prompt"] for r in rows], return_tensors="pt", padding=True).to(device)
    kw = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": new_tokens,
          "pad_token_id": tokens.pad_token_id, "eos_token_id": tokens.eos_token_id}  # fmt: skip
    with torch.inference_mode():
        t0 = time.perf_counter()
        gm.generate(**enc, **kw)
        _sync()
        out["generate_first_call_s"] = time.perf_counter() - t0
        times, steps, toks = [], [], []
        for r in range(repeats):
            torch.manual_seed(r)
            _sync()
            t0 = time.perf_counter()
            g = gm.generate(**enc, **kw)
            _sync()
            times.append(time.perf_counter() - t0)
            resp = g[:, enc["input_ids"].shape[1] :]
            steps.append(resp.shape[1])
            eos_at = (resp == tokens.eos_token_id).int()
            done_before = (eos_at.cumsum(1) - eos_at) > 0  # tokens after the first EOS are padding
            toks.append(int((~done_before).sum()))
    out["generate"] = {"s_per_call": statistics.median(times), "ms_per_step": 1e3 * sum(times) / sum(steps),
                       "tokens_per_s": sum(toks) / sum(times), "steps": steps, "tokens": toks}  # fmt: skip
    out["engine_speedup_vs_generate"] = out["generate"]["ms_per_step"] / out["engine"]["ms_per_step"]
    del gm, model
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return out


def bench_opd(pair: Path, steps: int, batch: int, new_tokens: int, device: str) -> dict:
    cfg_pair = PairConfig(student=str(pair / "student"), teacher=str(pair / "teacher"))
    tokens = load_pair_tokenizer(cfg_pair)
    ids = tokenize_prompts(tokens, io.read_prompts(pair / "prompts" / "train.jsonl"))
    student = io.load_causal_lm(pair / "student", "float32", device)
    teacher = io.load_causal_lm(pair / "teacher", "float32", device)
    engine = HFEngine(student, RolloutConfig(engine="hf", dtype="bfloat16", device=device),
                      eos_token_id=tokens.eos_token_id, pad_token_id=tokens.pad_token_id)  # fmt: skip
    cfg = TrainConfig(prompts="train.jsonl", steps=steps, batch_size=batch, max_new_tokens=new_tokens, lr=1e-5)
    t0 = time.perf_counter()
    result = train(student, teacher, engine, ids, cfg, seed=0)
    _sync()
    wall = time.perf_counter() - t0
    engine.close()
    logs = result.steps[1:] or result.steps
    phases = ("seconds_rollout", "seconds_teacher", "seconds_backward", "seconds_sync")
    med = {p: statistics.median(getattr(s, p) for s in logs) for p in phases}
    return {
        "steps": steps, "batch": batch, "max_new_tokens": new_tokens, "wall_s": wall,
        "median_step_s": sum(med.values()), **{f"median_{p}": v for p, v in med.items()},
        "tokens_per_step": statistics.median(s.tokens for s in logs),
        "loss": [s.loss for s in result.steps], "in_run_k3": [s.k3 for s in result.steps],
        "peak_gpu_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None,
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pair", type=Path, default=Path("smollm2"))
    ap.add_argument("--out", type=Path, default=Path("bench_smollm2.json"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--opd-steps", type=int, default=5)
    args = ap.parse_args()
    res = {"device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu", "torch": torch.__version__}
    import transformers

    res["transformers"] = transformers.__version__
    res["decode"] = bench_decode(args.pair, args.batch, args.new_tokens, args.repeats, args.device)
    print(json.dumps(res["decode"], indent=2), flush=True)
    res["opd"] = bench_opd(args.pair, args.opd_steps, args.batch, 64, args.device)
    print(json.dumps(res["opd"], indent=2), flush=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
