"""docs/rl.md and README quote the RL copy calibration's noise, bench/results/rl_noise_design.json and
bench/results/rl_coverage*.json (issue 40): the figures there are the committed ledger's and the JSONs'; and
bench/budget_coverage.py's RL copy protocol (the RL budget interval's coverage under its shipped protocol): `tally`'s
figures, the protocol read from the shipped files, one real simulated calibration, a resumed work file."""

from __future__ import annotations

import importlib
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "rl_noise_design.json"
COVERAGE = ROOT / "bench" / "results" / "rl_coverage.json"


def _bench(name: str = "rl_noise_design"):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "bench"))


def test_the_committed_noise_is_the_ledgers() -> None:
    """bench/rl_noise_design.py's `measured` read from today's ledger and artifact equals what the JSON recorded (the
    simulation's inputs), and docs/rl.md quotes it."""
    got = _bench().measured()
    saved = json.loads(RESULT.read_text())["measured"]
    assert got.keys() == saved.keys()
    for k, v in saved.items():
        assert got[k] == v or (isinstance(v, float) and abs(got[k] - v) <= 1e-12 * max(1.0, abs(v))), k
    doc = (ROOT / "docs" / "rl.md").read_text()
    assert f"spread **{got['unperturbed_sd']:.3f} in quality, {got['unperturbed_sd_tau']:.1f} τ**" in doc
    assert f"run sd of {got['run_sd']:.3f} (a pair's {got['pair_sd_tau']:.1f} τ)" in doc
    assert f"seed effect of sd {got['seed_sd']:.3f}" in doc
    assert got["unperturbed_runs"] == 24 and "the 24 runs at k3 < 0.0025" in doc


def test_docs_table_is_the_jsons_median_hi_lo() -> None:
    rows = json.loads(RESULT.read_text())["rows"]
    doc = (ROOT / "docs" / "rl.md").read_text()
    table = doc[doc.index("| run noise (one run's sd) |") :]
    table = table[: table.index("\n\n")]
    lines = {line.split("|")[1].strip(): line for line in table.splitlines()[2:]}
    label = {1.0: "4 τ (as measured)", 0.5: "2 τ", 0.25: "1 τ", 0.125: "0.5 τ"}
    for r in rows:
        if r["truth"] != "power":
            continue
        m = r["median_hi_lo"]
        text = "∞" if m == float("inf") else f"{m:.0f}" if m >= 10 else f"{m:.1f}"
        line = lines[label[r["noise_scale"]]]
        assert text in line, (r, line)
    p2 = next(r for r in rows if r["truth"] == "power2")
    assert f"τ(x/B)²: {p2['median_hi_lo']:.2f}" in table


def _rec(b: float, lo: float, hi: float, method: str = "model", runs: int = 51) -> dict:
    return {"b": b, "lo": lo, "hi": hi, "method": method, "runs": runs}


def test_tally_counts_each_figure() -> None:
    """Five calibrations of B = 1 written by hand: each figure counted as the docstring defines it, the boundary at
    1.05 B on both sides of it."""
    recs = [
        _rec(1.0, 0.5, 2.0),  # covers
        _rec(1.0, 1.04, 3.0),  # lo above B, but under 1.05 B: not an ADMIT at 1.05 B
        _rec(1.0, 1.06, 3.0),  # lo above 1.05 B
        _rec(1.0, 0.2, 0.9, "bracket", 45),  # hi under B and under B / 1.05: a REJECT at 0.95 B
        _rec(1.0, 0.0, math.inf, "bracket", 45),  # open
    ]
    row = _bench("budget_coverage").tally(recs)
    assert row["sims"] == 5
    assert row["coverage"] == pytest.approx(2 / 5)
    assert row["lower_above_truth"] == pytest.approx(2 / 5)
    assert row["admit_at_1.05B"] == pytest.approx(1 / 5)
    assert row["upper_below_truth"] == pytest.approx(1 / 5)
    assert row["reject_at_0.95B"] == pytest.approx(1 / 5)
    assert row["finite"] == pytest.approx(4 / 5)
    assert row["median_interval_factor"] == pytest.approx(4.0)  # 4, 2.88, 2.83, 4.5, inf
    assert row["interval_factor_at_most_2"] == 0.0
    assert row["model_used"] == pytest.approx(3 / 5)
    assert row["mean_runs"] == pytest.approx((3 * 51 + 2 * 45) / 5)


