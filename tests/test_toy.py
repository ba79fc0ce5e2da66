"""The toy pair: task helpers, tokenizer, cache and determinism (on a tiny recipe), and the default pair's quality."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from admitcheck import io
from admitcheck.pairs import toy

# A recipe that builds in a few seconds: for cache and determinism tests, not for quality.
TINY = toy.ToyRecipe(
    num_train=40, num_probe=8, num_eval=8, teacher_hidden=32, student_hidden=32, teacher_steps=3, student_steps=2,
    student_noisy_steps=2,
)  # fmt: skip


def weights_hash(d: Path) -> dict[str, str]:
    return {m: io.sha256_file(d / m / "model.safetensors") for m in ("teacher", "student")}


# ----------------------------------------------------------------------------------------------- task, tokenizer


def test_task_helpers():
    assert toy.format_prompt("31415") == "3 1 4 1 5 ="
    assert toy.expected_answer("3 1 4 1 5 =") == "5 1 4 1 3"
    assert toy.check_answer("3 1 4 1 5 =", "5 1 4 1 3")
    assert toy.check_answer("3 1 4 1 5 =", " 51413 ")  # whitespace is not part of the answer
    assert not toy.check_answer("3 1 4 1 5 =", "5 1 4 1")
    assert not toy.check_answer("3 1 4 1 5 =", "5 1 4 1 3 3")
    assert not toy.check_answer("3 1 4 1 5 =", "3 1 4 1 5")
    assert toy.task_accuracy(["1 2 =", "3 4 ="], ["2 1", "3 4"]) == 0.5
    with pytest.raises(ValueError):
        toy.task_accuracy(["1 2 ="], [])


def test_tokenizer_ids_and_round_trip(tmp_path):
    from transformers import AutoTokenizer

    toy.make_tokenizer().save_pretrained(tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)  # what engines and the scorer load
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, len(tok)) == (0, 1, 2, 16)
    ids = tok("3 1 4 1 5 =")["input_ids"]
    assert ids == [1, 7, 5, 8, 5, 9, 14] == toy.encode_prompt("3 1 4 1 5 =")
    assert tok("31415=")["input_ids"] == ids == toy.encode_prompt("31415 =")  # char-level: spaces only separate
    response = [9, 5, 8, 5, 7, toy.EOS_ID, toy.PAD_ID, toy.PAD_ID]  # "5 1 4 1 3" <eos> <pad> <pad>
    assert toy.toy_response_text(tok, response) == "5 1 4 1 3"
    assert toy.check_answer("3 1 4 1 5 =", toy.toy_response_text(tok, response))
    assert tok.decode(ids, skip_special_tokens=True) == "3 1 4 1 5 ="


def test_splits_are_disjoint_and_in_range():
    splits = toy._make_splits(toy.ToyRecipe(), seed=0)
    sizes = {k: len(v) for k, v in splits.items()}
    assert sizes == {"eval": 128, "probe": 256, "train": 2000}
    all_rows = [r for rows in splits.values() for r in rows]
    assert len(set(all_rows)) == len(all_rows)
    assert all(r.isdigit() and 4 <= len(r) <= 10 for r in all_rows)
    assert toy._make_splits(toy.ToyRecipe(), seed=0) == splits
    assert toy._make_splits(toy.ToyRecipe(), seed=1) != splits


def test_recipe_hash_covers_seed_and_fields():
    base = toy.recipe_hash(toy.ToyRecipe(), 0)
    assert base == toy.recipe_hash(toy.ToyRecipe(), 0)
    assert base != toy.recipe_hash(toy.ToyRecipe(), 1)
    assert base != toy.recipe_hash(replace(toy.ToyRecipe(), student_noisy_steps=151), 0)


def test_recipe_rejects_impossible_settings():
    with pytest.raises(ValueError, match="multiples of 32"):
        toy.ToyRecipe(student_hidden=48)
    with pytest.raises(ValueError, match="distinct prompts"):
        toy.ToyRecipe(min_digits=2, max_digits=3)


def test_generate_and_reverse_kl_on_an_untrained_model():
    model = toy.make_model(32, 1, seed=0).eval()
    prompts = [toy.encode_prompt(toy.format_prompt(d)) for d in ("12", "345", "6789", "01")]
    greedy = toy.generate(model, prompts, max_new_tokens=5)
    assert greedy == toy.generate(model, prompts, max_new_tokens=5)
    assert all(len(r) <= 5 and (toy.EOS_ID not in r or r[-1] == toy.EOS_ID) for r in greedy)
    sampled = toy.generate(model, prompts, max_new_tokens=5, temperature=1.0, seed=3)
    assert sampled == toy.generate(model, prompts, max_new_tokens=5, temperature=1.0, seed=3)
    assert toy.reverse_kl_student_to_teacher(model, model, prompts, sampled) == pytest.approx(0.0, abs=1e-6)
    other = toy.make_model(32, 1, seed=1).eval()
    assert toy.reverse_kl_student_to_teacher(model, other, prompts, sampled) > 0


# ----------------------------------------------------------------------------------------------- cache, determinism


@pytest.mark.slow
def test_cache_force_and_determinism(tmp_path):
    d = tmp_path / "pair"
    first = toy.build_toy_pair(d, seed=0, recipe=TINY)
    meta = json.loads((d / "toy_pair.json").read_text())
    assert meta["recipe_hash"] == first.recipe_hash == toy.recipe_hash(TINY, 0)
    before, stamp = weights_hash(d), (d / "student" / "model.safetensors").stat().st_mtime_ns

    again = toy.build_toy_pair(d, seed=0, recipe=TINY)  # cache hit: nothing rewritten
    assert again == first
    assert (d / "student" / "model.safetensors").stat().st_mtime_ns == stamp

    forced = toy.build_toy_pair(d, seed=0, recipe=TINY, force=True)  # same seed: bit-identical weights
    assert weights_hash(d) == before
    assert replace(forced, build_seconds=0.0) == replace(first, build_seconds=0.0)

    other = toy.build_toy_pair(d, seed=1, recipe=TINY)  # another seed is another recipe hash: rebuilt
    assert other.recipe_hash != first.recipe_hash and weights_hash(d) != before

    (d / "teacher" / "model.safetensors").unlink()  # a missing file is not a cache hit
    rebuilt = toy.build_toy_pair(d, seed=1, recipe=TINY)
    assert (d / "teacher" / "model.safetensors").is_file() and rebuilt.recipe_hash == other.recipe_hash


def test_summary_paths_follow_a_moved_dir(tmp_path):
    toy.build_toy_pair(tmp_path / "a", seed=0, recipe=TINY)
    (tmp_path / "a").rename(tmp_path / "b")
    moved = toy.build_toy_pair(tmp_path / "b", seed=0, recipe=TINY)
    assert moved.student_dir == str(tmp_path / "b" / "student")
    assert set(moved.to_dict()) >= {"directory", "teacher_accuracy", "reverse_kl_student_to_teacher"}


# ----------------------------------------------------------------------------------------------- the default pair


@pytest.mark.slow
def test_pair_dirs_load_as_standard_hf_models(toy_pair_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for name, hidden in (("teacher", 128), ("student", 64)):
        model = AutoModelForCausalLM.from_pretrained(toy_pair_dir / name)
        tok = AutoTokenizer.from_pretrained(toy_pair_dir / name)
        cfg = model.config
        assert (cfg.model_type, cfg.hidden_size, cfg.num_hidden_layers, cfg.head_dim) == ("llama", hidden, 2, 32)
        assert cfg.vocab_size == len(tok) == 16 and not cfg.tie_word_embeddings
        assert cfg.max_position_embeddings >= 256
        assert next(model.parameters()).dtype == torch.float32
        assert tok("3 1 4 =")["input_ids"] == [1, 7, 5, 8, 14]
        assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)


@pytest.mark.slow
def test_prompt_files_are_disjoint_and_well_formed(toy_pair_dir):
    rows = {s: io.read_prompts(toy_pair_dir / "prompts" / f"{s}.jsonl") for s in ("train", "probe", "eval")}
    assert {s: len(r) for s, r in rows.items()} == {"train": 2000, "probe": 256, "eval": 128}
    prompts = [r["prompt"] for rs in rows.values() for r in rs]
    assert len(set(prompts)) == len(prompts)
    for r in (r for rs in rows.values() for r in rs):
        assert set(r) == {"prompt", "answer"} and r["prompt"].endswith(" =")
        assert toy.check_answer(r["prompt"], r["answer"]) and r["answer"] == toy.expected_answer(r["prompt"])


@pytest.mark.slow
def test_pair_quality_teacher_solves_it_student_has_room(toy_pair_dir):
    s = toy.build_toy_pair(toy_pair_dir, seed=0)  # the session's build, from the cache
    assert s.teacher_accuracy >= 0.95
    # The student's weakness shows in its temperature-1 samples (what OPD trains on), not in greedy decoding.
    assert 0.1 <= s.student_sampled_accuracy <= s.teacher_accuracy - 0.3
    assert 0.3 <= s.reverse_kl_student_to_teacher <= 3.0  # nats/token: clearly above zero, reducible
    assert 5.0 <= s.student_response_tokens <= 11.0  # 4-10 digits plus <eos>


@pytest.mark.slow
def test_saved_weights_reproduce_the_summary(toy_pair_dir):
    s = toy.build_toy_pair(toy_pair_dir, seed=0)
    teacher = io.load_causal_lm(toy_pair_dir / "teacher")
    tok = io.load_tokenizer(toy_pair_dir / "teacher")
    rows = io.read_prompts(toy_pair_dir / "prompts" / "eval.jsonl")
    prompts = [r["prompt"] for r in rows]
    responses = toy.generate(teacher, [tok(p)["input_ids"] for p in prompts])
    assert all(r[-1] == toy.EOS_ID for r in responses)  # every answer ends with <eos>: engines see "stop"
    assert toy.task_accuracy(prompts, [toy.toy_response_text(tok, r) for r in responses]) == s.teacher_accuracy
