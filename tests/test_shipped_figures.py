"""README and docs quote the shipped SmolLM2 calibration: the figures there are the artifact's, to 3 digits."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_readme_and_docs_quote_the_shipped_smollm2_budget():
    cal = yaml.safe_load((ROOT / "calibrations" / "smollm2.yaml").read_text())
    b, (lo, hi) = cal["budget"]["value"], cal["budget"]["interval"]
    quoted = f"{b:.3g} [{lo:.3g}, {hi:.3g}]"
    assert quoted == "0.138 [0.0679, 0.232]"  # what the texts below say; re-made artifact -> update them
    readme = (ROOT / "README.md").read_text()
    docs = (ROOT / "docs" / "smollm2.md").read_text()
    assert quoted in readme and quoted in docs
    factor = f"{hi / lo:.3g}"
    assert factor in readme and factor in docs
    runs = cal["budget"]["protocol"]["runs"]
    assert f"{runs} runs" in readme and f"{runs} runs" in docs


def test_readme_and_docs_quote_the_two_reproducibility_seeds():
    """Issue 23: the seeds' budgets as README and docs/smollm2.md quote them, and their ratio to the shipped one as
    quoted: issue 23's ±20% holds for seed 1000 (1.15×) and is missed by seed 2000 (1.23×) under the seed-effect model
    of issue 34, the levels' x re-measured as the functional (issue 35); under the isotonic estimator 0.99×, 1.01×."""
    shipped = yaml.safe_load((ROOT / "calibrations" / "smollm2.yaml").read_text())["budget"]["value"]
    readme = (ROOT / "README.md").read_text()
    docs = (ROOT / "docs" / "smollm2.md").read_text()
    for seed, text, ratio in ((1000, "0.158 [0.0553, ∞)", "1.15"), (2000, "0.169 [0.0923, ∞)", "1.23")):
        budget = yaml.safe_load((ROOT / "calibrations" / f"smollm2-seed{seed}.yaml").read_text())["budget"]
        lo, hi = budget["interval"]
        assert hi == float("inf")  # an open upper bound, as the texts say
        assert text == f"{budget['value']:.3g} [{lo:.3g}, ∞)"
        assert text in readme
        assert f"**{budget['value']:.3g}**" in docs and f"[{lo:.3g}, ∞)" in docs
        assert f"{budget['value'] / shipped:.3g}" == ratio and f"{ratio}×" in readme
