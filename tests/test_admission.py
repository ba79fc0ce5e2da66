"""Admission, the pure decision rule: look plan, per-look confidence, decision interval, ruling, margin and ratio.

Closed forms and golden numbers; no model, no file. `screen`'s orchestration is tests/test_screen.py.
"""

from __future__ import annotations

import ast
import math
import subprocess
import sys
from pathlib import Path

import pytest

from admitcheck.admission import (
    Evidence,
    Verdict,
    confidence_per_look,
    decision_interval,
    look,
    looks_plan,
    margin_to_budget,
    predicted_cost,
    ratio_to_budget,
    ruling,
    verdict,
)
from admitcheck.config import ScreenConfig
from admitcheck.curve import Budget

PROBE = {"min_prompts": 8, "num_prompts": 32, "batch_size": 8, "max_new_tokens": 16, "seed": 0}


def budget(value: float = 0.05, kind: str = "point") -> Budget:
    interval = {"point": (value / 2, value * 2), "lower_bound": (value, math.inf), "upper_bound": (0.0, value)}
    return Budget(value, kind, interval[kind], tolerance=0.05)


def evidence(state: str, k3: float = 0.01, half: float = 0.01, **kw) -> Evidence:
    """Evidence with the symmetric k3 interval k3 ± half (at 0.99 per look, 2 of 4 looks, 16 probes)."""
    fields = dict(
        state=state,
        values={"k3": k3, "k1": 0.0},
        intervals={"k3": (k3 - half, k3 + half)},
        confidence=0.99,
        looks=2,
        probes=16,
        tokens=160,
        max_looks=4,
    )
    return Evidence(**(fields | kw))


def test_looks_plan_and_confidence_per_look():
    cfg = ScreenConfig.model_validate(
        {"pair": {"student": "s", "teacher": "t"}, "calibration": "c.yaml", "probe": {"prompts": "p", **PROBE}}
        | {"candidates": [{"name": "bf16", "rollout": {"engine": "hf", "dtype": "bfloat16"}}]}
    )
    assert looks_plan(cfg, 1000) == (1, 4, 4)  # first look after batch 1, at most 4 batches, 4 looks
    assert looks_plan(cfg, 20) == (1, 3, 3)  # a short prompt file caps the batches
    assert looks_plan(cfg, 4) == (1, 1, 1)  # fewer prompts than one batch: one look
    assert confidence_per_look(0.95, 1) == 0.95
    assert confidence_per_look(0.95, 4) == pytest.approx(1 - 0.05 / 4)  # Bonferroni: α spent evenly


def test_decision_interval_is_log_scale():
    lo, hi = decision_interval(0.01, 0.0, 0.02)  # symmetric ±0.01 -> log scale: positive, wider above
    assert 0 < lo < 0.01 < 0.02 < hi and math.isclose(lo * hi, 0.01**2)
    assert (lo, hi) == pytest.approx((0.01 / math.e, 0.01 * math.e))
    assert decision_interval(0.0, 0.0, 0.0) == (0.0, 0.0)
    assert decision_interval(math.inf, math.inf, math.inf) == (math.inf, math.inf)


@pytest.mark.parametrize(
    ("k3", "half", "kind", "state"),
    [
        (0.01, 0.001, "point", "admit"),
        (0.2, 0.01, "point", "reject"),
        (0.05, 0.01, "point", "undecided"),
        (0.01, 0.001, "lower_bound", "admit"),  # inside the calibrated range: admitted against b
        (0.2, 0.01, "upper_bound", "reject"),
        (0.01, 0.001, "upper_bound", "unresolvable"),  # B ≤ b: an interval below b proves nothing
        (math.nan, math.nan, "point", "undecided"),
    ],
)
def test_look(k3, half, kind, state):
    assert look(k3, k3 - half, k3 + half, 0.05, kind) == state


