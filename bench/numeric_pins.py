"""Numeric pins (issue #39): which CPU code paths move the toy build and the calibration's fixed sequences, whether
the pins (`admitcheck.numerics`) make every path give the same bits, and what the pins cost in speed.

    python bench/numeric_pins.py --out bench/results/numeric_pins.json       # builds: ~15-40 min on 2 shared cores
    python bench/numeric_pins.py --demo --out bench/results/numeric_pins_demo.json   # README's demo table per path

Each code path runs in its own process (the libraries read their variables once), with 1 torch thread:
- `toy build`: `build_toy_pair` from scratch (the shipped recipe, seed 0): its weights digest, its wall time, and the
  drift of its models on `calibrations/toy.yaml`'s 8 fixed sequences (`fingerprint.behaviour_drift`, nats/token);
- `shipped pair`: the same drift of the shipped toy/ pair scored on that path (same weights, another forward pass).

The paths: this machine as it is (no pins), and emulations of other CPUs' paths on it. ATen's and oneDNN's ISA are
chosen by their variables (`ATEN_CPU_CAPABILITY`, `ONEDNN_MAX_CPU_ISA`). MKL dispatches by vendor as well as ISA and
honours no variable for that on a non-Intel CPU, so `--intel-shim` (a 2-line C library, built with `cc` into a temp
dir and put in LD_PRELOAD) answers "yes" to MKL's "is this an Intel CPU?" (`mkl_serv_intel_cpu_true`): on this AMD
CPU with AVX-512, MKL then runs its Intel AVX-512 code path (MKL_VERBOSE names it), or with MKL_CBWR=AVX2 its Intel
AVX2 path. An AMX CPU's oneDNN AMX kernels cannot run here (no AMX tiles); the pins cap oneDNN below them anyway.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OFF = {"ADMITCHECK_NUMERIC_PINS": "off"}  # the pins switched off
ON = {"ADMITCHECK_NUMERIC_PINS": "on"}  # the default (admitcheck.numerics)
PINNED_VARS = ("MKL_CBWR", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")  # admitcheck.numerics.PINS' variables
SHIM_C = "int mkl_serv_intel_cpu_true(void) { return 1; }\nint mkl_serv_intel_cpu(void) { return 1; }\n"

# name -> (environment, uses the Intel shim, what it stands for)
PATHS: dict[str, tuple[dict[str, str], bool, str]] = {
    "this_cpu_pinned": (ON, False, "this machine with the pins"),
    "intel_pinned": (ON, True, "MKL's Intel path with the pins (any Intel CPU: the pins fix ATen and oneDNN)"),
    "this_cpu_unpinned": (OFF, False, "this machine without pins (the shipped artifacts' path)"),
    "intel_avx512_unpinned": (OFF, True, "MKL's Intel AVX-512 path (an Intel AVX-512 CPU without pins)"),
    "intel_avx2_unpinned": (
        OFF | {"MKL_CBWR": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
        True,
        "MKL's Intel AVX2 path, ATen and oneDNN at AVX2 (an Intel AVX2-only CPU without pins)",
    ),
    "amd_avx2_unpinned": (
        OFF | {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
        False,
        "MKL's AMD path, ATen and oneDNN at AVX2 (an AMD AVX2-only CPU without pins)",
    ),
}


def worker(out_dir: Path) -> dict:
    """In a fresh process on one code path: build the toy pair, and score it and the shipped pair on the fixed
    sequences."""
    import torch

    import admitcheck  # noqa: F401  the pins, when switched on
    from admitcheck import numerics
    from admitcheck.calibration.artifact import load_calibration
    from admitcheck.fingerprint import behaviour_drift, model_fingerprint
    from admitcheck.io import load_causal_lm
    from admitcheck.pairs.toy import build_toy_pair

    torch.set_num_threads(1)
    cal = load_calibration(ROOT / "calibrations" / "toy.yaml")
    stored = cal.pair.behaviour

    def drift(d: Path) -> dict[str, float]:  # {"student": ..., "teacher": ...} in the results
        return dataclasses.asdict(behaviour_drift(stored, load_causal_lm(d / "student"), load_causal_lm(d / "teacher")))

    shipped = drift(ROOT / "toy")  # before the build: the same weights, this path's forward pass
    t0 = time.perf_counter()
    build_toy_pair(out_dir, seed=0, force=True)
    seconds = time.perf_counter() - t0
    weights = {s: model_fingerprint(out_dir / s)["weights"][:16] for s in ("student", "teacher")}
    return {
        "numerics": numerics.in_effect(),
        "build_seconds": round(seconds, 1),
        "weights": weights,
        "same_weights_as_shipped": {
            s: weights[s] == model_fingerprint(ROOT / "toy" / s)["weights"][:16] for s in weights
        },
        "rebuilt_pair_drift": drift(out_dir),
        "shipped_pair_drift": shipped,
    }


def speed_workload():
    """(step, forward): one AdamW training step of the toy teacher's shape (2 layers x 128, batch 64 x 24 tokens: the
    toy build's inner loop) and one forward of a BF16 copy, as callables (also bench/avx2_emulation.py's)."""
    import torch

    from admitcheck.pairs.toy import make_model

    model = make_model(128, 2, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(4, 15, (64, 24), generator=torch.Generator().manual_seed(0))
    bf16 = make_model(128, 2, seed=0).to(torch.bfloat16).eval()

    def step() -> None:
        loss = torch.nn.functional.cross_entropy(model(x[:, :-1]).logits.flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()

    def forward() -> None:
        with torch.no_grad():
            bf16(x)

    return step, forward


def speed_worker(steps: int) -> dict:
    """Seconds per training step of the toy teacher (2 layers x 128, batch 64 x 24 tokens, AdamW: the toy build's
    inner loop) and per forward of a BF16 copy, on this process's code path."""
    import torch

    import admitcheck  # noqa: F401  the pins, when switched on
    from admitcheck import numerics

    torch.set_num_threads(1)
    step, forward = speed_workload()
    out: dict[str, object] = {"numerics": numerics.in_effect()}
    for name, fn in (("train_step_seconds", step), ("bf16_forward_seconds", forward)):
        fn()  # warm-up
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        out[name] = sorted(times)[len(times) // 2]  # median
    return out


def speed(rounds: int, steps: int) -> dict:
    """Pinned and unpinned alternately (ABAB..., each in a fresh process), so load from other jobs hits both alike;
    the ratio of medians of the per-round medians."""
    runs: dict[str, list[dict]] = {"pinned": [], "unpinned": []}
    for _ in range(rounds):
        for label, extra in (("unpinned", OFF), ("pinned", ON)):
            env = {k: v for k, v in os.environ.items() if k not in ("ADMITCHECK_NUMERIC_PINS", *PINNED_VARS)}
            env |= extra | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
            cmd = [sys.executable, __file__, "--speed-worker", str(steps)]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            runs[label].append(json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1]))
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    out: dict[str, object] = {"rounds": rounds, "steps_per_round": steps}
    for key in ("train_step_seconds", "bf16_forward_seconds"):
        a, b = med([r[key] for r in runs["pinned"]]), med([r[key] for r in runs["unpinned"]])
        out[key] = {"pinned": round(a, 5), "unpinned": round(b, 5), "pinned_over_unpinned": round(a / b, 3)}
    return out


