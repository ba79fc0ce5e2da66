"""Screening: the sequential verdicts, compatibility checks, `--from-logs`, engine failures that keep the verdicts
obtained, and the CLI's exit codes and outputs. The pure decision rule is tests/test_sequential.py;
the checks before a screen (compatibility, candidates, engines) tests/test_checks.py.

The calibration here is hand-made (`write_artifact`): the real pair and prompt fingerprints, the screen's protocol,
a chosen budget. Toy-pair tests are `slow` (the session fixture builds the pair once).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from admitcheck import io
from admitcheck.admission.screen import ScreenReport, Verdict
from admitcheck.config import PairConfig, ScreenConfig
from admitcheck.errors import CalibrationError, ConfigError, EngineError
from tests.test_cli import assert_user_error

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
# 32 per batch, 3 looks: a bettor that gains at most ~7% a sequence (κ 8) needs ≥ 54 sequences to reach 1/α = 40
PROBE = {"min_prompts": 32, "num_prompts": 96, "batch_size": 32, "max_new_tokens": 16, "seed": 0}
FUNCTIONAL = {"estimator": "k3", "kappa": 8.0}  # logs give k3 only; the toy-pair fixture below states kl_exact
KL_EXACT = {"estimator": "kl_exact", "kappa": 8.0}
BF16 = {"name": "bf16", "rollout": {"engine": "hf", "dtype": "bfloat16"}}
NOISE = {"name": "noise", "rollout": {"engine": "hf", "dtype": "float32", "noise": {"relative_std": 0.3}}}
NAN = {"name": "nan", "rollout": {"engine": "hf", "dtype": "float16", "noise": {"relative_std": 1e6}}}  # fp16 overflow
# W8A8 with 64-wide blocks: vLLM runs it nowhere (CPU: no FP8 kernel; GPU: its FP8 kernels need 128)
W8A8_VLLM = {
    "name": "w8a8",
    "rollout": {
        "engine": "vllm",
        "dtype": "bfloat16",
        "weights": {"format": "fp8_e4m3", "granularity": "block", "block_size": 64, "activations": "fp8_per_token"},
    },
}
HAVE_VLLM = importlib.util.find_spec("vllm") is not None
runner = CliRunner()


def write_artifact(path: Path, toy: Path, budget: float = 0.05, kind: str = "point", **protocol) -> Path:
    """A hand-made calibration artifact of the toy pair (schema of `admitcheck.calibration.artifact`), protocol =
    PROBE's."""
    from admitcheck.calibration.artifact import SCHEMA_VERSION, CalibrationArtifact, dump_calibration, fingerprint_pair
    from admitcheck.fingerprint import prompts_fingerprint

    pair = PairConfig(student=str(toy / "student"), teacher=str(toy / "teacher"))
    fp = fingerprint_pair(pair)
    fp["prompts"] = {k: prompts_fingerprint(toy / "prompts" / f"{k}.jsonl") for k in ("probe", "train", "eval")}
    interval = {"point": [budget / 2, budget * 2], "lower_bound": [budget, math.inf], "upper_bound": [0.0, budget]}
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": 0} | protocol.pop("sampling", {})
    functional = protocol.pop("functional", FUNCTIONAL)  # None: an artifact written before issue #35
    data = {
        "schema_version": SCHEMA_VERSION,
        "name": "toy",
        "metric": protocol.pop("metric", "k3"),
        "pair": fp,
        "protocol": {
            "sampling": sampling,
            "probe": {"max_new_tokens": protocol.pop("max_new_tokens", 16)},
            "reference": {"dtype": protocol.pop("reference_dtype", "float32")},
        }
        | ({"functional": functional} if functional is not None else {}),
        "recipe": {
            "steps": 50,
            "batch_size": 16,
            "max_new_tokens": 16,
            "lr": 3e-4,
            "weight_decay": 0.0,
            "grad_clip": 1.0,
            "loss": "pg",
            "student_logprobs": "trainer",
            "tis_cap": None,
            "temperature": 1.0,
            "rollout": {"engine": "hf", "dtype": "float32"},
            "seed": 0,
            "prompts": os.path.relpath(toy / "prompts" / "train.jsonl", path.parent),
        },
        "quality": {"baseline_mean": 1.0, "baseline_std": 0.01, "baseline_seeds": 3, "start": 3.0, "improvement": 0.6},
        "tolerance": {"value": 0.05, "rule": "hand-made"},
        "runs": [
            {
                "level": "baseline",
                "seed": 0,
                "mismatch": 0.0,
                "fit_x": budget / 100,
                "quality": 1.0,
                "quality_cost": 0.0,
            }
        ],
        "curve": {"form": "log_logistic", "params": {"plateau": 1.0, "x50": budget * 5, "steepness": 2.0}},
        "budget": {"value": budget, "kind": kind, "interval": interval[kind], "confidence": 0.95},
        "provenance": {"note": "hand-made for tests"},
    }
    path.write_text(dump_calibration(CalibrationArtifact.model_validate(data)))
    return path