def test_ruling_by_state_budget_kind_and_policy():
    d, marginal, reason = ruling(evidence("admit", half=0.001), budget(), "reject")
    assert (d, marginal) == ("ADMIT", False) and reason.startswith("k3 upper bound") and "at 0.99 per look" in reason
    d, marginal, reason = ruling(evidence("admit", half=0.001, max_looks=1), budget(), "reject")
    assert "per look" not in reason  # one look (logs): nominal confidence
    d, marginal, reason = ruling(evidence("reject", k3=0.2), budget(), "reject")
    assert (d, marginal) == ("REJECT", False) and "lower bound" in reason and "only known" not in reason
    d, _, reason = ruling(evidence("reject", k3=0.2), budget(kind="lower_bound"), "reject")
    assert d == "REJECT" and "only known to be ≥" in reason  # a rejection says B may be larger
    for k3, policy, decision in ((0.04, "reject", "REJECT"), (0.04, "admit", "ADMIT"), (0.06, "admit", "REJECT")):
        d, marginal, reason = ruling(evidence("undecided", k3=k3), budget(), policy)
        assert (d, marginal) == (decision, True), (k3, policy)
        assert reason.startswith("marginal:") and f"policy.undecided = {policy}" in reason and "16 probes" in reason
    d, marginal, reason = ruling(evidence("unresolvable"), budget(kind="upper_bound"), "admit")
    assert (d, marginal) == ("ADMIT", True) and "only known to be ≤" in reason  # point estimate below b
    d, marginal, reason = ruling(evidence("nonfinite", nonfinite=3, engine_nonfinite=3), budget(), "admit")
    assert (d, marginal, reason) == ("REJECT", False, "engine produced 3 non-finite log-probs")
    _, _, reason = ruling(evidence("nonfinite", k3=math.inf, nonfinite=2), budget(), "admit")
    assert reason.startswith("the reference gives 2 sampled tokens zero probability")


def test_margin_ratio_and_predicted_cost():
    assert margin_to_budget(0.05, 0.02) == pytest.approx(0.03) and margin_to_budget(0.05, 0.07) < 0
    assert ratio_to_budget(0.01, 0.05) == pytest.approx(0.2) and ratio_to_budget(0.01, 0.0) == math.inf
    double = lambda x: 2 * x  # noqa: E731 - a monotone stand-in for the calibration curve
    assert predicted_cost(double, 0.01, 0.005, 0.02) == (0.02, (0.01, 0.04))
    assert predicted_cost(double, 0.01, -0.005, math.inf) == (0.02, None)  # lower end clipped at 0, no upper
    assert predicted_cost(double, math.inf, math.inf, math.inf) == (None, None)


def test_verdict_golden():
    e = evidence("admit", k3=0.01, half=0.01)
    v = verdict("fp8_kv", e, budget(0.05), "reject", lambda x: 2 * x, floor_k3=1e-9, capacity={"ratio_vs_bf16": 2.0})
    assert isinstance(v, Verdict) and v.admitted and not v.marginal and v.source == "engine"
    assert v.k3_interval == pytest.approx((0.01 / math.e, 0.01 * math.e))  # the decision interval, not ± half
    assert v.margin == pytest.approx(0.05 - 0.01 * math.e) and v.ratio_to_budget == pytest.approx(0.2)
    assert v.quality_cost == pytest.approx(0.02)
    assert v.quality_cost_interval == pytest.approx((0.02 / math.e, 0.02 * math.e))
    assert (v.budget, v.budget_interval, v.budget_kind) == (0.05, (0.025, 0.1), "point")
    assert (v.probes, v.tokens, v.looks, v.confidence_per_look) == (16, 160, 2, 0.99)
    assert v.metric_intervals["k3"] == (0.0, 0.02) and v.to_dict()["capacity"] == {"ratio_vs_bf16": 2.0}


def test_screen_reexports_the_same_objects():
    import admitcheck.admission as admission
    import admitcheck.screen as screen

    for name in ("Verdict", "Decision", "decision_interval", "looks_plan"):
        assert getattr(screen, name) is getattr(admission, name)


def test_admission_is_pure():
    """No file I/O, printing, devices or torch: the module's imports and calls, and a fresh interpreter."""
    path = Path(__file__).resolve().parent.parent / "admitcheck" / "admission.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0}
    assert not imported & {"torch", "os", "io", "pathlib", "admitcheck.io", "shutil", "json", "yaml"}, imported
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert not calls & {"open", "print", "input"}, calls
    code = "import sys, admitcheck.admission; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
