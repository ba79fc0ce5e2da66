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


def test_a_warning_is_printed_as_text_not_markup() -> None:
    """A warning's brackets (intervals, `pip install 'admitcheck[ray]'`) are printed, not read as rich markup."""
    from admitcheck import terminal

    with terminal.err.capture() as cap:
        terminal.render_warning("drift [0.001, 0.002] within [bold]x[/bold]")
    assert "drift [0.001, 0.002] within [bold]x[/bold]" in cap.get()
