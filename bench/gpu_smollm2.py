"""GPU figures for the SmolLM2 pair: decode speed of the HF engine vs `transformers.generate()`, one OPD step's
time by phase (rollout, teacher scoring, trainer forward+backward, engine sync), and a campaign's throughput.

    python bench/gpu_smollm2.py --pair smollm2 --out bench_smollm2.json    # after `admitcheck pair smollm2 smollm2`
    python bench/gpu_smollm2.py --random-weights --out bench/results/h200_smollm2.json   # no weights needed
    PYTHONPATH=. python bench/gpu_smollm2.py --pair toy --device cpu --campaign-config examples/toy_calibrate.yaml \
        --campaign-steps 4 --campaign-runs 12 --jobs 2 --out bench/results/campaign_throughput_toy_cpu.json

Campaign throughput (`--campaign-config`, `bench_campaign`): N calibration runs (baseline and a σ = 0.01 noise level
alternating, seeds 0, 1, …) on a spawned pool of `--jobs` workers (what `LocalExecutor(jobs)` runs; a fresh pool per
path, so each pays its own pair load), runs/minute = N / wall time, by three paths:
`reload` (every run in a new process: import, pair load, engine build — what Ray GPU tasks did, max_calls 1),
`fresh` (the pair kept per process, every engine built per run: the landed local path) and `kept` (workers keep the
pair, the engines and the evaluator: `calibration.workers`). The records' measured fields must agree between paths
(`same_records`). `--campaign-ledger L`: the runs are L's first N (level, seed) instead, and each path's records are
compared with L's (`vs_ledger`: how many bit-identical, the largest differences). `--campaign-steps` shortens the
protocol's training (the toy's 200 steps take minutes per run on a shared CPU); the figure is then that protocol's.
`--campaign-compile true` runs the config with `rollout.compile: true` (the float32 engine on the compiled captured
path: each kept worker compiles once per batch shape); `steady_runs_per_minute` is the rate once every worker has
finished its first run (which carries its pair load, captures and compiles), beside the overall `runs_per_minute`.

`--random-weights`: the SmolLM2-135M shape (30 layers, hidden 576, 9/3 heads, vocab 49152, tied) with random weights
built in-process, random prompts of 32-64 tokens; decode only (speed does not depend on the weights' values). It
times, in one process: the engine's eager loop (`cuda_graphs=False`), the captured engine with eager kernels and with
the compiled forward (first call = capture + compile), `generate()` with the dynamic and the static cache (128
tokens forced by `min_new_tokens`), the in-place weight sync, and how often the captured engine draws the eager
engine's tokens under the same seed.

Fused (`HFEngine(fused=True)`, rollout/engines/fused_llama.py: one GEMM for q|k|v and one for gate|up per layer):
pair mode times `engine_fused` after `engine` (the compiled captured path on CUDA) with the same prompts and seeds and
reports `same_tokens_as_unfused` (the gpu tests' >= 99% rule on real weights) and `engine_fused_speedup`; random
weights add `engine_graphs_fused_eager_kernels`, `engine_graphs_compiled_fused` and `..._repeat_kv` (`--only` selects
them) with `same_tokens_as_unfused` against their unfused twins and `weight_sync_fused` (the in-place sync, then the
same tokens). `_repeat_kv` (`engine_fused_repeat_kv` in pair mode): GQA through HF's repeated K/V instead of grouped
queries (`fused_llama.GROUP_QUERIES`), to tell the two savings apart.
    python bench/gpu_smollm2.py --pair smollm2 --device cuda --parts decode --out bench/results/h200_smollm2_fused.json
    python bench/gpu_smollm2.py --random-weights --only engine_graphs_compiled,engine_graphs_compiled_fused \
        --out bench/results/h200_smollm2_fused_random.json

Decode: the teacher (30 layers) in BF16, batch 64 chat prompts, 128 new tokens at temperature 1; each side is
warmed up once, then timed over `--repeats` calls (torch.cuda.synchronize around each). ms per step = wall time /
decode steps (the longest response); tokens/s counts response tokens actually produced (EOS included).
OPD: the 24-layer student in float32 as trainer, a BF16 engine, the float32 teacher, batch 64 x 64 tokens, PG loss;
the median of steps 2..N (step 1 carries warm-up).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's admitcheck, not an installed one
from admitcheck import io
from admitcheck.calibration.opd import train
from admitcheck.config import PairConfig, RolloutConfig, SamplingConfig, TrainConfig
from admitcheck.pairs.load import load_pair_tokenizer, tokenize_prompts
from admitcheck.rollout.engines.fused_llama import is_fused
from admitcheck.rollout.engines.hf import HFEngine


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def bench_decode(pair: Path, batch: int, new_tokens: int, repeats: int, device: str) -> dict:
    tokens = load_pair_tokenizer(PairConfig(student=str(pair / "teacher"), teacher=str(pair / "teacher")))
    rows = io.read_prompts(pair / "prompts" / "probe.jsonl", batch)
    ids = tokenize_prompts(tokens, rows)
    model = io.load_causal_lm(pair / "teacher", "float32", "cpu")
    engine = HFEngine(model, RolloutConfig(engine="hf", dtype="bfloat16", device=device),
                      eos_token_id=tokens.eos_token_id, pad_token_id=tokens.pad_token_id)  # fmt: skip
    out: dict = {"batch": batch, "max_new_tokens": new_tokens, "repeats": repeats}
    out["engine"] = _time_engine(engine, ids, new_tokens, repeats)  # the one timing loop of this bench
    first = out["engine"].pop("_first")  # the first call's Rollouts: compared below, not JSON
    out["engine_first_call_s"] = out["engine"]["first_call_s"]
    engine.close()
    print("engine", json.dumps(out["engine"]), flush=True)
    # the same engine with the fused Llama decode forward (q|k|v and gate|up as one GEMM each; on CPU its static
    # decoder's bodies run eagerly): speed, and the tokens against the unfused engine's under the same seed; GQA
    # with grouped queries (the default) and with HF's repeated K/V
    for name, grouped in (("engine_fused", True), ("engine_fused_repeat_kv", False)):
        with _group_queries(grouped):
            fused = HFEngine(model, RolloutConfig(engine="hf", dtype="bfloat16", device=device), fused=True,
                             eos_token_id=tokens.eos_token_id, pad_token_id=tokens.pad_token_id)  # fmt: skip
            out[name] = _time_engine(fused, ids, new_tokens, repeats)
        out[name] |= _same_tokens(first, out[name].pop("_first"), "unfused")
        out[name]["speedup_vs_unfused"] = out["engine"]["ms_per_step"] / out[name]["ms_per_step"]
        out[name]["still_fused"] = is_fused(fused.model)  # every projection still a view of its fused buffer
        fused.close()
        print(name, json.dumps(out[name]), flush=True)
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
            g = gm.generate(**enc, **kw)  # (B, prompt + response)
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


def smollm2_shape_model(seed: int = 0) -> torch.nn.Module:
    """Random float32 weights in the SmolLM2-135M shape (REFERENCE §7)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                      num_attention_heads=9, num_key_value_heads=3, head_dim=64, tie_word_embeddings=True,
                      rope_theta=1e5, max_position_embeddings=8192, bos_token_id=1, eos_token_id=2,
                      pad_token_id=0)  # fmt: skip
    return LlamaForCausalLM(cfg).eval()


