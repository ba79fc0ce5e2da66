"""docs/rl.md and README quote the RL copy calibration's noise and bench/results/rl_noise_design.json (issue 40): the
figures there are the committed ledger's and the JSON's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "rl_noise_design.json"


def _bench():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import rl_noise_design
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return rl_noise_design


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
