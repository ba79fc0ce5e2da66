"""The numeric pins on an AVX2-only x86-64 CPU (issue #39), by emulation: the same runs natively and on a CPU that
QEMU's TCG emulates, compared bit for bit.

    python bench/avx2_emulation.py --out bench/results/avx2_emulation.json     # ~30 min wall, ~26 CPU-min emulated
    python bench/avx2_emulation.py --parts fingerprint probe --no-diagnosis --no-control --out /tmp/a.json  # ~3 min

Needs: `qemu-x86_64-static` (Debian: `apt-get install qemu-user-static`; QEMU >= 7.2, the first whose TCG emulates
AVX, AVX2, FMA and F16C), a C compiler (`cc`: the CPUID and approximate-instruction probes), x86-64 Linux, and the
toy pair built under the pins in toy/ (shipped since the re-make: student e4c0c08427fd049e, teacher 1a8506f541b4fd06:
bench/results/numeric_pins.json).

`qemu-x86_64-static -cpu Haswell` runs the venv's own Python, torch, MKL and oneDNN binaries on an emulated Intel
Haswell: CPUID says GenuineIntel with AVX2, FMA, F16C and no AVX-512 or AMX, so every library picks its code path by
its own detection (torch's capability, MKL's and oneDNN's dispatch), not by a variable telling it to. (/proc/cpuinfo
is the host's under qemu-user; none of these libraries reads it.) Each part runs in a fresh process natively and
emulated, 1 torch thread, CUDA hidden, `ADMITCHECK_NUMERIC_PINS=on` (applied by `import admitcheck`, as in every
run); the tensors each part writes are compared: sha256 of their bytes, tensors that differ, the largest |difference|.
- `fingerprint`: both models' logits and per-token log-probs on calibrations/toy.yaml's 8 fixed sequences (what
  `fingerprint.check_behaviour` scores to accept or refuse a pair), and the `behaviour_fingerprint` digest;
- `probe`: one probe batch (32 prompts x 64 new tokens) of three screen candidates through `probe.probe_batches`:
  BF16, examples/toy_measure.yaml's FP8 recipe, float32 with 20% weight noise: sampled tokens, both sides' log-probs
  and full rows, the per-sequence sums (k3, kl_exact, ...);
- `opd`: the first 5 OPD steps of calibrations/toy.yaml's recipe (`opd.first_steps`; batch 128): weights, losses;
- `build_short`: `build_toy_pair` from scratch with 15/8/5 of the shipped 600/250/150 SFT steps (the full build is
  ~150 s natively, ~100x that emulated: `--parts build` runs it); its weights;
- diagnosis: `opd_stages` (the first OPD step taken apart: rollouts, teacher scores, every module's output and
  gradients, the grad norm, the weights after AdamW), `sqrt` (torch.sqrt of float32 is MKL's vsSqrt), the same on an
  emulated AMD CPU (`EMULATED_AMD`), `noise_rms` (the noise candidate's scale), the probe with NumPy's AVX-512
  kernels off on both sides, and `opd` / `build_short` with AdamW(fused=True);
- control: `fingerprint` and the BF16 probe with the pins off (expected to differ: ATen AVX-512 vs AVX2 kernels).
The C probes: CPUID as each side sees it, and rsqrtps / rcpps over every float in [1, 4).

What it found (bench/results/avx2_emulation.json): the forward passes are the same bits (fingerprint, every probe's
tokens and log-probs, the first OPD step's activations and gradients); three things are not, none pinned by
`admitcheck.numerics`:
1. NumPy dispatches float64 exp/expm1 to AVX-512 kernels where the CPU has them: the probe's per-sequence sums
   (k3, kl_exact, ...) differ in the last bits between AVX-512 and AVX2 CPUs (a real difference: with
   NPY_DISABLE_CPU_FEATURES=<NPY_AVX512> the BF16 and FP8 candidates' probes are the same bits).
2. torch.sqrt of float32 on the CPU is MKL's vsSqrt, whose MKL_CBWR=COMPATIBLE path is not correctly rounded and
   gives other bits emulated than natively (AdamW's denominator, the noise candidate's rms): 5 OPD steps and the short
   build differ by an ulp or so per step. It follows the emulator, not the vendor (an emulated AMD CPU gives the
   emulated Intel's bits), and QEMU computes rcpps/rsqrtps exactly where hardware gives its maker's 12-bit
   approximation, so this one may be the emulator's: real Intel and AMD CPUs each have their own rcpps/rsqrtps, and
   whether MKL's COMPATIBLE sqrt differs between them needs a real CPU of each kind with the same torch.
3. With AdamW(fused=True) (ATen's own kernel, vsqrtps) 5 OPD steps and the short build are the same bits.
Emulated runs are niced (`nice -n 5`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QEMU = "qemu-x86_64-static"
PARTS = ("fingerprint", "probe", "opd", "build_short")  # "build" (the full toy build) is ~4 emulated hours
SHORT_BUILD = {
    "teacher_steps": 15,
    "student_steps": 8,
    "student_noisy_steps": 5,
    "num_eval": 32,
}  # shipped: 600, 250, 150, 128
PINNED_VARS = ("MKL_CBWR", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")  # admitcheck.numerics.PINS' variables
OPD_STEPS = 5  # OPD steps of the toy recipe (batch 128 rollouts x 16 tokens each)
PROBE_PROMPTS = 32  # one probe batch
CANDIDATES = {  # name -> rollout config (bench/toy_remake/toy_screen.yaml, examples/toy_measure.yaml)
    "bf16": {"engine": "hf", "dtype": "bfloat16"},
    "fp8_w8a8_kv_skip0": {
        "engine": "hf",
        "dtype": "bfloat16",
        "weights": {
            "format": "fp8_e4m3",
            "granularity": "channel",
            "activations": "fp8_per_token",
            "exclude": ["model.layers.0.*"],
        },
        "kv_cache": {"dtype": "fp8_e4m3", "skip_layers": [0]},
    },
    "heavy_noise": {"engine": "hf", "dtype": "float32", "noise": {"relative_std": 0.2, "seed": 0}},
}
CPUID_C = r"""
#include <stdio.h>
#include <string.h>
#include <cpuid.h>
int main(void) {
  unsigned a, b, c, d, c1, d1, b7, c7, d7, a71 = 0, x, y, z; char v[13] = {0};
  __cpuid(0, a, b, c, d); memcpy(v, &b, 4); memcpy(v + 4, &d, 4); memcpy(v + 8, &c, 4);
  __cpuid(1, a, b, c1, d1); __cpuid_count(7, 0, a, b7, c7, d7); __cpuid_count(7, 1, a71, x, y, z);
  printf("{\"vendor\": \"%s\", \"flags\": [", v); const char *sep = "";
#define F(cond, name) if (cond) { printf("%s\"%s\"", sep, name); sep = ", "; }
  F(c1 & (1u << 12), "fma") F(c1 & (1u << 28), "avx") F(c1 & (1u << 29), "f16c") F(b7 & (1u << 5), "avx2")
  F(b7 & (1u << 16), "avx512f") F(b7 & (1u << 17), "avx512dq") F(b7 & (1u << 30), "avx512bw")
  F(b7 & (1u << 31), "avx512vl") F(c7 & (1u << 11), "avx512_vnni") F(a71 & (1u << 5), "avx512_bf16")
  F(d7 & (1u << 23), "avx512_fp16") F(d7 & (1u << 22), "amx_bf16") F(d7 & (1u << 24), "amx_tile")
  F(d7 & (1u << 25), "amx_int8") F(a71 & (1u << 4), "avx_vnni")
  printf("]}\n"); return 0;
}
"""
# rsqrtps / rcpps, the 12-bit approximations whose results the CPU's maker chooses, over every float in [1, 4): a hash
# of each one's outputs, and how many differ from the correctly rounded 1/sqrt(x), 1/x (QEMU computes them in softfloat
# from the exact operations, where hardware returns its own approximation)
APPROX_C = r"""
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <immintrin.h>
static uint64_t fnv(uint64_t h, uint32_t x) {
  for (int i = 0; i < 4; i++) { h ^= (x >> (8 * i)) & 255; h *= 1099511628211ULL; } return h; }
