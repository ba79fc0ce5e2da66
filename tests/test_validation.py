"""admitcheck.validation: `validate(config)` collects every error (schema errors with their field paths, then
inputs, limits, pair and calibration compatibility); `admitcheck validate` prints each, exit 2. One error prints
as every command prints it."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from admitcheck.cli import app
from admitcheck.validation import validate
from tests.test_cli import assert_user_error, measure_config, screen_config

runner = CliRunner()


def _where(result) -> list[str]:
    return [f"{e.file}: {e.field}" for e in result.errors]


def test_two_schema_errors_are_both_named(tmp_path, toy_pair_dir):
    cfg = measure_config(tmp_path, toy_pair_dir, **{"probe.num_promts": 8, "rollout.dtype": "float64"})
    result = validate(cfg)
    assert result.kind == "measure" and not result.ok
    assert _where(result) == [f"{cfg}: probe.num_promts", f"{cfg}: rollout.dtype"]
    assert "unknown key" in result.errors[0].message and "(and" not in result.errors[0].message
    r = runner.invoke(app, ["validate", str(cfg)])
    assert_user_error(r, "probe.num_promts: unknown key", "rollout.dtype:")
    assert r.output.count("admitcheck: ConfigError") == 2  # one panel each


def test_two_independent_input_errors_are_both_named(tmp_path, toy_pair_dir):
    """A teacher that is no model dir and a probe prompt file that is not there: two causes, two errors."""
    cfg = measure_config(
        tmp_path,
        toy_pair_dir,
        **{"pair.teacher": str(tmp_path / "no_teacher"), "probe.prompts": str(tmp_path / "none.jsonl")},
    )
    result = validate(cfg)
    assert [e.field for e in result.errors] == ["pair.teacher", "probe.prompts"]
    r = runner.invoke(app, ["validate", str(cfg)])
    assert_user_error(r, "pair.teacher:", "probe.prompts:", "prompts file not found")


def test_a_rollout_that_does_not_fit_and_an_incompatible_calibration(tmp_path, toy_pair_dir):
    """Screen config: a candidate skipping a layer the model lacks, and a protocol the calibration was not made
    with (the calibration's sampling temperature): both, the rollout's first."""
    path = screen_config(tmp_path, toy_pair_dir, **{"sampling": {"temperature": 0.7}})
    data = yaml.safe_load(path.read_text())
    data["candidates"] = [{"name": "kv99", "rollout": {"kv_cache": {"dtype": "fp8_e4m3", "skip_layers": [99]}}}]
    path.write_text(yaml.safe_dump(data))
    result = validate(path)
    assert [e.field for e in result.errors] == ["candidates.kv99.rollout.kv_cache.skip_layers", "sampling.temperature"]


def test_one_error_is_the_error_every_command_raises(tmp_path, toy_pair_dir):
    """A single error: the same `file: field: message` as `measure` (the first error of the schema's list)."""
    cfg = measure_config(tmp_path, toy_pair_dir, **{"probe.num_promts": 8})
    result = validate(cfg)
    assert len(result.errors) == 1
    r = runner.invoke(app, ["measure", str(cfg)])
    assert_user_error(r, str(result.errors[0]))


def test_a_valid_config_has_no_errors_and_says_what_would_run(toy_pair_dir, tmp_path):
    result = validate(measure_config(tmp_path, toy_pair_dir))
    assert result.ok and result.kind == "measure" and result.info["prompts"]["probe.prompts"] > 0


def test_unreadable_yaml_and_unknown_kind_stop_at_once(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("pair: [\n")
    assert [e.message.split(":")[0] for e in validate(bad).errors] == ["malformed YAML"]
    other = tmp_path / "other.yaml"
    other.write_text("kind: nonsense\n")
    result = validate(other)
    assert result.kind is None and [e.field for e in result.errors] == ["kind"]
