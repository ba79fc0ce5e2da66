"""Fingerprints: the same model written another way is the same pair; a different model is not."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from admitcheck import fingerprint as fp
from admitcheck.errors import CalibrationError
from tests.tiny import tiny_llama


def _save(model, d: Path, **kw) -> Path:
    model.save_pretrained(d, **kw)
    return d


def test_canonical_config_ignores_how_it_was_written():
    v5 = {"model_type": "llama", "hidden_size": 64, "transformers_version": "5.24.0", "dtype": "float32",
          "use_cache": True, "_name_or_path": "/somewhere",
          "rope_parameters": {"rope_theta": 1e5, "rope_type": "default"}}  # fmt: skip
    v4 = {"model_type": "llama", "hidden_size": 64, "transformers_version": "4.57.0", "torch_dtype": "bfloat16",
          "rope_theta": 1e5, "rope_scaling": None}  # fmt: skip
    assert fp._canonical_config(v5) == fp._canonical_config(v4)
    assert fp._canonical_config(v5)["rope"]["rope_theta"] == 1e5
    # the silent rope_theta 1e4-vs-1e5 trap (REFERENCE §7) is a different model, and says so
    assert fp._canonical_config(v4 | {"rope_theta": 1e4}) != fp._canonical_config(v4)
    assert fp._canonical_config(v4 | {"hidden_size": 32}) != fp._canonical_config(v4)


def test_weights_digest_is_independent_of_format_sharding_and_order(tmp_path):
    model = tiny_llama()
    one = fp.weights_digest(_save(model, tmp_path / "one"))
    sharded = _save(model, tmp_path / "sharded", max_shard_size="60KB")
    assert len(list(sharded.glob("*.safetensors"))) > 1
    assert fp.weights_digest(sharded) == one
    (tmp_path / "bin").mkdir()
    torch.save(dict(reversed(model.state_dict().items())), tmp_path / "bin" / "pytorch_model.bin")
    assert fp.weights_digest(tmp_path / "bin")["weights"] == one["weights"]
    assert one["parameters"] == sum(p.numel() for p in model.parameters())
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight[0, 0] += 1e-3  # one value
    assert fp.weights_digest(_save(model, tmp_path / "changed"))["weights"] != one["weights"]


def test_model_fingerprint_of_a_resaved_dir_is_unchanged(tmp_path):
    a = _save(tiny_llama(), tmp_path / "a")
    b = tmp_path / "b"
    shutil.copytree(a, b)
    cfg = json.loads((b / "config.json").read_text())
    cfg.update(transformers_version="9.9.9", use_cache=False, _name_or_path="elsewhere")
    (b / "config.json").write_text(json.dumps(cfg, indent=1))
    assert fp.model_fingerprint(a) == fp.model_fingerprint(b)


def test_tokenizer_fingerprint_ignores_bookkeeping_not_vocabulary(tmp_path):
    from admitcheck.pairs import toy

    a = tmp_path / "a"
    toy.make_tokenizer().save_pretrained(a)
    b = tmp_path / "b"
    shutil.copytree(a, b)
    tc = json.loads((b / "tokenizer_config.json").read_text())
    tc["tokenizer_class"] = "PreTrainedTokenizerFast" if tc.get("tokenizer_class") != "PreTrainedTokenizerFast" else "X"
    (b / "tokenizer_config.json").write_text(json.dumps(tc))
    tj = json.loads((b / "tokenizer.json").read_text())
    tj["version"] = "0.0.1"
    (b / "tokenizer.json").write_text(json.dumps(tj))
    assert fp.tokenizer_fingerprint(a) == fp.tokenizer_fingerprint(b)
    tj["added_tokens"][0]["content"] = "<PAD>"
    (b / "tokenizer.json").write_text(json.dumps(tj))
    assert fp.tokenizer_fingerprint(a) != fp.tokenizer_fingerprint(b)


def test_prompts_fingerprint_reads_rows_not_bytes(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"prompt": "1 2 =", "answer": "2 1"}\n')
    (tmp_path / "b.jsonl").write_text('{"answer":"2 1","prompt":"1 2 ="}\r\n\n')
    (tmp_path / "c.jsonl").write_text('{"prompt": "1 3 =", "answer": "3 1"}\n')
    a, b, c = (fp.prompts_fingerprint(tmp_path / f"{n}.jsonl") for n in "abc")
    assert a == b != c


def test_strict_differences_name_the_field():
    stored = {"student": {"architecture": {"num_hidden_layers": 2}, "weights": "a" * 64}, "tokenizer": "t"}
    present = {"student": {"architecture": {"num_hidden_layers": 3}, "weights": "b" * 64}, "tokenizer": "t"}
    diffs = fp.strict_differences(stored, present)
    assert [d.field for d in diffs] == ["pair.student.architecture.num_hidden_layers", "pair.student.weights"]
    assert "calibration has 2, this pair 3" in str(diffs[0])
    assert fp.strict_differences(stored | {"probe_prompts": "p"}, stored) == []  # keys the present side lacks


def test_behaviour_drift_zero_for_the_same_model_and_refused_for_another():
    from admitcheck.calibration.schema import Behaviour

    # initializer_range 0.2: peaked next-token distributions (a 0.02 init is near uniform and hardly moves)
    student, teacher = tiny_llama(0, initializer_range=0.2), tiny_llama(1, initializer_range=0.2)
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(3, 64, (12,), generator=g).tolist() for _ in range(4)]
    stored = Behaviour.model_validate(fp.behaviour_fingerprint(student, teacher, seqs))  # as the artifact holds it
    assert len(stored.student_logprobs) == 4 and len(stored.student_logprobs[0]) == 11
    drift = fp.check_behaviour(stored, student, teacher, budget=0.01)
    # stored values keep 7 significant digits: |Δ| ≤ 5e-7·|log p| (|log p| ≲ 20 here) → (Δ)²/2 ≤ 5e-11
    assert drift.student < 5e-11 and drift.teacher < 5e-11
    noised = tiny_llama(0, initializer_range=0.2)
    with torch.no_grad():
        for p in noised.parameters():
            p.add_(0.05 * p.std() * torch.randn(p.shape, generator=g))
    d = fp.behaviour_drift(stored, noised, teacher)
    assert d.student > 0.01 * 0.01 and d.teacher == drift.teacher
    with pytest.raises(CalibrationError) as exc:
        fp.check_behaviour(stored, noised, teacher, budget=0.01, file="screen.yaml")
    assert exc.value.field == "pair.student" and "drifted by" in exc.value.message
    # the same drift is accepted against a budget 100× larger than it (the rule is relative to B)
    fp.check_behaviour(stored, noised, teacher, budget=100 * d.student / fp.BEHAVIOUR_TOLERANCE)


def test_environment_names_software_and_device():
    env = fp.environment()
    assert env["torch"] and env["transformers"]
    assert env["device"] == "cpu" or env["device"].startswith("cuda")


ROOT = Path(__file__).resolve().parents[1]


def test_the_shipped_pair_scored_on_this_processes_code_path_is_far_inside_the_tolerance():
    """The stored log-probs were computed on another code path (unpinned, calibrations/toy.yaml's machine); the same
    weights scored here drift by float32 rounding only (bench/numeric_pins.py: ≤ 3e-12 nats/token on every path)."""
    from admitcheck.calibration.artifact import load_calibration
    from admitcheck.io import load_causal_lm

    cal = load_calibration(ROOT / "calibrations" / "toy.yaml")
    stored = cal.pair.behaviour
    d = fp.behaviour_drift(stored, load_causal_lm(ROOT / "toy" / "student"), load_causal_lm(ROOT / "toy" / "teacher"))
    assert max(d.student, d.teacher) < 1e-6 * fp.BEHAVIOUR_TOLERANCE * cal.budget.value


def test_the_tolerance_accepts_the_same_pair_on_every_code_path_and_refuses_a_build_of_another():
    """bench/results/numeric_pins.json (#39): the same weights scored on each CPU code path stay far inside the
    tolerance (1% of the budget); pinned, every path builds the same weights; unpinned, a build on another path is
    another model (its drift is above the tolerance, so it is refused)."""
    doc = json.loads((ROOT / "bench" / "results" / "numeric_pins.json").read_text())
    tol = fp.BEHAVIOUR_TOLERANCE * doc["summary"]["budget"]
    paths = {k: r for k, r in doc["paths"].items() if "weights" in r}
    assert max(max(r["shipped_pair_drift"].values()) for r in paths.values()) < 1e-6 * tol
    pinned = [r["weights"] for k, r in paths.items() if k.endswith("_pinned")]
    assert len(pinned) >= 2 and all(w == pinned[0] for w in pinned)
    others = [k for k in paths if k.endswith("_unpinned") and k != "this_cpu_unpinned"]
    assert others and all(max(paths[k]["rebuilt_pair_drift"].values()) > tol for k in others)
