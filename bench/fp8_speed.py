"""Decode-step time of BF16 vs FP8 W8A8 GEMMs vs an FP8 KV cache, on random weights of real model shapes (Hopper).

    python bench/fp8_speed.py --out bench/results/h200_fp8_speed.json      # one H200, ≤ 2.5 min (--time-limit 140)
    python bench/fp8_speed.py --dry-run --out /tmp/fp8_dry.json             # CPU, tiny shapes: the code paths only

What one measurement is: a stack of n decoder layers (distinct random weights and KV caches, so that weights and
cache stream from HBM as in a real model, not from L2), one decode step of `batch` sequences each attending over
`context` cached tokens: RMSNorm, fused QKV GEMM, RoPE, the new K/V written into the cache, GQA attention over the
cache, O GEMM, residual, RMSNorm, fused gate/up GEMM, SiLU·mul, down GEMM, residual. Captured in a CUDA graph (the
small model is launch-bound without one), replayed: CUDA events, warm-up, the median over `--repeats` trials of
`--replays` replays. decode_step_ms = stack time × L / n + the BF16 final norm and lm_head (vLLM keeps lm_head in
BF16). n = all L layers when they fit in half the free memory, else fewer (Qwen3-8B at 16k: the BF16 cache of all 36
layers at batch 64 is 155 GB, more than the GPU: `full_model_fits` says, per variant, whether weights + the whole
cache fit in 90% of its memory).

Variants (the linear layers × the attention):
  bf16                        BF16 GEMMs (torch.matmul, cuBLAS); SDPA over a BF16 cache
  fp8_w8a8_tensor             torch._scaled_mm, e4m3, per-tensor weight scale, dynamic per-tensor activation scale
  fp8_w8a8_rowwise            torch._scaled_mm, e4m3, per-output-channel weight scales, dynamic per-token ones
  fp8_kv_sdpa_upcast          BF16 GEMMs; the cache stored in e4m3 (scale 1, vLLM's default), upcast to BF16 in
                              memory, then SDPA: the cost of an FP8 cache WITHOUT a kernel that reads it (an upper
                              bound: it moves more bytes than BF16)
  bf16_kv_triton              BF16 GEMMs; this file's Triton split-K decode-attention kernel over a BF16 cache
  fp8_kv_triton               the same kernel reading the e4m3 cache and upcasting in registers: what an FP8 cache
                              saves in a kernel that reads it (compare with bf16_kv_triton: same kernel, half bytes)
  fp8_w8a8_rowwise_kv_triton  both
Components (`components`): the same stacks with only the linear part or only the attention part, per variant.
Caveats: norms, RoPE and the activation quantization are unfused PyTorch kernels (vLLM fuses the per-token FP8
quantization into one), so on the launch-bound small model the FP8 GEMM variants carry ~5 extra small kernels per
GEMM and are pessimistic; `linear_only_ms` shows the GEMM side alone. Prefill is not timed (decode dominates rollouts).
Each measurement is in try/except: its error is recorded in the JSON and the rest go on; past --time-limit the rest
are recorded as skipped. The JSON is rewritten after every model shape, so a killed run keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite e4m3fn


@dataclass(frozen=True)
class Shape:
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    mlp: int
    vocab: int


SHAPES = {
    "smollm2_135m": Shape("smollm2_135m", 30, 576, 9, 3, 64, 1536, 49152),
    "qwen3_8b": Shape("qwen3_8b", 36, 4096, 32, 8, 128, 12288, 151936),
}
TINY = Shape("tiny", 2, 64, 4, 2, 16, 128, 128)
VARIANTS = {  # name: (linear, attention)
    "bf16": ("bf16", "sdpa"),
    "fp8_w8a8_tensor": ("fp8_tensor", "sdpa"),
    "fp8_w8a8_rowwise": ("fp8_rowwise", "sdpa"),
    "fp8_kv_sdpa_upcast": ("bf16", "sdpa_fp8_upcast"),
    "bf16_kv_triton": ("bf16", "triton_bf16"),
    "fp8_kv_triton": ("bf16", "triton_fp8"),
    "fp8_w8a8_rowwise_kv_triton": ("fp8_rowwise", "triton_fp8"),
}


# ------------------------------------------------------------------------------------------------ the kernels

try:
    import triton
    import triton.language as tl

    @triton.jit
    def _decode_split(Q, K, V, Acc, M, L, T, SPLIT_T, S, sm_scale, stride_qb, stride_qh, stride_kb, stride_kh,
                      stride_kt, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr,
                      BLOCK_T: tl.constexpr):  # fmt: skip
        """One (sequence, KV head, split): the G query heads of that KV head over cache rows [s·SPLIT_T, …)
        (unnormalised acc, running max m and sum l, for the combine). K/V of any dtype, upcast in registers."""
        b, h, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        kvh = tl.num_programs(1)
        g, d = tl.arange(0, GP), tl.arange(0, D)
        q = tl.load(Q + b * stride_qb + (h * G + g)[:, None] * stride_qh + d[None, :], mask=g[:, None] < G, other=0.0)
        m_i = tl.full([GP], float("-inf"), tl.float32)
        l_i = tl.zeros([GP], tl.float32)
        acc = tl.zeros([GP, D], tl.float32)
        base = b * stride_kb + h * stride_kh
        for t0 in range(s * SPLIT_T, s * SPLIT_T + SPLIT_T, BLOCK_T):
            t = t0 + tl.arange(0, BLOCK_T)
            ok = t < T
            k = tl.load(K + base + t[:, None] * stride_kt + d[None, :], mask=ok[:, None], other=0.0).to(q.dtype)
            qk = tl.dot(q, tl.trans(k)) * sm_scale  # (GP, BLOCK_T) fp32
            qk = tl.where(ok[None, :], qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp(qk - m_safe[:, None])
            alpha = tl.exp(m_i - m_safe)
            v = tl.load(V + base + t[:, None] * stride_kt + d[None, :], mask=ok[:, None], other=0.0).to(q.dtype)
            acc = acc * alpha[:, None] + tl.dot(p.to(q.dtype), v)
            l_i = l_i * alpha + tl.sum(p, 1)
            m_i = m_new
        row = ((b * kvh + h) * S + s) * GP + g
        tl.store(Acc + row[:, None] * D + d[None, :], acc)
        tl.store(M + row, m_i)
        tl.store(L + row, l_i)

    TRITON_ERROR = None
except Exception as exc:  # no triton (CPU-only machines): the triton variants record this
    TRITON_ERROR = f"{type(exc).__name__}: {exc}"


def triton_decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, T: int) -> torch.Tensor:
    """q (B, H, D) one query per sequence; k, v (B, KVH, Tmax, D) caches of any dtype (scale 1), the first T rows
    valid -> (B, H, D) bf16. Split over the cache (flash-decoding) so that B·KVH·S programs fill the GPU."""
    B, H, D = q.shape
    KVH = k.shape[1]
    G = H // KVH
    GP = max(16, triton.next_power_of_2(G))  # tl.dot needs ≥ 16 rows
    BLOCK_T = 64
    S = max(1, min(math.ceil(T / BLOCK_T), math.ceil(4 * 132 / (B * KVH))))  # ~4 programs per SM of an H200
    SPLIT_T = math.ceil(T / S / BLOCK_T) * BLOCK_T
    S = math.ceil(T / SPLIT_T)
    acc = torch.empty(B * KVH * S * GP, D, device=q.device, dtype=torch.float32)
    m = torch.empty(B * KVH * S * GP, device=q.device, dtype=torch.float32)
    l = torch.empty_like(m)
    _decode_split[(B, KVH, S)](q, k, v, acc, m, l, T, SPLIT_T, S, 1.0 / math.sqrt(D), q.stride(0), q.stride(1),
                               k.stride(0), k.stride(1), k.stride(2), G=G, GP=GP, D=D, BLOCK_T=BLOCK_T)  # fmt: skip
    acc, m, l = acc.view(B, KVH, S, GP, D), m.view(B, KVH, S, GP), l.view(B, KVH, S, GP)
    w = torch.exp(m - m.amax(dim=2, keepdim=True))  # combine the splits
    out = (acc * w[..., None]).sum(2) / (l * w).sum(2)[..., None]  # (B, KVH, GP, D)
    return out[:, :, :G].reshape(B, H, D).to(torch.bfloat16)


def sdpa_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """GQA decode without copying K/V: the G query heads of a KV head are its 'query positions'. q (B, H, D)."""
    B, H, D = q.shape
    KVH = k.shape[1]
    out = F.scaled_dot_product_attention(q.view(B, KVH, H // KVH, D), k, v)  # no mask: every row is in the past
    return out.reshape(B, H, D)


# ------------------------------------------------------------------------------------------------ the layers


class Linear:
    """One weight (N, K) in BF16 and, on CUDA, in e4m3 with a per-tensor and per-row scale."""

    def __init__(self, n: int, k: int, device: str, fp8: bool) -> None:
        self.w = (torch.randn(n, k, device=device) / math.sqrt(k)).to(torch.bfloat16)
        if fp8:
            w = self.w.float()
            self.s_tensor = (w.abs().amax() / FP8_MAX).clamp(min=1e-12).reshape(())
            self.w_tensor = (w / self.s_tensor).to(FP8)  # (N, K) row-major: .t() is the column-major (K, N) b
            self.s_row = (w.abs().amax(dim=1, keepdim=True) / FP8_MAX).clamp(min=1e-12)  # (N, 1)
            self.w_row = (w / self.s_row).to(FP8)
            self.s_row = self.s_row.t().contiguous()  # (1, N): scale_b of the rowwise product

    def __call__(self, x: torch.Tensor, kind: str) -> torch.Tensor:
        if kind == "bf16":
            return x @ self.w.t()
        if kind == "fp8_tensor":  # dynamic per-tensor activation scale, computed in the graph
            sx = (x.abs().amax().float() / FP8_MAX).clamp(min=1e-12)
            xq = (x.float() / sx).to(FP8)
            return torch._scaled_mm(xq, self.w_tensor.t(), scale_a=sx, scale_b=self.s_tensor, out_dtype=torch.bfloat16)
        sx = (x.abs().amax(dim=1, keepdim=True).float() / FP8_MAX).clamp(min=1e-12)  # (M, 1) per token
        xq = (x.float() / sx).to(FP8)
        return torch._scaled_mm(xq, self.w_row.t(), scale_a=sx, scale_b=self.s_row, out_dtype=torch.bfloat16)

    def nbytes(self, kind: str) -> int:
        return self.w.numel() * (2 if kind == "bf16" else 1)


class Layer:
    """One decoder layer's weights and its BF16 and e4m3 KV caches (B, KVH, T, D), T rows filled."""

    def __init__(self, sh: Shape, batch: int, context: int, device: str, fp8_gemm: bool) -> None:
        q, kv = sh.heads * sh.head_dim, sh.kv_heads * sh.head_dim
        self.qkv = Linear(q + 2 * kv, sh.hidden, device, fp8_gemm)
        self.o = Linear(sh.hidden, q, device, fp8_gemm)
        self.gate_up = Linear(2 * sh.mlp, sh.hidden, device, fp8_gemm)
        self.down = Linear(sh.hidden, sh.mlp, device, fp8_gemm)
        self.norm1 = torch.ones(sh.hidden, device=device, dtype=torch.bfloat16)
        self.norm2 = torch.ones(sh.hidden, device=device, dtype=torch.bfloat16)
        shape = (batch, sh.kv_heads, context, sh.head_dim)
        self.k = torch.randn(shape, device=device, dtype=torch.bfloat16)
        self.v = torch.randn(shape, device=device, dtype=torch.bfloat16)
        self.k8, self.v8 = self.k.to(FP8), self.v.to(FP8)


def rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def attention(layer: Layer, q, k_new, v_new, kind: str, pos: int) -> torch.Tensor:
    """Write this step's K/V at row `pos` of the cache (e4m3 for the fp8 kinds), then attend over rows [0, pos]."""
    fp8 = kind in ("sdpa_fp8_upcast", "triton_fp8")
    kc, vc = (layer.k8, layer.v8) if fp8 else (layer.k, layer.v)
    kc[:, :, pos] = k_new.to(kc.dtype)
    vc[:, :, pos] = v_new.to(vc.dtype)
    if kind == "sdpa":
        return sdpa_decode(q, kc, vc)
    if kind == "sdpa_fp8_upcast":
        return sdpa_decode(q, kc.to(torch.bfloat16), vc.to(torch.bfloat16))
    return triton_decode_attention(q, kc, vc, pos + 1)


def decode_step(layers: list[Layer], sh: Shape, x: torch.Tensor, cos, sin, linear: str, attn: str,
                parts: str = "all") -> torch.Tensor:  # fmt: skip
    """x (B, hidden) through the stack. `parts`: "all"; "linear" (no attention: q stands in for its output);
    "attention" (each layer's BF16 QKV output computed once beforehand, then RoPE, the cache write, the attention
    and the residual add only)."""
    B, pos = x.shape[0], layers[0].k.shape[2] - 1
    q_dim, kv_dim = sh.heads * sh.head_dim, sh.kv_heads * sh.head_dim
    for layer in layers:
        qkv = layer.qkv_cached if parts == "attention" else layer.qkv(rms_norm(x, layer.norm1), linear)
        q, k, v = qkv.split([q_dim, kv_dim, kv_dim], dim=-1)
        q = rope(q.reshape(B, sh.heads, sh.head_dim), cos, sin)
        if parts == "linear":
            a = q.reshape(B, q_dim)
        else:
            k = rope(k.reshape(B, sh.kv_heads, sh.head_dim), cos, sin)
            a = attention(layer, q, k, v.reshape(B, sh.kv_heads, sh.head_dim), attn, pos).reshape(B, q_dim)
        if parts == "attention":
            x = x + a  # q_dim == hidden for every shape here
            continue
        x = x + layer.o(a, linear)
        gate, up = layer.gate_up(rms_norm(x, layer.norm2), linear).chunk(2, dim=-1)
        x = x + layer.down(F.silu(gate) * up, linear)
    return x


