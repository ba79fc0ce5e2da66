"""A candidate's training-step time relative to the baseline's, for `plan` (docs/plan.md).

    ratio, how = step_time_ratio(StepTimeConfig(rollout_speedup=1.4), share=0.7, bench=None, file=None,
                                 field_name="candidates.0.step_time")      # (0.3 + 0.7 / 1.4, "rollout ×1.4, ...")
    s, how = bench_speedup(read_json("bench/results/h200_fp8_speed.json"), BenchRef(...), file=..., field_name=...)

A rollout speed-up s changes only the rollout part f of a synchronous step: (1 − f) + f / s (Amdahl). Rollouts that
overlap the rest of the step (asynchronous, staleness ≥ 1) make it max(f / s, 1 − f). f is given
(`rollout_share`), or the calibration's baseline runs' own (their `seconds_by_phase`, on the machine that ran them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from admitcheck.calibration.record import RunRecord
from admitcheck.config import StepTimeConfig
from admitcheck.errors import ConfigError


def bench_speedup(bench: dict[str, Any], ref: Any, *, file: str | None, field_name: str) -> tuple[float, str]:
    """(rollout speed-up, what it is) of `ref` (config.BenchRef) in a bench JSON: BF16 decode-step time over the
    variant's, same model, context and batch."""
    rows = [
        r
        for r in bench.get("results", [])
        if r.get("model") == ref.model
        and r.get("context") == ref.context
        and (ref.batch is None or r.get("batch") == ref.batch)
    ]
    batches = sorted({r.get("batch") for r in rows})
    if len(batches) != 1:
        what = "no result" if not batches else f"several batches {batches}: set step_time.bench.batch"
        raise ConfigError(
            f"bench: {what} for model {ref.model!r} at context {ref.context}", file=file, field=field_name
        )

    def step_ms(variant: str) -> float:
        hit = [r for r in rows if r.get("variant") == variant]
        ms = hit[0].get("decode_step_ms") if hit else None
        if not isinstance(ms, (int, float)) or not ms > 0:
            known = sorted({str(r.get("variant")) for r in rows})
            why = hit[0].get("error") if hit else f"no such variant (known: {', '.join(known)})"
            raise ConfigError(f"bench: no decode-step time for {variant!r}: {why}", file=file, field=field_name)
        return float(ms)

    s = step_ms("bf16") / step_ms(ref.variant)
    device = bench.get("device", "unknown GPU")
    return s, f"bench {device}: {ref.model} ctx {ref.context} batch {batches[0]} {ref.variant} decode ×{s:.2f}"


def step_time_ratio(
    st: StepTimeConfig, share: float | None, bench: dict | None, *, file: str | None, field_name: str
) -> tuple[float, str]:
    """(candidate step time / baseline step time, where it came from)."""
    if st.ratio is not None:
        return st.ratio, "given"
    if st.bench is not None:
        if bench is None:
            raise ConfigError("step_time.bench needs the plan's `bench:` JSON", file=file, field=f"{field_name}.bench")
        s, how = bench_speedup(bench, st.bench, file=file, field_name=f"{field_name}.bench")
    elif st.rollout_speedup is not None:
        s, how = st.rollout_speedup, f"rollout ×{st.rollout_speedup:g}"
    elif st.overlap:
        s, how = 1.0, "rollout ×1"
    else:
        return 1.0, "baseline's"
    if share is None:
        raise ConfigError(
            "a rollout speed-up needs the rollouts' share of a step: set rollout_share",
            file=file,
            field="rollout_share",
        )
    if st.overlap:
        return max(share / s, 1 - share), f"{how}, async: max(f/s, 1 − f), f {share:.2f}"
    return (1 - share) + share / s, f"{how}, (1 − f) + f/s, f {share:.2f}"


def measured_rollout_share(runs: list[RunRecord]) -> float | None:
    """Rollouts' share of the baseline runs' step time (their `seconds_by_phase`); None when not recorded."""
    shares = []
    for r in runs:
        if r.run_key.level.kind == "baseline" and r.seconds_by_phase:
            total = sum(r.seconds_by_phase.values())
            if total > 0:
                shares.append(r.seconds_by_phase.get("rollout", 0.0) / total)
    return float(np.mean(shares)) if shares else None
