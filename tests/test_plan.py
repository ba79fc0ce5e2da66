"""admission.plan and `admitcheck plan`: the shipped toy example, and synthetic ledgers with eval.every > 0 whose
time-to-quality is known in closed form (a level that learns at half the speed takes twice the steps)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from admitcheck import io
from admitcheck.admission.plan import plan
from admitcheck.cli import app
from admitcheck.config import PlanConfig
from tests.test_cli import assert_user_error

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "toy_plan.yaml"
TAU = 0.0192863772305047  # calibrations/toy.yaml's τ, which the synthetic ledgers below are read against


def test_toy_example_runs_and_sorts_by_speedup(tmp_path):
    png = tmp_path / "plan.png"
    result = CliRunner().invoke(app, ["plan", str(EXAMPLE), "--json", "--plot", str(png)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert "Infinity" not in result.stdout and "NaN" not in result.stdout  # strict JSON: ∞ and NaN are null
    rows = {r["name"]: r for r in doc["rows"]}
    speedups = [r["speedup"] for r in doc["rows"]]
    assert speedups == sorted(speedups, reverse=True)
    assert rows["baseline"]["speedup"] == 1.0 and rows["baseline"]["efficiency"]["n"] == 31
    assert rows["fp8_kv"]["source"] == "measured: fp8_kv" and rows["fp8_kv"]["efficiency"]["n"] == 16
    assert rows["stale_1"]["source"] == "measured: stale-1"
    assert rows["fp8_block_unrun"]["source"] == "noise curve" and rows["fp8_block_unrun"]["noise_curve"] is None
    # a measured row also says what the noise levels predict at its x: staleness learns faster than noise there
    assert rows["stale_1"]["noise_curve"]["mean"] < rows["stale_1"]["efficiency"]["mean"]
    # rollout ×1.15 on 70% of the step: (1 − 0.7) + 0.7 / 1.15
    assert rows["fp8_kv"]["step_time_ratio"] == pytest.approx(0.3 + 0.7 / 1.15)
    assert rows["stale_1"]["step_time_ratio"] == pytest.approx(0.7)  # async: max(0.7, 0.3)
    assert doc["calibration"]["evals_per_run"] == 2 and any("eval.every 0" in w for w in doc["warnings"])
    if png.exists():  # matplotlib installed
        assert png.read_bytes()[:4] == b"\x89PNG"
    table = CliRunner().invoke(app, ["plan", str(EXAMPLE)])
    assert table.exit_code == 0 and "speed-up" in table.output and "eval.every 0" in table.output


def test_validate_accepts_a_plan_config():
    result = CliRunner().invoke(app, ["validate", str(EXAMPLE), "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["kind"] == "plan" and "fp8_kv" in info["candidates"]


# ------------------------------------------------------------------------------------------ synthetic ledgers


def _curve(tau_steps: float, q0: float = 2.17, q_end: float = 0.40, every: int = 10, steps: int = 200, rise=None):
    """evals of q(t) = q_end + (q0 − q_end)·exp(−t / tau_steps) every `every` steps; `rise` (step, amount) adds a
    late rise from that step on."""
    out = []
    for t in range(0, steps + 1, every):
        q = q_end + (q0 - q_end) * math.exp(-t / tau_steps)
        if rise is not None and t >= rise[0]:
            q += rise[1]
        out.append([t, q, 0.5])
    return out


def _run(kind: str, seed: int, evals, x: float | None, relative_std: float = 0.0, staleness: int = 0) -> dict:
    level = {"kind": kind, "relative_std": relative_std, "rollout": None, "staleness": staleness}
    phases = {"rollout": 3.0, "teacher": 1.0, "backward": 1.0}
    return {"kind": "run", "key": json.dumps({"level": level, "seed": seed}), "seed": seed, "evals": evals,
            "mismatch": x, "quality": evals[-1][1], "in_run_k3": [x or 0.0] * 20,
            "seconds_by_phase": phases}  # fmt: skip


def synthetic(tmp_path: Path, every: int = 10) -> Path:
    """calibrations/toy.yaml copied beside a synthetic ledger: 3 seeds; baseline τ_steps 20 (reaches the target
    at ~step 89), a noise level at x 1e-3 learning at half the speed (τ_steps 40: ~step 178), one at x 1e-2 that
    never gets there (τ_steps 60), and a staleness-1 level that dips below the target, then rises above it."""
    cal = tmp_path / "toy.yaml"
    shutil.copy(ROOT / "calibrations" / "toy.yaml", cal)
    header = {"kind": "header", "ledger_version": 2, "pair": {"p": 1}, "config": {"eval": {"every": every}}}
    runs = [header]
    for seed, wiggle in ((1, 0.0), (2, 0.002), (3, -0.002)):
        runs.append(_run("baseline", seed, _curve(20, q_end=0.40 + wiggle, every=every), None))
        runs.append(_run("noise", seed, _curve(40, q_end=0.40 + wiggle, every=every), 1e-3, relative_std=0.02037))
        runs.append(_run("noise", seed, _curve(60, q_end=0.40 + wiggle, every=every), 1e-2, relative_std=0.04414))
        runs.append(_run("staleness", seed, _curve(20, q_end=0.40, every=every, rise=(150, 0.05)), 0.05, staleness=1))
    (tmp_path / "toy.ledger.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    return cal


def plan_config(tmp_path: Path, candidates: list[dict], **extra) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({"kind": "plan", "calibration": str(synthetic(tmp_path)), "candidates": candidates,
                                    "rollout_share": 0.8, **extra}))  # fmt: skip
    return path


def run_plan(path: Path):
    return plan(io.load_config(path, PlanConfig), config_file=str(path))


def test_half_speed_learning_takes_twice_the_steps(tmp_path):
    cands = [
        {"name": "slow", "relative_std": 0.02037, "step_time": {"ratio": 0.5}},  # its own runs
        {"name": "between", "mismatch": math.sqrt(1e-3 * 1e-2)},  # halfway in log x: efficiency (0.5 + 0) / 2
        {"name": "never", "relative_std": 0.04414},
        {"name": "dip", "staleness": 1},
    ]
    p = run_plan(plan_config(tmp_path, cands))
    rows = {r.name: r for r in p.rows}
    assert p.calibration.evals_per_run == 21 and not any("eval.every 0" in w for w in p.warnings)
    assert p.calibration.baseline_steps_to_target == pytest.approx(20 * math.log(1.77 / TAU), rel=0.02)
    slow = rows["slow"]
    assert slow.source == "measured: noise-1" and slow.x == pytest.approx(1e-3)
    assert slow.steps_ratio == pytest.approx(2.0, rel=0.02)
    assert slow.speedup == pytest.approx(1.0, rel=0.02)  # half the step time, twice the steps
    assert rows["between"].source == "noise curve"
    assert rows["between"].efficiency.mean == pytest.approx(0.25, rel=0.03)
    never = rows["never"]
    assert never.efficiency.mean == 0.0 and never.efficiency.reached == 0 and math.isinf(never.time_to_quality)
    assert rows["dip"].efficiency.reached == 0  # below the target at step ~90, back above it from step 150
    assert [r.name for r in p.rows][:2] == ["baseline", "slow"] or [r.name for r in p.rows][:2] == ["slow", "baseline"]
    assert p.rows[-1].speedup == 0.0


def test_step_time_from_a_bench_json(tmp_path):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"device": "NVIDIA H200", "results": [
        {"model": "m", "context": 1024, "batch": 8, "variant": "bf16", "decode_step_ms": 10.0},
        {"model": "m", "context": 1024, "batch": 8, "variant": "fp8_w8a8_rowwise", "decode_step_ms": 8.0},
        {"model": "m", "context": 1024, "batch": 8, "variant": "fp8_kv_triton", "decode_step_ms": None,
         "error": "RuntimeError: no triton"},
    ]}))  # fmt: skip
    ref = {"model": "m", "context": 1024, "variant": "fp8_w8a8_rowwise"}
    p = run_plan(plan_config(tmp_path, [{"name": "w8", "mismatch": 1e-3, "step_time": {"bench": ref}}],
                             bench=str(bench)))  # fmt: skip
    w8 = next(r for r in p.rows if r.name == "w8")
    assert w8.step_time_ratio == pytest.approx(0.2 + 0.8 / 1.25) and "NVIDIA H200" in w8.step_time_from
    bad = plan_config(tmp_path, [{"name": "kv", "mismatch": 1e-3, "step_time": {"bench": ref | {"variant":
                                  "fp8_kv_triton"}}}], bench=str(bench))  # fmt: skip
    assert_user_error(CliRunner().invoke(app, ["plan", str(bad)]), "candidates.0.step_time.bench", "no triton")


def test_screen_result_admitted_candidates_are_planned(tmp_path):
    from admitcheck.report import to_json
    from tests.test_report import make_result, make_verdict

    screen = tmp_path / "screen.json"  # what `admitcheck screen --json` writes: non-finite numbers are null there
    screen.write_text(to_json(make_result(make_verdict("ok", k3=2e-3), make_verdict("no", "REJECT", k3=math.inf))))
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({"calibration": str(synthetic(tmp_path)), "screen_result": str(screen)}))
    rows = {r.name: r for r in run_plan(path).rows}
    assert "no" not in rows and rows["ok"].x == 2e-3
    screen.write_text(json.dumps({"verdicts": [{"name": "ok", "decision": "ADMIT"}]}))  # not a screen's output
    assert_user_error(CliRunner().invoke(app, ["plan", str(path)]), "screen_result", "not `admitcheck screen --json`")


@pytest.mark.parametrize(
    ("candidates", "extra", "words"),
    [
        ([{"name": "a", "mismatch": 1e-3, "step_tme": {"ratio": 1}}], {}, ["candidates.0", "step_tme", "step_time"]),
        ([{"name": "a"}], {}, ["candidates.0.mismatch", "no mismatch"]),
        ([{"name": "a", "staleness": 3}], {}, ["candidates.0.mismatch", "no runs"]),
        ([{"name": "a", "mismatch": 1e-3, "step_time": {"ratio": 1, "rollout_speedup": 2}}], {}, ["step_time"]),
        (
            [{"name": "a", "mismatch": 1e-3, "step_time": {"bench": {"model": "m", "context": 1, "variant": "v"}}}],
            {},
            ["candidates.0.step_time.bench", "bench"],
        ),
        ([{"name": "a", "mismatch": 1e-3}], {"ledgers": ["missing.jsonl"]}, ["ledgers.0", "not found"]),
    ],
)
def test_bad_inputs_name_file_and_field(tmp_path, candidates, extra, words):
    path = plan_config(tmp_path, candidates, **extra)
    assert_user_error(CliRunner().invoke(app, ["plan", str(path)]), "plan.yaml", *words)


def test_a_ledger_of_another_recipe_is_refused(tmp_path):
    other = tmp_path / "other.ledger.jsonl"
    other.write_text(json.dumps({"kind": "header", "pair": {"p": 1}, "config": {"eval": {"every": 5}}}) + "\n")
    path = plan_config(tmp_path, [{"name": "a", "mismatch": 1e-3}], ledgers=[str(other)])
    assert_user_error(CliRunner().invoke(app, ["plan", str(path)]), "ledgers.0", "config.eval.every")


def test_eval_points_are_what_the_coarse_toy_gives():
    """The shipped toy ledgers evaluate twice per run: every level's pair efficiency is then ≈ 1 (reached at about
    the last step, like the baseline) or 0 (its paired cost is above τ) — the docs' caveat, pinned."""
    p = run_plan(EXAMPLE)
    for lv in p.levels:
        assert lv["n"] >= 1
    values = np.concatenate([r.efficiency.values for r in p.rows if r.efficiency.values])
    assert np.all((values == 0.0) | (np.abs(values - 1.0) < 0.05))


def test_a_grpo_calibration_reads_task_error_curves(tmp_path):
    """toy_rl's runs evaluate at steps 0, 100, 200; its quality (and τ) is 1 − task reward, not the reverse KL."""
    path = tmp_path / "rl.yaml"
    path.write_text(yaml.safe_dump({"kind": "plan", "calibration": str(ROOT / "calibrations" / "toy_rl.yaml"),
                                    "rollout_share": 0.5, "candidates": [{"name": "s1", "staleness": 1}]}))  # fmt: skip
    p = run_plan(path)
    assert p.calibration.quality_unit == "1 − task reward" and p.calibration.evals_per_run == 3
    assert not p.warnings  # eval.every > 0 there, and rollout_share given
    s1 = next(r for r in p.rows if r.name == "s1")
    assert s1.source == "measured: stale-1" and s1.efficiency.n == 3
