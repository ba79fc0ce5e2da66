"""calibration.workers (engines kept across runs), the local pool that keeps its workers across rounds, and the run
record's phase seconds (calibration.phases, record.py's issue-#37 block).

The must-hold: a worker that keeps its engines gives, run record by run record, the records of today's path (every
engine built and closed per run), bit for bit on CPU, over levels that exercise each way a kept engine is retargeted
(noise sizes and seeds on one engine, FP8 W8A8 hooks and an FP8 KV cache on their own, a staleness floor engine).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from admitcheck import io
from admitcheck.calibration.executors import LocalExecutor, Task
from admitcheck.calibration.ledger import read_run
from admitcheck.calibration.levels import Level, load_context, run_one, run_task
from admitcheck.calibration.phases import GpuSampler, PhaseClock, nvml_reader
from admitcheck.calibration.record import RunRecord
from admitcheck.calibration.workers import EngineKeep, engine_key
from admitcheck.config import CalibrateConfig, NoiseConfig, RolloutConfig
from tests.test_executors import toy_config

ROOT = Path(__file__).resolve().parents[1]
TIMING = {"seconds", "cpu_seconds", "seconds_by_phase", "seconds_setup", "seconds_probe", "seconds_evaluation",
          "gpu_utilization", "worker_run", "finished_at"}  # fmt: skip
W8A8 = {"engine": "hf", "weights": {"format": "fp8_e4m3", "activations": "fp8_per_token"}}
FP8_KV = {"engine": "hf", "kv_cache": {"dtype": "fp8_e4m3"}}


def measured(record: RunRecord) -> dict:
    """A record without its timings: what must be identical between the two paths."""
    return record.model_dump(exclude=TIMING)


def small_config(toy: Path, out: Path) -> CalibrateConfig:
    data = toy_config(toy, out)
    data["train"]["steps"] = 3
    return CalibrateConfig.model_validate(data)


def mixed_runs(config: CalibrateConfig) -> list[tuple[Level, int]]:
    """Interleaved so that every kept engine is retargeted from another level's run in between."""
    w8a8 = RolloutConfig.model_validate(W8A8)
    kv = RolloutConfig.model_validate(FP8_KV)
    base, a, b = Level("baseline", "baseline"), Level("n-a", "noise", 0.01), Level("n-b", "noise", 0.05)
    sys_b = Level("n-b-sys", "noise", 0.05, systematic=True)
    fp8, fp8kv = Level("w8a8", "rollout", rollout=w8a8), Level("kv", "rollout", rollout=kv)
    stale = Level("stale-1", "staleness", staleness=1)
    return [(base, 0), (a, 0), (fp8, 0), (base, 1), (b, 1), (stale, 0), (fp8kv, 0), (fp8, 1), (a, 1), (sys_b, 0)]


# ------------------------------------------------------------------------------------------------ fast


def test_engine_key_ignores_only_the_noise() -> None:
    r = RolloutConfig(engine="hf")
    noisy = r.model_copy(update={"noise": NoiseConfig(relative_std=0.1, seed=7)})
    assert engine_key(noisy) == engine_key(r)
    assert engine_key(r.model_copy(update={"dtype": "float32"})) != engine_key(r)
    assert engine_key(RolloutConfig.model_validate(W8A8)) != engine_key(r)


def test_phase_clock_adds_up_per_phase_and_times_calls() -> None:
    clock = PhaseClock()
    with clock.phase("probe"):
        sum(range(1000))
    timed = clock.timed("evaluation", lambda x, y=1: x + y)
    assert timed(2, y=3) == 5 and timed(1) == 2
    assert set(clock.seconds) == {"probe", "evaluation"} and clock.seconds["probe"] > 0
    assert clock.get("setup") is None and clock.get("probe") == round(clock.seconds["probe"], 2)


def test_gpu_sampler_is_null_on_cpu_and_averages_what_it_reads() -> None:
    assert nvml_reader("cpu") is None
    with GpuSampler("cpu") as gpu:
        pass
    assert gpu.mean_percent is None and gpu.samples == []
    values = iter([10.0, 30.0] + [20.0] * 1000)
    with GpuSampler(read=lambda: next(values), every_s=0.001) as gpu:
        while len(gpu.samples) < 4:
            pass
    assert gpu.samples[:2] == [10.0, 30.0] and gpu.mean_percent == pytest.approx(
        sum(gpu.samples) / len(gpu.samples), abs=0.05
    )


