"""What a newcomer on a fresh machine meets: rollout configs that do not fit the model, output in CI logs, library
warnings, and the shipped toy pair against the shipped calibration (rebuilt, re-saved, or a different pair)."""

from __future__ import annotations

import json
import re
import shutil
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from admitcheck.cli import app
from admitcheck.config import RolloutConfig
from admitcheck.rollout.precision import rollout_problems
from tests.test_cli import assert_user_error, measure_config
from tests.test_numerics import IS_INTEL

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


# ------------------------------------------------------------------------------ rollout configs that do not fit


def test_rollout_problems_layers_and_globs():
    names = ["model.layers.0.mlp.up_proj", "model.layers.1.mlp.up_proj", "lm_head"]
    ok = RolloutConfig(weights={"format": "fp8_e4m3", "exclude": ["*.up_proj"], "exclude_layers": [1]},
                       kv_cache={"dtype": "fp8_e4m3", "skip_layers": [0, 1]})  # fmt: skip
    assert rollout_problems(ok, 2, names) == []
    bad = RolloutConfig(kv_cache={"dtype": "fp8_e4m3", "skip_layers": [99]})
    (field, message), *_ = rollout_problems(bad, 2, names)
    assert field == "kv_cache.skip_layers" and "99" in message and "2 decoder layers" in message
    neg = RolloutConfig(weights={"format": "int8", "exclude_layers": [-1]})
    assert rollout_problems(neg, 2, names)[0][0] == "weights.exclude_layers"
    glob = RolloutConfig(weights={"format": "fp8_e4m3", "exclude": ["model.layer.0.*"]})  # typo: layer, not layers
    assert rollout_problems(glob, 2, names)[0][0] == "weights.exclude"
    assert rollout_problems(bad, 0, []) == []  # a model that does not say is not judged


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"rollout.kv_cache": {"dtype": "fp8_e4m3", "skip_layers": [99]}}, "rollout.kv_cache.skip_layers"),
        ({"rollout.weights": {"format": "fp8_e4m3", "exclude_layers": [2]}}, "rollout.weights.exclude_layers"),
        ({"rollout.weights": {"format": "fp8_e4m3", "exclude": ["model.layer.0.*"]}}, "rollout.weights.exclude"),
    ],
)
def test_validate_and_measure_refuse_a_rollout_that_does_not_fit(tmp_path, toy_pair_dir, override, field):
    cfg = measure_config(tmp_path, toy_pair_dir, **override)
    assert_user_error(runner.invoke(app, ["validate", str(cfg)]), str(cfg), field)
    assert_user_error(runner.invoke(app, ["measure", str(cfg)]), field)  # the engine refuses it too


def test_validate_names_the_candidate_of_a_screen_config(tmp_path, toy_pair_dir):
    data = yaml.safe_load((ROOT / "examples" / "toy_screen.yaml").read_text())
    data["candidates"] = [{"name": "kv99", "rollout": {"kv_cache": {"dtype": "fp8_e4m3", "skip_layers": [99]}}}]
    path = _retargeted(tmp_path, data, toy_pair_dir)
    assert_user_error(runner.invoke(app, ["validate", str(path)]), "candidates.kv99.rollout.kv_cache.skip_layers")


# ------------------------------------------------------------------------------------ output in CI logs


def test_tables_are_not_cut_when_stdout_is_not_a_terminal(tmp_path, toy_pair_dir):
    # CliRunner's stdout is not a terminal, as in a CI log: rich used to cut tables to 80 columns ("0.…").
    cfg = measure_config(tmp_path, toy_pair_dir)
    result = runner.invoke(app, ["measure", str(cfg)])
    assert result.exit_code == 0, result.output
    assert "…" not in result.output, result.output
    assert "seq_log_ratio_mean" in result.output


def test_engine_decoding_issues_no_library_warnings(toy_pair_dir):
    from admitcheck.config import SamplingConfig
    from admitcheck.io import load_causal_lm
    from admitcheck.rollout.engines.hf import HFEngine, cache_kwarg

    model = load_causal_lm(toy_pair_dir / "student")
    assert cache_kwarg(model) in ("cache", "past_key_values")
    engine = HFEngine(model, RolloutConfig(dtype="float32", kv_cache={"dtype": "fp8_e4m3"}), eos_token_id=2,
                      pad_token_id=0)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a FutureWarning/DeprecationWarning from transformers fails the test
        ro = engine.sample([[1, 5, 6, 7, 14]] * 4, SamplingConfig(), seed=0, max_new_tokens=8)
    assert ro.num_tokens > 0


# ------------------------------------------------------------------------ the shipped pair and calibration


def _retargeted(tmp_path: Path, data: dict, toy: Path, name: str = "screen.yaml") -> Path:
    """An example config with its ../toy paths pointed at `toy` and the calibration at the shipped one."""

    def fix(v):
        if isinstance(v, dict):
            return {k: fix(x) for k, x in v.items()}
        if isinstance(v, list):
            return [fix(x) for x in v]
        if isinstance(v, str) and v.startswith("../toy/"):
            return str(toy / v.removeprefix("../toy/"))
        if isinstance(v, str) and v.startswith("../calibrations/"):
            return str(ROOT / v.removeprefix("../"))
        return v

    path = tmp_path / name
    path.write_text(yaml.safe_dump(fix(data)))
    return path