# ------------------------------------------------------------------------------------------------ timing


def time_fn(fn, device: str, replays: int, repeats: int, graphs: bool) -> tuple[float, str, list[float]]:
    """(median ms per call, mode, per-trial ms): a CUDA graph of fn replayed (eager when capture fails or on CPU)."""
    if device == "cpu":
        fn()
        trials = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(replays):
                fn()
            trials.append((time.perf_counter() - t0) * 1e3 / replays)
        return statistics.median(trials), "eager (cpu)", trials
    mode = "cuda_graph"
    call = fn
    if graphs:
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):  # warm-up off the capture (Triton compiles, cuBLAS picks its algorithms)
                    fn()
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn()
            call = g.replay
        except Exception as exc:  # recorded, then eager
            torch.cuda.synchronize()
            mode = f"eager (graph capture failed: {type(exc).__name__}: {str(exc)[:200]})"
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    trials = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            call()
        end.record()
        end.synchronize()
        trials.append(start.elapsed_time(end) / replays)
    call = g = None  # the graph and its pool are released here
    torch.cuda.empty_cache()  # the graph's private pool goes before the next capture
    return statistics.median(trials), mode, trials


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"


def can_run(linear: str, attn: str, device: str) -> str | None:
    """Why a variant cannot run here (None: it can)."""
    if linear.startswith("fp8") and device == "cpu":
        return "skipped: torch._scaled_mm needs a CUDA GPU with FP8 tensor cores (sm_89+); dry runs skip it"
    if linear.startswith("fp8") and torch.cuda.get_device_capability() < (8, 9):
        return f"skipped: FP8 GEMMs need sm_89+, this GPU is sm_{''.join(map(str, torch.cuda.get_device_capability()))}"
    if attn.startswith("triton") and (device == "cpu" or TRITON_ERROR):
        return f"skipped: the Triton kernel needs CUDA and triton ({TRITON_ERROR or 'cpu'})"
    return None


