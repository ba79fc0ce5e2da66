"""The CLI: exit codes and one clear message (file and field) for every kind of bad input, never a traceback."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from admitcheck import terminal
from admitcheck.cli import app

runner = CliRunner()
terminal.err.width = 400  # one line per message, so file paths are not wrapped inside the panel


def run(*args: str):
    return runner.invoke(app, list(args))


def assert_user_error(result, *words: str, code: int = 2) -> None:
    text = result.output
    assert result.exit_code == code, text
    assert "Traceback" not in text, text
    flat = " ".join(text.translate({ord(c): " " for c in "│╭╮╰╯─"}).split())  # unwrap the rich panel
    for w in words:
        assert w in flat, (w, text)


def measure_config(tmp_path: Path, toy: Path, **overrides) -> Path:
    cfg = {
        "pair": {"student": str(toy / "student"), "teacher": str(toy / "teacher")},
        "probe": {
            "prompts": str(toy / "prompts" / "probe.jsonl"),
            "num_prompts": 8,
            "max_new_tokens": 16,
            "batch_size": 8,
        },
        "rollout": {"engine": "hf", "dtype": "bfloat16"},
    }
    for dotted, value in overrides.items():
        node = cfg
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    path = tmp_path / "measure.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_help_is_instant_and_imports_no_torch():
    code = "import sys; from admitcheck.cli import app; assert 'torch' not in sys.modules, 'torch imported'"
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    assert time.perf_counter() - t0 < 5.0
    result = run("--help")
    assert result.exit_code == 0
    for command in ("measure", "toy-pair", "demo"):
        assert command in result.output


def test_malformed_yaml(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("pair: {student: s\n")
    assert_user_error(run("measure", str(p)), str(p), "malformed YAML")


def test_misspelled_key(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("pair: {student: s, teacher: t}\nprobe: {prompts: p.jsonl, max_new_token: 4}\nrollout: {}\n")
    assert_user_error(run("measure", str(p)), str(p), "probe.max_new_token", "unknown key")


def test_wrong_type_and_nonpositive_tokens(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("pair: {student: s, teacher: t}\nprobe: {prompts: p.jsonl, max_new_tokens: 0}\nrollout: {}\n")
    assert_user_error(run("measure", str(p)), "probe.max_new_tokens", "greater than 0")
    p.write_text("pair: {student: s, teacher: t}\nprobe: {prompts: p.jsonl}\nrollout: {dtype: fp4}\n")
    assert_user_error(run("measure", str(p)), "rollout.dtype")


def test_missing_config_file(tmp_path):
    assert_user_error(run("measure", str(tmp_path / "nope.yaml")), "nope.yaml", "file not found")


@pytest.mark.slow
def test_missing_model_dir(tmp_path, toy_pair_dir):
    p = measure_config(tmp_path, toy_pair_dir, **{"pair.student": str(tmp_path / "no_such_model")})
    assert_user_error(run("measure", str(p)), str(p), "pair.student", "not found")


@pytest.mark.slow
def test_missing_prompts_file(tmp_path, toy_pair_dir):
    p = measure_config(tmp_path, toy_pair_dir, **{"probe.prompts": str(tmp_path / "none.jsonl")})
    assert_user_error(run("measure", str(p)), "probe.prompts", "not found")


@pytest.mark.slow
def test_broken_prompt_line(tmp_path, toy_pair_dir):
    prompts = tmp_path / "probe.jsonl"
    good = (toy_pair_dir / "prompts" / "probe.jsonl").read_text().splitlines()
    prompts.write_text("\n".join([good[0], '{"prompt": "12', *good[1:4]]) + "\n")
    p = measure_config(tmp_path, toy_pair_dir, **{"probe.prompts": str(prompts)})
    assert_user_error(run("measure", str(p)), str(prompts), "probe.prompts", "line 2")


@pytest.mark.slow
def test_dir_that_is_not_a_causal_lm(tmp_path, toy_pair_dir):
    fake = tmp_path / "encoder"
    shutil.copytree(toy_pair_dir / "teacher", fake)
    cfg = json.loads((fake / "config.json").read_text())
    cfg.update(model_type="bert", architectures=["BertModel"])
    (fake / "config.json").write_text(json.dumps(cfg))
    p = measure_config(tmp_path, toy_pair_dir, **{"pair.teacher": str(fake)})
    assert_user_error(run("measure", str(p)), "pair.teacher", "not a causal LM")


@pytest.mark.slow
def test_different_tokenizers(tmp_path, toy_pair_dir):
    other = tmp_path / "teacher"
    shutil.copytree(toy_pair_dir / "teacher", other)
    tok = json.loads((other / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    if isinstance(vocab, dict):  # swap two token ids: same size, different vocabulary
        a, b = sorted(vocab)[-2:]
        vocab[a], vocab[b] = vocab[b], vocab[a]
    else:
        pytest.skip("tokenizer model without a dict vocab")
    (other / "tokenizer.json").write_text(json.dumps(tok))
    p = measure_config(tmp_path, toy_pair_dir, **{"pair.teacher": str(other)})
    assert_user_error(run("measure", str(p)), "pair.teacher", "tokenizers differ")


@pytest.mark.slow
def test_cuda_device_without_gpu(tmp_path, toy_pair_dir):
    import torch

    if torch.cuda.is_available():
        pytest.skip("has a GPU")
    p = measure_config(tmp_path, toy_pair_dir, **{"reference.device": "cuda"})
    assert_user_error(run("measure", str(p)), "reference.device", "CUDA")


@pytest.mark.slow
def test_measure_json_end_to_end(tmp_path, toy_pair_dir):
    p = measure_config(tmp_path, toy_pair_dir, **{"rollout.kv_cache": {"dtype": "fp8_e4m3"}})
    result = run("measure", str(p), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    cand, floor = doc["candidate"]["metrics"]["values"], doc["floor"]["metrics"]["values"]
    assert cand["k3"] > 0
    assert floor["k3"] < 1e-9  # floor: the engine in the reference's own configuration
    assert doc["candidate"]["num_sequences"] == 8
    table = run("measure", str(p))
    assert table.exit_code == 0 and "k3" in table.output and "floor" in table.output


# ------------------------------------------------------------------------------ validate refuses what screen refuses

ROOT = Path(__file__).resolve().parents[1]


def write_with_overrides(data: dict, path: Path, overrides: dict) -> Path:
    """`data` with each dotted override set (parents made as needed), written as YAML to `path`."""
    for dotted, value in overrides.items():
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    path.write_text(yaml.safe_dump(data))
    return path


def screen_config(tmp_path: Path, toy: Path, name: str = "s.yaml", **overrides) -> Path:
    """examples/toy_screen.yaml with absolute paths (pair `toy`), one cheap candidate, and top-level overrides."""
    data = yaml.safe_load((ROOT / "examples" / "toy_screen.yaml").read_text())
    data["pair"] = {"name": "toy", "student": str(toy / "student"), "teacher": str(toy / "teacher")}
    data["calibration"] = str(ROOT / "calibrations" / "toy.yaml")
    data["probe"]["prompts"] = str(toy / "prompts" / "probe.jsonl")
    data["candidates"] = data["candidates"][:1]
    return write_with_overrides(data, tmp_path / name, overrides)


def assert_both_refuse(path: Path, field: str, *words: str) -> None:
    """validate and screen exit 2 with the same field (screen before loading any model)."""
    for command in ("validate", "screen"):
        assert_user_error(run(command, str(path)), str(path), f"{field}:", *words)


def test_swapped_pair_fails_validate_like_screen(tmp_path, toy_pair_dir):
    p = screen_config(tmp_path, toy_pair_dir, **{"pair.student": str(toy_pair_dir / "teacher"),
                                                   "pair.teacher": str(toy_pair_dir / "student")})  # fmt: skip
    assert_both_refuse(p, "pair.student", "hidden_size", "another architecture")


def test_a_budget_of_another_objective_is_refused(tmp_path, toy_pair_dir):
    rl = str(ROOT / "calibrations" / "toy_rl.yaml")
    assert_both_refuse(screen_config(tmp_path, toy_pair_dir, calibration=rl), "objective", "RL", "grpo")
    opd = screen_config(tmp_path, toy_pair_dir, "opd.yaml", objective="rl")  # an RL gate against the OPD budget
    assert_both_refuse(opd, "objective", "OPD")


def test_a_budget_with_lower_bound_zero_admits_nothing_unless_reject_only(tmp_path, toy_pair_dir):
    data = yaml.safe_load((ROOT / "calibrations" / "toy_rl.yaml").read_text())  # a GRPO budget whose lower bound is 0
    data["budget"]["interval"] = [0.0, data["budget"]["interval"][1]]
    rl = str(tmp_path / "toy_rl_zero.yaml")
    Path(rl).write_text(yaml.safe_dump(data, sort_keys=False))
    p = screen_config(tmp_path, toy_pair_dir, calibration=rl, objective="rl")
    assert_both_refuse(p, "calibration", "lower confidence bound 0", "no candidate can be admitted",
                       "levels below", "policy.reject_only")  # fmt: skip
    ok = screen_config(tmp_path, toy_pair_dir, "ok.yaml", calibration=rl, objective="rl",
                       **{"policy.reject_only": True})  # fmt: skip
    r = run("validate", str(ok), "--json")
    assert r.exit_code == 0, r.output
    assert "reject-only" in json.loads(r.stdout)["gate"]


def test_lengths_past_max_position_embeddings(tmp_path, toy_pair_dir):
    """The issue's `max_new_tokens: 1000000000`: exit 2 from validate and from measure (was an OOM traceback)."""
    p = measure_config(tmp_path, toy_pair_dir, **{"probe.max_new_tokens": 1_000_000_000})
    for command in ("validate", "measure"):
        assert_user_error(run(command, str(p)), "probe.max_new_tokens:", "max_position_embeddings is 256")
    edge = measure_config(tmp_path, toy_pair_dir, **{"probe.max_new_tokens": 250})  # 250 + the longest prompt > 256
    assert_user_error(run("validate", str(edge)), "probe.max_new_tokens:", "at most")
    s = screen_config(tmp_path, toy_pair_dir, **{"probe.max_new_tokens": 1_000_000_000})
    r = run("validate", str(s))  # a screen config: its protocol differs from the budget's first, named as such
    assert_user_error(r, "max_new_tokens")


