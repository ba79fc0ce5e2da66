"""bench/compare_coverage.py under the SmolLM2 protocols (issue 40: the OPD / RL budget ratio's interval, with the
shared seeds, checked by simulation): the measured correlation in bench/results/compare_coverage_smollm2_rl.json is
today's ledgers', one simulated comparison of the two shipped protocols runs, and docs/compare.md's table is the
JSON's."""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "compare_coverage_smollm2_rl.json"


@pytest.fixture()
def bench(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    return importlib.import_module("compare_coverage")


def test_the_measured_correlation_is_the_ledgers(bench) -> None:
    saved = json.loads(RESULT.read_text())["measured"]
    got = json.loads(json.dumps(bench.measured(("smollm2", "smollm2_rl_copy"))))
    assert got.keys() == saved.keys()
    for k, v in saved.items():
        assert got[k] == (pytest.approx(v, rel=1e-9) if isinstance(v, float) else v), k
    assert saved["shared_seeds"] == 3 and saved["matched_runs"] == 24


def test_one_comparison_of_the_smollm2_protocols(bench) -> None:
    """Two simulated comparisons: each calibration under its own protocol (the OPD grid brackets its B, the RL copy's
    B lies under its grid), their ratio interval from `compare_budgets`."""
    protos = importlib.import_module("budget_coverage").protocols()
    row = bench.one_cell(
        "power/power",
        0.4,
        2,
        3,
        protos["smollm2_57"],
        None,
        protos["smollm2_rl_copy"],
        ("smollm2_57", "smollm2_rl_copy"),
    )
    assert row["sims"] == 2 and sum(row["methods"].values()) == 2
    for k in ("paired", "independent"):
        assert 0.0 <= row[k]["coverage"] <= 1.0 and row[k]["median_hi_over_lo"] > 1.0


def test_docs_table_is_the_json() -> None:
    d = json.loads(RESULT.read_text())
    assert d["protocol"].startswith("A: smollm2_57, B: smollm2_rl_copy")
    doc = (ROOT / "docs" / "compare.md").read_text()
    table = doc[doc.index("| truths OPD / RL | ρ | sims | paired: coverage |") :]
    table = table[: table.index("\n\n")]
    lines = table.splitlines()[2:]
    assert len(lines) == len(d["rows"])
    for line, r in zip(lines, d["rows"]):
        p, i = r["paired"], r["independent"]
        a, b = r["shapes"].split("/")

        def width(s: dict) -> str:
            fin = "–" if s["median_log_width_finite"] is None else f"{math.exp(s['median_log_width_finite']):.1f}"
            m = s["median_hi_over_lo"]
            return f"{'∞' if m == math.inf else f'{m:.1f}'} ({fin})"

        cells = [f"{a} / {b}", f"{r['rho']:g}", str(r["sims"]), f"**{p['coverage']:.3f}**",
                 f"{p['lower_above_truth']:.3f}", f"{p['upper_below_truth']:.3f}", width(p), f"{p['open']:.2f}",
                 f"{i['coverage']:.3f}", width(i),
                 f"{r['mean_r']:.2f}", f"{r['model_used'][0]:.2f} / {r['model_used'][1]:.2f}"]  # fmt: skip
        assert [c.strip() for c in line.split("|")[1:-1]] == cells, line
        assert p["coverage"] >= 0.93
    low = min(r["paired"]["coverage"] for r in d["rows"])
    assert f"paired coverage {low:.3f}–" in " ".join(doc.split())


def test_the_second_simulation_seed_is_quoted() -> None:
    """docs/compare.md's re-run with seed 1 is bench/results/compare_coverage_smollm2_rl_seed1.json's: its paired
    coverages, P(lower > R) and open shares, every cell at ≥ 0.93."""
    d = json.loads((ROOT / "bench" / "results" / "compare_coverage_smollm2_rl_seed1.json").read_text())
    assert d["seed"] == 1 and d["measured"] == json.loads(RESULT.read_text())["measured"]
    rows = {(r["shapes"], r["rho"]): r["paired"] for r in d["rows"]}
    assert all(p["coverage"] >= 0.93 for p in rows.values()) and d["ok"]
    doc = " ".join((ROOT / "docs" / "compare.md").read_text().split())
    cov = [f"{rows[k]['coverage']:.2f}" for k in (("power/power", 0.4), ("power/power", 0.8))]
    assert f"paired coverage {cov[0]} (power / power, ρ 0.4), {cov[1]} (ρ 0.8), " in doc
    assert f"{rows['power/sigmoid', 0.4]['coverage']:.2f} (power / sigmoid), " in doc
    assert f"{rows['linear/power2', 0.4]['coverage']:.2f} (linear / power2)" in doc
    assert f"P(lower > R) ≤ {max(p['lower_above_truth'] for p in rows.values()):.2f}" in doc
    opens = ", ".join(f"{rows[k]['open']:.2f}" for k in rows)
    assert f"open intervals {opens} —" in doc
