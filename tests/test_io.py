"""Hub ids ("org/name") as pair.student/pair.teacher: resolved through the local Hugging Face cache first, downloaded
only when HF_HUB_OFFLINE is not set. The cache is built in the test (the layout huggingface_hub writes: refs/main
names a commit, snapshots/<commit>/ holds the files); HF_HUB_OFFLINE=1 throughout, so nothing touches the network."""

from __future__ import annotations

import pytest

from admitcheck import io
from admitcheck.config import MeasureConfig
from admitcheck.errors import ConfigError
from admitcheck.pairs.toy import make_tokenizer
from tests.tiny import tiny_llama

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """HF_HUB_CACHE holding 'acme/tiny-llama' (a random 2-layer Llama and the toy tokenizer), offline."""
    cache = tmp_path / "hub"
    repo = cache / "models--acme--tiny-llama"
    snap = repo / "snapshots" / COMMIT
    tiny_llama().save_pretrained(snap)
    make_tokenizer().save_pretrained(snap)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return snap


def test_hub_id_shape():
    assert io.is_hub_id("Qwen/Qwen3-1.7B")
    assert io.is_hub_id("acme/tiny-llama@main")
    for not_id in ("student", "../toy/student", "/abs/dir", "a/b/c", "org/"):
        assert not io.is_hub_id(not_id), not_id


def test_cached_id_resolves_to_its_snapshot(hub_cache):
    assert io.resolve_model_ref("acme/tiny-llama") == hub_cache
    assert io.resolve_model_ref("acme/tiny-llama@main") == hub_cache
    model = io.load_causal_lm("acme/tiny-llama")
    assert model.config.num_hidden_layers == 2
    assert io.load_tokenizer("acme/tiny-llama").eos_token_id is not None
    assert io.check_causal_lm("acme/tiny-llama")["model_type"] == "llama"


def test_config_model_keys_become_snapshot_dirs(hub_cache, tmp_path):
    cfg_file = tmp_path / "m.yaml"
    cfg_file.write_text(
        "pair: {student: acme/tiny-llama, teacher: acme/tiny-llama}\n"
        "probe: {prompts: probe.jsonl}\n"
        "rollout: {engine: hf, dtype: bfloat16}\n"
    )
    cfg = io.load_config(cfg_file, MeasureConfig)
    assert cfg.pair.student == str(hub_cache) == cfg.pair.teacher
    assert cfg.probe.prompts == str(tmp_path / "probe.jsonl")  # paths still resolve against the file


def test_missing_id_offline_is_a_config_error_naming_the_field(hub_cache):
    with pytest.raises(ConfigError) as exc:
        io.load_causal_lm("acme/not-there", field="pair.teacher")
    msg = str(exc.value)
    assert "pair.teacher" in msg and "HF_HUB_OFFLINE" in msg and "acme/not-there" in msg
    assert exc.value.exit_code == 2


def test_local_dirs_never_go_through_the_hub(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    d = tmp_path / "org" / "model"  # looks like an id, but it is a path that exists
    tiny_llama().save_pretrained(d)
    monkeypatch.chdir(tmp_path)
    assert not io.is_hub_id("org/model")
    assert io.resolve_model_ref("org/model") == io.Path("org/model")
    assert io.load_causal_lm("org/model").config.num_hidden_layers == 2