def _time_engine(engine: HFEngine, ids: list[list[int]], new_tokens: int, repeats: int) -> dict:
    sampling = SamplingConfig(temperature=1.0)
    _sync()
    t0 = time.perf_counter()
    first = engine.sample(ids, sampling, 0, new_tokens)
    _sync()
    out = {"first_call_s": time.perf_counter() - t0}
    times, steps, toks = [], [], []
    for r in range(repeats):
        _sync()
        t0 = time.perf_counter()
        ro = engine.sample(ids, sampling, r + 1, new_tokens)
        _sync()
        times.append(time.perf_counter() - t0)
        steps.append(ro.token_ids.shape[1])
        toks.append(ro.num_tokens)
    per_step = [1e3 * t / n for t, n in zip(times, steps)]
    out.update({"s_per_call": statistics.median(times), "ms_per_step": statistics.median(per_step),
                "ms_per_step_min": min(per_step), "tokens_per_s": sum(toks) / sum(times),
                "steps": steps, "tokens": toks})  # fmt: skip
    again = engine.sample(ids, sampling, 0, new_tokens)  # the first call's seed again: is the path deterministic?
    n = min(first.token_ids.shape[1], again.token_ids.shape[1])
    out["same_tokens_on_repeat"] = (first.token_ids[:, :n] == again.token_ids[:, :n]).float().mean().item()
    return out | {"_first": first}


