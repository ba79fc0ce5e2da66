"""admitcheck.calibration.calibrate / artifact / levels: the calibration flow on a tiny in-process pair.

The fit itself is curve.py's (test_curve.py: monotone fit, budget kinds, bootstrap coverage); here: levels and the
auto grid, paired runs (every level's replicate r has the baseline's seed r), adaptive replicates within the run
cap, budget and fitted curve consistent, degenerate cases explicit, the x choice recorded, the artifact round-trips
(schema 1 refused with how to regenerate), an interrupted calibration resumes to the identical artifact, --jobs 2
equals --jobs 1, bad input names its file and field without losing ledger lines, golden numbers.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from admitcheck import io
from admitcheck.calibration import opd
from admitcheck.calibration.artifact import load_calibration
from admitcheck.calibration.calibrate import calibrate
from admitcheck.calibration.compatibility import calibration_matches
from admitcheck.calibration.fit import PlacedRun, fit_runs
from admitcheck.calibration.ledger import NoiseGrid, ledger_path
from admitcheck.calibration.levels import Level, noise_for_mismatch
from admitcheck.calibration.record import RunRecord
from admitcheck.config import CalibrateConfig
from admitcheck.errors import CalibrationError, ConfigError
from tests.test_opd import make_tiny_pair

# Golden numbers of `tiny_config` (seed 0), CPU float32, one torch thread; tolerance for platform rounding.
GOLDEN = {
    "baseline_mean": 6.696841313377085,  # nats/token, mean of the baseline replicates
    "tolerance": 0.1,  # nats/token (absolute in the config)
    "budget": 1.260915307302205,  # x's units (a lower bound, the bracket's: the tiny pair barely cares)
    # x is the self-winsorized k3 sequence mean (issue 35's functional, metrics.Functional), not the k3 token mean
    "noise_2_mismatch": 1.5015879515051282,
    "runs": 10,  # 2 pairs per level, one round adding a level below the grid (2 pairs), then the cap of 11
}
GOLDEN_RTOL = 1e-4


def tiny_config_dict(root: Path, out: Path) -> dict:
    p = root / "prompts"
    return {
        "pair": {"name": "tiny", "student": str(root / "student"), "teacher": str(root / "teacher")},
        "probe": {"prompts": str(p / "probe.jsonl"), "num_prompts": 16, "max_new_tokens": 6, "batch_size": 16},
        "train": {"prompts": str(p / "train.jsonl"), "steps": 3, "batch_size": 8, "max_new_tokens": 6, "lr": 1e-2,
                  "loss": "gkd_reverse_kl"},
        "eval": {"prompts": str(p / "eval.jsonl"), "num_prompts": 16, "samples": 2, "max_new_tokens": 6,
                 "batch_size": 32},
        "levels": {"auto_noise": {"count": 2, "min_mismatch": 1e-3, "max_mismatch": 1.0},
                   "extra": [{"name": "stale-1", "staleness": 1, "fit": False}], "max_runs": 11},
        "tolerance": {"absolute": 0.1},
        "bootstrap": 50,
        "output": str(out),
    }  # fmt: skip


def write_config(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def comparable(cal) -> dict:
    """The artifact without what legitimately differs between two runs of one calibration (time, wall clock)."""
    d = cal.dump()
    d["provenance"].pop("created_at")
    d["provenance"].pop("seconds")
    d["provenance"].pop("run_cpu_seconds", None)  # process CPU time of the runs: a measurement, not a result
    return d


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> Path:
    return make_tiny_pair(tmp_path_factory.mktemp("pair"))


@pytest.fixture(scope="module")
def reference(pair, tmp_path_factory):
    """One uninterrupted calibration: (config, artifact)."""
    out = tmp_path_factory.mktemp("ref") / "tiny.yaml"
    cfg = CalibrateConfig.model_validate(tiny_config_dict(pair, out))
    from admitcheck.report import write_calibration_chart

    cal = calibrate(cfg)
    write_calibration_chart(cal)  # what the command draws beside the artifact
    return cfg, cal


# ------------------------------------------------------------------------------------------------ levels


def test_auto_grid_interpolates_log_log_and_is_monotone() -> None:
    grid = NoiseGrid([0.01, 0.1, 1.0], [1e-4, 1e-2, 1e-2 * 0.9])  # saturating, non-monotone end
    stds = noise_for_mismatch(grid, [1e-4, 1e-3, 1e-2, 1e-6, 10.0])
    assert stds[0] == pytest.approx(0.01) and stds[2] == pytest.approx(0.1, rel=1e-3)
    assert stds[1] == pytest.approx(10**-1.5, rel=1e-3)  # halfway in log-log
    assert stds[3] == pytest.approx(0.001, rel=1e-3)  # extrapolated with the first segment's slope (2)
    assert stds[4] > 1.0 and all(np.diff([stds[3], stds[0], stds[1], stds[2], stds[4]]) > 0)


def test_levels_and_paired_runs(reference) -> None:
    cfg, cal = reference
    names = [lv.name for lv in cal.levels]
    assert names[:4] == ["baseline", "noise-1", "noise-2", "stale-1"]
    assert all(n.startswith("noise-added-") for n in names[4:])  # the design's levels (runs fixed before looking)
    counts = {n: sum(r.level == n for r in cal.runs) for n in names}
    assert min(counts.values()) >= 2 and len(cal.runs) <= 11  # ≥ 2 pairs per level, within the run cap
    assert counts["baseline"] == max(counts.values())  # every level replicate has its baseline pair
    base_seed = {r.replicate: r.seed for r in cal.runs if r.level == "baseline"}
    assert len(set(base_seed.values())) == len(base_seed)  # replicates are independent
    for r in cal.runs:
        assert r.seed == base_seed[r.replicate]  # common random numbers with the baseline's replicate
        assert r.steps == cfg.train.steps
        if r.kind != "baseline":
            lo, hi = r.mismatch_interval
            assert lo <= r.mismatch <= hi and r.x_start == r.mismatch and r.x_run > 0
    by = {r.level: r for r in cal.runs}
    assert 1e-4 < by["noise-1"].mismatch < 1e-2 and by["noise-2"].mismatch > 0.1  # aimed at 1e-3 and 1
    assert by["stale-1"].mismatch > 0 and not by["stale-1"].in_fit  # KL(θ0 ‖ θ1) after one real OPD step
    quality = {(r.level, r.replicate): r.quality for r in cal.runs}
    for r in cal.runs:
        assert r.quality_cost == pytest.approx(quality[(r.level, r.replicate)] - quality[("baseline", r.replicate)])
    assert cal.quality.baseline_mean == pytest.approx(np.mean([quality[k] for k in quality if k[0] == "baseline"]))


def test_report_records_rule_x_choice_and_draws(reference) -> None:
    cfg, cal = reference
    b = cal.budget
    assert b.x in ("start", "run") and b.x_reason and set(b.by_x) == {"start", "run"}
    assert cal.protocol.x == b.x == cal.x_measure and b.rule.startswith(("one model", "the model was refused"))
    assert b.method in ("model", "bracket") and b.method_reason and b.bracket is not None and b.model is not None
    assert len(cal.budget_draws()) == cfg.bootstrap and b.protocol.runs == len(cal.runs)
    assert b.protocol.decide is None and "decide" not in cal.dump()["budget"]["protocol"]  # none named: absent
    report = {lv.level: lv for lv in cal.level_report}
    assert report["noise-1"].replicates >= 2 and report["stale-1"].paired_cost_interval is None
    assert cal.tolerance.rule.startswith("absolute")


def test_budget_and_fitted_curve_are_consistent(reference) -> None:
    _, cal = reference
    b = cal.gate_budget()
    assert b.tolerance == cal.tau > 0
    if b.kind == "point":
        assert cal.predict_cost(b.value) == pytest.approx(cal.tau, rel=1e-6)
        assert b.interval[0] <= b.value <= b.interval[1]
    grid = np.geomspace(1e-8, 10, 200)
    assert np.all(np.diff(cal.predict_cost(grid)) >= 0) and cal.predict_cost(0.0) == 0.0
    assert (Path(cal.path).with_suffix(".png")).stat().st_size > 1000


def test_golden_numbers(reference) -> None:
    _, cal = reference
    got = {
        "baseline_mean": cal.quality.baseline_mean,
        "tolerance": cal.tau,
        "budget": cal.budget.value,
        "noise_2_mismatch": next(r.mismatch for r in cal.runs if r.level == "noise-2"),
        "runs": len(cal.runs),
    }
    for key, want in GOLDEN.items():
        assert got[key] == pytest.approx(want, rel=GOLDEN_RTOL), (key, got[key], got)


# ------------------------------------------------------------------------------------------------ artifact


def test_artifact_round_trips(reference, pair) -> None:
    _, cal = reference
    again = load_calibration(cal.path)
    assert again == cal and again.dump() == cal.dump()
    assert again.budget == cal.budget and again.protocol.flat() == cal.protocol.flat()
    stored = cal.dump()["pair"]
    assert again.pair_fingerprint == {**{k: stored[k] for k in ("student", "teacher", "tokenizer")},
                                      "probe_prompts": stored["prompts"]["probe"]}  # fmt: skip
    assert again.predict_cost(0.05) == cal.predict_cost(0.05)
    rows = dict(again.summary_rows())
    assert "budget (k3)" in rows and "tolerance τ" in rows
    assert again.train_prompts() == (pair / "prompts" / "train.jsonl").resolve()  # stored relative to the artifact


def test_calibration_matches(reference, pair, tmp_path) -> None:
    cfg, cal = reference
    assert calibration_matches(cfg, cal) == (True, "")
    more_effort = cfg.model_copy(update={"train": cfg.train.model_copy(update={"steps": 7})})
    assert calibration_matches(more_effort, cal.path)[0]
    other_lr = cfg.model_copy(update={"train": cfg.train.model_copy(update={"lr": 1e-3})})
    ok, reason = calibration_matches(other_lr, cal)
    assert not ok and reason.startswith("recipe.lr")


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda d: d.update(schema_version=99), "schema_version"),
        (lambda d: d.update(schema_version=1), "schema_version"),
        (lambda d: d["curve"].pop("cost"), "curve.cost"),
        (lambda d: d["budget"].pop("value"), "budget.value"),
        (lambda d: d["runs"][0].pop("quality"), "runs.0.quality"),
        (lambda d: d["pair"]["student"].update(weights=3), "pair.student.weights"),
    ],
)
def test_load_calibration_names_the_bad_field(reference, tmp_path, edit, field) -> None:
    data = reference[1].dump()
    edit(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(CalibrationError) as err:
        load_calibration(path)
    assert err.value.field == field and err.value.file == str(path)


def test_load_calibration_missing_or_corrupt(tmp_path) -> None:
    with pytest.raises(CalibrationError) as err:
        load_calibration(tmp_path / "none.yaml")
    assert err.value.file == str(tmp_path / "none.yaml")
    (tmp_path / "broken.yaml").write_text("budget: [unclosed\n")
    with pytest.raises(CalibrationError, match="malformed YAML"):
        load_calibration(tmp_path / "broken.yaml")


# ------------------------------------------------------------------------------------------------ degenerate fits


def test_schema_1_is_refused_with_how_to_regenerate(reference, tmp_path) -> None:
    data = reference[1].dump() | {"schema_version": 1}
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(CalibrationError, match="admitcheck calibrate"):
        load_calibration(tmp_path / "old.yaml")


def _synthetic(costs: list[float], reps: int = 2) -> tuple[list[Level], list[PlacedRun]]:
    """Paired runs: baseline qualities 1.0, 1.02 (replicates 0, 1); level i at x_i costs costs[i] in both."""
    levels = [Level("baseline", "baseline")] + [Level(f"noise-{i}", "noise") for i in range(len(costs))]
    base = (1.0, 1.02)[:reps]
    runs = [PlacedRun(levels[0], r, RunRecord(seed=r, quality=q)) for r, q in enumerate(base)]
    for i, (x, c) in enumerate(zip(np.geomspace(1e-3, 1, len(costs)), costs)):
        runs += [PlacedRun(levels[i + 1], r, RunRecord(seed=r, mismatch=float(x), quality=q + c,
                                                       in_run_k3=[float(x) / 2] * 4))
                 for r, q in enumerate(base)]  # fmt: skip
    return levels, runs


@pytest.mark.parametrize(
    ("costs", "kind"),
    [([0.0, 0.01, 0.3, 0.9, 1.0], "point"), ([0.0, 0.0, 0.01, 0.02, 0.01], "lower_bound"),
     ([0.5, 0.7, 0.9, 1.0, 1.0], "upper_bound")],
)  # fmt: skip
def test_degenerate_budgets_are_explicit(costs, kind) -> None:
    data = tiny_config_dict(Path("/nonexistent"), Path("/nonexistent/x.yaml"))
    data.pop("tolerance")  # the default: 5% of the baseline quality
    cfg = CalibrateConfig.model_validate(data)
    levels, runs = _synthetic(costs)
    f = fit_runs(cfg, levels, runs)
    est = f.estimate
    b = est.budget
    assert b.kind == kind and est.tau == pytest.approx(0.05 * 1.01)
    if kind == "point":
        assert est.fit.predict(b.value) == pytest.approx(est.tau, rel=1e-6)
    elif kind == "lower_bound":
        assert b.value == pytest.approx(1.0) and math.isinf(b.interval[1])
    else:
        assert b.value == pytest.approx(1e-3) and b.interval == (0.0, pytest.approx(1e-3))


def test_held_out_levels_are_predicted_not_fitted() -> None:
    data = tiny_config_dict(Path("/nonexistent"), Path("/nonexistent/x.yaml"))
    data.pop("tolerance")
    cfg = CalibrateConfig.model_validate(data)
    levels, runs = _synthetic([0.0, 0.01, 0.3, 0.9, 1.0])
    want = fit_runs(cfg, levels, runs)
    stale = Level("stale-1", "staleness", staleness=1, fit=False)
    checks = [PlacedRun(stale, r, RunRecord(seed=r, mismatch=0.01, quality=5.0, in_run_k3=[0.001] * 4))
              for r in (0, 1)]  # fmt: skip
    got = fit_runs(cfg, [*levels, stale], [*runs, *checks])
    assert got.estimate.budget == want.estimate.budget and got.estimate.fit == want.estimate.fit
    check = got.runs[len(runs)]
    assert check.level == "stale-1" and not check.in_fit and check.quality_cost == pytest.approx(4.0)
    assert check.predicted_cost == pytest.approx(float(want.estimate.fit.predict(check.fit_x)))
    assert want.runs == got.runs[: len(runs)]  # the fit made no change to its input (frozen records)
    # the staleness check sits far above the noise curve under both x: the choice and its evidence are recorded
    assert got.x in ("start", "run") and set(got.by_x) == {"start", "run"}


# ------------------------------------------------------------------------------------------------ resume, jobs


@pytest.mark.slow
def test_interrupted_calibration_resumes_to_the_identical_artifact(pair, reference, tmp_path, monkeypatch) -> None:
    _, want = reference
    out = tmp_path / "tiny.yaml"
    cfg = CalibrateConfig.model_validate(tiny_config_dict(pair, out))
    real_train, calls = opd.train, {"n": 0}

    def interrupted(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:  # the fourth run stops after its first optimizer step

            def stop(step, model):
                raise KeyboardInterrupt("interrupted mid-run")

            kwargs["on_step"] = stop
        return real_train(*args, **kwargs)

    monkeypatch.setattr(opd, "train", interrupted)
    with pytest.raises(KeyboardInterrupt):
        calibrate(cfg)
    ledger = io.read_jsonl(ledger_path(out))
    assert [r["kind"] for r in ledger] == ["header", "grid", "run", "run", "run"] and not out.exists()
    monkeypatch.setattr(opd, "train", real_train)
    resumed = calibrate(cfg)
    assert comparable(resumed) == comparable(want)
    assert sum(r["kind"] == "run" for r in io.read_jsonl(ledger_path(out))) == len(want.runs)
    again = calibrate(cfg)  # everything in the ledger: no run is repeated, same artifact
    assert comparable(again) == comparable(want)


def test_a_ledger_replays_its_recorded_rounds_whatever_the_design(pair, reference, tmp_path, monkeypatch) -> None:
    """Every decision after a round is in the ledger before it is acted on (a "round" line: the next round's levels
    and counts, or the stop under its effort settings); a re-run on the finished ledger follows them without
    planning (a design changed since would otherwise ask for runs the ledger lacks and train them), and gives the
    same artifact. Without the round lines (a ledger written before them) the rounds are planned again."""
    from admitcheck.calibration import calibrate as driver

    cfg0, want = reference
    lines = io.read_jsonl(ledger_path(Path(cfg0.output)))
    rounds = [r for r in lines if r["kind"] == "round"]
    assert [r["round"] for r in rounds] == list(range(len(rounds))) and rounds[-1]["stop"] == "run cap"
    assert rounds[0]["stop"] is None and rounds[0]["added"], rounds  # the round that added a level below the grid
    out = tmp_path / "tiny.yaml"
    shutil.copy(ledger_path(Path(cfg0.output)), ledger_path(out))
    cfg = CalibrateConfig.model_validate(tiny_config_dict(pair, out))

    def no_planning(*args, **kwargs):
        raise AssertionError("planned again")

    monkeypatch.setattr(driver, "plan_round", no_planning)
    monkeypatch.setattr(driver.Campaign, "run_round", lambda self, tasks, label: True)  # no run may be made
    assert comparable(calibrate(cfg)) == comparable(want)
    assert io.read_jsonl(ledger_path(out)) == lines  # nothing appended: every decision was read back
    _write_lines(ledger_path(out), [r for r in lines if r["kind"] != "round"])
    with pytest.raises(AssertionError, match="planned again"):
        calibrate(cfg)
    _write_lines(ledger_path(out), lines)
    raised = cfg.model_copy(update={"levels": cfg.levels.model_copy(update={"max_runs": 13})})
    with pytest.raises(AssertionError, match="planned again"):  # a stop recorded under another cap: a continuation
        calibrate(raised)


def _write_lines(path: Path, lines: list[dict]) -> None:
    path.unlink()
    for line in lines:
        io.append_jsonl(path, line)


@pytest.mark.slow
def test_parallel_jobs_give_the_same_artifact(pair, reference, tmp_path) -> None:
    cfg = CalibrateConfig.model_validate(tiny_config_dict(pair, tmp_path / "tiny.yaml"))
    assert comparable(calibrate(cfg, jobs=2)) == comparable(reference[1])


# ------------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda d: d.update(tolerance={"absolute": 0}), "tolerance.absolute"),
        (lambda d: d.update(tolerance={"relative": -0.1}), "tolerance.relative"),
        (lambda d: d.update(tolerance={"seed_std_multiple": 2.0}), "tolerance.seed_std_multiple"),
        (lambda d: d["levels"].update(replicates=1), "levels.replicates"),
        (lambda d: d.update(levels={"auto_noise": None, "extra": []}), "levels"),
    ],
)
def test_bad_config_names_file_and_field(pair, tmp_path, edit, field) -> None:
    data = tiny_config_dict(pair, tmp_path / "x.yaml")
    edit(data)
    path = write_config(tmp_path / "bad.yaml", data)
    with pytest.raises(ConfigError) as err:
        io.load_config(path, CalibrateConfig)
    assert err.value.file == str(path) and err.value.field == field


def _copy_ledger(reference, tmp_path) -> tuple[Path, bytes]:
    out = tmp_path / "tiny.yaml"
    shutil.copy(ledger_path(Path(reference[1].path)), ledger_path(out))
    return out, ledger_path(out).read_bytes()


def test_ledger_of_another_config_is_refused_and_kept(pair, reference, tmp_path) -> None:
    out, before = _copy_ledger(reference, tmp_path)
    data = tiny_config_dict(pair, out)
    data["train"]["lr"] = 5e-3
    with pytest.raises(CalibrationError) as err:
        calibrate(CalibrateConfig.model_validate(data))
    assert err.value.file == str(ledger_path(out)) and err.value.field == "config.train.lr"
    assert ledger_path(out).read_bytes() == before and not out.exists()


def test_ledger_of_another_pair_is_refused_and_kept(pair, reference, tmp_path) -> None:
    out, before = _copy_ledger(reference, tmp_path)
    other = tmp_path / "other_pair"
    shutil.copytree(pair, other)
    model = io.load_causal_lm(other / "student")
    with __import__("torch").no_grad():
        model.lm_head.weight.mul_(1.01)
    model.save_pretrained(other / "student")
    data = tiny_config_dict(pair, out)
    data["pair"]["student"] = str(other / "student")
    with pytest.raises(CalibrationError) as err:
        calibrate(CalibrateConfig.model_validate(data))
    assert err.value.field == "pair.student.weights" and "different pair" in err.value.message
    assert ledger_path(out).read_bytes() == before


def test_corrupt_ledger_is_a_calibration_error(pair, tmp_path) -> None:
    out = tmp_path / "tiny.yaml"
    ledger_path(out).write_text('{"kind": "header"}\n{not json\n')
    with pytest.raises(CalibrationError) as err:
        calibrate(CalibrateConfig.model_validate(tiny_config_dict(pair, out)))
    assert err.value.file == str(ledger_path(out))


# ------------------------------------------------------------------------------------------------ shipped artifact


def test_shipped_toy_calibration_shows_flat_then_degrading() -> None:
    """calibrations/toy.yaml (made by `admitcheck calibrate examples/toy_calibrate.yaml --jobs 2`) meets the bar."""
    cal = load_calibration(Path(__file__).resolve().parents[1] / "calibrations" / "toy.yaml")
    q, b = cal.quality, cal.budget
    report = sorted((lv for lv in cal.level_report if lv.kind == "noise"), key=lambda lv: lv.x)
    assert q.improvement >= 0.30  # OPD works: held-out reverse KL down by ≥ 30%
    assert report[0].paired_cost < cal.tau  # flat: the smallest level costs less than τ
    assert report[-1].paired_cost >= 2 * cal.tau  # then degrading
    assert b.kind == "point" and b.interval[0] <= b.value <= b.interval[1]
    assert all(lv.replicates >= 2 for lv in cal.level_report)
    assert len(cal.budget_draws()) == b.n_boot >= 200


def test_systematic_noise_is_another_level_key_and_fresh_noise_keeps_the_old_one():
    """A systematic level's runs are not a fresh-noise level's (their ledger keys differ); a fresh level's key is
    the one ledgers written before the option hold."""
    from admitcheck.calibration.levels import Level

    fresh = Level("n", "noise", relative_std=0.02).spec()
    assert fresh.dump() == {"kind": "noise", "relative_std": 0.02, "rollout": None, "staleness": 0}
    assert Level("n", "noise", relative_std=0.02, systematic=True).spec().dump() == fresh.dump() | {"systematic": True}


def test_header_difference_takes_a_missing_key_for_null() -> None:
    """An option an older admitcheck wrote at its null default (`rollout.cuda_graphs: null`, the shipped SmolLM2
    calibration ledger's header) is the same run as a newer header that leaves it out: Ledger.open resumed such a
    ledger, and a backtest now reuses its runs by the same rule (it did not, 2026-12-06: 4 baselines were to be re-run).
    A real difference is still named."""
    from admitcheck.calibration.ledger import LedgerHeader, header_difference

    old = LedgerHeader(2, {"student": "a"}, {"rollout": {"cuda_graphs": None, "dtype": "float32"}})
    new = LedgerHeader(2, {"student": "a"}, {"rollout": {"dtype": "float32"}})
    assert header_difference(old, new) is None and header_difference(new, old) is None
    other = LedgerHeader(2, {"student": "a"}, {"rollout": {"dtype": "bfloat16"}})
    assert header_difference(old, other) == "config.rollout.dtype"
    assert header_difference(old, LedgerHeader(2, {"student": "b"}, old.config)) == "pair.student"
