"""admitcheck.numerics: the pins are set before torch runs, a user's value wins, and pinned training steps give the
same bits on MKL's Intel and AMD code paths (an LD_PRELOAD shim stands in for an Intel CPU, as in
bench/numeric_pins.py) and on every machine (a golden digest)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from admitcheck import numerics

ROOT = Path(__file__).resolve().parents[1]

# digest of `_workload()` under the pins (torch 2.13.0+cpu of requirements/ci-cpu.txt): the same on every x86-64 CPU
# with AVX2 (measured here on an AMD EPYC with AVX-512 natively and on MKL's Intel path through the shim)
GOLDEN = "8e78e651dd139f84"
# what a real Intel CPU computes under the pins (measured 2026-12-07 on an Intel Xeon, family 6 model 167, AVX-512,
# AVX512-FP16 and AMX, torch 2.13.0+cpu): not the AMD digest, though MKL runs CNR:COMPATIBLE there too and an AMD
# CPU on MKL's Intel path (the shim) gives GOLDEN; our reading, not isolated: a kernel whose approximate
# instructions (rcpps / rsqrtps) round by vendor. README, "Same numbers on every x86-64 CPU".
GOLDEN_INTEL = "bfc8ca1c0026d489"
IS_INTEL = "GenuineIntel" in Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else False

WORKLOAD = """
import hashlib, torch
import admitcheck
from admitcheck.pairs.toy import make_model
torch.set_num_threads(1)
model = make_model(128, 2, seed=0)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randint(4, 15, (32, 20), generator=torch.Generator().manual_seed(0))
for _ in range(5):  # forward, backward (MKL GEMMs), AdamW (ATen kernels)
    loss = torch.nn.functional.cross_entropy(model(x[:, :-1]).logits.flatten(0, 1), x[:, 1:].flatten())
    opt.zero_grad(); loss.backward(); opt.step()
h = hashlib.sha256()
for p in model.parameters():
    h.update(p.detach().numpy().tobytes())
with torch.no_grad():  # a BF16 forward (oneDNN where it is allowed)
    h.update(model.to(torch.bfloat16)(x).logits.float().numpy().tobytes())
print(h.hexdigest()[:16])
"""


def _run(env_extra: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if k not in (numerics.SWITCH, *numerics.PINS)}
    env |= env_extra | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", WORKLOAD], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def _intel_shim(tmp_path: Path) -> Path | None:
    """A library answering "yes" to MKL's "is this an Intel CPU?": MKL then takes its Intel code paths here."""
    src, lib = tmp_path / "shim.c", tmp_path / "libshim.so"
    src.write_text("int mkl_serv_intel_cpu_true(void) { return 1; }\nint mkl_serv_intel_cpu(void) { return 1; }\n")
    try:
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return lib


def test_apply_sets_what_is_unset_and_leaves_what_the_user_set():
    env = {"MKL_CBWR": "AUTO", numerics.SWITCH: "on"}
    added = numerics.apply(env)
    assert env["MKL_CBWR"] == "AUTO" and "MKL_CBWR" not in added  # the user's value wins
    assert env["ATEN_CPU_CAPABILITY"] == "avx2" and env["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    default: dict[str, str] = {}
    cache = {numerics.CACHE: numerics.inductor_cache_dir("avx2")}
    assert numerics.apply(default) == numerics.PINS | cache and default == numerics.PINS | cache  # on by default
    mine = {numerics.CACHE: "/my/cache", "ATEN_CPU_CAPABILITY": "avx512"}
    assert numerics.apply(mine) == {k: v for k, v in numerics.PINS.items() if k != "ATEN_CPU_CAPABILITY"}
    assert numerics.inductor_cache_dir("avx512") != cache[numerics.CACHE]  # one directory per kernel set
    for value in ("off", "OFF", "0", "false", "no"):  # switched off: none is set
        off = {numerics.SWITCH: value}
        assert numerics.apply(off) == {} and off == {numerics.SWITCH: value}


CAPABILITY = "import admitcheck, torch; torch.zeros(1).sum(); print(torch.backends.cpu.get_cpu_capability())"


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the pins are x86-64 code paths")
def test_importing_admitcheck_pins_torch_before_its_first_kernel_unless_switched_off():
    """The pins act only when set before torch's first CPU kernel: `import admitcheck` does that (unless off)."""
    env = {k: v for k, v in os.environ.items() if k not in (numerics.SWITCH, *numerics.PINS)}
    env |= {"PYTHONPATH": str(ROOT)}
    on = subprocess.run([sys.executable, "-c", CAPABILITY], env=env, capture_output=True, text=True,
                        check=True).stdout.split()[-1]  # fmt: skip
    assert on in ("AVX2", "DEFAULT")  # the default pins it; DEFAULT: a CPU without AVX2
    off = subprocess.run([sys.executable, "-c", CAPABILITY], env=env | {numerics.SWITCH: "off"}, capture_output=True,
                         text=True, check=True)  # fmt: skip
    off_cap = off.stdout.split()[-1]
    assert off_cap == on or off_cap.startswith("AVX512")  # off leaves torch's own choice (AVX-512 where it is)


@pytest.mark.slow
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="MKL's x86-64 code paths")
def test_pinned_training_steps_are_the_same_bits_on_mkls_intel_and_amd_paths(tmp_path):
    shim = _intel_shim(tmp_path)
    if shim is None:
        pytest.skip("no C compiler (cc) for the Intel shim")
    pinned = {numerics.SWITCH: "on"}
    native, intel = _run(pinned), _run(pinned | {"LD_PRELOAD": str(shim)})
    # the golden digest: what the AMD CPUs measured compute under the pins, and MKL's Intel path on them; a real
    # Intel CPU computes its own (GOLDEN_INTEL)
    assert native == intel == (GOLDEN_INTEL if IS_INTEL else GOLDEN)
    if not IS_INTEL:  # on an Intel CPU the shim changes nothing; elsewhere, unpinned, MKL's two paths differ
        unpinned = {numerics.SWITCH: "off"}
        assert _run(unpinned) != _run(unpinned | {"LD_PRELOAD": str(shim)})


@pytest.mark.slow
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the pins are x86-64 code paths")
def test_a_pinned_process_does_not_load_what_an_unpinned_one_compiled(tmp_path):
    """Inductor's cache does not tell ATEN_CPU_CAPABILITY's kernel sets apart: with one cache directory, the compiled
    fused forward crashed (SIGABRT or SIGSEGV, torch 2.13) in a process under the other capability. The pins' own
    directory keeps them apart: the compiled-forward test passes unpinned, then pinned, then unpinned again, all
    with the default directories (under one fresh temp dir)."""
    test = "tests/test_fused_llama.py::test_compiled_fused_forward_reads_in_place_weight_updates"
    env = {k: v for k, v in os.environ.items() if k not in (numerics.SWITCH, numerics.CACHE, *numerics.PINS)}
    env |= {"TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    for switch in ("off", "on", "off"):
        args = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", test]
        run = subprocess.run(args, env=env | {numerics.SWITCH: switch}, cwd=ROOT, capture_output=True, text=True)
        assert run.returncode == 0, (switch, run.stdout[-2000:], run.stderr[-2000:])