@contextlib.contextmanager
def _group_queries(on: bool):
    """FusedLlamaForward's GQA mode for the engines built and first sampled inside (`fused_llama.GROUP_QUERIES`)."""
    from admitcheck.rollout.engines import fused_llama

    saved, fused_llama.GROUP_QUERIES = fused_llama.GROUP_QUERIES, on
    try:
        yield
    finally:
        fused_llama.GROUP_QUERIES = saved


def _same_tokens(a, b, name: str) -> dict:
    """How many of rollouts a's tokens b holds (same seed), and the median first step where a row differs."""
    n = min(a.token_ids.shape[1], b.token_ids.shape[1])
    differ = a.token_ids[:, :n] != b.token_ids[:, :n]
    first = torch.where(differ.any(1), differ.float().argmax(1), torch.full_like(differ[:, 0], n, dtype=torch.long))
    return {f"same_tokens_as_{name}": 1.0 - differ.float().mean().item(),
            f"first_differing_step_median_vs_{name}": float(first.float().median())}  # fmt: skip


def _time_generate(model, ids: list[list[int]], new_tokens: int, repeats: int, static: bool) -> dict:
    from admitcheck.rollout.layout import left_pad

    input_ids, mask = left_pad(ids, 0, model.device)
    kw = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": new_tokens,
          "min_new_tokens": new_tokens, "pad_token_id": 0, "eos_token_id": 2}  # fmt: skip
    if static:
        kw["cache_implementation"] = "static"
    out: dict = {}
    with torch.inference_mode():
        _sync()
        t0 = time.perf_counter()
        model.generate(input_ids=input_ids, attention_mask=mask, **kw)
        _sync()
        out["first_call_s"] = time.perf_counter() - t0
        times, steps = [], []
        for r in range(repeats):
            torch.manual_seed(r)
            _sync()
            t0 = time.perf_counter()
            g = model.generate(input_ids=input_ids, attention_mask=mask, **kw)
            _sync()
            times.append(time.perf_counter() - t0)
            steps.append(g.shape[1] - input_ids.shape[1])
    per_step = [1e3 * t / n for t, n in zip(times, steps)]
    return out | {"s_per_call": statistics.median(times), "ms_per_step": statistics.median(per_step),
                  "ms_per_step_min": min(per_step), "tokens_per_s": len(ids) * sum(steps) / sum(times),
                  "steps": steps}  # fmt: skip