def test_probe_batch_beyond_memory(tmp_path, toy_pair_dir):
    p = measure_config(tmp_path, toy_pair_dir, **{"probe.batch_size": 10**12})
    assert_user_error(run("validate", str(p)), "probe.batch_size:", "GiB")


def test_vllm_truncated_sampling_on_a_large_vocabulary_is_refused(tmp_path, toy_pair_dir):
    big = tmp_path / "big"
    shutil.copytree(toy_pair_dir / "student", big)
    cfg = json.loads((big / "config.json").read_text())
    (big / "config.json").write_text(json.dumps({**cfg, "vocab_size": 50_000}))
    p = measure_config(tmp_path, toy_pair_dir, **{"pair.student": str(big), "rollout.engine": "vllm",
                                                  "sampling.top_p": 0.9})  # fmt: skip
    assert_user_error(run("validate", str(p)), "rollout.engine:", "kept set", "top_p")
    from admitcheck.config import SamplingConfig
    from admitcheck.rollout.engines.vllm import FULL_VOCAB_LIMIT, kept_set_problem

    assert kept_set_problem(SamplingConfig(top_k=20), FULL_VOCAB_LIMIT + 1)
    assert kept_set_problem(SamplingConfig(top_k=20), FULL_VOCAB_LIMIT) is None  # full rows: the kept set is known
    assert kept_set_problem(SamplingConfig(), 10**6) is None


