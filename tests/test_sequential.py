"""Admission, the pure decision rule: look plan, per-look level, the look against the budget's interval, the ruling.

Closed forms and golden numbers; no model, no file. `screen`'s orchestration is tests/test_screen.py; the error
rates of the rule by simulation are tests/test_coverage.py.
"""

from __future__ import annotations

import ast
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from admitcheck.admission.sequential import (
    Evidence,
    Verdict,
    budget_band,
    confidence_per_look,
    decision_estimator,
    look,
    look_states,
    looks_plan,
    predicted_cost,
    ratio_to_budget,
    ruling,
    verdict,
)
from admitcheck.calibration.curve import Budget
from admitcheck.config import ScreenConfig
from admitcheck.rollout.capacity import CapacitySummary

PROBE = {"min_prompts": 8, "num_prompts": 32, "batch_size": 8, "max_new_tokens": 16, "seed": 0}


def budget(value: float = 0.05, kind: str = "point") -> Budget:
    interval = {"point": (value / 2, value * 2), "lower_bound": (value, math.inf), "upper_bound": (0.0, value)}
    return Budget(value, kind, interval[kind], tolerance=0.05)


def evidence(state: str, k3: float = 0.01, half: float = 0.01, **kw) -> Evidence:
    """Evidence whose functional (on k3, κ 8) is k3 with the interval k3 ± half (0.99, 2 of 4 looks, 16 probes)."""
    fields = dict(
        state=state,
        values={"k3": k3, "k1": 0.0},
        intervals={"k3": (k3 - half, k3 + half)},
        confidence=0.99,
        looks=2,
        probes=16,
        tokens=160,
        max_looks=4,
        top_share=0.05,
        tail_index=0.1,
        mismatch=k3,
        mismatch_interval=(k3 - half, k3 + half),
        kappa=8.0,
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


@pytest.mark.parametrize(
    ("level", "kind", "state"),
    [
        (0.005, "point", "admit"),  # x 0.005 ≪ B_lo 0.025: 96 sequences are enough evidence
        (0.04, "point", "undecided"),  # below B = 0.05 but not clearly below B_lo
        (0.4, "point", "reject"),  # x 0.4 ≫ B_hi 0.1
        (0.07, "point", "undecided"),  # above B but not clearly above B_hi
        (0.4, "lower_bound", "undecided"),  # B ≥ b: (b, inf) never rejects by the bound
        (0.005, "upper_bound", "undecided"),  # B ≤ b: (0, b) never admits by the bound
        (0.4, "upper_bound", "reject"),
    ],
)
def test_look(level, kind, state):
    x = level * np.random.default_rng(0).gamma(4.0, 0.25, 96)  # sequence means, mean `level`
    assert look(x, budget_band(budget(0.05, kind)), kappa=8.0, alpha=0.025) == state


def test_look_is_a_test_of_the_budget_end_at_every_sequence():
    """The look decides when the capital crossed 1/α at any sequence so far (Ville), not only at the last one."""
    x = np.full(64, 0.001)
    assert look(x, (0.025, 0.1), 8.0, 0.025) == "admit"
    late = np.concatenate([x, np.full(400, 0.2)])  # the capital crossed early, then fell: still decided
    assert look(late, (0.025, 0.1), 8.0, 0.025) == "admit"
    assert look(x[:3], (0.025, 0.1), 8.0, 0.025) == "undecided"  # three sequences cannot reach 1/α


def test_look_states_vectorised_matches_scalar():
    rng = np.random.default_rng(0)
    x = rng.gamma(2.0, 0.5, (30, 96)) * rng.choice([0.002, 0.05, 0.3], (30, 1))  # (30 rows, 96 sequences)
    band = budget_band(budget())
    states = look_states(x, band, 8.0, 0.025)
    assert list(states) == [look(row, band, 8.0, 0.025) for row in x]
    assert set(states) == {"admit", "undecided", "reject"}


def test_decision_estimator():
    assert decision_estimator("k3", {"k3": 1, "kl_exact": 1}) == "kl_exact"  # same KL, less variance
    assert decision_estimator("k3", {"k3": 1}) == "k3"
    assert decision_estimator("kl_exact", {"k3": 1}) == "k3"  # no full rows: k3 estimates the same quantity
    assert decision_estimator("k1", {"k1": 1, "kl_exact": 1}) == "k1"  # other scales are measured as themselves


def test_ruling_by_state_budget_interval_and_policy():
    d, marginal, control, by, reason, margin = ruling(evidence("admit", k3=0.004, half=0.001), budget(), "reject")
    assert (d, marginal, control) == ("ADMIT", False, True) and "at 0.99, valid at every look" in reason
    assert reason.startswith("k3 (κ 8) upper bound 0.005 < budget lower bound 0.025")
    assert margin == pytest.approx(0.025 - 0.005) and by == "budget"  # 0.025 of budget doubt vs 0.001 of candidate
    narrow = Budget(0.05, "point", (0.045, 0.1), tolerance=0.05)  # 0.005 of budget doubt below B
    _, _, _, by, _, _ = ruling(evidence("admit", k3=0.01, half=0.02), narrow, "reject")
    assert by == "candidate"
    d, _, _, _, reason, _ = ruling(evidence("admit", half=0.001, max_looks=1), budget(), "reject")
    assert "every look" not in reason  # one look (logs)
    d, marginal, control, by, reason, margin = ruling(evidence("reject", k3=0.3, half=0.05), budget(), "reject")
    assert (d, marginal, control) == ("REJECT", False, True) and "lower bound 0.25 > budget upper bound 0.1" in reason
    assert margin == pytest.approx(0.15)
    # marginal, the budget's doubt: the candidate's interval is clear of B = 0.05 but not of [0.025, 0.1]
    d, marginal, control, by, reason, margin = ruling(evidence("undecided", k3=0.02, half=0.01), budget(), "reject")
    assert (d, marginal, control, by) == ("REJECT", True, True, "budget") and "budget's uncertainty" in reason
    assert margin == pytest.approx(0.025 - 0.03)  # the side of the point estimate, negative
    d, marginal, control, by, reason, _ = ruling(evidence("undecided", k3=0.04, half=0.02), budget(), "reject")
    assert (d, marginal, by) == ("REJECT", True, "candidate") and "still contains the budget" in reason
    for k3, decision in ((0.04, "ADMIT"), (0.06, "REJECT")):
        d, marginal, control, _, reason, _ = ruling(evidence("undecided", k3=k3, half=0.02), budget(), "admit")
        assert (d, marginal, control) == (decision, True, False) and "NO ERROR CONTROL" in reason
    _, _, _, _, reason, _ = ruling(evidence("admit", half=0.001, capped_share=0.3), budget(), "reject")
    assert "heavy tail: 30% of k3 lies above the cap" in reason  # reported beside the verdict; it blocks nothing
    d, marginal, _, _, reason, _ = ruling(evidence("nonfinite", nonfinite=3, engine_nonfinite=3), budget(), "admit")
    assert (d, marginal, reason) == ("REJECT", False, "engine produced 3 non-finite log-probs")
    _, _, _, _, reason, _ = ruling(evidence("nonfinite", k3=math.inf, nonfinite=2), budget(), "admit")
    assert reason.startswith("the reference gives 2 sampled tokens zero probability")


def test_ratio_and_predicted_cost():
    assert ratio_to_budget(0.01, 0.05) == pytest.approx(0.2) and ratio_to_budget(0.01, 0.0) == math.inf
    double = lambda x: 2 * x  # noqa: E731 - a monotone stand-in for the calibration curve
    assert predicted_cost(double, 0.01, 0.005, 0.02) == (0.02, (0.01, 0.04))
    assert predicted_cost(double, 0.01, -0.005, math.inf) == (0.02, None)  # lower end clipped at 0, no upper
    assert predicted_cost(double, math.inf, math.inf, math.inf) == (None, None)


CAPACITY = CapacitySummary(
    ratio_vs_bf16=2.0,
    kv_ratio_equal_memory=2.0,
    num_tokens=2000,
    num_tokens_bf16=1000,
    bytes_per_token=64,
    weight_bytes=10**6,
    fits=True,
    gpu_memory_gib=80.0,
)


def test_verdict_golden():
    values = {"k3": 0.012, "kl_exact": 0.01, "k1": 0.0}
    intervals = {"k3": (0.002, 0.03), "kl_exact": (0.008, 0.012)}
    e = evidence("admit", values=values, intervals=intervals, estimator="kl_exact", top_share=0.04, tail_index=0.3)
    e = Evidence(**(e.__dict__ | {"mismatch": 0.01, "mismatch_interval": (0.008, 0.012), "capped_share": 0.02}))
    v = verdict("fp8_kv", e, budget(0.05), "reject", lambda x: 2 * x, floor=1e-9, capacity=CAPACITY)
    assert isinstance(v, Verdict) and v.admitted and not v.marginal and v.error_control and v.source == "engine"
    assert (v.estimator, v.mismatch, v.mismatch_interval) == ("kl_exact", 0.01, (0.008, 0.012))
    assert v.metric_intervals == intervals  # one interval per metric; the decision's is the estimator's
    assert (v.k3, v.k3_interval) == (0.012, (0.002, 0.03))
    assert v.margin == pytest.approx(0.025 - 0.012) and v.ratio_to_budget == pytest.approx(0.2)
    assert v.quality_cost == pytest.approx(0.02) and v.quality_cost_interval == pytest.approx((0.016, 0.024))
    assert (v.budget, v.budget_interval, v.budget_kind) == (0.05, (0.025, 0.1), "point")
    assert (v.probes, v.tokens, v.looks, v.confidence_per_look) == (16, 160, 2, 0.99)
    assert not v.heavy_tail and v.decided_by == "budget" and v.to_dict()["capacity"] == CAPACITY
    assert (v.capped_share, v.kappa) == (0.02, 8.0)
    assert "k3_interval" not in v.to_dict()


def test_screen_reexports_the_same_objects():
    import admitcheck.admission.screen as screen
    import admitcheck.admission.sequential as admission

    for name in ("Verdict", "Decision", "looks_plan"):
        assert getattr(screen, name) is getattr(admission, name)


def test_admission_is_pure():
    """No file I/O, printing, devices or torch: the module's imports and calls, and a fresh interpreter."""
    path = Path(__file__).resolve().parent.parent / "admitcheck" / "admission" / "sequential.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0}
    assert not imported & {"torch", "os", "io", "pathlib", "admitcheck.io", "shutil", "json", "yaml"}, imported
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert not calls & {"open", "print", "input"}, calls
    code = "import sys, admitcheck.admission.sequential; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