def bench_random(batch: int, new_tokens: int, repeats: int, only: str, device: str = "cuda") -> dict:
    """Decode speed on the SmolLM2 shape with random weights (see the module docstring)."""
    model = smollm2_shape_model()
    gen = torch.Generator().manual_seed(1)
    lengths = torch.randint(32, 65, (batch,), generator=gen).tolist()
    ids = [torch.randint(3, 49152, (n,), generator=gen).tolist() for n in lengths]
    rollout = RolloutConfig(engine="hf", dtype="bfloat16", device=device)  # cpu: a smoke test of the code paths
    kw = {"eos_token_id": 2, "pad_token_id": 0}
    out: dict = {"model": "SmolLM2-135M shape, random weights, BF16", "batch": batch, "max_new_tokens": new_tokens,
                 "prompt_tokens": [min(lengths), max(lengths)], "repeats": repeats,
                 "tokens_note": "random weights give near-flat next-token distributions over 49152 tokens: inverse-CDF "
                   "sampling then flips a token on any ulp-level logit difference, so same_tokens_* here measure "
                   "kernel determinism, not sampling fidelity (see tests/test_engine_cuda.py for that)",
                 "timing": "ms_per_step = median over calls of wall time / steps (prefill and host "
                           "copies included); ms_per_step_min the fastest call"}  # fmt: skip
    variants = {"engine_eager": {"cuda_graphs": False}, "engine_graphs_eager_kernels": {"compile_forward": False},
                "engine_graphs_compiled": {},
                "engine_graphs_fused_eager_kernels": {"compile_forward": False, "fused": True},
                "engine_graphs_compiled_fused": {"fused": True},
                "engine_graphs_compiled_fused_repeat_kv": {"fused": True}}  # fmt: skip
    unfused = {"engine_graphs_fused_eager_kernels": "engine_graphs_eager_kernels",
               "engine_graphs_compiled_fused": "engine_graphs_compiled",
               "engine_graphs_compiled_fused_repeat_kv": "engine_graphs_compiled"}  # fmt: skip
    firsts = {}
    for name, opts in variants.items():
        if only and name not in only.split(","):
            continue
        with _group_queries(not name.endswith("_repeat_kv")):  # the fused forward is built at the first sample
            engine = HFEngine(model, rollout, **kw, **opts)
            res = _time_engine(engine, ids, new_tokens, repeats if name != "engine_eager" else 2)
        firsts[name] = res.pop("_first")
        out[name] = res
        print(name, json.dumps(res), flush=True)
        if name in ("engine_graphs_compiled", "engine_graphs_compiled_fused"):
            key = "weight_sync" + name.removeprefix("engine_graphs_compiled")
            out[key] = bench_sync(engine, model, ids, new_tokens)
            out[key]["still_fused"] = is_fused(engine.model) if engine.fused else None  # after the in-place syncs
            print(key, json.dumps(out[key]), flush=True)
        if unfused.get(name) in firsts:
            res |= _same_tokens(firsts[unfused[name]], firsts[name], "unfused")
        if "engine_graphs_compiled" in out and name.startswith("engine_graphs_compiled_fused"):
            res["speedup_vs_unfused"] = out["engine_graphs_compiled"]["ms_per_step"] / res["ms_per_step"]
        engine.close()
    if "engine_eager" in firsts:
        for name in ("engine_graphs_eager_kernels", "engine_graphs_compiled", *unfused):
            if name in firsts:
                a, b = firsts["engine_eager"], firsts[name]
                n = min(a.token_ids.shape[1], b.token_ids.shape[1])
                same = (a.token_ids[:, :n] == b.token_ids[:, :n]).float().mean().item()
                first_diff = (a.token_ids[:, :n] != b.token_ids[:, :n]).float().argmax(1)
                out[name]["same_tokens_as_eager"] = same
                out[name]["first_differing_step_median"] = float(first_diff.float().median())
    gm = None
    for name, static in (("generate_dynamic", False), ("generate_static", True)):
        if only and name not in only.split(","):
            continue
        gm = gm if gm is not None else copy.deepcopy(model).to(device=device, dtype=torch.bfloat16)
        out[name] = _time_generate(gm, ids, new_tokens, 2 if not static else repeats, static)
        print(name, json.dumps(out[name]), flush=True)
    if "generate_static" in out and "engine_graphs_compiled" in out:
        out["speedup_vs_generate_static"] = out["generate_static"]["ms_per_step"] / out["engine_graphs_compiled"][
            "ms_per_step"]  # fmt: skip
    return out