def test_protocol_is_the_shipped_one_and_a_calibration_runs() -> None:
    """The protocol is read from the shipped config and ledger (what the JSON recorded); one simulated calibration
    of it gives an interval around its point, within the run cap."""
    bench = _bench("budget_coverage")
    p = bench.rl_copy_protocol()
    saved = json.loads(COVERAGE.read_text())["protocols"]["smollm2_rl_copy"]
    assert saved.pop("x") == "start"  # `protocols()` adds the x its levels are read in
    for k, v in saved.items():
        got = p[k]
        if isinstance(v, float) or (isinstance(v, list) and v and isinstance(v[0], float)):
            assert got == pytest.approx(v, rel=1e-12), k
        elif isinstance(v, dict | list):
            assert json.loads(json.dumps(got)) == v, k
        else:
            assert got == v, k
    assert p["max_runs"] == 51 and len(p["grid"]) == 7 and p["grid"][0] == pytest.approx(0.005)
    assert p["x_real"] == 1.0 and p["baseline_sd"] == pytest.approx(math.hypot(p["seed_sd"], p["run_sd"]))
    (rec,) = bench.one_chunk(("smollm2_rl_copy", "power", 0, 1, 0, p))
    assert 0 <= rec["lo"] <= rec["hi"] and rec["runs"] <= p["max_runs"]
    assert p["budget"] / 2 <= rec["b"] <= 2 * p["budget"]
    lowered = bench.rl_copy_protocol(lower=10.0)
    assert lowered["grid"] == pytest.approx([g / 10 for g in p["grid"]])


