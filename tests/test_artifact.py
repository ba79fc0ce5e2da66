"""The outputs' schemas (calibration.schema, calibration.record, admission.backtest_report) against what is shipped.

Every YAML under calibrations/ (found recursively) loads through its schema and dumps back to the same bytes; every
shipped ledger's run lines load as RunRecords and write back the same lines; a malformed artifact or report is a
CalibrationError naming its file and field.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from admitcheck.admission.backtest_report import BacktestReport, dump_backtest, load_backtest
from admitcheck.calibration.artifact import dump_calibration, load_calibration
from admitcheck.calibration.record import RunRecord
from admitcheck.calibration.schema import CalibrationArtifact
from admitcheck.errors import CalibrationError

CALIBRATIONS = Path(__file__).resolve().parents[1] / "calibrations"
SHIPPED_YAML = sorted(CALIBRATIONS.rglob("*.yaml"))
SHIPPED_LEDGERS = sorted(CALIBRATIONS.rglob("*.ledger.jsonl"))


def is_backtest(path: Path) -> bool:
    return yaml.safe_load(path.read_text()).get("kind") == "backtest"


def test_the_shipped_files_are_found() -> None:
    names = {p.name for p in SHIPPED_YAML}
    assert {"toy.yaml", "toy_rl.yaml", "toy-seed1000.yaml", "smollm2.yaml", "toy.backtest.yaml"} <= names
    assert len(SHIPPED_LEDGERS) >= 4


@pytest.mark.parametrize("path", SHIPPED_YAML, ids=lambda p: str(p.relative_to(CALIBRATIONS)))
def test_every_shipped_yaml_round_trips_through_its_schema(path: Path) -> None:
    if is_backtest(path):
        report = load_backtest(path)
        assert isinstance(report, BacktestReport) and report.path == path
        assert dump_backtest(report) == path.read_text()
    else:
        cal = load_calibration(path)
        assert isinstance(cal, CalibrationArtifact) and cal.path == path
        assert dump_calibration(cal) == path.read_text()
        assert cal.budget.kind in ("point", "lower_bound", "upper_bound") and cal.tau > 0
        assert len(cal.runs) == sum(lv.replicates for lv in cal.level_report)


@pytest.mark.parametrize("path", SHIPPED_LEDGERS, ids=lambda p: p.name)
def test_every_shipped_ledger_line_round_trips_as_a_run_record(path: Path) -> None:
    lines = path.read_text().splitlines()
    runs = [line for line in lines if json.loads(line).get("kind") == "run"]
    assert runs
    for line in runs:
        record = RunRecord.model_validate_json(line)
        assert record.key and json.dumps(record.line(), sort_keys=True) == line


def test_a_record_is_frozen_and_keyed_by_copy() -> None:
    record = RunRecord(seed=3, quality=1.5)
    keyed = record.keyed("k")
    assert keyed.key == "k" and record.key == ""
    with pytest.raises(ValueError):
        record.quality = 2.0  # type: ignore[misc]
    assert "reused_from" not in keyed.line() and keyed.reused("a.ledger.jsonl").line()["reused_from"]
    assert keyed.line() == {"kind": "run", "key": "k", "seed": 3, "quality": 1.5}  # the keys it was made with
    old = {"kind": "run", "key": "k", "seed": 3, "quality": 1.5, "mismatch": None}  # a line of an older ledger
    assert RunRecord.model_validate(old).reused("a").line() == old | {"reused_from": "a"}  # copied as it was


def test_a_run_key_is_typed_and_encodes_to_the_ledger_key() -> None:
    from admitcheck.calibration.campaign import run_key
    from admitcheck.calibration.levels import Level
    from admitcheck.calibration.record import RunKey

    level = Level("noise-1", "noise", relative_std=0.01)
    key = RunKey.decode(run_key(level, 7))
    assert key == RunKey(level.spec(), 7) and key.encode() == run_key(level, 7)
    lines = map(json.loads, (CALIBRATIONS / "toy.ledger.jsonl").read_text().splitlines())
    stored = next(x for x in lines if x.get("kind") == "run")
    record = RunRecord.model_validate(stored)
    assert record.run_key.encode() == record.key and record.run_key.seed == record.seed


def test_a_run_entry_shares_its_record_base_and_keeps_the_artifact_order() -> None:
    from admitcheck.calibration.record import RunMeasurements
    from admitcheck.calibration.schema import RUN_ENTRY_ORDER, RunEntry

    assert issubclass(RunRecord, RunMeasurements) and issubclass(RunEntry, RunMeasurements)
    assert sorted(RUN_ENTRY_ORDER) == sorted(RunEntry.model_fields)
    record = RunRecord(seed=3, quality=1.5, mismatch=0.01, k3=0.02)
    entry = RunEntry(level="a", fit_x=0.01, quality_cost=0.1, **record.measurements())
    assert entry.mismatch == 0.01 and entry.quality == 1.5
    cal = load_calibration(CALIBRATIONS / "toy.yaml")
    assert list(cal.dump()["runs"][0]) == [k for k in RUN_ENTRY_ORDER if k in cal.runs[0].model_fields_set]


def _calibration_data() -> dict:
    return yaml.safe_load((CALIBRATIONS / "toy.yaml").read_text())


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda d: d.pop("budget"), "budget"),
        (lambda d: d["budget"].update(kind="huge"), "budget.kind"),
        (lambda d: d["budget"].update(interval=[0.1]), "budget.interval.1"),
        (lambda d: d["curve"].pop("exponent"), "curve.exponent"),
        (lambda d: d["budget"]["model"].pop("lack_of_fit"), "budget.model.lack_of_fit"),
        (lambda d: d["curve"].update(form="spline"), "curve"),
        (lambda d: d["runs"][3].pop("quality_cost"), "runs.3.quality_cost"),
        (lambda d: d["runs"][0].update(qualty=1.0), "runs.0.qualty"),
        (lambda d: d["recipe"].update(loss="ppo"), "recipe.loss"),
        (lambda d: d["protocol"]["sampling"].update(top_p=2.0), "protocol.sampling.top_p"),
        (lambda d: d["pair"]["student"].pop("weights"), "pair.student.weights"),
        (lambda d: d["tolerance"].update(value="small"), "tolerance.value"),
        (lambda d: d.update(extra_section={}), "extra_section"),
    ],
)
def test_a_malformed_artifact_names_the_field(tmp_path, edit, field) -> None:
    data = _calibration_data()
    edit(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(CalibrationError) as err:
        load_calibration(path)
    assert err.value.field == field and err.value.file == str(path), (err.value.field, err.value.message)


def test_a_malformed_backtest_report_names_the_field(tmp_path) -> None:
    data = yaml.safe_load((CALIBRATIONS / "toy.backtest.yaml").read_text())
    data["candidates"][1]["truth"].pop("label")
    path = tmp_path / "bad.backtest.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(CalibrationError) as err:
        load_backtest(path)
    assert err.value.field == "candidates.1.truth.label" and err.value.file == str(path)


def test_attributes_read_what_the_yaml_says() -> None:
    cal = load_calibration(CALIBRATIONS / "toy.yaml")
    data = _calibration_data()
    assert cal.budget.value == data["budget"]["value"] and list(cal.budget.interval) == data["budget"]["interval"]
    assert cal.tau == data["tolerance"]["value"] and cal.recipe.loss == data["recipe"]["loss"]
    assert cal.runs[5].quality_cost == data["runs"][5]["quality_cost"]
    assert cal.protocol.flat()["protocol.probe.max_new_tokens"] == data["protocol"]["probe"]["max_new_tokens"]
    assert cal.x_measure == data["budget"]["x"] and len(cal.budget_draws()) == data["budget"]["n_boot"]
    assert cal.predict_cost(0.0) == 0.0 and math.isclose(cal.predict_cost(cal.budget.value), cal.tau, rel_tol=1e-6)
    assert cal.recipe.train_config("train.jsonl").steps == data["recipe"]["steps"]


def test_an_artifact_keeps_a_run_s_non_finite_numbers() -> None:
    cal = load_calibration(CALIBRATIONS / "toy.yaml")
    run = cal.runs[2].model_copy(update={"mismatch_interval": (0.05, math.inf)})
    dumped = cal.model_copy(update={"runs": [*cal.runs[:2], run, *cal.runs[3:]]}).dump()
    assert dumped["runs"][2]["mismatch_interval"] == [0.05, math.inf]
