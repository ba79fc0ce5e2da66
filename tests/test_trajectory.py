"""Screening during the run (issue 40): both budgets in the artifact, `screen --checkpoint`, the checkpoint
trajectory's run-averaged x (admission/trajectory.py) and a pipeline's per-step logs against the run budget."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from admitcheck.admission.trajectory import checkpoint_steps, run_average
from admitcheck.calibration.artifact import load_calibration
from admitcheck.errors import CalibrationError, ConfigError
from tests.test_cli import ROOT, assert_user_error, run, screen_config

SHIPPED = ("toy", "toy_rl", "smollm2", "smollm2-seed1000", "smollm2-seed2000", "smollm2-pooled")


# --------------------------------------------------------------------------------------------------- both budgets


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_artifact_carries_both_budgets_with_their_verdicts(name):
    b = load_calibration(ROOT / "calibrations" / f"{name}.yaml").budget
    assert set(b.by_x) == {"start", "run"} and not b.by_x_missing
    for w, v in b.by_x.items():
        assert v.method in ("model", "bracket") and v.method_reason, w
        assert v.lack_of_fit is not None and 0 <= v.lack_of_fit.p_value <= 1 and v.accepted is not None, w
        assert v.interval[0] <= v.value <= v.interval[1], w
    chosen = b.by_x[b.x]  # the gate's budget is the chosen x's, entry for entry
    assert (chosen.value, tuple(chosen.interval), chosen.method) == (b.value, tuple(b.interval), b.method)
    assert b.by_x["run"].value != b.by_x["start"].value  # two fits, not one copied


def _ledger_runs_without_in_run_k3(level: str):
    from admitcheck.calibration.refit import ledger_runs

    config, levels, placed = ledger_runs(load_calibration(ROOT / "calibrations" / "toy.yaml"))
    stripped = [
        type(p)(p.level, p.replicate, p.record.model_copy(update={"in_run_k3": []})) if p.level.name == level else p
        for p in placed
    ]
    return config, levels, stripped


def test_a_ledger_without_in_run_k3_says_so_instead_of_a_run_budget():
    from admitcheck.calibration.fit import fit_runs

    config, levels, placed = _ledger_runs_without_in_run_k3("noise-2")
    config = config.model_copy(update={"bootstrap": 0})
    f = fit_runs(config, levels, placed)
    assert set(f.by_x) == {"start"} and f.x == "start"
    assert "in_run_k3" in f.by_x_missing["run"] and "noise-2" in f.by_x_missing["run"]
    assert all(r.x_run is None for r in f.runs)
    run_x = config.model_copy(update={"levels": config.levels.model_copy(update={"x": "run"})})
    with pytest.raises(CalibrationError, match="in_run_k3") as exc:
        fit_runs(run_x, levels, placed)
    assert exc.value.field == "levels.x"


# --------------------------------------------------------------------------------------------------- run average


def test_checkpoint_steps_are_start_quarter_half_end():
    assert checkpoint_steps(20) == [0, 5, 10, 20] and checkpoint_steps(200) == [0, 50, 100, 200]
    assert checkpoint_steps(2) == [0, 1, 2]  # ¼ of 2 rounds to 0: one checkpoint fewer, never a duplicate
    for bad in ((0.25, 1.0), (0.0, 0.5), (0.0, 1.5)):
        with pytest.raises(ConfigError, match="fractions"):
            checkpoint_steps(20, bad)
    with pytest.raises(ConfigError, match="horizon"):
        checkpoint_steps(0)


def test_run_average_is_exact_for_a_linear_drift_and_shifts_staleness():
    x = lambda t: 0.01 + 0.002 * t  # noqa: E731  nats/token, drifting linearly
    steps = [0, 5, 10, 20]
    assert run_average(steps, [x(s) for s in steps], 20) == pytest.approx(np.mean([x(t) for t in range(20)]))
    # staleness 1: step t sees the screen at t − 1; step 0 sees 0 (engine and trainer both θ0)
    want = np.mean([0.0] + [x(t - 1) for t in range(1, 20)])
    assert run_average(steps, [x(s) for s in steps], 20, staleness=1) == pytest.approx(want)
    assert run_average([0, 1], [0.05, 0.05], 4, staleness=2) == pytest.approx((0 + 0.025 + 0.05 + 0.05) / 4)


# --------------------------------------------------------------------------------------------------- logs per step


def _logs(rows_per_step: dict[int | None, list[float]]):
    from admitcheck.measurement.logs import LoggedLogprobs

    ells = [(s, e) for s, es in rows_per_step.items() for e in es]  # one token per row: ℓ = log π − log μ
    mu = np.full((len(ells), 1), -1.0)
    pi = mu + np.array([[e] for _, e in ells])
    steps = [s for s, _ in ells]
    row_steps = None if None in steps else np.array(steps)
    return LoggedLogprobs("logs.jsonl", mu, pi, np.ones_like(mu, dtype=bool), row_steps=row_steps,
                          steps=tuple(sorted(set(s for s in steps if s is not None))))  # fmt: skip


def test_logged_k3_per_step_against_the_run_budget():
    from admitcheck.admission.run_x import logged_run_average
    from admitcheck.measurement.metrics import k3_terms

    cal = load_calibration(ROOT / "calibrations" / "toy.yaml")
    r = logged_run_average(_logs({0: [0.1, -0.1], 30: [0.15]}), cal)
    k = lambda e: float(k3_terms(np.array(e)))  # noqa: E731
    assert [s.step for s in r.steps] == [0, 30] and [s.sequences for s in r.steps] == [2, 1]
    assert r.value == pytest.approx(((k(0.1) + k(-0.1)) / 2 + k(0.15)) / 2)  # the mean of per-step token means
    run_b = cal.budget.by_x["run"]
    assert r.budget == run_b.value and r.position == "within" and r.run_window == 20
    assert any("first 20 steps" in n for n in r.notes)  # step 30 lies beyond the budget's window
    low = logged_run_average(_logs({None: [0.001]}), cal)
    assert low.position == "below" and any("no training step" in n for n in low.notes)
    old = cal.model_copy(update={"budget": cal.budget.model_copy(update={"by_x": {}})})
    assert logged_run_average(_logs({0: [0.1]}), old).position == "no budget"


def test_a_logs_screen_reports_its_steps_against_the_run_budget(tmp_path, toy_pair_dir):
    rows = [json.loads(x) for x in (ROOT / "examples" / "logs" / "toy_bf16.jsonl").read_text().splitlines() if x]
    logs = tmp_path / "steps.jsonl"
    logs.write_text("".join(json.dumps(r | {"step": 10 * (i % 3)}) + "\n" for i, r in enumerate(rows)))
    r = run("screen", str(screen_config(tmp_path, toy_pair_dir)), "--from-logs", str(logs), "--json")
    assert r.exit_code in (0, 1), r.output
    doc = json.loads(r.stdout)
    ra = doc["logged"]["run_average"]
    assert [s["step"] for s in ra["steps"]] == [0, 10, 20] and sum(s["sequences"] for s in ra["steps"]) == len(rows)
    assert ra["value"] == pytest.approx(np.mean([s["k3"] for s in ra["steps"]]))
    assert ra["budget"] == load_calibration(ROOT / "calibrations" / "toy.yaml").budget.by_x["run"].value
    assert doc["weights"]["at"] == "logs"


# --------------------------------------------------------------------------------------------------- bad inputs


def test_checkpoint_bad_inputs_exit_2_naming_the_field(tmp_path, toy_pair_dir):
    p = screen_config(tmp_path, toy_pair_dir)
    assert_user_error(run("screen", str(p), "--checkpoint-step", "3"), "--checkpoint:", "set checkpoint too")
    missing = str(tmp_path / "nowhere")
    assert_user_error(run("screen", str(p), "--checkpoint", missing), "checkpoint:", "no config.json")
    teacher = str(toy_pair_dir / "teacher")  # another architecture than the student's
    assert_user_error(run("screen", str(p), "--checkpoint", teacher), "checkpoint:", "not a checkpoint of this pair")
    broken = tmp_path / "broken"
    shutil.copytree(toy_pair_dir / "student", broken)
    (broken / "config.json").write_text("{not json")
    assert_user_error(run("validate", str(screen_config(tmp_path, toy_pair_dir, "b.yaml", checkpoint=str(broken)))),
                      "checkpoint:", "config.json")  # fmt: skip
    stale = screen_config(tmp_path, toy_pair_dir, "st.yaml", checkpoint=str(toy_pair_dir / "student"),
                          candidates=[{"name": "stale_2", "staleness": 2}])  # fmt: skip
    assert_user_error(run("screen", str(stale)), "candidates.stale_2.staleness:", "optimizer state")
    logs = str(ROOT / "examples" / "logs" / "toy_bf16.jsonl")
    assert_user_error(run("screen", str(p), "--from-logs", logs, "--checkpoint", teacher), "logs.checkpoint")


# --------------------------------------------------------------------------------------------------- on the toy


@pytest.mark.slow
def test_a_screen_at_a_checkpoint_measures_those_weights(tmp_path, toy_pair_dir):
    from admitcheck import io
    from admitcheck.admission.inputs import read_screen_inputs
    from admitcheck.admission.trajectory import save_run_checkpoints
    from admitcheck.config import ScreenConfig

    p = screen_config(tmp_path, toy_pair_dir, **{"probe.num_prompts": 64, "probe.min_prompts": 64})
    saved, _, _ = save_run_checkpoints(read_screen_inputs(io.load_config(p, ScreenConfig)), [0, 2], tmp_path / "ck")
    copy = tmp_path / "copy"
    shutil.copytree(toy_pair_dir / "student", copy)
    docs = {}
    for key, extra in (("start", ()), ("copy", ("--checkpoint", str(copy))),
                       ("step2", ("--checkpoint", str(saved[2]), "--checkpoint-step", "2"))):  # fmt: skip
        r = run("screen", str(p), "--json", *extra)
        assert r.exit_code in (0, 1), r.output
        docs[key] = json.loads(r.stdout)
    assert docs["start"]["weights"] == {"at": "start", "student": str(toy_pair_dir / "student"), "step": None}
    assert docs["step2"]["weights"] == {"at": "checkpoint", "student": str(saved[2]), "step": 2}
    k3 = {k: d["verdicts"][0]["metrics"]["k3"] for k, d in docs.items()}
    assert k3["copy"] == k3["start"]  # the same weights give the same numbers
    assert k3["step2"] != k3["start"]  # two OPD steps moved the student


@pytest.mark.slow
def test_a_trajectory_predicts_the_run_x_from_its_checkpoints(tmp_path, toy_pair_dir):
    from admitcheck import io
    from admitcheck.admission.trajectory import screen_trajectory
    from admitcheck.config import ScreenConfig

    p = screen_config(tmp_path, toy_pair_dir, **{"probe.num_prompts": 32, "probe.min_prompts": 32})
    cfg = io.load_config(p, ScreenConfig)
    cfg = cfg.model_copy(update={"candidates": [*cfg.candidates, cfg.candidates[0].model_validate(
        {"name": "stale_1", "staleness": 1})]})  # fmt: skip
    t = screen_trajectory(cfg, config_file=str(p), out_dir=tmp_path / "traj", horizon=2)
    assert [pt.step for pt in t.points] == [0, 1, 2] and set(t.run_x) == {"bf16", "stale_1"}
    for name, rx in t.run_x.items():
        ks = [pt.candidates[name].k3 for pt in t.points]
        assert rx.value == pytest.approx(run_average([0, 1, 2], ks, 2, 1 if name == "stale_1" else 0))
        assert rx.budget == load_calibration(ROOT / "calibrations" / "toy.yaml").budget.by_x["run"].value
    assert (tmp_path / "traj" / "step-1" / "config.json").is_file()
    assert (tmp_path / "traj" / "step-3" / "config.json").is_file()  # θ2+1: the stale reference at the last point


def test_trajectory_command_bad_inputs_exit_2(tmp_path, toy_pair_dir):
    p = screen_config(tmp_path, toy_pair_dir)
    out = str(tmp_path / "ck")
    assert_user_error(run("trajectory", str(p), "--out-dir", out, "--horizon", "0"), "--horizon:", "≥ 1")
    assert_user_error(run("trajectory", str(p), "--out-dir", out, "--horizon", "500"), "--horizon:", "200 steps")
    at = screen_config(tmp_path, toy_pair_dir, "at.yaml", checkpoint=str(toy_pair_dir / "student"))
    assert_user_error(run("trajectory", str(at), "--out-dir", out), "checkpoint:", "own checkpoints")


@pytest.mark.slow
def test_trajectory_command_prints_one_json_document(tmp_path, toy_pair_dir):
    p = screen_config(tmp_path, toy_pair_dir, **{"probe.num_prompts": 32, "probe.min_prompts": 32})
    r = run("trajectory", str(p), "--out-dir", str(tmp_path / "ck"), "--horizon", "1", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [pt["step"] for pt in doc["points"]] == [0, 1] and doc["run_x"]["bf16"]["position"] in ("below", "within")
    table = run("trajectory", str(p), "--out-dir", str(tmp_path / "ck2"), "--horizon", "1")
    assert table.exit_code == 0 and "run-averaged x" in table.output