def demo_worker(reports: Path) -> dict:
    """The demo on the shipped pair and calibration (what README's table shows), on this process's code path."""
    import torch

    import admitcheck  # noqa: F401  the pins, when switched on
    from admitcheck import numerics
    from admitcheck.demo import README_TABLE, readme_table, run_demo

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    table = readme_table(run_demo(ROOT / "toy", reports))
    readme = (ROOT / "README.md").read_text()
    start, end = (readme.index(m) for m in README_TABLE)
    return {
        "numerics": numerics.in_effect(),
        "seconds": round(time.perf_counter() - t0, 1),
        "table_sha256": hashlib.sha256(table.encode()).hexdigest()[:16],
        "same_as_readme": table == readme[start + len(README_TABLE[0]) : end].strip(),
        "table": table,
    }


def demo(shim: Path | None, tmp: Path) -> dict:
    """README's demo table printed on each of three code paths: pinned natively and on MKL's Intel path (must be the
    same), and unpinned (the path README's table was made on)."""
    out = {}
    for name, extra, needs_shim in (("this_cpu_pinned", ON, False), ("intel_pinned", ON, True),
                                    ("this_cpu_unpinned", OFF, False)):  # fmt: skip
        if needs_shim and shim is None:
            out[name] = {"skipped": "no C compiler for the Intel shim"}
            continue
        env = {k: v for k, v in os.environ.items() if k not in ("ADMITCHECK_NUMERIC_PINS", *PINNED_VARS)}
        env |= extra | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
        if needs_shim:
            env["LD_PRELOAD"] = str(shim)
        cmd = [sys.executable, __file__, "--demo-worker", str(tmp / f"reports_{name}")]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"demo {name}: worker failed\n{proc.stderr[-3000:]}")
        out[name] = json.loads(lines[-1])
        print("demo", name, out[name]["table_sha256"], out[name]["seconds"], flush=True)
    return out