int main(void) {
  uint64_t hr = 1469598103934665603ULL, hc = hr; long nr = 0, nc = 0, n = 0; float lo = 1.0f; uint32_t a;
  memcpy(&a, &lo, 4);
  for (uint32_t u = a;; u += 4) {
    float x[4], r[4], c[4]; for (int i = 0; i < 4; i++) { uint32_t w = u + i; memcpy(&x[i], &w, 4); }
    if (x[0] >= 4.0f) break;
    _mm_storeu_ps(r, _mm_rsqrt_ps(_mm_loadu_ps(x))); _mm_storeu_ps(c, _mm_rcp_ps(_mm_loadu_ps(x)));
    for (int i = 0; i < 4; i++) {
      uint32_t br, bc; memcpy(&br, &r[i], 4); memcpy(&bc, &c[i], 4); hr = fnv(hr, br); hc = fnv(hc, bc); n++;
      if (r[i] != (float)(1.0 / sqrt((double)x[i]))) nr++;
      if (c[i] != (float)(1.0 / (double)x[i])) nc++;
    }
  }
  printf("{\"floats\": %ld, \"rsqrtps_hash\": \"%016llx\", \"rsqrtps_not_correctly_rounded\": %ld, "
         "\"rcpps_hash\": \"%016llx\", \"rcpps_not_correctly_rounded\": %ld}\n",
         n, (unsigned long long)hr, nr, (unsigned long long)hc, nc);
  return 0;
}
"""
EMULATED_AMD = "EPYC-Rome"  # an AVX2-only AMD CPU (Zen 2): MKL takes its AMD branch there, as on this machine
NPY_AVX512 = "AVX512F AVX512CD AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL"  # NumPy's AVX-512 dispatch targets, off


# ------------------------------------------------------------------------------------------- workers (one process)


def _setup():
    import admitcheck  # noqa: F401, I001  the pins, when switched on: imported before torch, as the CLI does
    import torch

    torch.set_num_threads(1)
    return torch


def part_cpu() -> tuple[dict, dict]:
    """What the libraries detect: torch's kernel set, oneDNN's ISA (ONEDNN_VERBOSE, in stderr) after an fp32 conv."""
    torch = _setup()
    from admitcheck import numerics

    torch.nn.functional.conv2d(torch.ones(16, 8, 16, 16), torch.ones(8, 8, 3, 3))  # oneDNN's: its ISA line
    return {"numerics": numerics.in_effect(), "torch": torch.__version__}, {}


def part_sqrt() -> tuple[dict, dict]:
    """torch.sqrt of float32 on the CPU is MKL's vector math (vsSqrt, called by ATen's vml.h): on 65,536 floats
    from 4.7e-10 to 2, how many results are not the correctly rounded square root, and whether calling MKL's
    VMSSQRT_ directly (high-accuracy mode, as ATen does) gives the same bits."""
    torch = _setup()
    import ctypes

    v = torch.arange(0x30000000, 0x40000000, 4096, dtype=torch.int64).to(torch.int32).view(torch.float32)  # (65536,)
    out, ref = v.sqrt(), v.double().sqrt().float()  # float64 then float32: correctly rounded (53 >= 2*24 + 2 bits)
    lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
    mkl = torch.empty_like(v)
    n, mode = ctypes.c_int64(v.numel()), ctypes.c_uint64(0x140102)  # VML_HA | VML_FTZDAZ_OFF | VML_ERRMODE_IGNORE
    lib.VMSSQRT_64_(ctypes.byref(n), ctypes.c_void_p(v.data_ptr()), ctypes.c_void_p(mkl.data_ptr()), ctypes.byref(mode))
    info = {
        "floats": v.numel(),
        "not_correctly_rounded": int((out != ref).sum()),
        "same_as_mkl_vmssqrt": bool(torch.equal(out, mkl)),
    }
    return info, {"sqrt": out}


def part_noise_rms() -> tuple[dict, dict]:
    """The weight-noise candidate's draw (`precision.noised`, relative_std 0.2, seed 0, step 0) of every student
    parameter, and the rms its scale comes from (a 0-dim torch.sqrt: MKL's vsSqrt too)."""
    _setup()
    from admitcheck.io import load_causal_lm
    from admitcheck.rollout.precision import noised

    tensors = {}
    for name, w in load_causal_lm(ROOT / "toy" / "student").named_parameters():
        w = w.detach()
        tensors[f"rms.{name}"] = w.pow(2).mean().sqrt()
        tensors[f"noised.{name}"] = noised(w, 0.2, 0, 0, name)
    return {}, tensors


def part_speed() -> tuple[dict, dict]:
    """CPU seconds (this process) per step of numeric_pins.py's workload: a toy-teacher training step (2 layers x
    128, batch 64 x 24 tokens, AdamW) and a BF16 forward of the same model; the median of 3 after a warm-up."""
    _setup()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from numeric_pins import speed_workload

    step, forward = speed_workload()

    info = {}
    for name, fn in (("train_step_cpu_seconds", step), ("bf16_forward_cpu_seconds", forward)):
        fn()
        times = []
        for _ in range(3):
            t0 = time.process_time()
            fn()
            times.append(time.process_time() - t0)
        info[name] = round(sorted(times)[1], 4)
    return info, {}


def part_fingerprint() -> tuple[dict, dict]:
    torch = _setup()
    from admitcheck.calibration.artifact import load_calibration
    from admitcheck.fingerprint import _token_logprobs, behaviour_fingerprint
    from admitcheck.io import load_causal_lm

    seqs = load_calibration(ROOT / "calibrations" / "toy.yaml").pair.behaviour.sequences  # the 8 fixed sequences
    tensors, info = {}, {}
    models = {s: load_causal_lm(ROOT / "toy" / s) for s in ("student", "teacher")}
    for name, model in models.items():
        with torch.no_grad():
            for i, ids in enumerate(seqs):
                tensors[f"{name}.logits.{i}"] = model(input_ids=torch.tensor([ids]), use_cache=False).logits.float()
        tensors[f"{name}.token_logprobs"] = torch.tensor(
            [v for r in _token_logprobs(model, seqs) for v in r], dtype=torch.float64
        )
    beh = behaviour_fingerprint(models["student"], models["teacher"], seqs)
    info["behaviour_fingerprint_sha256"] = hashlib.sha256(json.dumps(beh, sort_keys=True).encode()).hexdigest()[:16]
    info["sequences"], info["tokens"] = len(seqs), sum(len(s) - 1 for s in seqs)
    return info, tensors


def part_probe(names: list[str]) -> tuple[dict, dict]:
    torch = _setup()
    from admitcheck import io
    from admitcheck.config import PairConfig, ProbeConfig, RolloutConfig, SamplingConfig
    from admitcheck.measurement.probe import probe_batches
    from admitcheck.pairs.load import LoadedPair, tokenize_prompts
    from admitcheck.rollout.engines import build_engine

    toy = ROOT / "toy"
    pair = LoadedPair(PairConfig(name="toy", student=str(toy / "student"), teacher=str(toy / "teacher")))
    probe = ProbeConfig(
        prompts=str(toy / "prompts" / "probe.jsonl"),
        num_prompts=PROBE_PROMPTS,
        max_new_tokens=64,
        batch_size=32,
        seed=0,
    )
    sampling = SamplingConfig(temperature=1.0)
    prompt_ids = tokenize_prompts(pair.tokens, io.read_prompts(probe.prompts, limit=probe.num_prompts))
    reference = pair.student("float32", "cpu")
    tensors, info = {}, {}
    for name in names:
        t0 = time.perf_counter()
        engine = build_engine(
            RolloutConfig(**CANDIDATES[name]),
            str(toy / "student"),
            eos_token_id=pair.tokens.eos_token_id,
            pad_token_id=pair.tokens.pad_token_id,
        )
        k3 = 0.0
        for b in probe_batches(engine, reference, prompt_ids, probe, sampling, full=True):
            got = {
                "tokens": b.rollouts.token_ids,
                "mask": b.rollouts.mask,
                "engine_logprobs": b.rollouts.logprobs,
                "engine_full": b.rollouts.full_logprobs,
                "reference_logprobs": b.scores.logprobs,
                "reference_full": b.scores.full_logprobs,
            }
            got |= {f"sums.{k}": torch.from_numpy(v) for k, v in b.per_sequence.items()}
            tensors |= {f"{name}.{b.index}.{k}": v for k, v in got.items() if v is not None}
            k3 += float(b.per_sequence["k3"].sum()) / max(float(b.per_sequence["num_tokens"].sum()), 1.0)
        engine.close()
        info[name] = {"k3_per_token": k3, "seconds": round(time.perf_counter() - t0, 2)}
    return info, tensors


def part_opd() -> tuple[dict, dict]:
    torch = _setup()
    from admitcheck import io
    from admitcheck.calibration.artifact import load_calibration
    from admitcheck.calibration.grpo import train_prompts
    from admitcheck.calibration.levels import Level
    from admitcheck.calibration.opd import first_steps
    from admitcheck.config import PairConfig
    from admitcheck.pairs.load import LoadedPair

    cal = load_calibration(ROOT / "calibrations" / "toy.yaml")  # its recipe: examples/toy_calibrate.yaml's train
    toy = ROOT / "toy"
    pair = LoadedPair(PairConfig(name="toy", student=str(toy / "student"), teacher=str(toy / "teacher")))
    path = toy / "prompts" / "train.jsonl"
    cfg = cal.recipe.train_config(str(path))
    ids, task = train_prompts(io.read_prompts(path), pair.tokens, cfg, file=str(path))
    seed = Level("stale", "staleness", staleness=1).seed(cal.recipe.seed, 0)  # a calibration level's seed
    student, result = first_steps(
        pair.student("float32", "cpu"),
        pair.teacher("float32", "cpu"),
        ids,
        cfg,
        cal.recipe.rollout,
        steps=OPD_STEPS,
        seed=seed,
        tokens=pair.tokens,
        task=task,
    )
    tensors = {f"weights.{k}": v.detach() for k, v in student.state_dict().items()}
    tensors["loss"] = torch.tensor([log.loss for log in result.steps], dtype=torch.float64)
    tensors["grad_norm"] = torch.tensor([log.grad_norm for log in result.steps], dtype=torch.float64)
    info = {"steps": OPD_STEPS, "batch_size": cfg.batch_size, "losses": [log.loss for log in result.steps]}
    return info, tensors


def part_opd_stages() -> tuple[dict, dict]:
    """The first OPD step of `opd` (the same batch, seeds and objective) taken apart, to find where a difference
    starts: rollouts, teacher scores, the student's log-probs, the loss, every module's forward output and its
    gradients (backward hooks), every parameter's gradient, the clipped norm, the weights after AdamW."""
    torch = _setup()
    import copy

    from admitcheck import io
    from admitcheck.calibration.artifact import load_calibration
    from admitcheck.calibration.grpo import train_prompts
    from admitcheck.calibration.levels import Level
    from admitcheck.calibration.objectives import objective_for
    from admitcheck.calibration.opd import _batch_indices, cast_parameters
    from admitcheck.calibration.runs import derive_seed
    from admitcheck.config import PairConfig, SamplingConfig
    from admitcheck.measurement.scorer import response_logprobs
    from admitcheck.pairs.load import LoadedPair
    from admitcheck.rollout.engines.hf import HFEngine

    cal = load_calibration(ROOT / "calibrations" / "toy.yaml")
    toy = ROOT / "toy"
    pair = LoadedPair(PairConfig(name="toy", student=str(toy / "student"), teacher=str(toy / "teacher")))
    path = toy / "prompts" / "train.jsonl"
    cfg = cal.recipe.train_config(str(path))
    ids, task = train_prompts(io.read_prompts(path), pair.tokens, cfg, file=str(path))
    seed = Level("stale", "staleness", staleness=1).seed(cal.recipe.seed, 0)
    teacher = pair.teacher("float32", "cpu")
    student = cast_parameters(copy.deepcopy(pair.student("float32", "cpu")), "float32").eval()
    objective = objective_for(cfg, teacher, ids, task)
    sampling = SamplingConfig(temperature=cfg.temperature, coupling=cfg.sampling_coupling)
    engine = HFEngine(
        student, cal.recipe.rollout, eos_token_id=pair.tokens.eos_token_id, pad_token_id=pair.tokens.pad_token_id
    )
    t: dict = {}
    batch = [ids[i] for i in _batch_indices(len(ids), cfg.batch_size, seed, 0)]
    ro = engine.sample(batch, sampling, derive_seed(seed, "rollout", 0), cfg.max_new_tokens)
    t |= {"a.rollout.tokens": ro.token_ids, "a.rollout.logprobs": ro.logprobs, "a.rollout.mask": ro.mask}
    t["b.teacher.logprobs"] = objective.targets(batch, ro, sampling).logprobs
    hooks = []
    for name, mod in student.named_modules():
        if name and not list(mod.children()):  # leaf modules

            def fwd(m, i, o, name=name):
                t[f"c.forward.{name}"] = (o[0] if isinstance(o, tuple) else o).detach().clone()

            def bwd(m, gi, go, name=name):
                if go and go[0] is not None:
                    t[f"e.grad_output.{name}"] = go[0].detach().clone()
                if gi and gi[0] is not None:
                    t[f"e.grad_input.{name}"] = gi[0].detach().clone()

            hooks += [mod.register_forward_hook(fwd), mod.register_full_backward_hook(bwd)]
    targets = objective.targets(batch, ro, sampling)
    lp, full = response_logprobs(student, ro.prompt_ids, ro.token_ids, ro.mask, sampling, full=objective.full_vocab)
    loss, _ = objective.step_loss(lp, full, ro, targets)
    t["c.student.logprobs"], t["d.loss"] = lp.detach().clone(), loss.detach().clone()
    params = [p for p in student.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    loss.backward()
    for h in hooks:
        h.remove()
    t |= {f"f.grad.{k}": p.grad.clone() for k, p in student.named_parameters() if p.grad is not None}
    t["g.grad_norm"] = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip if cfg.grad_clip is not None else 1e9)
    opt.step()
    t |= {f"h.weights.{k}": v.detach().clone() for k, v in student.state_dict().items()}
    engine.close()
    return {"loss": float(loss)}, t


def part_build(out: Path, short: bool) -> tuple[dict, dict]:
    """The toy build from scratch (seed 0): the shipped recipe, or (short) the same with ~5% of its SFT steps."""
    _setup()
    from safetensors.torch import load_file

    from admitcheck.fingerprint import model_fingerprint
    from admitcheck.pairs.toy import ToyRecipe, build_toy_pair

    t0 = time.perf_counter()
    summary = build_toy_pair(out, seed=0, force=True, recipe=ToyRecipe(**SHORT_BUILD) if short else None)
    info = {"build_seconds": round(time.perf_counter() - t0, 1), "recipe": SHORT_BUILD if short else "shipped"}
    info["summary"] = {k: v for k, v in summary.to_dict().items() if isinstance(v, float) and k != "build_seconds"}
    info["weights"] = {s: model_fingerprint(out / s)["weights"][:16] for s in ("student", "teacher")}
    tensors = {
        f"{s}.{k}": v for s in ("student", "teacher") for k, v in load_file(out / s / "model.safetensors").items()
    }
    return info, tensors


def worker(part: str, out: Path) -> None:
    """One part in this process: its tensors to out/tensors.pt, its summary (with their digest) on stdout. A part
    named `NAME+fused` runs NAME with every torch.optim.AdamW made with fused=True (ATen's fused CPU kernel: its
    own vectorised sqrt, not MKL's vsSqrt)."""
    t0 = time.perf_counter()
    part, _, variant = part.partition("+")
    if variant == "fused":
        torch = _setup()

        class FusedAdamW(torch.optim.AdamW):
            def __init__(self, *args, **kwargs) -> None:
                super().__init__(*args, **kwargs | {"fused": True})

        torch.optim.AdamW = FusedAdamW  # looked up at each call by opd.train and pairs.toy._sft
    if part == "cpu":
        info, tensors = part_cpu()
    elif part == "fingerprint":
        info, tensors = part_fingerprint()
    elif part.startswith("probe"):  # probe or probe:bf16,heavy_noise
        info, tensors = part_probe(part.split(":", 1)[1].split(",") if ":" in part else list(CANDIDATES))
    elif part == "sqrt":
        info, tensors = part_sqrt()
    elif part == "noise_rms":
        info, tensors = part_noise_rms()
    elif part == "speed":
        info, tensors = part_speed()
    elif part == "opd":
        info, tensors = part_opd()
    elif part == "opd_stages":
        info, tensors = part_opd_stages()
    elif part in ("build", "build_short"):
        info, tensors = part_build(out / "toy", short=part == "build_short")
    else:
        raise SystemExit(f"unknown part {part}")
    import torch

    from admitcheck import numerics

    torch.save(tensors, out / "tensors.pt")
    info |= {"numerics": numerics.in_effect(), "digest": digest(tensors), "seconds": round(time.perf_counter() - t0, 2)}
    print(json.dumps(info), flush=True)


def digest(tensors: dict) -> str:
    """sha256 over (name, dtype, shape, raw bytes) of every tensor, sorted by name."""
    h = hashlib.sha256()
    for k in sorted(tensors):
        t = tensors[k].contiguous()
        h.update(f"{k}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(-1).view(__import__("torch").uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


# ---------------------------------------------------------------------------------------------- the orchestrator


def compare(a: dict, b: dict) -> dict:
    """Equal bytes per tensor; the largest |a - b| over the floating ones (equal infinities count 0)."""
    import torch

    differ, worst, where = [], 0.0, None
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k), b.get(k)
        if x is None or y is None or x.shape != y.shape or x.dtype != y.dtype:
            differ.append(k)
            continue
        if torch.equal(x.view(-1).view(torch.uint8), y.view(-1).view(torch.uint8)) if x.numel() else True:
            continue
        differ.append(k)
        if x.is_floating_point():
            d = torch.where(x == y, torch.zeros((), dtype=torch.float64), (x.double() - y.double()).abs())
            d = torch.nan_to_num(d, nan=float("inf"))
            if float(d.max()) > worst:
                worst, where = float(d.max()), k
    return {
        "equal": not differ,
        "tensors": len(a),
        "tensors_differing": len(differ),
        "differing": differ[:80],
        "max_abs_diff": worst,
        "max_abs_diff_at": where,
    }


def run_part(part: str, emulated: str | None, pins: bool, tmp: Path, extra_env: dict | None = None) -> dict:
    """The part in a fresh process (under `qemu -cpu emulated` when given): its summary, tensors and CPU times."""
    tag = "_".join(f"{k}" for k in sorted(extra_env or {}))
    name = re.sub(r"[^A-Za-z0-9]+", "_", f"{part}_{tag}_{emulated or 'native'}_{'pins' if pins else 'nopins'}")
    out = tmp / name
    out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("ADMITCHECK_NUMERIC_PINS", *PINNED_VARS)}
    env |= {
        "ADMITCHECK_NUMERIC_PINS": "on" if pins else "off",
        "OMP_NUM_THREADS": "1",
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONPATH": str(ROOT),
        "PYTHONHASHSEED": "0",
    } | (extra_env or {})
    cmd = [sys.executable, "-B", __file__, "--worker", part, str(out)]
    if emulated:
        cmd = ["nice", "-n", "5", QEMU, "-cpu", emulated, *cmd]
    t0, r0 = time.perf_counter(), os.times()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    r1 = os.times()
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{part} ({emulated or 'native'}): worker failed\n{proc.stderr[-3000:]}")
    info = json.loads(lines[-1])
    info["wall_seconds"] = round(time.perf_counter() - t0, 1)
    info["cpu_seconds"] = round((r1.children_user - r0.children_user) + (r1.children_system - r0.children_system), 1)
    isa = [ln.split("isa:", 1)[1] for ln in (proc.stdout + proc.stderr).splitlines() if "info,cpu,isa:" in ln]
    if isa:
        info["onednn_isa"] = isa[0]
    print(f"{part} {emulated or 'native'} pins={pins} {tag}: {info['digest']} {info['wall_seconds']} s", flush=True)
    return info | {"_out": str(out)}