def write_config(path: Path, toy: Path, calibration: Path, candidates: list[dict], **overrides) -> Path:
    cfg = {
        "pair": {"name": "toy", "student": str(toy / "student"), "teacher": str(toy / "teacher")},
        "calibration": str(calibration),
        "probe": {"prompts": str(toy / "prompts" / "probe.jsonl"), **PROBE},
        "candidates": candidates,
    }
    if "probe" in overrides:
        cfg["probe"] |= overrides.pop("probe")
    for dotted, value in overrides.items():
        node = cfg
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    path.write_text(yaml.safe_dump(cfg))
    return path


def cli(*args: str):
    from admitcheck.cli import app

    return runner.invoke(app, list(args))


# --------------------------------------------------------------------------------------------- pure pieces


@pytest.mark.parametrize("name", ["toy_screen.yaml", "toy_screen_logs.yaml", "qwen3_vllm_screen.yaml"])
def test_examples_parse(name):
    cfg = io.load_config(EXAMPLES / name, ScreenConfig)
    if name == "toy_screen.yaml":
        kinds = [c.name for c in cfg.candidates]
        assert kinds == [
            "bf16",
            "fp8_w8a8_tensor",
            "fp8_block",
            "fp8_kv",
            "fp8_kv_skip0",
            "int8_weights",
            "heavy_noise",
            "stale_2",
        ]
        assert cfg.candidates[-1].staleness == 2 and cfg.candidates[4].rollout.kv_cache.skip_layers == [0]
    if name == "toy_screen_logs.yaml":
        assert cfg.source == "logs" and cfg.logs.path.endswith("toy_bf16.jsonl")


# --------------------------------------------------------------------------------------------- library, toy pair


@pytest.fixture(scope="module")
def setup(tmp_path_factory, toy_pair_dir):
    d = tmp_path_factory.mktemp("screen")
    cal = write_artifact(d / "cal.yaml", toy_pair_dir, budget=0.05, functional=KL_EXACT)
    return d, cal


@pytest.fixture(scope="module")
def result(setup, toy_pair_dir):
    from admitcheck.admission.screen import screen

    d, cal = setup
    p = write_config(d / "screen.yaml", toy_pair_dir, cal, [BF16, NOISE, NAN, {"name": "stale", "staleness": 1}])
    return screen(io.load_config(p, ScreenConfig), config_file=str(p))