@pytest.mark.gpu
def test_gpu_utilization_is_read_on_cuda() -> None:
    """NVML (pynvml or nvidia-smi) reads a percentage, and a sampler around 2 s of matmuls sees the GPU busy. (On the
    H200, 2026-12-05, 50 matmuls of 4096² — 0.1 s of work — read a mean of 0.0: NVML's counter is the share of its
    own last sample period, 1/6 to 1 s, with a kernel running, so a block shorter than that period can read 0.)"""
    import time

    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    read = nvml_reader("cuda")
    assert read is not None and 0.0 <= read() <= 100.0
    with GpuSampler("cuda", every_s=0.1) as gpu:
        a = torch.randn(4096, 4096, device="cuda")
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 2.0:
            for _ in range(20):
                a = a @ a / 64
            torch.cuda.synchronize()
    assert gpu.mean_percent is not None and gpu.mean_percent > 20


def test_every_shipped_ledger_line_loads_and_round_trips() -> None:
    n = 0
    for path in sorted((ROOT / "calibrations").glob("*.ledger.jsonl")):
        for i, line in enumerate(io.read_jsonl(path)):
            if line.get("kind") == "run":
                record = read_run(line, path, i)
                assert record.line() == line  # an old line comes back exactly: no new field appears
                for field in ("seconds_setup", "gpu_utilization"):  # a field the line lacks reads as None
                    assert (line.get(field) is not None) == (getattr(record, field) is not None)
                n += 1
    assert n > 100


def test_phase_fields_round_trip_and_a_misspelt_phase_is_refused(tmp_path) -> None:
    phases = {"rollout": 1.0, "teacher": 0.5, "backward": 2, "sync": 0}
    rec = RunRecord(seed=1, quality=0.5, seconds_by_phase=phases, seconds_setup=0.3, seconds_probe=1.2,
                    seconds_evaluation=4.0, gpu_utilization=87.5, worker_run=3)  # fmt: skip
    io.append_jsonl(tmp_path / "l.jsonl", rec.keyed("k").line())
    back = read_run(io.read_jsonl(tmp_path / "l.jsonl")[0], tmp_path / "l.jsonl", 0)
    assert back == rec.keyed("k") and back.seconds_by_phase["backward"] == 2.0
    with pytest.raises(Exception, match=r"seconds_by_phase\.rolout"):
        read_run({"kind": "run", "seed": 1, "quality": 0.5, "seconds_by_phase": {"rolout": 1.0}}, tmp_path, 0)


def test_the_progress_note_quotes_the_committed_throughput() -> None:
    """docs/gpu_campaigns.md's CPU table is bench/results/campaign_throughput_toy_cpu.json's, to 3 digits."""
    paths = json.loads((ROOT / "bench/results/campaign_throughput_toy_cpu.json").read_text())["campaign"]["paths"]
    doc = (ROOT / "docs" / "gpu_campaigns.md").read_text()
    for name, p in paths.items():
        row = f"| {p['runs_per_minute']:.3g} | {p['median_run_s']:.3g} | {p['median_phase_s']['setup']:.2f} |"
        assert f"`{name}`" in doc and row in doc, (name, row)
    assert paths["kept"]["runs_per_minute"] > 2 * paths["reload"]["runs_per_minute"]  # what the note concludes


def test_the_progress_note_quotes_the_h200_throughput() -> None:
    """docs/gpu_campaigns.md's H200 row is bench/results/h200_campaign_throughput.json's (30 runs, 10 kept workers)."""
    k = json.loads((ROOT / "bench/results/h200_campaign_throughput.json").read_text())["campaign"]
    assert k["runs"] >= 30 and k["jobs"] == 10
    p = k["paths"]["kept"]
    doc = (ROOT / "docs" / "gpu_campaigns.md").read_text()
    assert (
        f"**{p['runs_per_minute']:.3g} runs/minute** ({p['wall_s']:.0f} s), median run {p['median_run_s']:.0f} s" in doc
    )
    assert f"evaluation **{p['median_phase_s']['evaluation']:.1f} s**" in doc


# ------------------------------------------------------------------------------------------------ toy pair


@pytest.mark.slow
def test_kept_engines_give_todays_records_bit_for_bit(toy_pair_dir, tmp_path) -> None:
    config = small_config(toy_pair_dir, tmp_path / "toy.yaml")
    ctx = load_context(config)
    keep = EngineKeep()
    # a keep bounded below the three recipes: engines evicted (closed) and rebuilt when their recipe comes back
    small, closed = EngineKeep(max_engines=2), []
    runs = mixed_runs(config)
    for i, (level, seed) in enumerate(runs):
        fresh = run_one(ctx, config, level, seed)
        kept = run_one(ctx, config, level, seed, keep=keep)
        before = dict(small.engines)
        bounded = run_one(ctx, config, level, seed, keep=small)
        closed += [e for k, e in before.items() if small.engines.get(k) is not e]
        assert measured(kept) == measured(fresh), f"run {i}: {level.name}/seed {seed}"
        assert measured(bounded) == measured(fresh), f"run {i} (bounded keep): {level.name}/seed {seed}"
        assert len(small.engines) <= 2
        assert kept.worker_run == i + 1 and fresh.worker_run is None
        for r in (fresh, kept):
            assert r.seconds_setup is not None and r.seconds_evaluation > 0 and r.gpu_utilization is None
            assert (r.seconds_probe is None) == (level.kind == "baseline")
    assert len(keep.engines) == 3  # float32 base (noise levels, and the float32 staleness floor), W8A8, FP8 KV
    assert len(keep.evaluators) == 1
    assert len(closed) >= 3 and all(e.model is None for e in closed)  # the evicted were closed (their memory freed)