def run_path(name: str, shim: Path | None, tmp: Path) -> dict:
    env_extra, needs_shim, what = PATHS[name]
    env = {k: v for k, v in os.environ.items() if k not in ("ADMITCHECK_NUMERIC_PINS", *PINNED_VARS)}
    env |= env_extra | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    if needs_shim:
        if shim is None:
            return {"what": what, "skipped": "no C compiler for the Intel shim"}
        env["LD_PRELOAD"] = str(shim)
    cmd = [sys.executable, __file__, "--worker", str(tmp / name)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{name}: worker failed\n{proc.stderr[-3000:]}")
    return {"what": what, "env": env_extra | ({"LD_PRELOAD": "intel shim"} if needs_shim else {})} | json.loads(
        lines[-1]
    )


def build_shim(tmp: Path) -> Path | None:
    src, lib = tmp / "intel_shim.c", tmp / "libintel_shim.so"
    src.write_text(SHIM_C)
    try:
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(lib), str(src)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return lib


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "numeric_pins.json"))
    ap.add_argument("--paths", nargs="*", default=list(PATHS), help=f"code paths to run (default all: {list(PATHS)})")
    ap.add_argument("--rounds", type=int, default=5, help="speed: alternating pinned/unpinned rounds")
    ap.add_argument("--steps", type=int, default=20, help="speed: timed steps per round")
    ap.add_argument("--demo", action="store_true", help="only the demo table on three code paths (writes --out)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--speed-worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--demo-worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.demo_worker:
        print(json.dumps(demo_worker(Path(args.demo_worker))), flush=True)
        return
    if args.demo:
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as d:
            runs = demo(build_shim(Path(d)), Path(d))
        hashes = {k: r.get("table_sha256") for k, r in runs.items()}
        doc = {
            "bench": "bench/numeric_pins.py --demo",
            "command": "python " + " ".join(["bench/numeric_pins.py", *sys.argv[1:]]),
            "machine": {"cpu": cpu_model(), "cores": os.cpu_count()},
            "wall_seconds": round(time.perf_counter() - t0, 1),
            "pinned_tables_equal": hashes.get("this_cpu_pinned") == hashes.get("intel_pinned"),
            "paths": runs,
        }
        Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
        print(json.dumps({k: v for k, v in doc.items() if k != "paths"}, indent=2))
        return
    if args.worker:
        print(json.dumps(worker(Path(args.worker))), flush=True)
        return
    if args.speed_worker:
        print(json.dumps(speed_worker(args.speed_worker)), flush=True)
        return
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        shim = build_shim(tmp)
        results = {}
        for name in args.paths:
            results[name] = run_path(name, shim, tmp)
            print(name, json.dumps(results[name]), flush=True)
    cost = speed(args.rounds, args.steps)
    print("speed", json.dumps(cost), flush=True)
    from admitcheck.calibration.artifact import load_calibration

    budget = load_calibration(ROOT / "calibrations" / "toy.yaml").budget.value
    pinned = [r for k, r in results.items() if k.endswith("_pinned") and "weights" in r]
    unpinned = {k: r for k, r in results.items() if k.endswith("_unpinned") and "weights" in r}
    base = results.get("this_cpu_unpinned", {}).get("build_seconds")
    summary = {
        "pinned_paths_build_the_same_weights": len({json.dumps(r["weights"]) for r in pinned}) == 1 if pinned else None,
        "unpinned_weights_by_path": {k: r["weights"] for k, r in unpinned.items()},
        "max_shipped_pair_drift_across_paths": max(
            (max(r["shipped_pair_drift"].values()) for r in results.values() if "weights" in r), default=None
        ),
        "budget": budget,
        "tolerance": 0.01 * budget,
        "speed": cost,
        "build_seconds_pinned_over_unpinned": (
            round(results["this_cpu_pinned"]["build_seconds"] / base, 2)
            if base and "this_cpu_pinned" in results
            else None
        ),
    }
    import torch

    doc = {
        "bench": "bench/numeric_pins.py",
        "command": "python " + " ".join(["bench/numeric_pins.py", *sys.argv[1:]]),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "torch": torch.__version__},
        "wall_seconds": round(time.perf_counter() - t0, 1),
        "summary": summary,
        "paths": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