@pytest.mark.slow
def test_verdicts(result):
    v = {x.name: x for x in result.verdicts}
    assert v["bf16"].decision == "ADMIT" and not v["bf16"].marginal and v["bf16"].error_control
    assert v["bf16"].estimator == "kl_exact"  # full rows: the same KL as k3, with less variance
    assert v["bf16"].mismatch_interval[1] < 0.025 and v["bf16"].margin > 0  # below the budget's lower bound
    assert v["bf16"].decided_by == "budget" and not v["bf16"].heavy_tail  # its own interval is ~100x narrower
    assert result.policy.max_looks == 3 and v["noise"].looks <= 3
    assert v["noise"].decision == "REJECT" and v["noise"].mismatch_interval[0] > 0.1 and v["noise"].margin > 0
    assert v["nan"].decision == "REJECT" and v["nan"].reason.startswith("engine produced")
    assert "non-finite log-probs" in v["nan"].reason and v["nan"].quality_cost is None
    assert v["stale"].k3 > 0 and v["stale"].capacity.ratio_vs_bf16 == 1.0
    assert v["bf16"].capacity.ratio_vs_bf16 == 1.0 and v["noise"].capacity.ratio_vs_bf16 == pytest.approx(0.5, rel=1e-4)
    for x in (v["bf16"], v["noise"]):
        assert x.floor is not None and abs(x.floor) < 1e-6 and x.tokens > x.probes > 0 and x.seconds > 0
        assert x.quality_cost is not None and x.quality_cost_interval[0] <= x.quality_cost <= x.quality_cost_interval[1]
        assert {"k1", "k3", "kl_exact", "abs_diff_p99", "ess"} <= set(x.metrics)
    assert result.exit_code == 1 and result.floor["hf"].probes == 32
    assert v["bf16"].looks == 2 and v["bf16"].confidence_per_look == 0.95  # a confidence sequence: no α split
    assert v["bf16"].kappa == 8.0 and 0.0 <= v["bf16"].capped_share < 1.0


@pytest.mark.slow
def test_a_screen_loads_the_pair_once(setup, tmp_path, toy_pair_dir, monkeypatch):
    """The compatibility check, the reference, every stale candidate and the prefix-shift diagnostic share one
    `LoadedPair`: each (model, dtype, device) is read once outside the engines (which load their own copy), each
    tokenizer once."""
    import inspect

    from admitcheck.admission.screen import screen

    loads, tokenizers = [], []
    real_model, real_tokenizer = io.load_causal_lm, io.load_tokenizer

    def load_causal_lm(path, dtype="float32", device="cpu", **kw):
        caller = inspect.stack()[1].filename
        if "engines" not in caller:
            loads.append((str(path), dtype, device))
        return real_model(path, dtype, device, **kw)

    def load_tokenizer(path, **kw):
        tokenizers.append(str(path))
        return real_tokenizer(path, **kw)

    monkeypatch.setattr(io, "load_causal_lm", load_causal_lm)
    monkeypatch.setattr(io, "load_tokenizer", load_tokenizer)
    _, cal = setup
    cands = [BF16, {"name": "stale1", "staleness": 1}, {"name": "stale2", "staleness": 2}]
    p = write_config(tmp_path / "s.yaml", toy_pair_dir, cal, cands, diagnostics=["prefix_shift"],
                     probe={"min_prompts": 16, "num_prompts": 16})  # fmt: skip
    result = screen(io.load_config(p, ScreenConfig), config_file=str(p))
    assert len(result.verdicts) == 3 and result.diagnostics["bf16"].prefix_shift
    assert sorted(loads) == sorted(set(loads)) and len(loads) == 2  # student and teacher, float32 on CPU
    assert sorted(tokenizers) == sorted({str(toy_pair_dir / "student"), str(toy_pair_dir / "teacher")})


