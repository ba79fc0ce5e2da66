"""The toy re-make's ledgers, summarised (issues 36, 34, 39): per level, the paired cost and the sd of one pair's
cost in τ, the baselines' spread, the per-run evaluation SE, and what of a pair's spread the evaluation explains.

    python bench/toy_remake_summary.py bench/toy_remake/toy.ledger.jsonl --out bench/results/toy_remake_summary.json

A pair is a level run and the baseline run of the same seed; τ = 5% of the baselines' mean final quality (the
calibration's tolerance). Two evaluations enter a pair's cost, so the evaluation's share of its variance is
2·SE² (SE: the median of the runs' own clustered evaluation SE, `quality_se`); the rest is the training trajectory's:
the floor no evaluation can lower (docs/noise.md). Reads the ledger only: no model, no run.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics as st
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from admitcheck.calibration.ledger import line_kind, read_run


def summarise(path: Path, relative: float = 0.05) -> dict:
    lines = [json.loads(t) for t in path.read_text().splitlines() if t.strip()]
    runs = [read_run(x, path, i) for i, x in enumerate(lines) if line_kind(x) == "run"]
    base, levels = {}, defaultdict(dict)
    for r in runs:
        key = r.run_key
        spec = key.level
        if spec.kind == "baseline":
            base[key.seed] = r
        else:
            levels[(spec.kind, spec.relative_std, spec.staleness)][key.seed] = r
    quality = [r.quality for r in base.values()]
    tau = relative * st.mean(quality)
    se = [r.quality_se for r in runs if r.quality_se is not None]
    se_tau = st.median(se) / tau if se else None
    rows = []
    for (kind, std, stale), by_seed in sorted(levels.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0.0, kv[0][2])):
        costs = [(r.quality - base[s].quality) / tau for s, r in by_seed.items() if s in base]
        sd = st.stdev(costs) if len(costs) > 1 else None
        xs = [r.mismatch for r in by_seed.values() if r.mismatch is not None]
        trajectory = math.sqrt(max(sd**2 - 2 * se_tau**2, 0.0)) if sd is not None and se_tau is not None else None
        rows.append({"kind": kind, "relative_std": std, "staleness": stale, "pairs": len(costs),
                     "x": st.mean(xs) if xs else None, "cost_tau": st.mean(costs), "pair_sd_tau": sd,
                     "trajectory_sd_tau": trajectory})  # fmt: skip
    return {
        "ledger": str(path),
        "runs": len(runs),
        "tau": tau,
        "baselines": len(base),
        "baseline_mean": st.mean(quality),
        "baseline_sd_tau": st.stdev(quality) / tau if len(quality) > 1 else None,
        "evaluation_se_tau": se_tau,
        "median_cpu_seconds": st.median([r.cpu_seconds for r in runs]),
        "levels": rows,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("ledgers", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    result = {p.name: summarise(p) for p in a.ledgers}
    text = json.dumps(result, indent=2)
    if a.out:
        a.out.write_text(text + "\n")
    print(text)