def test_runtime_failure_is_exit_3_without_traceback(tmp_path, toy_pair_dir, monkeypatch):
    import admitcheck.measurement.measure as measure_module

    def oom(*_, **__):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:118] DefaultCPUAllocator: can't allocate memory: you "
                           "tried to allocate 32000000352 bytes.\nsecond line")  # fmt: skip

    monkeypatch.setattr(measure_module, "measure", oom)
    p = measure_config(tmp_path, toy_pair_dir)
    assert_user_error(run("measure", str(p)), "out of memory", "probe.batch_size", code=3)

    def crash(*_, **__):
        raise RuntimeError("CUDA error: device-side assert triggered")

    monkeypatch.setattr(measure_module, "measure", crash)
    assert_user_error(run("measure", str(p)), "runtime failure", "device-side assert", code=3)


def test_version_and_flags_shown_as_flags():
    from admitcheck import __version__

    r = run("--version")
    assert r.exit_code == 0 and r.stdout.strip() == f"admitcheck {__version__}"
    text = run("screen", "--help").output
    line = next(row for row in text.splitlines() if "--json" in row)
    assert "<bool>" not in line and "--strict" in text


@pytest.mark.slow
def test_from_logs_states_the_logged_quantity_and_strict_refuses(tmp_path, toy_pair_dir):
    logs = ROOT / "examples" / "logs" / "toy_bf16.jsonl"
    p = screen_config(tmp_path, toy_pair_dir)
    r = run("screen", str(p), "--from-logs", str(logs), "--json")
    assert r.exit_code in (0, 1), r.output  # a verdict (64 logged sequences may not clear the budget), not a refusal
    logged = json.loads(r.stdout)["logged"]
    assert logged["sequences"] == 64 and logged["differences"] == []
    assert logged["budget_protocol"]["max_new_tokens"] == 64 and logged["budget_protocol"]["x"] == "start"
    later = screen_config(tmp_path, toy_pair_dir, "later.yaml", **{"logs.path": str(logs), "logs.step": 40})
    r = run("screen", str(later), "--from-logs", str(logs))
    assert r.exit_code in (0, 1) and "training step 40" in " ".join(r.output.split()), r.output  # a warning
    assert_user_error(run("screen", str(later), "--from-logs", str(logs), "--strict"), "logs.path:", "step 40")
    teacher = str(toy_pair_dir / "teacher")  # another architecture than the student's
    wrong = screen_config(tmp_path, toy_pair_dir, "wrong.yaml", **{"logs.path": str(logs), "logs.checkpoint": teacher})
    r = run("screen", str(wrong), "--from-logs", str(logs))
    assert_user_error(r, "logs.checkpoint:", "not a checkpoint of this pair's student")