@pytest.mark.slow
def test_marginal_follows_policy(setup, tmp_path, toy_pair_dir):
    from admitcheck.admission.screen import screen

    _, cal = setup
    probe = {**PROBE, "min_prompts": 96}  # one look, at the maximum
    p = write_config(tmp_path / "s.yaml", toy_pair_dir, cal, [BF16], probe=probe)
    cfg = io.load_config(p, ScreenConfig)
    k3 = screen(cfg).verdicts[0].mismatch
    edge = write_artifact(tmp_path / "edge.yaml", toy_pair_dir, budget=k3 * 1.01, functional=KL_EXACT)  # inside
    for policy, decision in (("reject", "REJECT"), ("admit", "ADMIT")):
        p = write_config(tmp_path / "s.yaml", toy_pair_dir, edge, [BF16], probe=probe, policy={"undecided": policy})
        v = screen(io.load_config(p, ScreenConfig)).verdicts[0]
        assert v.marginal and v.decision == decision and "marginal" in v.reason, v.reason
        assert v.error_control == (policy == "reject")  # the point estimate deciding has no error control
    lower = write_artifact(
        tmp_path / "lower.yaml", toy_pair_dir, budget=k3 * 1.01, kind="upper_bound", functional=KL_EXACT
    )
    p = write_config(tmp_path / "s.yaml", toy_pair_dir, lower, [BF16], probe=probe)
    with pytest.raises(CalibrationError, match="lower confidence bound 0"):  # (0, b): nothing can be admitted
        screen(io.load_config(p, ScreenConfig))
    p = write_config(tmp_path / "s.yaml", toy_pair_dir, lower, [BF16], probe=probe, policy={"reject_only": True})
    v = screen(io.load_config(p, ScreenConfig)).verdicts[0]
    assert v.budget_kind == "upper_bound" and v.marginal


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["kl_exact", "k3"])
def test_the_screen_measures_the_calibrations_functional(tmp_path, toy_pair_dir, estimator):
    """The functional's estimator is the calibration's (k3 even where full rows exist), its value the fixed point
    of the sequence means, and the uncapped token means stay in the metrics."""
    from admitcheck.admission.screen import screen
    from admitcheck.measurement.metrics import winsorized_mean

    cal = write_artifact(tmp_path / "cal.yaml", toy_pair_dir, functional={"estimator": estimator, "kappa": 8.0})
    p = write_config(tmp_path / "s.yaml", toy_pair_dir, cal, [BF16])
    v = screen(io.load_config(p, ScreenConfig)).verdicts[0]
    assert v.estimator == estimator and "kl_exact" in v.metrics and "k3" in v.metrics
    assert v.mismatch_interval[0] <= v.mismatch <= v.mismatch_interval[1]
    assert v.mismatch == pytest.approx(v.metrics[estimator], rel=0.5)  # light tail: near the token mean
    assert winsorized_mean([[v.mismatch]], 8.0)[0] == pytest.approx(v.mismatch)


@pytest.mark.slow
def test_calibration_x_and_screen_mismatch_are_one_functional(tmp_path, toy_pair_dir):
    """A calibration level's x (`levels.level_mismatch`, what the ledger stores) and a screen's mismatch of the same
    engine on the same probes are the same number, interval included: one code path (`ProbeRun.functional`)."""
    from admitcheck.admission.screen import screen
    from admitcheck.calibration.levels import Level, level_functional, level_mismatch, load_context
    from admitcheck.config import CalibrateConfig, RolloutConfig

    raw = yaml.safe_load((EXAMPLES / "toy_calibrate.yaml").read_text())
    raw["pair"] = {"name": "toy", "student": str(toy_pair_dir / "student"), "teacher": str(toy_pair_dir / "teacher")}
    raw["probe"] |= {"prompts": str(toy_pair_dir / "prompts" / "probe.jsonl"), "num_prompts": 64, "max_new_tokens": 16}
    raw["train"]["prompts"] = str(toy_pair_dir / "prompts" / "train.jsonl")
    raw["eval"]["prompts"] = str(toy_pair_dir / "prompts" / "eval.jsonl")
    raw["output"] = str(tmp_path / "cal.yaml")
    config = CalibrateConfig.model_validate(raw)
    ctx = load_context(config)
    functional = level_functional(config, ctx.tokens.vocab_size)
    rollout = RolloutConfig(engine="hf", dtype="bfloat16")
    x = level_mismatch(ctx, config, Level("bf16", "rollout", rollout=rollout), seed=0)

    cal = write_artifact(tmp_path / "a.yaml", toy_pair_dir, functional=functional.to_dict())
    probe = {**PROBE, "min_prompts": 64, "num_prompts": 64, "batch_size": config.probe.batch_size}
    p = write_config(tmp_path / "s.yaml", toy_pair_dir, cal, [BF16], probe=probe)
    v = screen(io.load_config(p, ScreenConfig)).verdicts[0]
    assert v.estimator == functional.estimator == "k3" and v.probes == 64  # k3: what every engine and log has
    assert x.mismatch == pytest.approx(v.mismatch, rel=1e-12)
    assert x.mismatch_interval == pytest.approx(list(v.mismatch_interval), rel=1e-9)
    assert x.k3 == pytest.approx(v.k3, rel=1e-12)  # the uncapped token mean stays beside it