def measure_shape(sh: Shape, context: int, batch: int, args, device: str, deadline: float) -> dict:
    """Every variant (and its components) of one model shape, context and batch; errors recorded per entry."""
    rec: dict = {"model": sh.name, "context": context, "batch": batch, "variants": {}, "shape": asdict(sh)}
    fp8_gemm = device != "cpu" and torch.cuda.get_device_capability() >= (8, 9)
    q_dim, kv_dim = sh.heads * sh.head_dim, sh.kv_heads * sh.head_dim
    w_params = sh.hidden * (q_dim + 2 * kv_dim) + q_dim * sh.hidden + 3 * sh.hidden * sh.mlp
    kv_bf16 = 2 * batch * kv_dim * context * 2  # bytes per layer
    per_layer = w_params * 4 + kv_bf16 * 1.5  # BF16 + two e4m3 copies of the weights; BF16 + e4m3 caches
    free = torch.cuda.mem_get_info()[0] if device != "cpu" else 8 << 30
    n = max(1, min(sh.layers, int((0.5 * free - kv_bf16) // per_layer)))  # kv_bf16: one layer's upcast cache
    total_mem = torch.cuda.get_device_properties(0).total_memory if device != "cpu" else 0
    rec |= {"layers_timed": n, "weight_params_per_layer": w_params, "kv_bytes_per_layer_bf16": kv_bf16}
    layers = []
    if device != "cpu":
        torch.cuda.reset_peak_memory_stats()
    try:
        torch.manual_seed(0)
        layers = [Layer(sh, batch, context, device, fp8_gemm) for _ in range(n)]
        x = torch.randn(batch, sh.hidden, device=device, dtype=torch.bfloat16)
        ang = torch.rand(sh.head_dim // 2, device=device) * context
        cos, sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
        for layer in layers:  # the attention-only stacks reuse one BF16 QKV output per layer
            layer.qkv_cached = layer.qkv(rms_norm(x, layer.norm1), "bf16")
        lm_head = (torch.randn(sh.vocab, sh.hidden, device=device) / math.sqrt(sh.hidden)).to(torch.bfloat16)
        norm = torch.ones(sh.hidden, device=device, dtype=torch.bfloat16)
        head_ms, head_mode, _ = time_fn(lambda: rms_norm(x, norm) @ lm_head.t(), device, args.replays, args.repeats,
                                        not args.no_graphs)  # fmt: skip
        rec["lm_head_ms"], rec["lm_head_mode"] = head_ms, head_mode
    except Exception as exc:  # recorded (out of memory, ...)
        rec["error"] = error_text(exc)
        layers = []
        if device != "cpu":
            torch.cuda.empty_cache()
        return rec
    for name, (linear, attn) in VARIANTS.items():
        entry: dict = {"linear": linear, "attention": attn}
        rec["variants"][name] = entry
        why = can_run(linear, attn, device)
        if why is None and time.monotonic() > deadline:
            why = "skipped: --time-limit reached"
        if why is not None:
            entry["decode_step_ms"], entry["skipped"] = None, why
            continue
        w_bytes = sum(lin.nbytes(linear) for lin in (layers[0].qkv, layers[0].o, layers[0].gate_up, layers[0].down))
        kv_bytes = kv_bf16 // (2 if attn.endswith("fp8") or attn == "sdpa_fp8_upcast" else 1)
        fits = (w_bytes + kv_bytes) * sh.layers + sh.vocab * sh.hidden * 2 <= 0.9 * total_mem if total_mem else None
        entry |= {"weight_bytes_per_layer": w_bytes, "kv_bytes_per_layer": kv_bytes, "full_model_fits": fits}
        parts = ["all"] + (["linear", "attention"] if args.components else [])
        for part in parts:
            key = "stack" if part == "all" else f"{part}_only"
            done = [k for k, v in VARIANTS.items() if v[0] == linear and k != name and k in rec["variants"]]
            if part == "linear" and any(f"{key}_ms" in rec["variants"][k] for k in done):
                continue  # the same linear part was timed under an earlier variant
            try:
                step = lambda p=part, li=linear, at=attn: decode_step(layers, sh, x, cos, sin, li, at, p)  # noqa: E731
                ms, mode, trials = time_fn(step, device, args.replays, args.repeats, not args.no_graphs)
                entry[f"{key}_ms"] = ms
                entry[f"{key}_trials_ms"] = trials
                entry.setdefault("mode", mode)
            except Exception as exc:  # recorded, the others go on
                entry[f"{key}_error"] = error_text(exc)
                if device != "cpu":
                    torch.cuda.synchronize()
                    torch.cuda.empty_cache()
        if "stack_ms" in entry:
            entry["layer_ms"] = entry["stack_ms"] / n
            entry["decode_step_ms"] = entry["layer_ms"] * sh.layers + rec["lm_head_ms"]
            entry["hbm_gbps_per_layer"] = (w_bytes + kv_bytes) / (entry["layer_ms"] * 1e-3) / 1e9
        else:
            entry["decode_step_ms"], entry["error"] = None, entry.get("stack_error", "not measured")
    if device != "cpu":
        rec["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30  # this shape's stack, caches and graph pools
    base = rec["variants"].get("bf16", {}).get("decode_step_ms")
    tri = rec["variants"].get("bf16_kv_triton", {}).get("decode_step_ms")
    for name, entry in rec["variants"].items():
        ms = entry.get("decode_step_ms")
        entry["speedup_vs_bf16"] = base / ms if base and ms else None
        if name.endswith("kv_triton"):
            entry["speedup_vs_bf16_kv_triton"] = tri / ms if tri and ms else None
    layers.clear()  # free the GPU memory before the next shape
    if device != "cpu":
        torch.cuda.empty_cache()
    return rec


def check_triton_kernel(device: str) -> dict:
    """The Triton kernel against SDPA on a small case (BF16 and e4m3 caches): max abs error, on the GPU only."""
    if device == "cpu" or TRITON_ERROR:
        return {"skipped": f"needs CUDA and triton ({TRITON_ERROR or 'cpu'})"}
    try:
        torch.manual_seed(1)
        q = torch.randn(4, 8, 128, device=device, dtype=torch.bfloat16)
        k = torch.randn(4, 2, 1000, 128, device=device, dtype=torch.bfloat16)
        v = torch.randn_like(k)
        out = {}
        for name, (kc, vc) in {"bf16": (k, v), "fp8": (k.to(FP8), v.to(FP8))}.items():
            ref = sdpa_decode(q, kc.to(torch.bfloat16)[:, :, :900], vc.to(torch.bfloat16)[:, :, :900])
            got = triton_decode_attention(q, kc, vc, 900)
            out[f"max_abs_error_{name}"] = float((got.float() - ref.float()).abs().max())
        out["ok"] = all(e < 0.05 for e in out.values())
        return out
    except Exception as exc:  # recorded
        return {"error": error_text(exc)}


def check_scaled_mm(device: str) -> dict:
    """Both FP8 GEMM paths (`Linear`: per-tensor, rowwise) against the BF16 product on a small case: max error over
    the output's max (e4m3 rounds to ~3 significant bits: a few %). Runs wherever torch._scaled_mm does (CUDA sm_89+;
    torch's CPU build has it too), so a dry run checks the call and the layouts the GPU run will use."""
    out = {}
    torch.manual_seed(2)
    lin = Linear(96, 64, device, True)
    x = torch.randn(32, 64, device=device).to(torch.bfloat16)
    ref = x.float() @ lin.w.float().t()
    for kind in ("fp8_tensor", "fp8_rowwise"):
        try:
            out[kind] = float((lin(x, kind).float() - ref).abs().max() / ref.abs().max())
        except Exception as exc:  # recorded: the GPU run's FP8 variants would fail the same way
            out[kind] = error_text(exc)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="Write the JSON here.")
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes, no FP8 GEMMs, no Triton: code paths.")
    ap.add_argument("--models", nargs="+", default=["smollm2_135m", "qwen3_8b"], choices=sorted(SHAPES))
    ap.add_argument("--contexts", nargs="+", type=int, default=[1024, 16384])
    ap.add_argument("--batch", type=int, default=64, help="Decode batch (sequences).")
    ap.add_argument("--extra-batch", type=int, default=32, help="Also this batch for qwen3_8b at the longest context "
                    "(batch 64 of its BF16 cache does not fit the GPU); 0 = none.")  # fmt: skip
    ap.add_argument("--replays", type=int, default=10, help="Graph replays per trial.")
    ap.add_argument("--repeats", type=int, default=7, help="Trials (the median is reported).")
    ap.add_argument("--no-components", dest="components", action="store_false", help="Skip linear/attention-only.")
    ap.add_argument("--no-graphs", action="store_true", help="Time eagerly (no CUDA graphs).")
    ap.add_argument("--time-limit", type=float, default=140.0, help="Seconds; later ones are skipped (JSON says).")
    args = ap.parse_args()
    t0 = time.monotonic()
    deadline = t0 + args.time_limit
    device = "cpu" if args.dry_run or not torch.cuda.is_available() else "cuda"
    if args.dry_run:
        cases = [(TINY, 32, 4)]
        args.replays, args.repeats = 2, 2
    else:
        cases = [(SHAPES[m], c, args.batch) for m in args.models for c in args.contexts]
        if args.extra_batch and "qwen3_8b" in args.models:
            cases.append((SHAPES["qwen3_8b"], max(args.contexts), args.extra_batch))
    doc = {
        "bench": "fp8_speed", "dry_run": args.dry_run, "device": torch.cuda.get_device_name(0) if device == "cuda"
        else f"cpu ({platform.processor() or platform.machine()})", "torch": torch.__version__,
        "triton": None if TRITON_ERROR else triton.__version__, "cuda": torch.version.cuda,
        "capability": list(torch.cuda.get_device_capability()) if device == "cuda" else None,
        "settings": {"replays": args.replays, "repeats": args.repeats, "graphs": not args.no_graphs,
                     "time_limit_s": args.time_limit, "components": args.components},
        "notes": [
            "decode_step_ms = stack_ms / layers_timed × layers + lm_head_ms (BF16 final norm + lm_head)",
            "fp8_kv_sdpa_upcast upcasts the e4m3 cache to BF16 in memory before SDPA: an upper bound for an FP8 "
            "cache without a kernel that reads it; fp8_kv_triton reads e4m3 in the kernel (compare bf16_kv_triton)",
            "FP8 KV scale 1.0 (vLLM's default); weights random (timings do not depend on values)",
        ],
        "triton_check": check_triton_kernel(device), "scaled_mm_check": check_scaled_mm(device), "results": [],
    }  # fmt: skip
    for sh, context, batch in cases:
        if time.monotonic() > deadline:
            doc["results"].append({"model": sh.name, "context": context, "batch": batch,
                                   "skipped": "--time-limit reached"})  # fmt: skip
            continue
        try:
            rec = measure_shape(sh, context, batch, args, device, deadline)
        except Exception as exc:  # a whole shape failed: record it, go on
            rec = {"model": sh.name, "context": context, "batch": batch, "error": error_text(exc)}
        doc["results"].append(rec)
        doc["seconds"] = time.monotonic() - t0
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(flat(doc), indent=1))
        print(summary(rec), flush=True)
    doc["seconds"] = time.monotonic() - t0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(flat(doc), indent=1))
    print(f"wrote {args.out} in {doc['seconds']:.0f} s", flush=True)


def flat(doc: dict) -> dict:
    """The document with one row per (model, context, batch, variant) in `results` (what `admitcheck plan` reads:
    model, context, batch, variant, decode_step_ms, error) and the per-shape records under `shapes`."""
    rows = []
    for rec in doc["results"]:
        for name, e in rec.get("variants", {}).items():
            rows.append({"model": rec["model"], "context": rec["context"], "batch": rec["batch"], "variant": name,
                         "decode_step_ms": e.get("decode_step_ms"), "speedup_vs_bf16": e.get("speedup_vs_bf16"),
                         "error": e.get("error") or e.get("skipped")})  # fmt: skip
        if not rec.get("variants"):
            rows.append({"model": rec["model"], "context": rec["context"], "batch": rec["batch"], "variant": None,
                         "decode_step_ms": None, "error": rec.get("error") or rec.get("skipped")})  # fmt: skip
    return {k: v for k, v in doc.items() if k != "results"} | {"results": rows, "shapes": doc["results"]}


def summary(rec: dict) -> str:
    head = f"{rec['model']} ctx {rec['context']} batch {rec['batch']}"
    if "variants" not in rec or not rec["variants"]:
        return f"{head}: {rec.get('error') or rec.get('skipped')}"
    parts = [f"{k} {v['decode_step_ms']:.3f} ms" if v.get("decode_step_ms") else f"{k} -"
             for k, v in rec["variants"].items()]  # fmt: skip
    return f"{head} (layers timed {rec.get('layers_timed')}): " + ", ".join(parts)


if __name__ == "__main__":
    main()
