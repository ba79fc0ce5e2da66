"""bench/smollm2_continuation.py on the lr-5e-6 RL ledger: its start is the ledger's fit as calibrate makes it, one
continuation keeps the ledger's runs and the cap, and docs/rl.md quotes the committed forecast."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
RL = "smollm2_rl_copy_lr5e-6"
RESULTS = ROOT / "bench" / "results"


def _forecasts() -> dict[str, dict]:
    """The committed forecasts by file name."""
    return {p.name: json.loads(p.read_text()) for p in sorted(RESULTS.glob("rl_continuation_lr5e-6*.json"))}


def test_the_start_is_the_ledgers_fit_at_the_runs_the_forecasts_start_from(bench_module) -> None:
    """The first N runs of the ledger, fitted as `curve.estimate` fits them, give each forecast's recorded start; at the
    153 runs through round 19 that is the figure docs/rl.md quotes on the way to the finished 198 (the ledger only
    grows)."""
    cont = bench_module("smollm2_continuation")
    from admitcheck.calibration.curve import Tolerance, estimate

    starts = {(d["start"]["runs"], d["start"]["rounds"]): d["start"] for d in _forecasts().values()}
    assert (153, 19) in starts
    for (runs, rounds), start in starts.items():
        data, base = cont.shipped_runs(RL, runs)
        assert sum(len(v[1]) for v in data.values()) + len(base) == runs
        est = estimate(cont.levels_of(data), base, Tolerance(relative=0.05), confidence=0.95, looks=rounds + 1)
        # a least-squares fit re-run: equal to 1e-9 on any x86-64 CPU (AVX2 and AVX-512 round reductions differently)
        assert est.budget.value == pytest.approx(start["budget"], rel=1e-9)
        assert list(est.budget.interval) == pytest.approx(start["interval"], rel=1e-9)
    doc = " ".join((ROOT / "docs" / "rl.md").read_text().split())
    s = starts[(153, 19)]
    lo, hi = s["interval"]
    assert f"{s['budget']:.4f} [{lo:.4f}, {hi:.4f}], hi/lo {s['factor']:.1f} at 153 runs (round 19)" in doc


def test_a_continuation_keeps_the_ledger_and_stops_at_the_cap(bench_module) -> None:
    """One simulated continuation of the RL ledger's 153 runs: it never passes the cap, spends at least one round when
    one fits, and with the run noise set to zero and the truth the fit itself the budget stays the fit's."""
    cont = bench_module("smollm2_continuation")
    bc = bench_module("budget_coverage")
    from admitcheck.calibration.curve import Tolerance, estimate

    proto = bc.protocols()[f"{RL}_201"]
    tol = Tolerance(relative=proto["relative"])
    data, base = cont.shipped_runs(RL, 153)
    est0 = estimate(cont.levels_of(data), base, tol, confidence=0.95, looks=20)
    cost = est0.model.predict
    est, runs = cont.continue_once(data, base, cost, proto, tol, np.random.default_rng(0), 170, 19)
    assert 153 < runs <= 170
    quiet = proto | {"run_sd": 0.0, "seed_sd": 0.0, "x_cv": 0.0}
    est, runs = cont.continue_once(data, base, cost, quiet, tol, np.random.default_rng(1), 180, 19)
    assert 153 < runs <= 180 and est.method == "model"
    assert math.isclose(est.budget.value, est0.budget.value, rel_tol=0.02)  # twice the cost: -23%


def forecast_row(d: dict, file: str) -> str:
    """docs/rl.md's table row of one committed forecast."""
    (r,) = d["rows"]
    q1, q3 = r["interval_factor_quartiles"]
    cap = f"{r['max_runs']}" + (f" (seed {d['seed']})" if d["seed"] else "")
    return (f"| {cap} | {r['mean_runs']:.1f} | {r['median_interval_factor']:.2f} | {q1:.2f}–{q3:.2f} | "
            f"{r['interval_factor_at_most_3']:.2f} | {r['sims']} | {file} |")  # fmt: skip


def test_the_forecast_is_quoted() -> None:
    """docs/rl.md's forecast table is the committed forecasts', each from the 153 runs through round 19 on the fit
    itself; none at the 201-run cap reaches hi/lo 3, as the text says."""
    doc = " ".join((ROOT / "docs" / "rl.md").read_text().split())
    at_cap = []
    for name, d in _forecasts().items():
        (r,) = d["rows"]
        assert r["truth"] == "fit" and r["design"] == "local"
        assert (d["start"]["runs"], d["start"]["rounds"]) == (153, 19)
        assert forecast_row(d, name) in doc, forecast_row(d, name)
        if r["max_runs"] == 201:
            at_cap.append(r)
    assert len(at_cap) == 2 and all(r["interval_factor_at_most_3"] == 0 for r in at_cap)
    n = sum(r["sims"] for r in at_cap)
    assert f"not one of {n} simulated continuations reached 3" in doc
    readme = " ".join((ROOT / "README.md").read_text().split())
    medians = " and ".join(f"{r['median_interval_factor']:.2f}" for r in at_cap)
    assert f"it ends at median hi/lo {medians} on two seeds, none of {n} ≤ 3" in readme
