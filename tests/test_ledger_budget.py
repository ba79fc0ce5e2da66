"""`calibrate --budget-so-far` (`calibrate.ledger_budget`): the budget a ledger's runs give now, its rounds replayed
as a resumed calibrate replays them, no run made, no model loaded, nothing written."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from admitcheck.calibration.artifact import load_calibration
from admitcheck.calibration.ledger import Ledger
from admitcheck.cli import app
from admitcheck.errors import CalibrationError
from tests.test_cli import assert_user_error

ROOT = Path(__file__).resolve().parents[1]
RL = "smollm2_rl_copy_lr5e-6"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _budget(config: Path) -> dict:
    result = CliRunner().invoke(app, ["calibrate", str(config), "--budget-so-far", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _rl_config(tmp_path: Path, ledger_lines: list[str], tail: str = "") -> Path:
    """examples/smollm2_calibrate_rl_copy_lr5e-6.yaml writing to tmp_path, its ledger `ledger_lines` (+ `tail`)."""
    cfg = yaml.safe_load((ROOT / "examples" / "smollm2_calibrate_rl_copy_lr5e-6.yaml").read_text())
    cfg["output"] = str(tmp_path / f"{RL}.yaml")
    (tmp_path / f"{RL}.ledger.jsonl").write_text("".join(ledger_lines) + tail)
    path = tmp_path / "cal.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.parametrize(
    ("config", "name", "runs"),
    [("toy_calibrate.yaml", "toy", 111), ("smollm2_calibrate_rl_copy_lr5e-6.yaml", RL, 198)],
)
def test_a_finished_ledger_gives_its_artifacts_budget_and_is_not_written(config: str, name: str, runs: int) -> None:
    """A finished ledger replays to its recorded stop and fits its artifact's budget: the toy calibration's 111 runs,
    and the lr-5e-6 RL calibration's 198 (made over four device sessions, its stop the 201-run cap)."""
    ledger = ROOT / "calibrations" / f"{name}.ledger.jsonl"
    before = _digest(ledger)
    got = _budget(ROOT / "examples" / config)
    cal = load_calibration(ROOT / "calibrations" / f"{name}.yaml")
    assert got["runs"] == got["ledger_runs"] == len(cal.runs) == runs and got["stop"] == cal.budget.protocol.stopped
    assert got["budget"] == pytest.approx(cal.budget.value, rel=1e-9)
    assert got["interval"] == pytest.approx(list(cal.budget.interval), rel=1e-9)
    assert got["method"] == cal.budget.method and got["x"] == cal.budget.x
    assert _digest(ledger) == before


# the lr-5e-6 RL artifact as shipped at its first 51 runs (round 5; git show 269d209:calibrations/…lr5e-6.yaml)
RL_AT_51 = (0.017994050032195636, (0.004136804865789575, 0.05185161843836111))


def test_a_round_in_flight_is_left_out_and_a_torn_line_left_alone(tmp_path: Path) -> None:
    """The lr-5e-6 RL ledger cut two runs into the round its continuation started (after the 51 runs of its first
    artifact), with a torn append: the fit is the ledger's whole rounds' (51 runs, round 5: that artifact's budget),
    the ledger byte for byte as it was."""
    lines = (ROOT / "calibrations" / f"{RL}.ledger.jsonl").read_text().splitlines(keepends=True)
    kinds = [json.loads(x).get("kind") for x in lines]
    first_201 = next(i for i, x in enumerate(lines) if kinds[i] == "round" and json.loads(x)["max_runs"] == 201)
    (tmp_path / "whole").mkdir()
    whole = _budget(_rl_config(tmp_path / "whole", lines[:first_201]))  # the same ledger without the round in flight
    cut = lines[: first_201 + 3]  # the continuation's round line and two of its three runs
    config = _rl_config(tmp_path, cut, tail='{"accuracy": 0.3, "acc')
    ledger = tmp_path / f"{RL}.ledger.jsonl"
    before = _digest(ledger)
    got = _budget(config)
    assert got["runs"] == whole["runs"] == 51 and got["ledger_runs"] == 53 and got["rounds"] == 5
    assert got["stop"] == "the ledger as it stands"
    for k in ("budget", "interval", "interval_factor"):
        assert got[k] == pytest.approx(whole[k], rel=1e-12)
    assert got["budget"] == pytest.approx(RL_AT_51[0], rel=1e-9)
    assert got["interval"] == pytest.approx(list(RL_AT_51[1]), rel=1e-9)
    assert _digest(ledger) == before
    human = CliRunner().invoke(app, ["calibrate", str(config), "--budget-so-far"])
    assert human.exit_code == 0 and "51 runs of the ledger's 53 through round 5" in human.output, human.output


def test_a_ledger_without_a_whole_first_round_or_missing_or_corrupt_is_one_clear_error(tmp_path: Path) -> None:
    lines = (ROOT / "calibrations" / f"{RL}.ledger.jsonl").read_text().splitlines(keepends=True)
    config = _rl_config(tmp_path, lines[:6])  # the header, the grid and four runs of round 0's 24
    result = CliRunner().invoke(app, ["calibrate", str(config), "--budget-so-far"])
    assert_user_error(result, f"{RL}.ledger.jsonl", "does not hold round 0's runs yet")
    config = _rl_config(tmp_path, lines[:1])  # the header alone: no grid measured
    assert_user_error(CliRunner().invoke(app, ["calibrate", str(config), "--budget-so-far"]), "no grid measurement")
    config = _rl_config(tmp_path, [*lines[:3], "{not json\n", *lines[3:30]])
    assert_user_error(CliRunner().invoke(app, ["calibrate", str(config), "--budget-so-far"]), "corrupt ledger line 4")
    (tmp_path / f"{RL}.ledger.jsonl").unlink()
    assert_user_error(CliRunner().invoke(app, ["calibrate", str(config), "--budget-so-far"]), "no ledger yet")


def test_a_ledger_read_for_a_replay_refuses_to_be_written(tmp_path: Path) -> None:
    path = tmp_path / "x.ledger.jsonl"
    path.write_text((ROOT / "calibrations" / "toy.ledger.jsonl").read_text())
    ledger = Ledger.read(path)
    assert ledger.read_only and len(ledger.runs) == 111
    with pytest.raises(CalibrationError, match="not written to"):
        ledger.append({"kind": "grid"})
    assert path.read_text() == (ROOT / "calibrations" / "toy.ledger.jsonl").read_text()