@pytest.mark.slow
def test_an_artifact_without_its_functional_is_refused(tmp_path, toy_pair_dir):
    old = write_artifact(tmp_path / "old.yaml", toy_pair_dir, functional=None)
    p = write_config(tmp_path / "s.yaml", toy_pair_dir, old, [BF16])
    for cmd in ("screen", "validate"):
        assert_user_error(cli(cmd, str(p)), "protocol.functional", "uncapped k3 token mean")


@pytest.mark.slow
@pytest.mark.parametrize("sampling", [{"top_p": 0.9}, {"top_k": 20}])
def test_truncated_sampling_measure_and_screen_agree(tmp_path, toy_pair_dir, sampling):
    """top_p 0.9 / top_k 20: screen and measure score with the engine's kept set — the same k3 for the same config
    and seeds, and a BF16 engine never gets an infinite k3 (4 batches of 32 at the probe cap)."""
    from admitcheck.admission.screen import screen
    from admitcheck.config import SamplingConfig
    from admitcheck.measurement.measure import measure_engine
    from admitcheck.pairs.load import load_pair_tokenizer, tokenize_prompts
    from admitcheck.rollout.engines import build_engine

    cal = write_artifact(tmp_path / "cal.yaml", toy_pair_dir, budget=1e-9, sampling=sampling)  # never admits
    probe = {**PROBE, "min_prompts": 128, "num_prompts": 128, "batch_size": 32}  # one look: every batch runs
    p = write_config(
        tmp_path / "s.yaml", toy_pair_dir, cal, [BF16], probe=probe, full_logprobs=False, sampling=sampling
    )
    cfg = io.load_config(p, ScreenConfig)
    v = screen(cfg).verdicts[0]
    assert v.probes == 128 and math.isfinite(v.k3) and v.decision == "REJECT"
    assert "non-finite" not in v.reason and "zero probability" not in v.reason, v.reason
    tokens = load_pair_tokenizer(cfg.pair)
    ids = tokenize_prompts(tokens, io.read_prompts(cfg.probe.prompts, limit=128))
    reference = io.load_causal_lm(cfg.pair.student, "float32", "cpu")
    ids_kw = {"eos_token_id": tokens.eos_token_id, "pad_token_id": tokens.pad_token_id}
    engine = build_engine(cfg.candidates[0].rollout, cfg.pair.student, **ids_kw)
    m = measure_engine(engine, reference, ids, cfg.probe, SamplingConfig(**sampling), full=False).metrics(0.95)
    assert v.k3 == pytest.approx(m.values["k3"], rel=1e-12) and math.isfinite(m.values["k3"])
    assert v.k3_interval == pytest.approx(m.intervals["k3"], rel=1e-12)


