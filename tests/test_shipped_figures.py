"""README and docs quote the shipped SmolLM2 calibration: the figures there are the artifact's, to 3 digits."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_readme_and_docs_quote_the_shipped_smollm2_budget():
    cal = yaml.safe_load((ROOT / "calibrations" / "smollm2.yaml").read_text())
    b, (lo, hi) = cal["budget"]["value"], cal["budget"]["interval"]
    quoted = f"{b:.3g} [{lo:.3g}, {hi:.3g}]"
    assert quoted == "0.144 [0.0555, 0.326]"  # what the texts below say; re-made artifact -> update them
    readme = (ROOT / "README.md").read_text()
    docs = (ROOT / "docs" / "smollm2.md").read_text()
    assert quoted in readme and quoted in docs
    factor = f"{hi / lo:.3g}"
    assert factor in readme and factor in docs
    runs = cal["budget"]["protocol"]["runs"]
    assert f"{runs} runs" in readme and f"{runs} runs" in docs