@pytest.mark.slow
def test_the_local_pool_keeps_its_workers_across_rounds(toy_pair_dir, tmp_path) -> None:
    config = small_config(toy_pair_dir, tmp_path / "toy.yaml")
    ctx = load_context(config)
    base, noise = Level("baseline", "baseline"), Level("n-a", "noise", 0.01)
    want = {(lv.name, s): measured(run_one(ctx, config, lv, s)) for lv in (base, noise) for s in (0, 1)}
    runner, seen = LocalExecutor(jobs=2), []
    try:
        for round_ in ((base, noise), (noise, base)):
            tasks = [Task(f"{lv.name}/{s}", lv.name, run_task, (config, None, lv, s)) for s, lv in enumerate(round_)]
            for task, record in runner.run(tasks):
                lv, s = task.args[2], task.args[3]
                assert measured(record) == want[(lv.name, s)], task.key
                seen.append(record.worker_run)
    finally:
        runner.close()
    assert sorted(seen)[-1] >= 2, seen  # a worker of round 1 made a run of round 2: it kept its pair and engines


@pytest.mark.gpu
@pytest.mark.slow
def test_kept_engines_on_cuda_match_fresh_ones_and_keep_their_graphs(toy_pair_dir, tmp_path) -> None:
    """Never ran yet (written in a session without a GPU). On CUDA a kept engine is retargeted by an in-place weight
    copy, so its captured decode graphs serve the next run: the records must still be the fresh engines' (the same
    kernels replayed), and the decoder objects must be the same ones after the second run (no recapture)."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    data = toy_config(toy_pair_dir, tmp_path / "toy.yaml")
    data["train"]["steps"] = 3
    cuda = {"engine": "hf", "dtype": "bfloat16", "device": "cuda", "compile": False}  # graphs, eager kernels: fast
    data |= {"reference": {"device": "cuda", "dtype": "float32"}, "rollout": cuda}
    config = CalibrateConfig.model_validate(data)
    ctx = load_context(config)
    keep = EngineKeep()
    runs = [(Level("baseline", "baseline"), 0), (Level("n-a", "noise", 0.01), 0), (Level("n-b", "noise", 0.05), 1)]
    graphs = None
    for i, (level, seed) in enumerate(runs):
        fresh = run_one(ctx, config, level, seed)
        kept = run_one(ctx, config, level, seed, keep=keep)
        assert measured(kept) == measured(fresh), f"run {i}: {level.name}/seed {seed}"
        (engine,) = keep.engines.values()  # one recipe: the noise levels share the base engine
        decoders = {k: id(v) for k, v in engine._decoders.items()}
        if graphs is not None:
            assert graphs.items() <= decoders.items()  # the graphs of the earlier runs are still the same objects
        graphs = decoders
    assert graphs, "the engine captured no decode graph: the CUDA path was not taken"
    assert kept.gpu_utilization is not None


@pytest.mark.slow
def test_a_run_with_eval_deferred_is_the_same_record_with_its_evaluations_after_the_training(
    toy_pair_dir, tmp_path, monkeypatch
) -> None:
    """`eval.deferred` reaches the training loop (`opd.train(defer_evals=True)`) and changes no recorded value."""
    from admitcheck.calibration import levels, opd

    config = small_config(toy_pair_dir, tmp_path / "toy.yaml")
    config = config.model_copy(update={"eval": config.eval.model_copy(update={"every": 2})})
    deferred_config = config.model_copy(update={"eval": config.eval.model_copy(update={"deferred": True})})
    seen = []
    train = opd.train

    def spy(*args, **kwargs):
        seen.append(kwargs.get("defer_evals"))
        return train(*args, **kwargs)

    monkeypatch.setattr(levels.opd, "train", spy)
    ctx = load_context(config)
    level = Level("stale-1", "staleness", staleness=1)
    inline, deferred = run_one(ctx, config, level, 0), run_one(ctx, deferred_config, level, 0)
    assert [s for s in seen if s is not None] == [False, True]  # None: the probe's stale student (its own steps)
    assert measured(deferred) == measured(inline) and len(inline.evals) > 2
