"""admitcheck.rollout.background and `train.rollouts: async` in calibration/opd.py: the engine samples batch t+k on a
background thread while step t trains, bit-identical to the simulated staleness of the same k (every step log
value but the timings, every eval, the final weights, the engine's syncs and final state, the torch RNG state); an
exception in the worker is raised by `train`; the worker is joined on every exit path.

Tiny pair of tests/test_opd.py (`make_tiny_pair`); a `gpu` test does the same with the engine on CUDA.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from admitcheck import io
from admitcheck.calibration import opd
from admitcheck.config import (
    EvalConfig,
    KVCacheConfig,
    NoiseConfig,
    PairConfig,
    RolloutConfig,
    SamplingConfig,
    TrainConfig,
    WeightsRecipe,
)
from admitcheck.pairs.load import load_pair_tokenizer, tokenize_prompts
from admitcheck.rollout.background import BackgroundRollouts, worker_threads
from admitcheck.rollout.engines.hf import HFEngine
from tests.test_opd import make_tiny_pair

NOISE = RolloutConfig(dtype="float32", noise=NoiseConfig(relative_std=0.02, seed=1))
FP8 = RolloutConfig(
    dtype="bfloat16",
    weights=WeightsRecipe(format="fp8_e4m3", activations="fp8_per_token"),
    kv_cache=KVCacheConfig(dtype="fp8_e4m3", scales="calibrated"),
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = make_tiny_pair(tmp_path_factory.mktemp("tiny_pair_async"))
    tokens = load_pair_tokenizer(PairConfig(student=str(root / "student"), teacher=str(root / "teacher")))
    eval_rows = io.read_prompts(root / "prompts" / "eval.jsonl")
    return {
        "tokens": tokens,
        "student": io.load_causal_lm(root / "student"),
        "teacher": io.load_causal_lm(root / "teacher"),
        "train_ids": tokenize_prompts(tokens, io.read_prompts(root / "prompts" / "train.jsonl")),
        "eval_ids": tokenize_prompts(tokens, eval_rows)[:8],
        "answers": [r["answer"] for r in eval_rows][:8],
    }


class RecordingEngine:
    """An HF engine that records every weight sync (noise step, weights) and which thread made it."""

    def __init__(self, inner: HFEngine, fail_at_sample: int | None = None) -> None:
        self.inner, self.syncs, self.threads, self.samples = inner, [], set(), 0
        self.fail_at_sample = fail_at_sample

    @property
    def device(self) -> torch.device:
        return self.inner.device

    def sample(self, *args, **kwargs):
        self.threads.add(threading.current_thread().name)
        if self.samples == self.fail_at_sample:
            raise RuntimeError(f"engine failed at sample {self.samples}")
        self.samples += 1
        return self.inner.sample(*args, **kwargs)

    def load_weights(self, weights, noise_step: int = 0) -> None:
        self.syncs.append((noise_step, {k: v.detach().cpu().clone() for k, v in weights.items()}))
        self.inner.load_weights(weights, noise_step=noise_step)

    def close(self) -> None:
        self.inner.close()


def _run(tiny, mode: str, k: int, *, loss: str = "pg", rollout: RolloutConfig = NOISE, steps: int = 4,
         stop_after: int | None = None, redraw_noise: bool = True, device: str = "cpu",
         engine_wrap=RecordingEngine, defer: bool = False, ema: float | None = None,
         events: list | None = None):  # fmt: skip
    extra = {"grpo": {"group_size": 4}} if loss == "grpo" else {}
    cfg = TrainConfig(prompts="-", steps=steps, batch_size=8, max_new_tokens=6, loss=loss, rollouts=mode, ema=ema,
                      **extra)  # fmt: skip
    student = opd.cast_parameters(copy.deepcopy(tiny["student"]), "float32").to(device)
    teacher = tiny["teacher"].to(device)
    tokens = tiny["tokens"]
    engine = engine_wrap(HFEngine(student, rollout, eos_token_id=tokens.eos_token_id, pad_token_id=tokens.pad_token_id))
    evaluator = opd.QualityEvaluator(
        teacher, tiny["eval_ids"], tiny["answers"], EvalConfig(prompts="-", max_new_tokens=6), tokens,
        SamplingConfig(), execution=rollout,
    )  # fmt: skip
    states, events = [], events if events is not None else []

    def on_step(i, m):
        states.append({n: v.detach().cpu().clone() for n, v in m.state_dict().items()})
        events.append(("step", i, len(worker_threads())))

    def evaluate(m, step):
        events.append(("eval", step, len(worker_threads())))
        return evaluator(m, step)

    torch.manual_seed(123)
    result = opd.train(
        student, None if loss == "grpo" else teacher, engine, tiny["train_ids"], cfg, evaluate, eval_every=1,
        staleness=k, seed=7, stop_after=stop_after, redraw_noise=redraw_noise, on_step=on_step, defer_evals=defer,
    )  # fmt: skip
    rng = torch.get_rng_state()
    final_engine = {n: v.detach().cpu().clone() for n, v in engine.inner.model.state_dict().items()}
    engine.close()
    return {"result": result, "states": states, "rng": rng, "engine": engine, "final_engine": final_engine}


def _values(result) -> list[dict]:
    """Every step log value but the timings, and every eval."""
    steps = [{k: v for k, v in asdict(s).items() if not k.startswith("seconds_")} for s in result.steps]
    return steps + [asdict(q) for q in result.evals]


def assert_bit_identical(a, b) -> None:
    assert _values(a["result"]) == _values(b["result"])
    assert len(a["states"]) == len(b["states"])
    for x, y in zip(a["states"], b["states"]):  # the student after every step, the final weights included
        assert all(torch.equal(x[n], y[n]) for n in x)
    assert torch.equal(a["rng"], b["rng"])
    assert [s for s, _ in a["engine"].syncs] == [s for s, _ in b["engine"].syncs]  # the same noise steps
    for (_, x), (_, y) in zip(a["engine"].syncs, b["engine"].syncs):  # the same weights at every sync
        assert all(torch.equal(x[n], y[n]) for n in x)
    assert all(torch.equal(a["final_engine"][n], b["final_engine"][n]) for n in a["final_engine"])


CASES = {
    "k1": {"k": 1},
    "k2": {"k": 2},
    "k4": {"k": 4, "steps": 6},
    "k2-gkd": {"k": 2, "loss": "gkd_reverse_kl"},
    "k2-grpo": {"k": 2, "loss": "grpo"},
    "k1-systematic-noise": {"k": 1, "redraw_noise": False},
    "k2-fp8-w8a8-kv-calibrated": {"k": 2, "rollout": FP8},
    "k2-stop-after": {"k": 2, "steps": 6, "stop_after": 3},
    "k4-more-than-the-steps": {"k": 4, "steps": 3},
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_async_rollouts_are_bit_identical_to_the_simulated_staleness(tiny, case) -> None:
    kw = CASES[case]
    sync, real = _run(tiny, "sync", **kw), _run(tiny, "async", **kw)
    assert_bit_identical(sync, real)
    assert real["engine"].threads and all(t.startswith("admitcheck-rollouts") for t in real["engine"].threads)
    assert sync["engine"].threads == {threading.main_thread().name}
    steps = min(kw.get("steps", 4), kw.get("stop_after") or 99)
    assert len(real["engine"].syncs) == steps and not worker_threads()


@pytest.mark.parametrize("case", ["k2-async", "k0", "k1-ema", "k2-grpo-stop-after"])
def test_deferred_evaluations_are_the_inline_ones_and_run_after_the_last_step(tiny, case) -> None:
    kw = {"k2-async": {"mode": "async", "k": 2}, "k0": {"mode": "sync", "k": 0},
          "k1-ema": {"mode": "async", "k": 1, "ema": 0.9},
          "k2-grpo-stop-after": {"mode": "async", "k": 2, "loss": "grpo", "steps": 6,
                                 "stop_after": 3}}[case]  # fmt: skip
    inline_events, deferred_events = [], []
    inline = _run(tiny, **kw, events=inline_events)
    deferred = _run(tiny, **kw, defer=True, events=deferred_events)
    assert_bit_identical(inline, deferred)  # the same steps, evals, final weights and RNG state
    steps = len(inline["result"].steps)
    assert [e[1] for e in inline_events if e[0] == "eval"] == list(range(steps + 1))  # eval_every 1: each step
    # inline: step i's evaluation right after step i (while an async run's thread samples ahead); deferred: step 0's
    # before the first step, the rest after the last one, with the rollouts' thread joined
    assert inline_events[1:3] == [("step", 1, inline_events[1][2]), ("eval", 1, inline_events[2][2])]
    assert deferred_events[0][:2] == ("eval", 0)
    assert [e[0] for e in deferred_events[1 : steps + 1]] == ["step"] * steps
    assert deferred_events[steps + 1 :] == [("eval", i, 0) for i in range(1, steps + 1)]
    if kw["mode"] == "async" and kw["k"]:
        assert any(e[2] for e in inline_events if e[0] == "eval" and e[1])  # inline: evaluated beside the sampling


def test_async_at_staleness_zero_is_the_synchronous_loop(tiny) -> None:
    sync, real = _run(tiny, "sync", 0, steps=2), _run(tiny, "async", 0, steps=2)
    assert_bit_identical(sync, real)
    assert real["engine"].threads == {threading.main_thread().name}


def test_the_engine_samples_without_touching_the_global_rng(tiny) -> None:
    tokens = tiny["tokens"]
    engine = HFEngine(copy.deepcopy(tiny["student"]), NOISE, eos_token_id=tokens.eos_token_id, pad_token_id=0)
    before = torch.get_rng_state()
    engine.load_weights(tiny["student"].state_dict(), noise_step=3)
    engine.sample(tiny["train_ids"][:4], SamplingConfig(), 5, 6)
    assert torch.equal(before, torch.get_rng_state())


def test_the_engine_shares_no_tensor_with_the_trainer(tiny) -> None:
    student = copy.deepcopy(tiny["student"])
    engine = HFEngine(student, RolloutConfig(dtype="float32"), eos_token_id=2, pad_token_id=0)
    ours = {t.data_ptr() for t in student.state_dict().values()}
    snapshot = {n: v.clone() for n, v in student.state_dict().items()}
    engine.load_weights(snapshot, noise_step=1)
    theirs = [t.data_ptr() for t in engine.model.state_dict().values()] + [t.data_ptr() for t in engine._clean.values()]
    assert not ours & set(theirs)
    assert not {t.data_ptr() for t in snapshot.values()} & set(theirs)


@pytest.mark.parametrize("at", [0, 2])
def test_an_exception_in_the_engine_thread_is_raised_by_train_and_the_thread_joined(tiny, at) -> None:
    def failing(inner):
        return RecordingEngine(inner, fail_at_sample=at)

    with pytest.raises(RuntimeError, match=f"engine failed at sample {at}"):
        _run(tiny, "async", 2, steps=4, engine_wrap=failing)
    assert not worker_threads()


def test_the_thread_is_joined_when_the_trainer_raises(tiny) -> None:
    def raise_at_step_2(i, _model):
        if i == 2:
            raise KeyboardInterrupt  # not an Exception: the loop's `finally` must still join the worker

    tokens = tiny["tokens"]
    student = copy.deepcopy(tiny["student"])
    engine = HFEngine(student, NOISE, eos_token_id=tokens.eos_token_id, pad_token_id=tokens.pad_token_id)
    cfg = TrainConfig(prompts="-", steps=6, batch_size=8, max_new_tokens=6, rollouts="async")
    with pytest.raises(KeyboardInterrupt):
        opd.train(student, tiny["teacher"], engine, tiny["train_ids"], cfg, staleness=2, seed=7,
                  on_step=raise_at_step_2)  # fmt: skip
    assert not worker_threads()


def test_background_rollouts_run_jobs_in_order_and_close_is_idempotent(tiny) -> None:
    tokens = tiny["tokens"]
    engine = RecordingEngine(HFEngine(copy.deepcopy(tiny["student"]), NOISE, eos_token_id=2, pad_token_id=0))
    snapshot = {n: v.clone() for n, v in tiny["student"].state_dict().items()}
    with BackgroundRollouts(engine) as rollouts:
        rollouts.submit(tiny["train_ids"][:4], SamplingConfig(), 1, 6)
        rollouts.submit(tiny["train_ids"][:4], SamplingConfig(), 1, 6, weights=snapshot, noise_step=5)
        rollouts.submit(None, None, 0, 0, weights=snapshot, noise_step=6)
        assert rollouts.pending == 3 and len(worker_threads()) == 1
        first, second, none = rollouts.result(), rollouts.result(), rollouts.result()
        rollouts.submit(tiny["train_ids"][:4], SamplingConfig(), 1, 6)  # left queued: close cancels or finishes it
    rollouts.close()
    assert none is None and first.token_ids.shape[0] == 4 and [s for s, _ in engine.syncs] == [5, 6]
    assert not torch.equal(first.logprobs, second.logprobs)  # noise step 0 vs 5
    assert not worker_threads() and tokens is not None
    with pytest.raises(RuntimeError, match="closed"):
        rollouts.submit(None, None, 0, 0)


def test_the_switch_is_validated_and_never_dumped() -> None:
    """Not part of what a run is: the ledger header (`run_relevant_config`), the artifact's recipe
    (`training_recipe_of`) and its resolved config are all dumps of the config, and are the same under sync and
    async."""
    import yaml

    from admitcheck.calibration.artifact import training_recipe_of
    from admitcheck.config import CalibrateConfig

    data = yaml.safe_load((Path(__file__).resolve().parents[1] / "examples" / "toy_calibrate_quick.yaml").read_text())
    sync = CalibrateConfig.model_validate(data)
    real = CalibrateConfig.model_validate({**data, "train": {**data["train"], "rollouts": "async"}})
    assert sync.train.rollouts == "sync" and real.train.rollouts == "async"
    assert sync.model_dump(mode="json") == real.model_dump(mode="json") and training_recipe_of(
        sync
    ) == training_recipe_of(real)
    assert "rollouts" not in real.model_dump(mode="json")["train"]
    with pytest.raises(ValueError, match="rollouts"):
        TrainConfig(prompts="p.jsonl", rollouts="overlap")
    deferred = CalibrateConfig.model_validate({**data, "eval": {**data["eval"], "deferred": True}})  # eval.deferred
    assert deferred.eval.deferred and deferred.model_dump(mode="json") == sync.model_dump(mode="json")
    with pytest.raises(ValueError, match="deferred"):
        EvalConfig(prompts="p.jsonl", deferred="later")


# ------------------------------------------------------------------------------------------------ CUDA


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("trainer", ["cpu", "cuda"])
@pytest.mark.parametrize("case", ["k1", "k2-fp8-w8a8-kv-calibrated", "k2-grpo"])
def test_async_rollouts_on_cuda_are_bit_identical_to_the_simulated_staleness(tiny, trainer, case) -> None:
    """The engine on CUDA (captured decode, its own stream in the worker); the trainer on CPU or on CUDA (then with
    deterministic algorithms: the trainer's own backward must not differ run to run for the comparison to mean
    anything). The engine's sampling is seeded and its kernels deterministic, so async = sync bitwise."""
    import os

    kw = dict(CASES[case])
    kw["rollout"] = kw.get("rollout", NOISE).model_copy(update={"device": "cuda", "compile": False})
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(trainer == "cuda", warn_only=True)
    try:
        sync, real = _run(tiny, "sync", device=trainer, **kw), _run(tiny, "async", device=trainer, **kw)
    finally:
        torch.use_deterministic_algorithms(was)
        tiny["teacher"].to("cpu")
    assert_bit_identical(sync, real)
    assert not worker_threads()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_deferred_evaluations_on_cuda_are_the_inline_ones(tiny) -> None:
    """eval.deferred with the trainer, the engine and the snapshots on CUDA: the same steps and evals, bit for bit."""
    import os

    rollout = NOISE.model_copy(update={"device": "cuda", "compile": False})
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        inline = _run(tiny, "async", 1, rollout=rollout, device="cuda")
        deferred = _run(tiny, "async", 1, rollout=rollout, device="cuda", defer=True)
    finally:
        torch.use_deterministic_algorithms(was)
        tiny["teacher"].to("cpu")
    assert_bit_identical(inline, deferred)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_cuda_engine_shares_no_tensor_with_a_cuda_trainer(tiny) -> None:
    student = copy.deepcopy(tiny["student"]).to("cuda")
    engine = HFEngine(student, RolloutConfig(dtype="float32", device="cuda"), eos_token_id=2, pad_token_id=0)
    ours = {t.data_ptr() for t in student.state_dict().values()}
    snapshot = {n: v.clone() for n, v in student.state_dict().items()}
    engine.load_weights(snapshot, noise_step=1)  # in place (captured graphs stay valid): copies, never aliases
    engine.sample(tiny["train_ids"][:4], SamplingConfig(), 5, 6)
    theirs = [t.data_ptr() for t in engine.model.state_dict().values()] + [t.data_ptr() for t in engine._clean.values()]
    assert not (ours | {t.data_ptr() for t in snapshot.values()}) & set(theirs)
    engine.close()
