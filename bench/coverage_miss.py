"""Why a coverage cell misses: re-run the missed calibrations of a `budget_coverage.py --work` result and look inside.

    nice -n 10 python bench/coverage_miss.py bench/results/rl_coverage_lr5e-6_301.json \
        bench/results/rl_coverage_lr5e-6_301_seed1.json --truth slow_crossing --floor 0.01 --jobs 2 \
        --out bench/results/rl_coverage_lr5e-6_301_misses.json          # 2 cores: ~15 min

Each result names its work file, seed and protocol (the protocol as it was simulated, stored in the result: a later
checkout, whose ledgers and artifacts have moved on, re-runs the same calibrations). A chunk's draws are seeded by
(seed, truth, chunk) (`budget_coverage.one_chunk`), so calibration i of a chunk is re-made by re-running the i before
it. For every record of `--truth` whose interval misses its B (B_lo > B or B_hi < B), or the records `--pick
CHUNK:I` names: the record as stored and as re-run (`same`: B, the interval and the runs equal to 1e-9 — the check
that it is the same calibration), its final levels (geometric-mean x, pairs, mean paired cost and the truth's cost at
that x, both in τ), the model's exponent and B̂, and the same final runs refitted by `curve.estimate` with the model's
exponent grid (`model.EXPONENTS`, from p = 0.1) extended down to `--floor`: does a flatter power law cover B?
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's admitcheck, not an installed one
sys.path.insert(0, str(ROOT / "bench"))


def missed(r: dict) -> bool:
    return r["lo"] > r["b"] or r["hi"] < r["b"]


def _interval(est) -> dict:
    lo, hi = (float(v) for v in est.budget.interval)
    m = est.model
    return {"lo": lo, "hi": hi, "method": est.method, "exponent": None if m is None else float(m.exponent),
            "model_b": None if m is None else float(m.value)}  # fmt: skip


def rerun(args: tuple) -> list[dict]:
    """Re-make calibrations `targets` (indices i) of one chunk: (name, truth, chunk, targets, seed, protocol, floor,
    stored records by i). The chunk's calibrations before the largest target are re-run to advance its draws."""
    import budget_coverage as bc

    from admitcheck.calibration import design, model
    from admitcheck.calibration.curve import Tolerance

    name, shape, chunk, targets, seed, proto, floor, stored = args
    rng = np.random.default_rng([seed, bc.SMOLLM2_TRUTHS.index(shape), chunk])
    tol = Tolerance(relative=proto["relative"])
    tau = tol.of(proto["baseline_mean"])
    sd, b_range = bc.noise_and_range(name, proto)
    seen: dict = {}
    real = design.estimate

    def spy(*a, **k):  # the rounds' last estimate's inputs are the calibration's final runs
        seen["args"], seen["kw"] = a, k
        return real(*a, **k)

    base_grid = model.EXPONENTS
    low = np.arange(floor, float(base_grid[0]) - 1e-12, 0.01)
    out = []
    design.estimate = spy
    try:
        for i in range(max(targets) + 1):
            truth = bc.draw_truth(shape, proto, tau, b_range, rng)
            while truth is None:
                truth = bc.draw_truth(shape, proto, tau, b_range, rng)
            f, b = truth
            t0 = time.perf_counter()
            est, runs = bc.calibrate_once(f, proto, sd, tol, rng)
            if i not in targets:
                continue
            model.EXPONENTS = np.concatenate([low, base_grid])
            try:
                flat = real(*seen["args"], **seen["kw"])
            finally:
                model.EXPONENTS = base_grid
            lo_f, hi_f = flat.budget.interval
            levels = seen["args"][0]
            rows = sorted(
                (float(np.exp(np.mean(np.log(lv.x)))), len(lv.cost), float(np.mean(lv.cost)) / tau) for lv in levels
            )
            mine = _interval(est)
            s = stored[i]
            same = (
                math.isclose(s["b"], b, rel_tol=1e-9) and runs == s["runs"]
                and all(math.isclose(s[k], mine[k], rel_tol=1e-9) or s[k] == mine[k] for k in ("lo", "hi"))
            )  # fmt: skip
            out.append({
                "protocol": name, "truth": shape, "seed": seed, "chunk": chunk, "i": i, "b": b, "runs": runs,
                "same": same, "stored": {k: s[k] for k in ("lo", "hi", "method")}, "rerun": mine,
                "floor": floor, "refit_floor": _interval(flat) | {"covers": bool(lo_f <= b <= hi_f)},
                "tau": tau, "levels": [{"x": x, "pairs": n, "cost_tau": c, "truth_tau": float(f(x)) / tau}
                                       for x, n, c in rows],
                "seconds": round(time.perf_counter() - t0, 1),
            })  # fmt: skip
    finally:
        design.estimate = real
    return out


def main(argv: list[str] | None = None) -> dict:
    from concurrent.futures import ProcessPoolExecutor

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", type=Path, help="budget_coverage.py --work results (JSON)")
    ap.add_argument("--truth", required=True)
    ap.add_argument("--pick", nargs="*", default=None, help="CHUNK:I of the first result (default: every miss)")
    ap.add_argument("--floor", type=float, default=0.01, help="the refit's smallest exponent")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    if not 0 < a.floor < 0.1:
        raise SystemExit(f"--floor: must lie in (0, 0.1), got {a.floor}")
    tasks, sources = [], []
    for path in a.results:
        d = json.loads(path.read_text())
        if "work" not in d:
            raise SystemExit(f"{path}: no `work` file named (a result of budget_coverage.py --work)")
        (name,) = {r["protocol"] for r in d["rows"] if r["truth"] == a.truth} or {None}
        if name is None:
            raise SystemExit(f"{path}: no cell of truth {a.truth!r}")
        recs = [json.loads(x) for x in (ROOT / d["work"]).read_text().splitlines() if x.strip()]
        recs = [r for r in recs if r["truth"] == a.truth and r["protocol"] == name]
        if a.pick is not None and path == a.results[0]:
            want = {tuple(int(v) for v in p.split(":")) for p in a.pick}
            picked = [r for r in recs if (r["chunk"], r["i"]) in want]
        else:
            picked = [r for r in recs if a.pick is None and missed(r)]
        by_chunk: dict[int, list[dict]] = {}
        for r in picked:
            by_chunk.setdefault(r["chunk"], []).append(r)
        for chunk, rs in sorted(by_chunk.items()):
            stored = {r["i"]: r for r in recs if r["chunk"] == chunk}
            tasks.append((name, a.truth, chunk, sorted(r["i"] for r in rs), d["seed"], d["protocols"][name], a.floor,
                          stored))  # fmt: skip
        sources.append({"result": str(path), "work": d["work"], "seed": d["seed"], "protocol": name,
                        "records": len(recs), "misses": sum(missed(r) for r in recs)})  # fmt: skip
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max(1, a.jobs)) as pool:
        found = [x for got in pool.map(rerun, tasks) for x in got]
    found.sort(key=lambda x: (x["seed"], x["chunk"], x["i"]))
    out = {
        "truth": a.truth, "sources": sources, "calibrations": found,
        "all_same": all(x["same"] for x in found),
        "covered_with_floor": sum(x["refit_floor"]["covers"] for x in found),
        "seconds": round(time.perf_counter() - t0, 1),
        "command": "python bench/coverage_miss.py " + " ".join(sys.argv[1:] if argv is None else argv),
    }  # fmt: skip
    text = json.dumps(out, indent=1)
    if a.out:
        a.out.write_text(text + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "calibrations"}, indent=1))
    return out


if __name__ == "__main__":
    main()