def bench_sync(engine: HFEngine, model, ids: list[list[int]], new_tokens: int) -> dict:
    """In-place weight sync from a float32 trainer copy on the GPU: plain, with noise, with FP8 W8A8; and whether
    the captured graphs still sample the same tokens after syncing the same weights back."""
    sampling = SamplingConfig(temperature=1.0)
    state = {k: v.to(engine.device, torch.float32) for k, v in model.state_dict().items()}
    before = engine.sample(ids, sampling, 5, new_tokens)
    ptrs = [p.data_ptr() for p in engine.model.parameters()]
    out = {}
    for _ in range(2):  # the first one warms the allocator
        _sync()
        t0 = time.perf_counter()
        engine.load_weights(state, noise_step=1)
        _sync()
        out["plain_ms"] = 1e3 * (time.perf_counter() - t0)
    after = engine.sample(ids, sampling, 5, new_tokens)
    out["same_tokens_after_resync"] = (before.token_ids == after.token_ids).float().mean().item()
    out["parameters_reallocated"] = ptrs != [p.data_ptr() for p in engine.model.parameters()]
    out["graphs_recaptured"] = len(engine._decoders) != 1
    from admitcheck.config import NoiseConfig, WeightsRecipe

    w8a8 = WeightsRecipe(format="fp8_e4m3", activations="fp8_per_token")
    for name, ro in (("noise_ms", {"noise": NoiseConfig(relative_std=0.01, seed=0)}),
                     ("fp8_w8a8_channel_ms", {"weights": w8a8})):  # fmt: skip
        engine.reconfigure(engine.rollout.model_copy(update=ro))
        times = []
        for step in range(3):
            _sync()
            t0 = time.perf_counter()
            engine.load_weights(state, noise_step=step + 1)
            _sync()
            times.append(1e3 * (time.perf_counter() - t0))
        out[name] = min(times)
    return out


def _fresh_task(config, config_file, level, seed):
    """The landed path: the process's pair (cached), every engine and the evaluator built for the run."""
    from admitcheck.calibration.levels import load_context, run_one

    started = time.perf_counter()
    return run_one(load_context(config, config_file), config, level, seed, started=started)


def _phase_medians(records: list) -> dict:
    med = {}
    for name in ("rollout", "teacher", "backward", "sync"):
        med[name] = statistics.median(r.seconds_by_phase.get(name, 0.0) for r in records)
    for name in ("evaluation", "probe", "setup"):
        got = [getattr(r, f"seconds_{name}") for r in records if getattr(r, f"seconds_{name}") is not None]
        med[name] = statistics.median(got) if got else None
    return med


def ledger_runs_of(ledger: Path, n: int) -> tuple[list, dict]:
    """The first n runs of a calibration ledger: [(Level, seed)] rebuilt from their keys, and key -> RunRecord."""
    from admitcheck.calibration.campaign import run_key
    from admitcheck.calibration.levels import Level
    from admitcheck.calibration.record import RunRecord

    wanted, records = [], {}
    for line in io.read_jsonl(ledger):
        if line.get("kind") != "run" or len(wanted) == n:
            continue
        key = json.loads(line["key"])
        spec, seed = key["level"], key["seed"]
        rollout = RolloutConfig.model_validate(spec["rollout"]) if spec["rollout"] else None
        name = f"{spec['kind']}-{spec['relative_std']:g}"
        level = Level(name, spec["kind"], relative_std=spec["relative_std"], rollout=rollout,
                      staleness=spec["staleness"], systematic=spec.get("systematic", False))  # fmt: skip
        assert run_key(level, seed) == line["key"], (run_key(level, seed), line["key"])  # rebuilt exactly
        wanted.append((level, seed))
        records[line["key"]] = RunRecord.model_validate(line)
    return wanted, records


def _record_diff(a, b) -> dict:
    """How far record a's measurements are from b's: largest absolute differences, and whether all are equal."""

    def gap(x, y) -> float:
        if x is None or y is None:
            return 0.0 if x is y else float("inf")
        return abs(float(x) - float(y))

    k3 = max((gap(x, y) for x, y in zip(a.in_run_k3, b.in_run_k3)), default=0.0)
    same = (a.quality, a.mismatch, a.in_run_k3, a.evals) == (b.quality, b.mismatch, b.in_run_k3, b.evals)
    return {"identical": same, "quality": gap(a.quality, b.quality), "mismatch": gap(a.mismatch, b.mismatch),
            "in_run_k3": k3}  # fmt: skip