@pytest.mark.slow
def test_from_logs_gives_the_same_metrics(setup, tmp_path, toy_pair_dir):
    """Logs written from a direct measurement (same prompts, seeds, reference) screen to the same metrics."""
    from admitcheck.admission.screen import screen
    from admitcheck.config import SamplingConfig
    from admitcheck.measurement.logs import write_measurement_logs
    from admitcheck.measurement.measure import measure_engine
    from admitcheck.pairs.load import load_pair_tokenizer, tokenize_prompts
    from admitcheck.rollout.engines import build_engine

    cal = write_artifact(tmp_path / "k3.yaml", toy_pair_dir, functional={"estimator": "k3", "kappa": 8.0})
    probe = {**PROBE, "min_prompts": 32, "num_prompts": 32}  # one look over all 32, like the logs
    p = write_config(tmp_path / "s.yaml", toy_pair_dir, cal, [NOISE], probe=probe, full_logprobs=False)
    cfg = io.load_config(p, ScreenConfig)
    tokens = load_pair_tokenizer(cfg.pair)
    ids = tokenize_prompts(tokens, io.read_prompts(cfg.probe.prompts, limit=32))
    reference = io.load_causal_lm(cfg.pair.student, "float32", "cpu")
    engine = build_engine(
        cfg.candidates[0].rollout, cfg.pair.student, eos_token_id=tokens.eos_token_id, pad_token_id=tokens.pad_token_id
    )
    acc = measure_engine(engine, reference, ids, cfg.probe, SamplingConfig(), full=False)
    direct = acc.metrics(0.95)
    assert write_measurement_logs(tmp_path / "logs.jsonl", acc) == 32

    from_logs = screen(cfg, from_logs=tmp_path / "logs.jsonl").verdicts[0]
    assert from_logs.source == "logs" and from_logs.name == "noise" and from_logs.probes == 32
    for k, value in direct.values.items():
        assert from_logs.metrics[k] == pytest.approx(value, rel=1e-12, abs=1e-15), k
    engine_run = screen(cfg).verdicts[0]  # the same tokens, sampled and scored again
    assert engine_run.estimator == from_logs.estimator == "k3"  # no full rows either way
    assert engine_run.k3 == pytest.approx(from_logs.k3, rel=1e-9)
    assert engine_run.k3_interval == pytest.approx(from_logs.k3_interval, rel=1e-9)
    assert engine_run.decision == from_logs.decision
    assert engine_run.mismatch == pytest.approx(from_logs.mismatch, rel=1e-9)  # the same functional
    kl_cal = write_config(tmp_path / "kl.yaml", toy_pair_dir, setup[1], [NOISE], probe=probe)
    with pytest.raises(CalibrationError, match="no full-vocabulary rows"):  # logs cannot give kl_exact
        screen(io.load_config(kl_cal, ScreenConfig), from_logs=tmp_path / "logs.jsonl")


# --------------------------------------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def cli_config(setup, toy_pair_dir):
    d, cal = setup
    return write_config(d / "cli.yaml", toy_pair_dir, cal, [BF16, NOISE])


@pytest.mark.slow
def test_cli_exit_0_all_admitted_table(cli_config):
    r = cli("screen", str(cli_config), "--candidate", "bf16")
    assert r.exit_code == 0, r.output
    assert "bf16" in r.stdout and "ADMIT" in r.stdout and "noise" not in r.stdout


@pytest.mark.slow
def test_cli_exit_1_every_output_format(cli_config, tmp_path, monkeypatch):
    summary = tmp_path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    junit, md = tmp_path / "r.xml", tmp_path / "r.md"
    r = cli("screen", str(cli_config), "--json", "--junit", str(junit), "--markdown", str(md))
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)  # one JSON document on stdout, nothing else
    assert [v["decision"] for v in doc["verdicts"]] == ["ADMIT", "REJECT"] and doc["exit_code"] == 1
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "1" and suite.get("errors") == "0"
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert cases["bf16"].find("failure") is None and cases["noise"].find("failure") is not None
    assert "| noise |" in md.read_text() and summary.read_text() == md.read_text()


@pytest.mark.slow
def test_cli_from_logs_and_validate(cli_config, tmp_path, toy_pair_dir):
    # trainer log-probs that differ a little (identical ones everywhere are refused: the trainer never recomputed);
    # 80 sequences: the bettor gains at most ~7% a sequence, and needs 1/α = 40
    lines = [{"rollout_logprobs": [-0.5, -0.1], "trainer_logprobs": [-0.5, -0.1 - 1e-4 * i]} for i in range(80)]
    logs = tmp_path / "l.jsonl"
    logs.write_text("".join(json.dumps(x) + "\n" for x in lines))
    k3_cal = write_artifact(tmp_path / "k3.yaml", toy_pair_dir, functional={"estimator": "k3", "kappa": 8.0})
    k3_config = write_config(tmp_path / "k3s.yaml", toy_pair_dir, k3_cal, [BF16, NOISE])  # logs give no kl_exact
    r = cli("screen", str(k3_config), "--from-logs", str(logs), "--json")
    assert r.exit_code == 0, r.output
    v = json.loads(r.stdout)["verdicts"][0]
    assert 0.0 < v["metrics"]["k3"] < 1e-5 and v["source"] == "logs" and v["probes"] == 80
    assert v["decision"] == "ADMIT" and not v["heavy_tail"]
    r = cli("validate", str(cli_config))
    assert r.exit_code == 0, r.output