def test_work_file_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--work`: a second start redoes nothing; a chunk cut short (its last line lost) is redone, and its records are
    the first start's (draws seeded by seed, truth and chunk)."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # a spawned worker unpickles one_chunk by name
    bench = importlib.import_module("budget_coverage")
    work = tmp_path / "w.jsonl"
    first = bench.run_chunked(2, ("smollm2_rl_copy",), ("step",), 0, 1, work, 1)
    lines = work.read_text().splitlines()
    assert len(lines) == 2 and first["rows"][0]["sims"] == 2
    again = bench.run_chunked(2, ("smollm2_rl_copy",), ("step",), 0, 1, work, 1)
    assert work.read_text().splitlines() == lines and again["rows"][0] == first["rows"][0]
    work.write_text(lines[0] + "\n")
    redone = bench.run_chunked(2, ("smollm2_rl_copy",), ("step",), 0, 1, work, 1)
    key = ("b", "lo", "hi", "method", "runs")
    assert sorted([json.loads(x)[k] for k in key] for x in work.read_text().splitlines()) == sorted(
        [json.loads(x)[k] for k in key] for x in lines
    )
    assert redone["rows"][0] == first["rows"][0]


def test_docs_table_is_the_json() -> None:
    rows = json.loads(COVERAGE.read_text())["rows"]
    doc = (ROOT / "docs" / "rl.md").read_text()
    table = doc[doc.index("| truth | coverage | P(B_lo > B) | ADMIT at 1.05 B |") :]
    table = table[: table.index("\n\n")]
    lines = {line.split("|")[1].strip(): line for line in table.splitlines()[2:]}
    assert set(lines) == {r["truth"] for r in rows} and len(rows) == 7
    for r in rows:
        m = r["median_interval_factor"]
        figures = ("coverage", "lower_above_truth", "admit_at_1.05B", "upper_below_truth")
        cells = [f"{r[k]:.3f}" for k in figures] + [f"{r['finite']:.2f}", "∞" if m == math.inf else f"{m:.1f}"]
        assert [c.strip() for c in lines[r["truth"]].split("|")[2:-1]] == cells, r["truth"]
        assert r["sims"] == 200
    worst = min(rows, key=lambda r: r["coverage"])
    assert worst["truth"] == "flat_then_rising" and f"it covers {worst['coverage']:.3f}" in doc
    assert f"P(B_lo > B) ≤ {max(r['lower_above_truth'] for r in rows):.2f}" in doc


def test_docs_quote_the_lowered_grid() -> None:
    """docs/rl.md's sentence on the grid 10× lower is bench/results/rl_coverage_lower10.json's."""
    d = json.loads((ROOT / "bench" / "results" / "rl_coverage_lower10.json").read_text())
    rows = {r["truth"]: r for r in d["rows"]}
    assert d["protocols"]["smollm2_rl_copy_lower10"]["grid_lowered"] == 10.0
    assert all(r["sims"] == 100 for r in rows.values())
    doc = " ".join((ROOT / "docs" / "rl.md").read_text().split())
    lo, hi = min(r["coverage"] for r in rows.values()), max(r["coverage"] for r in rows.values())
    assert f"covers flat_then_rising {rows['flat_then_rising']['coverage']:.2f}, every truth {lo:.2f}–{hi:.2f}" in doc
    p = rows["power"]
    assert f"{p['finite']:.0%} finite" in doc and p["median_interval_factor"] == math.inf
    assert f"B_lo lands above B {round(p['lower_above_truth'] * 100)} times in 100" in doc


def _close(a, b) -> bool:
    """Equal structure, floats to 1e-12 relative (least-squares fits read back from the ledgers)."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return a == pytest.approx(b, rel=1e-12) if isinstance(a, float) else a == b


def _grid_row(b: dict, label: str) -> str:
    """docs/rl.md's table row of one 24-run grid."""
    return (f"| {label} | {b['run_sd']:.4f} | {b['seed_sd']:.4f} | {b['baseline_mean']:.3f} | {b['tau']:.4f} | "
            f"{b['pair_sd_tau']:.1f} τ | {b['level_x_and_cost_tau'][-1][1]:.0f} τ | "
            f"{b['median_run_seconds']:.0f} s")  # fmt: skip


def test_lr_noise_is_the_ledgers_and_the_docs_quote_it() -> None:
    """bench/results/rl_lr_noise.json is `lr_noise` of today's ledgers and artifacts, and docs/rl.md's table, ratio
    and budget quote it (and the lr-5e-6 simulation's medians)."""
    saved = json.loads((ROOT / "bench" / "results" / "rl_lr_noise.json").read_text())
    got = json.loads(json.dumps(_bench().lr_noise()))
    assert _close(got, {k: v for k, v in saved.items() if k != "command"})
    doc = " ".join((ROOT / "docs" / "rl.md").read_text().split())
    for k, label in (("lr_1e-5", "lr 1e-5"), ("lr_5e-6", "lr 5e-6")):
        assert saved[k]["runs"] == 24 and saved[k]["two_way_dof"] == 14
        assert _grid_row(saved[k], label) in doc, _grid_row(saved[k], label)
    lo, hi = saved["run_sd_ratio_95"]
    ratio = saved["run_sd_ratio_1e5_over_5e6"]
    assert (f"The run sd falls by a factor of {ratio:.2f} (95% interval {lo:.2f}–{hi:.2f}, "
            f"F test p = {saved['variance_f_test_p']:.2f})") in doc  # fmt: skip
    assert f"(in the lr-1e-5 τ: {saved['pair_sd_tau_5e6_in_tau_1e5']:.1f} τ)" in doc
    old, new = saved["calibrations"]
    assert new["runs"] == 198 and old["runs"] == 45 and new["lr"] == 5e-6
    b, (blo, bhi) = new["budget"], new["interval"]
    assert f"**B = {b:.4f} k3, 95% interval [{blo:.4f}, {bhi:.3f}], hi/lo {new['hi_lo']:.1f}**" in doc
    assert f"residual sd {new['residual_sd_tau']:.2f} τ a run against {old['residual_sd_tau']:.1f} τ" in doc
    sim = json.loads((ROOT / "bench" / "results" / "rl_noise_design_lr5e-6.json").read_text())
    assert sim["measured"]["ledger"] == "calibrations/smollm2_rl_copy_lr5e-6.ledger.jsonl"
    rows = [r for r in sim["rows"] if not r.get("down_cap") and "seed" not in r]
    again = {r["max_runs"]: r["median_hi_lo"] for r in sim["rows"] if r.get("seed") == 1}
    assert f"another simulation seed gives {again[51]:.1f} at 51 runs and {again[99]:.1f} at 99 (`--seed 1`)" in doc
    med = {(r["truth"], r["max_runs"]): r for r in rows}
    cap = {r["max_runs"]: r for r in sim["rows"] if r.get("down_cap")}  # seed 0, as the rows above
    assert all(r["sims"] == 30 and r["grid"] == "shipped" and r["noise_scale"] == 1.0 for r in sim["rows"])
    assert f"median hi/lo of {med['power', 51]['median_hi_lo']:.1f} at 51 runs" in doc
    assert f"{med['power', 99]['median_hi_lo']:.1f} at 99, {med['power', 151]['median_hi_lo']:.1f} at 151" in doc
    r201 = med["power", 201]
    assert f"{r201['median_hi_lo']:.1f} at 201 ({r201['hi_lo_at_most_3']:.0%} ≤ 3)" in doc
    cov = [r["coverage"] for r in rows if r["truth"] == "power"]
    assert f"coverage {min(cov):.2f}–{max(cov):.2f}" in doc
    p2 = (med["power2", 51], med["power2", 99])
    assert f"τ(x/B)², {p2[0]['median_hi_lo']:.1f} at 51 runs and {p2[1]['median_hi_lo']:.1f} at 99" in doc
    assert f"(coverage {p2[0]['coverage']:.2f} and {p2[1]['coverage']:.2f})" in doc
    assert f"give {cap[51]['median_hi_lo']:.1f} at 51 runs and {cap[99]['median_hi_lo']:.1f} at 99" in doc


def test_batch_noise_is_the_ledgers_and_the_docs_quote_it() -> None:
    """bench/results/rl_batch_noise.json is `batch_noise` of today's two ledgers (a least-squares fit: to 1e-12), and
    docs/rl.md's table and sentence quote it."""
    saved = json.loads((ROOT / "bench" / "results" / "rl_batch_noise.json").read_text())
    got = json.loads(json.dumps(_bench().batch_noise()))
    assert _close(got, {k: v for k, v in saved.items() if k != "command"})
    doc = " ".join((ROOT / "docs" / "rl.md").read_text().split())
    for k, label in (("batch_32", "4 prompts × 8"), ("batch_128", "16 prompts × 8")):
        b = saved[k]
        assert b["runs"] == 24 and b["two_way_dof"] == 14
        assert _grid_row(b, label) in doc, _grid_row(b, label)
    lo, hi = saved["run_sd_ratio_95"]
    assert (
        f"by a factor of {saved['run_sd_ratio_32_over_128']:.2f} (95% interval {lo:.2f}–{hi:.2f}, F test p = "
        f"{saved['variance_f_test_p']:.2f}" in doc
    )
    assert f"(in the 4-prompt τ it would be {saved['pair_sd_tau_128_in_tau_32']:.1f} τ)" in doc
    rewards = [round(100 * (1 - saved[k]["baseline_mean"])) for k in ("batch_128", "batch_32")]
    assert f"held-out reward {rewards[0]}% against {rewards[1]}%" in doc
    readme = " ".join((ROOT / "README.md").read_text().split())
    small, big = saved["batch_32"]["pair_sd_tau"], saved["batch_128"]["pair_sd_tau"]
    assert f"its run sd is {saved['run_sd_ratio_32_over_128']:.2f}× lower" in readme
    assert f"a pair's noise is {big:.1f} τ against {small:.1f}" in readme


def test_the_second_seed_of_the_rl_coverage_is_quoted() -> None:
    """docs/rl.md's re-run of the RL coverage with seed 1 is bench/results/rl_coverage_seed1.json's."""
    d = json.loads((ROOT / "bench" / "results" / "rl_coverage_seed1.json").read_text())
    assert d["seed"] == 1 and all(r["sims"] == 100 for r in d["rows"]) and len(d["rows"]) == 7
    rows = {r["truth"]: r for r in d["rows"]}
    flat = rows.pop("flat_then_rising")
    cov = [r["coverage"] for r in rows.values()]
    doc = " ".join((ROOT / "docs" / "rl.md").read_text().split())
    assert (f"flat_then_rising {flat['coverage']:.2f} again (B_hi < B {flat['upper_below_truth']:.2f}), the other six "
            f"{min(cov):.2f}–{max(cov):.2f}, P(B_lo > B) ≤ "
            f"{max(r['lower_above_truth'] for r in [*rows.values(), flat]):.2f} on every truth") in doc  # fmt: skip


def test_the_lr5e6_coverage_and_its_continuation_are_quoted() -> None:
    """docs/rl.md's lr-5e-6 coverage table is bench/results/rl_coverage_lr5e-6.json's (200 a truth, 51 runs, every
    truth within the bench's rule); the 201-run rows (100 a truth) and the second seed's slow_crossing (300) are
    `tally` of their work files; the --budget-so-far figure is the committed ledger's."""
    bc = _bench("budget_coverage")
    d = json.loads((ROOT / "bench" / "results" / "rl_coverage_lr5e-6.json").read_text())
    proto = d["protocols"]["smollm2_rl_copy_lr5e-6"]
    assert proto["max_runs"] == 51 and proto["runs"] == 51 and d["ok"] and len(d["rows"]) == 8
    assert all(r["sims"] == 200 for r in d["rows"])
    doc = " ".join((ROOT / "docs" / "rl.md").read_text().split())
    for r in d["rows"]:
        hl = r["median_interval_factor"]
        hl = "∞" if math.isinf(hl) else f"{hl:.1f}"
        row = (f"| {r['truth']} | {r['coverage']:.3f} | {r['lower_above_truth']:.3f} | {r['admit_at_1.05B']:.3f} | "
               f"{r['upper_below_truth']:.3f} | {r['finite']:.2f} | {hl} |")  # fmt: skip
        assert row in doc, row
        assert r["coverage"] >= 0.93 and r["lower_above_truth"] <= 0.035
    full = json.loads((ROOT / "bench" / "results" / "rl_coverage_lr5e-6_201.json").read_text())
    assert full["protocols"]["smollm2_rl_copy_lr5e-6_201"]["max_runs"] == 201 and len(full["rows"]) == 8
    work = [json.loads(x) for x in (ROOT / full["work"]).read_text().splitlines() if x.strip()]
    for row in full["rows"]:
        mine = [r for r in work if r["truth"] == row["truth"]]
        assert row["sims"] == len(mine) == 100
        assert _close(bc.tally(mine), {k: v for k, v in row.items() if k in bc.tally(mine)})
    power = next(r for r in full["rows"] if r["truth"] == "power")
    assert f"{power['median_interval_factor']:.2f} on power ({power['interval_factor_at_most_3']:.0%} ≤ 3)" in doc
    for r in full["rows"]:
        if r["truth"] != "slow_crossing":
            assert r["coverage"] >= 0.96 and r["lower_above_truth"] <= 0.02 and r["admit_at_1.05B"] <= 0.01
    slow = next(r for r in full["rows"] if r["truth"] == "slow_crossing")
    n = slow["sims"]
    assert f"**coverage {slow['coverage']:.2f}, B_lo > B in {round(slow['lower_above_truth'] * n)} of {n}**" in doc
    seed1 = json.loads((ROOT / "bench" / "results" / "rl_coverage_lr5e-6_201_seed1.json").read_text())
    (s1,) = seed1["rows"]
    w1 = [json.loads(x) for x in (ROOT / "bench" / "results" / "rl_coverage_lr5e-6_201_seed1.work.jsonl").open()]
    assert s1["sims"] == len(w1) and _close(bc.tally(w1), {k: v for k, v in s1.items() if k in bc.tally(w1)})
    assert seed1["seed"] == 1 and s1["truth"] == "slow_crossing" and seed1["protocols"][s1["protocol"]]["runs"] == 96
    k = round(s1["lower_above_truth"] * s1["sims"])
    assert f"**coverage {s1['coverage']:.3f}, B_lo > B in {k} of {s1['sims']}**" in doc
    assert f"together {k + round(slow['lower_above_truth'] * n)} of {s1['sims'] + n}" in doc
    from admitcheck import io
    from admitcheck.calibration.calibrate import ledger_budget
    from admitcheck.config import CalibrateConfig

    path = ROOT / "examples" / "smollm2_calibrate_rl_copy_lr5e-6.yaml"
    b = ledger_budget(io.load_config(path, CalibrateConfig), str(path))
    lo, hi = b.interval
    assert f"**B = {b.budget:.4f} k3, 95% interval [{lo:.4f}, {hi:.4f}], hi/lo {b.interval_factor:.1f}**" in doc
    assert f"to **{b.ledger_runs} runs**" in doc and f"from {b.runs} runs of the ledger's {b.ledger_runs}," in doc
    assert f"through round {b.rounds}" in doc and b.ledger_runs - b.runs < 6  # at most a round's runs in flight