def steady_rate(records: list, jobs: int) -> float | None:
    """Runs/minute once every worker has finished its first run (that run carries the worker's pair load, graph
    captures and compiles): the runs after the jobs-th to finish over the time from it to the last (`finished_at`)."""
    times = sorted(r.finished_at for r in records if r.finished_at is not None)
    if len(times) <= jobs or times[-1] <= times[jobs - 1]:
        return None
    return 60.0 * (len(times) - jobs) / (times[-1] - times[jobs - 1])


def bench_campaign(
    config_file: Path,
    runs: int,
    jobs: int,
    paths: list[str],
    steps: int | None,
    ledger: Path | None = None,
    compile_forward: bool | None = None,
) -> dict:
    """Runs/minute of N campaign runs by each path (see the module docstring), whether their records agree, and
    with `ledger`: the ledger's first N runs, compared with its records (the slow path's, as shipped).
    `compile_forward` overrides the config's `rollout.compile` (an execution option: not in the runs' keys)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from admitcheck.calibration.campaign import run_key
    from admitcheck.calibration.executors import Task
    from admitcheck.calibration.levels import Level, run_task
    from admitcheck.config import CalibrateConfig

    cfg = io.load_config(config_file, CalibrateConfig)
    if steps:
        cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"steps": steps})})
    if compile_forward is not None:
        cfg = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"compile": compile_forward})})
    if ledger is not None:  # the ledger's first runs, same (level, seed): its records are the slow path's
        wanted, ledger_runs = ledger_runs_of(ledger, runs)
    else:
        levels = (Level("baseline", "baseline"), Level("noise-0.01", "noise", relative_std=0.01))
        wanted, ledger_runs = [(levels[i % 2], i // 2) for i in range(runs)], {}
    out: dict = {"config": str(config_file), "runs": len(wanted), "jobs": jobs, "train_steps": cfg.train.steps,
                 "compile": cfg.rollout.compile, "ledger": str(ledger) if ledger else None, "paths": {}}  # fmt: skip
    records: dict[str, dict] = {}
    for path in paths:
        fn = _fresh_task if path == "fresh" else run_task
        tasks = [Task(run_key(lv, s), f"{lv.name}/seed {s}", fn, (cfg, str(config_file), lv, s)) for lv, s in wanted]
        t0 = time.perf_counter()
        per_child = 1 if path == "reload" else None  # reload: a new process per run, as Ray GPU tasks (max_calls 1)
        ctx = mp.get_context("spawn")  # every path in its own pool: each pays its own pair load, none inherits one
        with ProcessPoolExecutor(jobs, mp_context=ctx, max_tasks_per_child=per_child) as pool:
            futs = {pool.submit(t.fn, *t.args): t for t in tasks}  # kept: the pool's workers keep engines and pair
            got = {}
            for f in as_completed(futs):  # each run as it lands: a run cut off early still leaves a partial rate
                got[futs[f].key] = f.result()
                print(f"{path}: {len(got)}/{len(tasks)} runs at {time.perf_counter() - t0:.1f} s", flush=True)
        wall = time.perf_counter() - t0
        runs = len(tasks)
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None  # a shared machine: say how shared
        recs = list(got.values())
        gpu = [r.gpu_utilization for r in recs if r.gpu_utilization is not None]
        out["paths"][path] = {
            "wall_s": round(wall, 2), "runs_per_minute": round(60.0 * runs / wall, 3),
            "steady_runs_per_minute": steady_rate(recs, jobs),
            "median_run_s": statistics.median(r.seconds for r in recs), "median_phase_s": _phase_medians(recs),
            "gpu_utilization_mean": sum(gpu) / len(gpu) if gpu else None, "load_average_1min_after": load,
        }  # fmt: skip
        print(path, json.dumps(out["paths"][path]), flush=True)
        records[path] = got
    timing = {"seconds", "cpu_seconds", "seconds_by_phase", "seconds_setup", "seconds_probe", "seconds_evaluation",
              "gpu_utilization", "worker_run", "finished_at"}  # fmt: skip
    first = paths[0]
    out["same_records"] = {
        p: all(records[p][k].model_dump(exclude=timing) == records[first][k].model_dump(exclude=timing)
               for k in records[first])
        for p in paths[1:]
    }  # fmt: skip
    if ledger_runs:  # against the ledger's records: bit-identical, else the largest differences
        for p in paths:
            diffs = [_record_diff(records[p][k], ledger_runs[k]) for k in ledger_runs]
            out["paths"][p]["vs_ledger"] = {
                "identical": sum(d["identical"] for d in diffs), "of": len(diffs),
                "max_abs_quality": max(d["quality"] for d in diffs),
                "max_abs_mismatch": max(d["mismatch"] for d in diffs),
                "max_abs_in_run_k3": max(d["in_run_k3"] for d in diffs),
            }  # fmt: skip
    rate = {p: v["runs_per_minute"] for p, v in out["paths"].items()}
    if "kept" in rate:
        out |= {f"speedup_kept_vs_{p}": rate["kept"] / r for p, r in rate.items() if p != "kept"}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pair", type=Path, default=Path("smollm2"))
    ap.add_argument("--out", type=Path, default=Path("bench_smollm2.json"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--opd-steps", type=int, default=5)
    ap.add_argument("--random-weights", action="store_true", help="The SmolLM2 shape with random weights, decode only.")
    ap.add_argument("--only", default="", help="Comma-separated variants to run (random-weights mode).")
    ap.add_argument("--parts", default="decode,opd", help="Which figures (pair mode): decode, opd, campaign.")
    ap.add_argument("--campaign-config", type=Path, default=Path("examples/smollm2_calibrate.yaml"))
    ap.add_argument("--campaign-runs", type=int, default=30)
    ap.add_argument("--campaign-steps", type=int, default=None, help="Override train.steps (a shortened protocol).")
    ap.add_argument("--campaign-paths", default="kept,fresh", help="Comma-separated: kept, fresh, reload.")
    ap.add_argument("--jobs", type=int, default=1, help="Campaign workers (processes; one per GPU slot).")
    compile_help = "Override the config's rollout.compile (the float32 engine on the compiled captured path)."
    ap.add_argument("--campaign-compile", choices=("true", "false"), default=None, help=compile_help)
    ap.add_argument("--campaign-ledger", type=Path, default=None, help="Run this ledger's first runs and compare.")
    args = ap.parse_args()
    res = {"device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu", "torch": torch.__version__}
    import transformers

    res["transformers"] = transformers.__version__
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.random_weights:
        res["decode"] = bench_random(args.batch, args.new_tokens, max(args.repeats, 5), args.only, args.device)
        args.out.write_text(json.dumps(res, indent=2) + "\n")
        return
    parts = args.parts.split(",")
    res["command"] = "python bench/gpu_smollm2.py " + " ".join(sys.argv[1:])
    for part in parts:  # written after each part: a call that ends early keeps what was measured
        if part == "decode":
            res["decode"] = bench_decode(args.pair, args.batch, args.new_tokens, args.repeats, args.device)
        elif part == "opd":
            res["opd"] = bench_opd(args.pair, args.opd_steps, args.batch, 64, args.device)
        elif part == "campaign":
            paths = args.campaign_paths.split(",")
            compiled = None if args.campaign_compile is None else args.campaign_compile == "true"
            a = args
            res["campaign"] = bench_campaign(
                a.campaign_config, a.campaign_runs, a.jobs, paths, a.campaign_steps, a.campaign_ledger, compiled
            )
        else:
            raise SystemExit(f"--parts: unknown part {part!r} (decode, opd, campaign)")
        print(part, json.dumps(res[part], indent=2), flush=True)
        args.out.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
