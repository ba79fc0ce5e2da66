"""bench/fp8_speed.py off the GPU: the dry run (tiny shapes on CPU) writes the JSON `admitcheck plan` reads, with the
FP8-GEMM and Triton paths skipped and said so; the Triton decode kernel, in Triton's CPU interpreter (float32: the
interpreter does not do bf16), matches SDPA over float32 and e4m3 caches, with several splits and a ragged end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench" / "fp8_speed.py"


@pytest.mark.slow
def test_dry_run_writes_every_variant(tmp_path):
    out = tmp_path / "fp8.json"
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, str(BENCH), "--dry-run", "--out", str(out)], capture_output=True,
                         text=True, env=env, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr
    doc = json.loads(out.read_text())
    assert doc["dry_run"] and doc["device"].startswith("cpu")
    rows = {r["variant"]: r for r in doc["results"]}
    assert set(rows) == {"bf16", "fp8_w8a8_tensor", "fp8_w8a8_rowwise", "fp8_kv_sdpa_upcast", "bf16_kv_triton",
                         "fp8_kv_triton", "fp8_w8a8_rowwise_kv_triton"}  # fmt: skip
    assert rows["bf16"]["decode_step_ms"] > 0 and rows["bf16"]["speedup_vs_bf16"] == 1.0
    assert rows["fp8_kv_sdpa_upcast"]["decode_step_ms"] > 0  # e4m3 cache storage runs on CPU too
    assert "_scaled_mm" in rows["fp8_w8a8_rowwise"]["error"] and rows["fp8_w8a8_rowwise"]["decode_step_ms"] is None
    assert "Triton" in rows["fp8_kv_triton"]["error"]
    # the FP8 GEMM calls themselves (layouts, scale shapes), where this torch build has _scaled_mm (2.13 CPU does)
    checked = {k: e for k, e in doc["scaled_mm_check"].items() if not isinstance(e, str)}
    assert all(e < 0.1 for e in checked.values()), checked
    shape = doc["shapes"][0]
    assert shape["variants"]["bf16"]["attention_only_ms"] > 0 and shape["variants"]["bf16"]["linear_only_ms"] > 0

    # `admitcheck plan` reads it: a step-time ratio from the dry run's e4m3-cache variant
    from admitcheck.admission.step_time import bench_speedup
    from admitcheck.config import BenchRef

    s, _ = bench_speedup(doc, BenchRef(model="tiny", context=32, variant="fp8_kv_sdpa_upcast"), file=None,
                           field_name="f")  # fmt: skip
    assert s == pytest.approx(rows["bf16"]["decode_step_ms"] / rows["fp8_kv_sdpa_upcast"]["decode_step_ms"])


CHECK = """
import sys, torch
sys.path.insert(0, sys.argv[1])
import fp8_speed as b
assert b.TRITON_ERROR is None, b.TRITON_ERROR
torch.manual_seed(1)
worst = 0.0
for D, H, KVH, B, T, Tmax in ((16, 4, 2, 2, 150, 160), (64, 9, 3, 1, 70, 80)):
    q = torch.randn(B, H, D)
    k = torch.randn(B, KVH, Tmax, D)
    v = torch.randn_like(k)
    for kc, vc in ((k, v), (k.to(b.FP8), v.to(b.FP8))):
        ref = b.sdpa_decode(q, kc.float()[:, :, :T], vc.float()[:, :, :T])
        worst = max(worst, float((b.triton_decode_attention(q, kc, vc, T).float() - ref).abs().max()))
print(worst)
"""


@pytest.mark.slow
def test_triton_decode_kernel_matches_sdpa_in_the_interpreter():
    pytest.importorskip("triton")
    env = os.environ | {"TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-c", CHECK, str(BENCH.parent)], capture_output=True, text=True, env=env,
                         timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert float(run.stdout.strip().splitlines()[-1]) < 0.01  # tf32-like rounding of tl.dot


@pytest.mark.slow
def test_every_variant_runs_at_the_smollm2_shape_on_cpu():
    """One SmolLM2-135M layer, batch 16, context 32: the FP8 GEMM variants (torch._scaled_mm, where this torch build
    has it on CPU) and the e4m3 cache give the BF16 output within FP8 rounding — the GPU run's shapes and layouts."""
    import torch

    sys.path.insert(0, str(BENCH.parent))
    import fp8_speed as b

    sh = b.SHAPES["smollm2_135m"]
    torch.manual_seed(0)
    layers = [b.Layer(sh, 16, 32, "cpu", True)]
    x = torch.randn(16, sh.hidden).to(torch.bfloat16)
    ang = torch.rand(sh.head_dim // 2) * 32
    cos, sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
    layers[0].qkv_cached = layers[0].qkv(b.rms_norm(x, layers[0].norm1), "bf16")
    ref = b.decode_step(layers, sh, x, cos, sin, "bf16", "sdpa").float()
    for linear, attn in (("fp8_tensor", "sdpa"), ("fp8_rowwise", "sdpa"), ("bf16", "sdpa_fp8_upcast")):
        try:
            y = b.decode_step(layers, sh, x, cos, sin, linear, attn).float()
        except (RuntimeError, NotImplementedError) as exc:  # no CPU _scaled_mm in this build
            pytest.skip(f"{linear}: {exc}")
        assert y.shape == ref.shape and float((y - ref).abs().max()) < 0.1 * float(ref.abs().max()), (linear, attn)
        for part in ("linear", "attention"):
            assert b.decode_step(layers, sh, x, cos, sin, linear, attn, part).shape == ref.shape
