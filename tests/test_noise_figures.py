"""README and docs/noise.md quote bench/results/noise_toy.json (issue 36): the figures there are the JSON's."""

from __future__ import annotations

import json
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _figures() -> dict[str, str]:
    d = json.loads((ROOT / "bench" / "results" / "noise_toy.json").read_text())
    tau = d["meta"]["tau"]
    today = next(
        o
        for o in d["options"]
        if (o["train_coupling"], o["eval_coupling"], o["weights"]) == ("inverse_cdf", "inverse_cdf", "last")
    )
    big = next(
        o for o in d["larger_evaluation"] if (o["train_coupling"], o["eval_coupling"]) == ("inverse_cdf", "gumbel")
    )
    cost = d["sampling_cost"]
    eval_se = d["evaluation"]["inverse_cdf/inverse_cdf"]["se_draws_rms"] / tau
    ledger_floor = math.sqrt(d["shipped"]["paired_cost_sd_tau"] ** 2 - today["paired_se_draws_tau"] ** 2)
    final_only = cost["run_train_cpu_s"] + cost["eval_cpu_s_by_samples"]["8"] + cost["eval_cpu_s_by_samples"]["64"]
    return {
        "run sd": f"{today['run_sd_tau']:.2f} τ",
        "evaluation share": f"{eval_se:.2f} τ",
        "trajectory": f"{today['trajectory_sd_tau']:.2f} τ",
        "ledger paired sd": f"{d['shipped']['paired_cost_sd_tau']:.2f} τ",
        "paired eval share": f"{today['paired_se_draws_tau']:.2f} τ",
        "ledger floor": f"{ledger_floor:.2f} τ",
        "64-sample paired sd": f"{big['paired_cost_sd_tau']:.2f} τ",
        "64-sample eval share": f"{big['paired_se_draws_tau']:.2f} τ",
        "cost": f"{final_only / cost['today_run_cpu_s']:.2f}×",
    }


def test_readme_and_docs_quote_the_noise_decomposition():
    figures = _figures()
    assert figures["run sd"] == "0.85 τ" and figures["64-sample paired sd"] == "0.65 τ"  # re-made JSON: update texts
    readme = (ROOT / "README.md").read_text()
    docs = (ROOT / "docs" / "noise.md").read_text()
    for name, quoted in figures.items():
        assert quoted in readme, name
        number = quoted.split()[0].rstrip("×")
        assert number in docs, name


def test_the_must_hold_is_reported_as_not_met():
    """Paired sd ≤ 0.25 τ is not reached on the toy: the texts must say so while the JSON says so."""
    d = json.loads((ROOT / "bench" / "results" / "noise_toy.json").read_text())
    best = min(o["paired_cost_sd_tau"] for o in d["options"] + d["larger_evaluation"] if o["weights"] == "last")
    assert best > 0.25
    assert "**not met**" in (ROOT / "README.md").read_text()
    assert "not met" in (ROOT / "docs" / "noise.md").read_text()