def pair_of(part: str, emulated: str, pins: bool, tmp: Path, extra_env: dict | None = None) -> dict:
    """The part natively and emulated (both with `extra_env`), compared."""
    import torch

    native, emu = run_part(part, None, pins, tmp, extra_env), run_part(part, emulated, pins, tmp, extra_env)
    a = torch.load(Path(native.pop("_out")) / "tensors.pt", weights_only=True)
    b = torch.load(Path(emu.pop("_out")) / "tensors.pt", weights_only=True)
    slowdown = round(emu["cpu_seconds"] / native["cpu_seconds"], 1) if native["cpu_seconds"] else None
    return {
        "env": extra_env or {},
        "native": native,
        "emulated": emu,
        "comparison": compare(a, b),
        "emulated_over_native_cpu": slowdown,
    }


def c_probe(tmp: Path, name: str, source: str, emulated: str | None) -> dict | str:
    """Compile `source` with cc (once) and run it natively or under `qemu -cpu emulated`: its JSON line."""
    exe = tmp / name
    if not exe.exists():
        (tmp / f"{name}.c").write_text(source)
        try:
            cmd = ["cc", "-O1", "-o", str(exe), str(tmp / f"{name}.c"), "-lm"]
            subprocess.run(cmd, check=True, capture_output=True)
        except (OSError, subprocess.CalledProcessError) as e:
            return f"not compiled: {e}"
    cmd = [QEMU, "-cpu", emulated, str(exe)] if emulated else [str(exe)]
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