@pytest.mark.slow
def test_cli_exit_2_bad_inputs(setup, cli_config, tmp_path, toy_pair_dir):
    _, cal = setup
    assert_user_error(cli("screen", str(cli_config), "--candidate", "nope"), "--candidate", "unknown candidate")
    missing = write_config(tmp_path / "a.yaml", toy_pair_dir, tmp_path / "none.yaml", [BF16])
    for cmd in ("screen", "validate"):
        assert_user_error(cli(cmd, str(missing)), "none.yaml", "file not found")
    corrupt = tmp_path / "corrupt.yaml"
    corrupt.write_text("budget: {value: [\n")
    assert_user_error(
        cli("validate", str(write_config(tmp_path / "b.yaml", toy_pair_dir, corrupt, [BF16]))),
        "corrupt.yaml",
        "malformed YAML",
    )
    shutil.copy(cal, tmp_path / "partial.yaml")
    data = yaml.safe_load((tmp_path / "partial.yaml").read_text())
    del data["budget"]
    (tmp_path / "partial.yaml").write_text(yaml.safe_dump(data))
    assert_user_error(
        cli("validate", str(write_config(tmp_path / "c.yaml", toy_pair_dir, tmp_path / "partial.yaml", [BF16]))),
        "budget",
    )
    other = write_artifact(tmp_path / "other.yaml", toy_pair_dir, max_new_tokens=64)
    bad_cal = write_config(tmp_path / "d.yaml", toy_pair_dir, other, [BF16])
    for cmd in ("screen", "validate"):
        assert_user_error(cli(cmd, str(bad_cal)), "probe.max_new_tokens", "differs from the calibration")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    empty_probe = write_config(tmp_path / "e.yaml", toy_pair_dir, cal, [BF16], **{"probe.prompts": str(empty)})
    assert_user_error(cli("screen", str(empty_probe)), "probe.prompts", "no prompts")
    for rows, words in (
        ([{"rollout_logprobs": [-1.0, -2.0], "trainer_logprobs": [-1.0]}], ["line 1", "has 1"]),
        ([{"rollout_logprobs": ["a"], "trainer_logprobs": [-1.0]}], ["not a number"]),
        ([{"rollout_logprobs": [-1.0], "trainer_logprobs": [0.7]}], ["positive log-prob"]),
    ):
        logs = tmp_path / "bad.jsonl"
        logs.write_text("".join(json.dumps(x) + "\n" for x in rows))
        assert_user_error(cli("screen", str(cli_config), "--from-logs", str(logs)), "bad.jsonl", *words)


@pytest.mark.slow
def test_cli_exit_3_engine_failure(cli_config, monkeypatch):
    import torch

    import admitcheck.rollout.engines

    def boom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")

    monkeypatch.setattr(admitcheck.rollout.engines, "build_engine", boom)
    assert_user_error(cli("screen", str(cli_config), "--candidate", "bf16"), "out of memory", code=3)


# --------------------------------------------------------------------------------------------- partial results


def _verdict(name: str) -> Verdict:
    return Verdict(
        name, "ADMIT", False, True, "candidate", "k3 upper bound 0.002 < budget lower bound 0.025", "k3", "k3", 0.001,
        (0.0005, 0.002), 0.05, (0.025, 0.1), "point", 0.023, 0.02, 0.05, 0.2, False, 0.002, (0.001, 0.004), 0.0, 16,
        160, 1, 0.9875,
    )  # fmt: skip