def _screen_bf16(tmp_path: Path, toy: Path):
    data = yaml.safe_load((ROOT / "examples" / "toy_screen.yaml").read_text())
    data["candidates"] = [c for c in data["candidates"] if c["name"] == "bf16"]
    return runner.invoke(app, ["screen", str(_retargeted(tmp_path, data, toy))])


def _copy_pair(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("toy_pair.json"))
    return dst


def test_the_shipped_pair_is_the_shipped_calibrations_pair(toy_pair_dir):
    from admitcheck.calibration.artifact import load_calibration
    from admitcheck.config import PairConfig
    from admitcheck.fingerprint import pair_fingerprint, strict_differences

    cal = load_calibration(ROOT / "calibrations" / "toy.yaml")
    pair = PairConfig(student=str(ROOT / "toy" / "student"), teacher=str(ROOT / "toy" / "teacher"))
    present = pair_fingerprint(pair, ROOT / "toy" / "prompts" / "probe.jsonl")
    assert strict_differences(cal.pair_fingerprint, present) == []
    assert cal.pair.behaviour is not None and len(cal.pair.behaviour.sequences) == 8


def test_a_resaved_pair_is_accepted(tmp_path):
    """The shipped student's config.json rewritten as another transformers version would: only bookkeeping keys
    differ, so the canonical fingerprints are equal and screen accepts it without a behaviour check."""
    toy = _copy_pair(ROOT / "toy", tmp_path / "toy")
    cfg = json.loads((toy / "student" / "config.json").read_text())
    cfg.update(transformers_version="4.57.1", use_cache=False)
    (toy / "student" / "config.json").write_text(json.dumps(cfg))
    result = _screen_bf16(tmp_path, toy)
    assert result.exit_code in (0, 1), result.output
    assert "warning" not in result.output  # bookkeeping only: the canonical fingerprints are equal


def test_a_pair_with_different_weights_but_the_same_behaviour_is_accepted_with_a_warning(tmp_path):
    from admitcheck.io import load_causal_lm

    toy = _copy_pair(ROOT / "toy", tmp_path / "toy")
    model = load_causal_lm(toy / "student")
    with torch.no_grad():  # one weight moved by 1 float32 ulp: other bytes, the same behaviour
        w = model.model.layers[0].mlp.down_proj.weight
        w[0, 0] = torch.nextafter(w[0, 0], torch.tensor(1.0))
    model.save_pretrained(toy / "student")
    result = _screen_bf16(tmp_path, toy)
    assert result.exit_code in (0, 1), result.output
    assert "warning" in result.output and "pair.student.weights" in result.output


def test_a_different_pair_is_refused(tmp_path):
    from admitcheck.io import load_causal_lm

    toy = _copy_pair(ROOT / "toy", tmp_path / "toy")
    model = load_causal_lm(toy / "student")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # the student with relative weight noise 0.05: a different model
        for p in model.parameters():
            p.add_(0.05 * p.pow(2).mean().sqrt() * torch.randn(p.shape, generator=g))
    model.save_pretrained(toy / "student")
    assert_user_error(_screen_bf16(tmp_path, toy), "pair.student", "drifted by")


@pytest.mark.slow
def test_a_rebuilt_toy_pair_is_accepted_by_the_shipped_calibration(tmp_path):
    """`admitcheck toy-pair DIR` under the locked versions rebuilds the shipped pair (deterministic build), on any
    x86-64 CPU: the numeric pins (`admitcheck.numerics`) give every CPU the same kernels (bench/numeric_pins.py).
    The weights are compared byte for byte, not only the behaviour: a build on another code path is another model."""
    result = runner.invoke(app, ["toy-pair", str(tmp_path / "toy")])
    assert result.exit_code == 0, result.output
    screened = _screen_bf16(tmp_path, tmp_path / "toy")
    if IS_INTEL and screened.exit_code == 2:  # measured 2026-12-07 on an Intel Xeon (AVX-512, AMX): the pinned build
        # rounds otherwise there (tests/test_numerics.py GOLDEN_INTEL) and its student drifts 1.5e-4 on the fixed
        # sequences, over the shipped check's 4.2e-5: refused. What must hold there: a rounding drift, far under the
        # ≥ 0.65 nats/token of a build on another kernel path (README, "Same numbers on every x86-64 CPU")
        drift = float(re.search(r"drifted by ([0-9.e+-]+)", " ".join(screened.output.split())).group(1))
        assert drift < 1e-3, screened.output
        pytest.xfail(f"a real Intel CPU: the rebuilt pair's student drifts {drift:g} (refused); README")
    assert screened.exit_code in (0, 1), screened.output  # a verdict (accepted as the same pair), not a refusal
    assert "bf16" in screened.output and "drifted" not in screened.output
    from admitcheck.fingerprint import model_fingerprint

    for side in ("student", "teacher"):
        rebuilt, shipped = (model_fingerprint(d / side)["weights"] for d in (tmp_path / "toy", ROOT / "toy"))
        assert rebuilt == shipped, side
