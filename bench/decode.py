"""Decode speed: the HF engine's own loop vs transformers `generate()`, and vs the model's bare forward passes.

    python bench/decode.py                          # tiny Llama student, CPU, batch 64 x 128 new tokens
    python bench/decode.py --pair toy --device cuda # toy/student on a GPU

Three timings of the same work (B prompts, N new tokens, no EOS stop, sampling at temperature 1, top_k 0, top_p 1):
  engine    HFEngine.sample
  generate  model.generate(do_sample=True, top_k=0, top_p=1.0, temperature=1.0), eos disabled
  floor     the model's own forwards for the same steps: prefill + (N - 1) single-token forwards over a DynamicCache
  floor*    the same forwards over the engine's preallocated cache (engine / floor* = the sampling loop's own cost)
Targets: generate / engine >= 10x (throughput ratio); engine / floor <= 1.5x (the loop's own overhead). Each
timing is the best of --repeats round-robin rounds after one warm-up. Prints a table, then one JSON line. On CPU the
default is one torch thread: for a model this small a second OpenMP thread only adds barriers, and on shared busy
cores it made every forward 20-40x slower.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admitcheck.config import RolloutConfig, SamplingConfig
from admitcheck.rollout.engines.hf import HFEngine
from admitcheck.rollout.layout import left_pad, position_ids


def tiny_student(vocab: int = 32, seed: int = 0) -> torch.nn.Module:
    """A student-sized Llama: 2 layers x hidden 64, 2 heads (head_dim 32)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    return LlamaForCausalLM(cfg).eval()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fns: dict[str, object], device: torch.device, repeats: int) -> dict[str, float]:
    """Best seconds of each `fn()` over `repeats` rounds, after one warm-up each. The methods run round-robin, so a
    burst of load from other processes hits them alike; the minimum is the least-disturbed run."""
    for fn in fns.values():
        fn()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, fn in fns.items():
            sync(device)
            t0 = time.perf_counter()
            fn()
            sync(device)
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", type=Path, default=None, help="toy pair dir; benchmarks DIR/student")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--batch", type=int, default=64, help="sequences per call")
    ap.add_argument("--new-tokens", type=int, default=128, help="tokens generated per sequence")
    ap.add_argument("--repeats", type=int, default=5, help="timed rounds (best reported)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: leave torch's default)")
    ap.add_argument("--skip-generate", action="store_true", help="time only the engine and the floor")
    args = ap.parse_args()
    if args.threads and not args.device.startswith("cuda"):
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)

    if args.pair is not None:
        from admitcheck.io import load_causal_lm

        model = load_causal_lm(args.pair / "student", "float32", "cpu")
        name = str(args.pair / "student")
    else:
        model = tiny_student()
        name = "tiny-llama-2x64"
    vocab = model.get_output_embeddings().weight.shape[0]
    no_eos = vocab  # an id outside the vocabulary is never sampled: every sequence runs to the length cap
    rollout = RolloutConfig(dtype=args.dtype, device=args.device)
    engine = HFEngine(model, rollout, eos_token_id=no_eos, pad_token_id=0)
    net = engine.model  # the same weights, dtype and device for all three timings
    B, N = args.batch, args.new_tokens
    gen = torch.Generator().manual_seed(0)
    prompts = [
        torch.randint(1, vocab, (int(n),), generator=gen).tolist() for n in torch.randint(4, 13, (B,), generator=gen)
    ]
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, top_k=0)
    ids, attn = left_pad(prompts, 0, device)  # (B, P)
    P = ids.shape[1]

    def run_engine() -> None:
        r = engine.sample(prompts, sampling, seed=0, max_new_tokens=N)
        assert r.num_tokens == B * N

    @torch.inference_mode()
    def run_floor(engine_cache: bool = False) -> None:
        from transformers import DynamicCache

        cache = engine._new_cache(P + N) if engine_cache else DynamicCache(config=net.config)
        full_attn = torch.ones(B, P + N, dtype=torch.long, device=device)
        full_attn[:, :P] = attn
        next_pos = attn.sum(dim=1, keepdim=True)
        net(
            input_ids=ids,
            attention_mask=attn,
            position_ids=position_ids(attn),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        tok = ids[:, -1:]
        for t in range(N - 1):
            net(
                input_ids=tok,
                attention_mask=full_attn[:, : P + t + 1],
                position_ids=next_pos + t,
                past_key_values=cache,
                use_cache=True,
            )

    @torch.inference_mode()
    def run_generate() -> None:
        out = net.generate(
            input_ids=ids,
            attention_mask=attn,
            do_sample=True,
            top_k=0,
            top_p=1.0,
            temperature=1.0,
            max_new_tokens=N,
            min_new_tokens=N,
            eos_token_id=None,
            pad_token_id=0,
        )
        assert out.shape[1] == P + N

    fns = {"engine": run_engine, "floor": run_floor, "floor*": lambda: run_floor(engine_cache=True)}
    if not args.skip_generate:
        fns["generate"] = run_generate
    best = timed(fns, device, args.repeats)
    t_engine, t_floor, t_floor_own, t_generate = best["engine"], best["floor"], best["floor*"], best.get("generate")
    tokens = B * N
    rows = [("engine", t_engine), ("floor (DynamicCache)", t_floor), ("floor* (engine's cache)", t_floor_own)]
    if t_generate is not None:
        rows.append(("generate()", t_generate))
    threads = torch.get_num_threads()
    print(f"model {name}  device {device}  dtype {args.dtype}  batch {B} x {N} new tokens  threads {threads}")
    print(f"{'method':<24}{'seconds':>10}{'tokens/s':>12}")
    for label, secs in rows:
        print(f"{label:<24}{secs:>10.3f}{tokens / secs:>12.0f}")
    speedup = t_generate / t_engine if t_generate is not None else None
    overhead = t_engine / t_floor
    if speedup is not None:
        print(f"engine vs generate(): {speedup:.1f}x faster (target >= 10x)")
    print(f"engine / floor: {overhead:.2f}x (target <= 1.5x); engine / floor*: {t_engine / t_floor_own:.2f}x")
    print(
        json.dumps(
            {
                "model": name,
                "device": str(device),
                "dtype": args.dtype,
                "batch": B,
                "new_tokens": N,
                "threads": threads,
                "engine_tokens_per_s": round(tokens / t_engine, 1),
                "generate_tokens_per_s": round(tokens / t_generate, 1) if t_generate is not None else None,
                "floor_tokens_per_s": round(tokens / t_floor, 1),
                "floor_engine_cache_tokens_per_s": round(tokens / t_floor_own, 1),
                "speedup_vs_generate": round(speedup, 2) if speedup is not None else None,
                "engine_over_floor": round(overhead, 3),
                "engine_over_floor_engine_cache": round(t_engine / t_floor_own, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
