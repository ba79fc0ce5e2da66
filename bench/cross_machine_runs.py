"""The same runs made on two machines (issues 36, 39): which came out bit-identical, and how far the others' final
qualities lie apart, in units of τ.

    python bench/cross_machine_runs.py calibrations/toy.backtest.ledger.jsonl \\
        bench/toy_remake/toy.backtest.amd_overlap.jsonl --tau 0.0192863772305047 \\
        --out bench/results/toy_remake_cross_machine.json

A run's ledger key (level, seed, recipe) fixes everything it computes; two ledgers holding the same key hold the same
run made twice. The second file holds the 22 runs this project's 2-core AMD EPYC (torch 2.13) made of the toy
re-make's backtest while the device host's Intel Xeon (torch 2.11) made the same ones (2026-12-05, both under the
numeric pins). Reads the ledgers only: no model, no run.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's admitcheck

from admitcheck.calibration.ledger import line_kind, read_run
from admitcheck.calibration.record import RunRecord


def runs(path: Path) -> dict[str, RunRecord]:
    """A ledger's run records by key (the ledger's own reader)."""
    lines = [json.loads(t) for t in path.read_text().splitlines() if t.strip()]
    return {r.key: r for r in (read_run(x, path, i) for i, x in enumerate(lines) if line_kind(x) == "run")}


def kind_of(record: RunRecord) -> str:
    level = record.run_key.level
    if level.kind == "rollout":
        ro = level.rollout
        fp8_kv = ro.get("kv_cache", {}).get("dtype", "auto") != "auto"  # LevelSpec keeps the rollout as dumped
        return f"rollout {ro['dtype']}" + (" + fp8 kv" if fp8_kv else "")
    return level.kind


def compare(a: Path, b: Path, tau: float) -> dict:
    ra, rb = runs(a), runs(b)
    rows = []
    for key in rb:
        if key not in ra:
            continue
        x, y = ra[key], rb[key]
        rows.append(
            {
                "kind": kind_of(x),
                "seed": x.seed,
                "same_start_quality": x.quality_start == y.quality_start,
                "same_mismatch": x.mismatch == y.mismatch,
                "same_first_loss": x.loss_first == y.loss_first,
                "same_final_quality": x.quality == y.quality,
                "final_quality_diff_tau": (y.quality - x.quality) / tau,
            }
        )
    parted = [r["final_quality_diff_tau"] for r in rows if not r["same_final_quality"]]
    by_kind: dict[str, dict] = {}
    for r in rows:
        k = by_kind.setdefault(r["kind"], {"runs": 0, "bit_identical": 0})
        k["runs"] += 1
        k["bit_identical"] += r["same_final_quality"]
    return {
        "a": str(a), "b": str(b), "tau": tau, "runs_in_both": len(rows),
        "same_start_quality": sum(r["same_start_quality"] for r in rows),
        "bit_identical_final": len(rows) - len(parted),
        "parted": len(parted),
        "parted_rms_tau": math.sqrt(sum(d * d for d in parted) / len(parted)) if parted else 0.0,
        "parted_max_abs_tau": max((abs(d) for d in parted), default=0.0),
        "by_kind": by_kind, "rows": rows,
    }  # fmt: skip


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--tau", type=float, required=True)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    result = compare(args.a, args.b, args.tau)
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))