def test_partial_result_reports_the_failure():
    from rich.console import Console

    from admitcheck.report import to_json, to_junit_xml, to_markdown, verdict_table

    calibration = {"path": "c.yaml", "pair": "toy", "metric": "k3", "budget": 0.05, "budget_interval": (0.025, 0.1)}
    calibration |= {"budget_kind": "point", "tolerance": 0.05}
    policy = {"confidence": 0.95, "confidence_per_look": 0.95, "max_looks": 1}
    times = {"seconds_setup": 0.1, "seconds_total": 1.0}
    result = ScreenReport(verdicts=[_verdict("bf16")], calibration=calibration, floor={}, policy=policy,
                          source="engine", failures={"fp8": "out of memory"}, **times)  # fmt: skip
    assert result.exit_code == 3 and not result.all_admitted
    doc = json.loads(to_json(result))
    assert doc["exit_code"] == 3 and doc["failures"] == {"fp8": "out of memory"}
    assert [v["name"] for v in doc["verdicts"]] == ["bf16"]
    suite = ET.fromstring(to_junit_xml(result)).find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "0", "1")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert cases["bf16"].find("failure") is None and cases["bf16"].find("error") is None
    error = cases["fp8"].find("error")
    assert error.get("type") == "EngineError" and error.get("message") == error.text == "out of memory"
    md = to_markdown(result)
    assert "1/2 admitted; 1 failed" in md and "| bf16 | **ADMIT** |" in md and "| fp8 | ❌ **ERROR** |" in md
    assert "- **fp8**: ERROR, no verdict: out of memory" in md
    console = Console(width=250, record=True)
    console.print(verdict_table(result))
    assert "ERROR" in console.export_text()


@pytest.mark.slow
def test_cli_engine_failure_keeps_the_verdicts(setup, toy_pair_dir, tmp_path, monkeypatch):
    """The second candidate's engine fails: exit 3 naming it, and the first one's verdict is in every report; the
    candidate after it is still screened; an engine's kv_cache_report lands in the verdict's capacity."""
    import admitcheck.rollout.engines

    _, cal = setup
    build = admitcheck.rollout.engines.build_engine
    allocated = {"allocated_kv_tokens": 4096, "block_size": 16}

    class Reporting:  # the HF engine with a vLLM-style kv_cache_report
        def __init__(self, engine):
            self.engine = engine

        def __getattr__(self, name):
            return getattr(self.engine, name)

        def kv_cache_report(self):
            return allocated

    def build_engine(rollout, *args, **kwargs):
        if rollout.noise.relative_std == 0.3:  # NOISE's rollout
            raise EngineError("vLLM failed to start: CUDA out of memory", field="rollout")
        engine = build(rollout, *args, **kwargs)
        return Reporting(engine) if rollout.dtype == "bfloat16" else engine  # BF16's rollout

    monkeypatch.setattr(admitcheck.rollout.engines, "build_engine", build_engine)
    p = write_config(tmp_path / "s.yaml", toy_pair_dir, cal, [BF16, NOISE, NAN])
    junit, md = tmp_path / "r.xml", tmp_path / "r.md"
    r = cli("screen", str(p), "--json", "--junit", str(junit), "--markdown", str(md))
    assert_user_error(r, "candidates.noise", "rollout: vLLM failed to start", "verdicts obtained: bf16, nan", code=3)
    doc = json.loads(r.stdout)
    assert [v["name"] for v in doc["verdicts"]] == ["bf16", "nan"] and list(doc["failures"]) == ["noise"]
    assert doc["exit_code"] == 3 and doc["verdicts"][0]["decision"] == "ADMIT"
    assert doc["verdicts"][0]["capacity"]["engine_allocated"] == allocated
    assert "engine_allocated" not in doc["verdicts"][1]["capacity"]
    suite = ET.parse(junit).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "1")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert cases["bf16"].find("failure") is None and cases["noise"].find("error") is not None
    text = md.read_text()
    assert "| bf16 | **ADMIT** |" in text and "| noise | ❌ **ERROR** |" in text and "| nan |" in text


@pytest.mark.slow
def test_cli_validate_names_the_rollout_vllm_cannot_run(setup, toy_pair_dir, tmp_path, monkeypatch):
    import admitcheck.rollout.engines.vllm as vllm_engine

    def check_rollout(rollout):
        raise ConfigError("vLLM-CPU has no FP8 kernel", field="rollout.weights.activations")

    monkeypatch.setattr(vllm_engine, "check_rollout", check_rollout)
    _, cal = setup
    p = write_config(tmp_path / "s.yaml", toy_pair_dir, cal, [BF16, W8A8_VLLM])
    assert_user_error(cli("validate", str(p)), "candidates.w8a8.rollout.weights.activations", "no FP8 kernel")
    assert cli("validate", str(p), "--candidate", "bf16").exit_code == 0