def test_a_reused_pair_shows_no_build_seconds(toy_pair_dir):
    r = run("toy-pair", str(toy_pair_dir), "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["reused"] is True
    assert "build_seconds" not in run("toy-pair", str(toy_pair_dir)).stdout


def test_a_gate_rerun_on_every_step_spends_alpha_over_its_runs(tmp_path, toy_pair_dir):
    """`logs.gates: N`: each verdict at 1 − α/N (Bonferroni over the N runs of the gate), so its interval is wider."""
    logs = ROOT / "examples" / "logs" / "toy_bf16.jsonl"
    once = screen_config(tmp_path, toy_pair_dir, "once.yaml", **{"logs.path": str(logs)})
    often = screen_config(tmp_path, toy_pair_dir, "often.yaml", **{"logs.path": str(logs), "logs.gates": 100})
    a, b = (json.loads(run("screen", str(p), "--from-logs", str(logs), "--json").stdout)["verdicts"][0]
            for p in (once, often))  # fmt: skip
    assert a["confidence_per_look"] == pytest.approx(0.95) and b["confidence_per_look"] == pytest.approx(0.9995)
    # at 1 − α/100 the confidence sequence over 64 logged sequences may not close above (its upper end is ∞: null)
    wider = b["mismatch_interval"][1] is None or b["mismatch_interval"][1] > a["mismatch_interval"][1]
    assert wider and a["mismatch_interval"][1] is not None and b["mismatch"] == a["mismatch"]


# ---------------------------------------------------------------------------- bad input found on a fresh machine (#39)


def calibrate_config(tmp_path: Path, toy: Path, name: str = "cal.yaml", **overrides) -> Path:
    """examples/toy_calibrate_quick.yaml with absolute paths (pair `toy`) and top-level overrides."""
    data = yaml.safe_load((ROOT / "examples" / "toy_calibrate_quick.yaml").read_text())
    data["pair"] = {"name": "toy", "student": str(toy / "student"), "teacher": str(toy / "teacher")}
    for section, split in (("probe", "probe"), ("train", "train"), ("eval", "eval")):
        data[section]["prompts"] = str(toy / "prompts" / f"{split}.jsonl")
    data["output"] = str(tmp_path / "out" / "toy.yaml")
    return write_with_overrides(data, tmp_path / name, overrides)


def test_more_probe_prompts_than_the_file_holds_is_refused(tmp_path, toy_pair_dir):
    """The issue's `probe.num_prompts: 100000` with a 256-prompt file was silently capped: refused instead."""
    p = measure_config(tmp_path, toy_pair_dir, **{"probe.num_prompts": 100_000})
    for command in ("validate", "measure"):
        assert_user_error(run(command, str(p)), str(p), "probe.num_prompts:", "100000", "holds 256", "at most 256")
    assert run("validate", str(measure_config(tmp_path, toy_pair_dir, **{"probe.num_prompts": 256}))).exit_code == 0
    assert_both_refuse(screen_config(tmp_path, toy_pair_dir, **{"probe.num_prompts": 257}), "probe.num_prompts",
                       "holds 256")  # fmt: skip
    c = calibrate_config(tmp_path, toy_pair_dir, **{"eval.num_prompts": 129})  # toy/prompts/eval.jsonl: 128
    for command in ("validate", "calibrate"):
        assert_user_error(run(command, str(c)), str(c), "eval.num_prompts:", "holds 128")


def test_a_staleness_at_or_beyond_the_recipes_steps_is_refused(tmp_path, toy_pair_dir):
    """The issue's `staleness: 1000` candidate against the 200-step recipe of calibrations/toy.yaml was measured."""
    for k in (1000, 200):
        p = screen_config(tmp_path, toy_pair_dir, f"s{k}.yaml", candidates=[{"name": "stale", "staleness": k}])
        assert_both_refuse(p, "candidates.stale.staleness", f"staleness {k}", "200 optimizer steps", "below 200")
    ok = screen_config(tmp_path, toy_pair_dir, "ok.yaml", candidates=[{"name": "stale", "staleness": 199}])
    assert run("validate", str(ok)).exit_code == 0
    c = calibrate_config(tmp_path, toy_pair_dir, **{"levels.extra": [{"name": "s", "staleness": 100}]})  # steps 100
    for command in ("validate", "calibrate"):
        assert_user_error(run(command, str(c)), str(c), "levels.extra.s.staleness 100", "train.steps 100")


def test_a_backtest_report_given_as_the_calibration_is_named(tmp_path, toy_pair_dir):
    report = ROOT / "calibrations" / "toy.backtest.yaml"
    p = screen_config(tmp_path, toy_pair_dir, calibration=str(report))
    assert_both_refuse(p, "calibration", "is a backtest report", "not a calibration artifact", "toy.yaml")
    assert "schema_version" not in run("validate", str(p)).output


def test_a_calibrate_output_that_is_one_of_its_inputs_is_refused_before_any_run(tmp_path, toy_pair_dir):
    """The issue's `output: cal.yaml` inside cal.yaml was overwritten by the artifact at the end of the run."""
    c = calibrate_config(tmp_path, toy_pair_dir)
    data = yaml.safe_load(c.read_text())
    data["output"] = "cal.yaml"  # relative: beside the config, i.e. the config itself
    c.write_text(yaml.safe_dump(data))
    before = c.read_text()
    for command in ("validate", "calibrate"):
        assert_user_error(run(command, str(c)), str(c), "output:", "the config file itself")
    assert c.read_text() == before and not (tmp_path / "cal.ledger.jsonl").exists()  # refused before any run
    prompts = calibrate_config(tmp_path, toy_pair_dir, "p.yaml", output=str(toy_pair_dir / "prompts" / "eval.jsonl"))
    assert_user_error(run("calibrate", str(prompts)), "output:", "eval.prompts")