def machine() -> dict:
    text = Path("/proc/cpuinfo").read_text()
    model = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
    qemu = subprocess.run([QEMU, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    import torch

    return {"cpu": model.group(1) if model else None, "cores": os.cpu_count(), "qemu": qemu, "torch": torch.__version__}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "avx2_emulation.json"))
    ap.add_argument("--cpu", default="Haswell", help="QEMU CPU model to emulate (an AVX2-only x86-64 CPU)")
    ap.add_argument("--parts", nargs="*", default=list(PARTS), help=f"parts to compare (default all: {PARTS})")
    ap.add_argument("--no-control", action="store_true", help="skip the pins-off control")
    ap.add_argument("--no-diagnosis", action="store_true", help="skip the diagnosis (opd_stages, sqrt, variants)")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker[0], Path(args.worker[1]))
        return
    if shutil.which(QEMU) is None:
        raise SystemExit(f"{QEMU} not found: apt-get install qemu-user-static (QEMU >= 7.2)")
    t0 = time.perf_counter()
    doc: dict = {
        "bench": "bench/avx2_emulation.py",
        "command": "python " + " ".join(["bench/avx2_emulation.py", *sys.argv[1:]]),
        "machine": machine(),
        "emulated_cpu": args.cpu,
    }
    cpu = args.cpu
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        doc["cpuid"] = {"native": c_probe(tmp, "cpuid", CPUID_C, None), "emulated": c_probe(tmp, "cpuid", CPUID_C, cpu)}
        doc["approximate_instructions"] = {
            w: c_probe(tmp, "approx", APPROX_C, e) for w, e in (("native", None), ("emulated", cpu))
        }
        detected = {}
        for emulated in (None, cpu):
            for pins in (True, False):
                info = run_part("cpu", emulated, pins, tmp, {"ONEDNN_VERBOSE": "1"})
                detected[f"{'emulated' if emulated else 'native'}_{'pins' if pins else 'nopins'}"] = {
                    "torch_cpu_capability": info["numerics"].get("torch_cpu_capability"),
                    "onednn_isa": info.get("onednn_isa"),
                    "numerics": info["numerics"],
                }
        doc["detected"] = detected
        doc["speed"] = {w: run_part("speed", e, True, tmp) for w, e in (("native", None), ("emulated", cpu))}
        for r in doc["speed"].values():
            r.pop("_out")
        doc["speed"]["emulated_over_native"] = {
            k: round(doc["speed"]["emulated"][k] / doc["speed"]["native"][k], 1)
            for k in ("train_step_cpu_seconds", "bf16_forward_cpu_seconds")
        }
        doc["pinned"] = {}
        for part in args.parts:
            doc["pinned"][part] = pair_of(part, cpu, True, tmp)
            print(part, json.dumps(doc["pinned"][part]["comparison"]), flush=True)
        if not args.no_diagnosis:  # where the pinned runs part, and what makes them agree
            doc["diagnosis"] = {
                "opd_stages": pair_of("opd_stages", cpu, True, tmp),
                "sqrt": pair_of("sqrt", cpu, True, tmp),
                "sqrt_emulated_amd": pair_of("sqrt", EMULATED_AMD, True, tmp),  # MKL's AMD branch, as natively
                "noise_rms": pair_of("noise_rms", cpu, True, tmp),
                "probe_numpy_avx512_off": pair_of("probe", cpu, True, tmp, {"NPY_DISABLE_CPU_FEATURES": NPY_AVX512}),
                "opd_fused_adamw": pair_of("opd+fused", cpu, True, tmp),
                "build_short_fused_adamw": pair_of("build_short+fused", cpu, True, tmp),
            }
            for k, r in doc["diagnosis"].items():
                print(k, json.dumps(r["comparison"]), flush=True)
        if not args.no_control:
            doc["control_pins_off"] = {p: pair_of(p, cpu, False, tmp) for p in ("fingerprint", "probe:bf16")}
    groups = [doc.get(g, {}) for g in ("pinned", "diagnosis", "control_pins_off")]
    runs = [r for g in groups for r in g.values()]
    doc["summary"] = {
        "pinned_equal": {p: r["comparison"]["equal"] for p, r in doc["pinned"].items()},
        "diagnosis_equal": {p: r["comparison"]["equal"] for p, r in doc.get("diagnosis", {}).items()},
        "control_pins_off_equal": {p: r["comparison"]["equal"] for p, r in doc.get("control_pins_off", {}).items()},
        "emulated_cpu_seconds": round(sum(r["emulated"]["cpu_seconds"] for r in runs), 1),
        "native_cpu_seconds": round(sum(r["native"]["cpu_seconds"] for r in runs), 1),
        "compute_slowdown": doc["speed"]["emulated_over_native"],
    }
    for name, r in [(f"pinned.{k}", v) for k, v in doc["pinned"].items()] + [
        (f"diagnosis.{k}", v) for k, v in doc.get("diagnosis", {}).items()
    ]:
        if "weights" in r["native"]:
            doc["summary"][f"{name}_weights"] = {w: r[w]["weights"] for w in ("native", "emulated")}
    doc["wall_seconds"] = round(time.perf_counter() - t0, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc["summary"], indent=2))


if __name__ == "__main__":
    main()
