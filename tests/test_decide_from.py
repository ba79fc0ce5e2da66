"""`levels.decide_from` naming a screen config (issue 38: "a `calibrate` option that takes a screen config"): the
config is screened once, by a real screen of the toy pair, its report kept beside the calibration's output and read
back on resume; bad entries are refused naming the field before anything is screened or written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from admitcheck import io
from admitcheck.admission.decide_from import kept_report_path, plan_decide, screened_decide
from admitcheck.config import CalibrateConfig, ScreenConfig
from admitcheck.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def _screen_config(tmp_path: Path, names: tuple[str, ...]) -> Path:
    """The shipped toy screen config with only `names` as candidates, its paths absolute, written to tmp_path."""
    cfg = io.load_config(ROOT / "examples" / "toy_screen.yaml", ScreenConfig)
    data = cfg.model_dump(mode="json", exclude_none=True)
    data["candidates"] = [c for c in data["candidates"] if c["name"] in names]
    path = tmp_path / "screen.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _calibrate_config(tmp_path: Path, decide_from: list[str], **top) -> CalibrateConfig:
    base = io.load_config(ROOT / "examples" / "toy_calibrate.yaml", CalibrateConfig)
    levels = base.levels.model_copy(update={"decide": [0.05], "decide_from": decide_from})
    return base.model_copy(update={"levels": levels, "output": str(tmp_path / "out" / "toy.yaml"), **top})


def test_a_screen_config_is_screened_once_and_its_report_kept(tmp_path) -> None:
    from admitcheck.admission.screen import screen
    from admitcheck.report import to_json

    screen_yaml = _screen_config(tmp_path, ("bf16", "fp8_kv"))
    cfg = _calibrate_config(tmp_path, [str(screen_yaml)])
    (src,) = plan_decide(cfg, "c.yaml")  # what `validate` shows: checked, nothing screened yet
    assert src.kind == "config" and src.bounds is None and src.candidates == ("bf16", "fp8_kv")
    assert src.kept == str(kept_report_path(cfg, "c.yaml", str(screen_yaml)))
    assert Path(src.kept).parent == tmp_path / "out" and Path(src.kept).name.startswith("toy.decide.")
    with pytest.raises(ConfigError, match="not screened yet") as err:  # no screener: nothing runs
        screened_decide(cfg, "c.yaml")
    assert err.value.field == "levels.decide_from.0"

    calls = []

    def screener(screen_cfg, file):
        calls.append(file)
        return to_json(screen(screen_cfg, config_file=file))

    merged = screened_decide(cfg, "c.yaml", screener=screener)
    assert calls == [str(screen_yaml)] and Path(src.kept).is_file()
    report = json.loads(Path(src.kept).read_text())
    uppers = [v["mismatch_interval"][1] for v in report["verdicts"]]
    assert [v["name"] for v in report["verdicts"]] == ["bf16", "fp8_kv"]
    assert report["verdicts"][1]["metric"] == cfg.metric and uppers[1] > 0
    want = [0.05, *(u for u in uppers if u > 0)]  # the config's own bound first; a bound of 0 decides nothing
    assert merged.levels.decide == pytest.approx(list(dict.fromkeys(want))) and merged.levels.decide_from == []

    def must_not_run(screen_cfg, file):
        raise AssertionError("a kept report is read back, not screened again")

    again = screened_decide(cfg, "c.yaml", screener=must_not_run)  # a resume: the same bounds
    assert again.levels.decide == merged.levels.decide
    (src,) = plan_decide(cfg, "c.yaml")
    assert src.bounds is not None and list(src.bounds) == [u for u in uppers if u > 0]
    screen_yaml.write_text(screen_yaml.read_text() + "# edited\n")  # another text: another screen
    (edited,) = plan_decide(cfg, "c.yaml")
    assert edited.bounds is None and edited.kept != src.kept


def test_bad_decide_from_entries_are_refused_naming_the_field_before_any_screen(tmp_path) -> None:
    screen_yaml = _screen_config(tmp_path, ("fp8_kv",))
    (tmp_path / "notes.txt").write_text("fp8_kv\n")
    refusals = [
        ([str(tmp_path / "notes.txt")], {}, "neither a screen's JSON output"),
        ([str(tmp_path / "missing.yaml")], {}, "no screen config"),
        ([str(ROOT / "examples" / "toy_calibrate.yaml")], {}, "does not validate"),  # a calibrate config
        ([str(screen_yaml)], {"metric": "kl_exact"}, "screens on k3, this calibration's metric is kl_exact"),
    ]
    pair = io.load_config(ROOT / "examples" / "toy_calibrate.yaml", CalibrateConfig).pair
    renamed = pair.model_copy(update={"name": "toy_v2"})
    refusals.append(([str(screen_yaml)], {"pair": renamed}, "of pair 'toy', this one is 'toy_v2'"))
    for decide_from, top, words in refusals:
        cfg = _calibrate_config(tmp_path, [str(screen_yaml), *decide_from] if top == {} else decide_from, **top)
        field = f"levels.decide_from.{len(cfg.levels.decide_from) - 1}"

        def screener(screen_cfg, file):
            raise AssertionError("nothing is screened before every entry is checked")

        with pytest.raises(ConfigError, match=words) as err:
            screened_decide(cfg, "c.yaml", screener=screener)
        assert err.value.field == field and err.value.file == "c.yaml", (words, err.value.field)
    assert not (tmp_path / "out").exists()  # nothing written


def test_validate_and_calibrate_commands_on_a_screen_config(tmp_path) -> None:
    """`validate` lists a screen config not screened yet and exits 0; `calibrate` refuses a bad entry with exit 2
    naming the field, no traceback, nothing written."""
    from typer.testing import CliRunner

    from admitcheck.cli import app

    screen_yaml = _screen_config(tmp_path, ("fp8_kv",))
    data = _calibrate_config(tmp_path, [str(screen_yaml)]).model_dump(mode="json", exclude_none=True)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    res = CliRunner().invoke(app, ["validate", str(tmp_path / "c.yaml")])
    assert res.exit_code == 0 and "to screen: [" in res.output, res.output
    assert "screen.yaml (candidates: fp8_kv)" in res.output
    assert "decide: [0.05]" in res.output
    data["levels"]["decide_from"] = [str(screen_yaml), str(ROOT / "examples" / "toy_calibrate.yaml")]
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(data))
    res = CliRunner().invoke(app, ["calibrate", str(tmp_path / "bad.yaml")])
    assert res.exit_code == 2 and "levels.decide_from.1" in res.output and "does not validate" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "out").exists()