def test_the_smollm2_records_analyse_on_a_machine_without_their_tensors(tmp_path):
    """The SmolLM2 noise step's 16 run records (8 inverse-CDF-trained, 8 Gumbel-trained since 2026-12-06; made on
    H100s, collected without their weights) re-analyse here as bench/results/noise_smollm2.json says: no divergence
    without tokens, with the committed tokens the divergence it ships; the evaluation sd and the Gumbel figures
    docs/noise.md quotes, and each inverse-CDF run's final quality the H200-made ledger's to 1e-8."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("noise_bench", ROOT / "bench" / "noise.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    work = ROOT / "bench/results/noise_smollm2_work"
    rows = [json.loads(x) for x in (work / "runs.jsonl").read_text().splitlines()]
    shipped = json.loads((ROOT / "bench/results/noise_smollm2.json").read_text())
    tau = shipped["meta"]["tau"]
    out = bench.analyse(rows, tmp_path, tau, shipped["shipped"], [])
    assert out["divergence"] == {"inverse_cdf": {}, "gumbel": {}}  # no tokens here
    couplings = {f"{t}/{e}" for t in ("inverse_cdf", "gumbel") for e in ("inverse_cdf", "gumbel")}
    assert set(out["evaluation"]) == couplings
    # the same records give the same figures (to float rounding: numpy's SIMD sums differ by CPU, AVX2 vs AVX-512)
    assert _close(out["evaluation"], shipped["evaluation"]) and _close(out["options"], shipped["options"])
    big_rows = [b for r in rows for b in r.get("big_evals", []) if b["samples"] == 32]  # in the runs since 2026-12-06
    larger = bench.larger_eval(rows, big_rows, tau)
    assert _close(larger, shipped["larger_evaluation"]) and shipped["larger_evaluation_missing"] == []
    with_tokens = bench.analyse(rows, work, tau, shipped["shipped"], [])  # the committed tokens: read, not written
    assert _close(with_tokens["divergence"], shipped["divergence"])
    ev = out["evaluation"]["inverse_cdf/inverse_cdf"]
    assert f"{ev['eval_sd_pooled']:.4f}" == "0.0063" and f"{ev['eval_sd_pooled_tau']:.2f}" == "0.17"
    big = {(o["train_coupling"], o["eval_coupling"]): o for o in larger}
    gg = big["gumbel", "gumbel"]
    agreement = shipped["divergence"]["gumbel"]["1"]["token_agreement"]
    docs = (ROOT / "docs" / "noise.md").read_text()
    assert "| 0.0063 | 0.17 |" in docs
    lo, hi = gg["paired_cost_sd_ci95_tau"]
    assert f"{gg['paired_cost_sd_tau']:.2f} τ [{lo:.2f}, {hi:.2f}]" in docs
    assert f"{gg['paired_trajectory_sd_tau']:.2f} τ" in docs and f"{agreement:.2f}" in docs
    assert all(abs(r["quality"] - r["ledger"]) < 1e-8 for r in shipped["shipped_reproduced"])


def _close(a, b) -> bool:
    """Nested JSON-like values equal, floats to 1e-9 relative (NaN equal to NaN)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def test_the_toy_run_caps_table_is_the_simulations():
    """docs/noise.md's table of the toy protocol at raised caps is bench/results/budget_coverage_toy_caps.json's, whose
    rows are `tally` of its work file; README quotes its power-law medians."""
    import importlib
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    bc = importlib.import_module("budget_coverage")
    d = json.loads((ROOT / "bench" / "results" / "budget_coverage_toy_caps.json").read_text())
    work = [json.loads(x) for x in (ROOT / d["work"]).read_text().splitlines() if x.strip()]
    rows = {(r["protocol"], r["truth"]): r for r in d["rows"]}
    assert len(rows) == 8 and d["ok"]
    for (proto, truth), row in rows.items():
        mine = [r for r in work if (r["protocol"], r["truth"]) == (proto, truth)]
        assert len(mine) == row["sims"] == 100
        got = bc.tally(mine)
        assert _close(got, {k: row[k] for k in got}), proto
    doc = " ".join((ROOT / "docs" / "noise.md").read_text().split())
    for proto, cap in (("toy", "120 (shipped)"), ("toy_160", "160"), ("toy_200", "200"), ("toy_240", "240")):
        p, lin = rows[(proto, "power")], rows[(proto, "linear")]
        lower = max(p["lower_above_truth"], lin["lower_above_truth"])
        assert lower <= 0.01 and min(p["coverage"], lin["coverage"]) >= 0.97
        line = (f"| {cap} | {p['median_interval_factor']:.2f} | {p['interval_factor_at_most_2']:.2f} | "
                f"{lin['median_interval_factor']:.2f} | {lin['interval_factor_at_most_2']:.2f} | "
                f"{p['coverage']:.2f} / {lin['coverage']:.2f} | ≤ 0.01 | {round(p['mean_runs'])} |")  # fmt: skip
        assert line in doc, line
    readme = " ".join((ROOT / "README.md").read_text().split())
    median = {c: rows[(n, "power")]["median_interval_factor"] for n, c in (("toy", 120), ("toy_200", 200))}
    assert f"({median[120]:.2f} at 120, {median[200]:.2f} at 200;" in readme
    s1 = json.loads((ROOT / "bench" / "results" / "budget_coverage_toy_caps_seed1.json").read_text())
    w1 = [json.loads(x) for x in (ROOT / s1["work"]).read_text().splitlines() if x.strip()]
    assert s1["seed"] == 1 and s1["ok"] and s1["protocols"] == d["protocols"]  # the same protocols, another seed
    r1 = {r["protocol"]: r for r in s1["rows"] if r["truth"] == "power"}
    assert len(r1) == len(s1["rows"]) == 4
    for proto, row in r1.items():
        mine = [r for r in w1 if r["protocol"] == proto]
        got = bc.tally(mine)
        assert len(mine) == 100 and _close(got, {k: row[k] for k in got}), proto
    caps = ("toy", "toy_160", "toy_200", "toy_240")
    med = ", ".join(f"{r1[n]['median_interval_factor']:.2f} at {c}" for n, c in zip(caps, (120, 160, 200, 240)))
    share = ", ".join(f"{r1[n]['interval_factor_at_most_2']:.2f}" for n in caps)
    cov = [r["coverage"] for r in r1.values()]
    assert f"median hi/lo **{med}**" in doc
    assert f"(P(hi/lo ≤ 2) {share}), coverage {min(cov):.2f}–{max(cov):.2f}" in doc
    assert max(r["lower_above_truth"] for r in r1.values()) <= 0.01
    m1 = f"{r1['toy']['median_interval_factor']:.2f} and {r1['toy_200']['median_interval_factor']:.2f};"
    assert f"a second simulation seed {m1}" in readme
