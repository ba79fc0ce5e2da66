"""The vLLM engine beside the HF engine on the toy pair: start-up, sampling tokens/s, weight reloads, a screen's cost.

    python bench/vllm_engine.py                      # builds (or reuses) the toy pair in ./toy
    python bench/vllm_engine.py --toy /tmp/toy --prompts 256 --batch-size 64 --threads 1

Engine start-up is reported apart from the work: a cold vLLM start, a warm one (the parked LLM of the same shape
reused, only weights reloaded) and the HF engine's. "screen cost" is what one candidate costs a screen after its
engine is up: sampling every probe batch and re-scoring it with the FP32 reference (`measure.measure_engine`).
"""

from __future__ import annotations

import argparse
import time

import torch


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def sample_all(engine, prompts, sampling, batch_size: int, max_new_tokens: int) -> tuple[int, float]:
    """(response tokens, seconds) for sampling every prompt in batches."""
    tokens, t0 = 0, time.perf_counter()
    for i, start in enumerate(range(0, len(prompts), batch_size)):
        tokens += engine.sample(prompts[start : start + batch_size], sampling, i, max_new_tokens).num_tokens
    return tokens, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--toy", default="toy", help="toy pair dir (built when missing)")
    ap.add_argument("--prompts", type=int, default=256, help="probe prompts sampled per measurement")
    ap.add_argument("--batch-size", type=int, default=64, help="prompts per engine call")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"], help="engine dtype")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of this process (HF engine, reference)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from toy_probe import toy_probe_setup

    from admitcheck.config import NoiseConfig, RolloutConfig
    from admitcheck.measurement.measure import measure_engine
    from admitcheck.pairs.toy import EOS_ID, PAD_ID
    from admitcheck.rollout.engines import build_engine
    from admitcheck.rollout.engines.vllm import release_parked

    setup = toy_probe_setup(args.toy, prompts=args.prompts, batch_size=args.batch_size,
                            max_new_tokens=args.max_new_tokens)  # fmt: skip
    student, prompts, probe, sampling = setup.student, setup.prompts, setup.probe, setup.sampling
    reference, opts = setup.reference, setup.vllm_options

    def bench(kind: str) -> dict[str, float]:
        plain = RolloutConfig(engine=kind, dtype=args.dtype, vllm=opts)
        noised = plain.model_copy(update={"noise": NoiseConfig(relative_std=0.05)})
        engine, cold = timed(lambda: build_engine(plain, student, eos_token_id=EOS_ID, pad_token_id=PAD_ID))
        sample_all(engine, prompts[: args.batch_size], sampling, args.batch_size, args.max_new_tokens)  # warm-up
        tokens, seconds = sample_all(engine, prompts, sampling, args.batch_size, args.max_new_tokens)
        _, reload = timed(lambda: engine.load_weights(student))
        engine.close()
        # vLLM: the LLM parked by close() is reused, only the (noised) weights are reloaded
        engine, warm = timed(lambda: build_engine(noised, student, eos_token_id=EOS_ID, pad_token_id=PAD_ID))
        acc, screen = timed(lambda: measure_engine(engine, reference, prompts, probe, sampling, full=False))
        _, resync = timed(lambda: engine.load_weights(reference.state_dict(), noise_step=1))
        engine.close()
        return {"start_cold_s": cold, "start_warm_s": warm, "tokens_per_s": tokens / seconds,
                "load_weights_dir_s": reload, "load_weights_noised_state_s": resync,
                "screen_candidate_s": screen, "screen_k3": acc.metrics().values["k3"]}  # fmt: skip

    rows = {kind: bench(kind) for kind in ("hf", "vllm")}
    release_parked()

    print(f"toy pair {args.toy}: {len(prompts)} prompts, batch {args.batch_size}, max_new_tokens "
          f"{args.max_new_tokens}, dtype {args.dtype}, {args.threads} torch thread(s) here")  # fmt: skip
    print(f"{'':30s}{'hf':>12s}{'vllm':>12s}{'vllm/hf':>10s}")
    for key in rows["hf"]:
        h, v = rows["hf"][key], rows["vllm"][key]
        print(f"{key:30s}{h:12.4g}{v:12.4g}{(v / h if h else float('nan')):10.3g}")


if __name__ == "__main__":  # vLLM spawns its workers: the guard keeps them from re-running this script
    main()
