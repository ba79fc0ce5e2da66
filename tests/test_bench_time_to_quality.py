"""bench/time_to_quality.py on the toy pair, a recipe of 10 steps: the measured side read back from its ledger
(deferred evaluations every 2 steps, the baseline paired by seed on seeds no plan ledger holds, steps-to-target and
training seconds per step), the per-candidate figures recomputed from the pairs, the pilot's step time handed to
`plan`, a candidate with only a mismatch listed and not run, a second call that makes no run (the ledgers resume)
and its call recorded, and the inputs it refuses."""

from __future__ import annotations

import importlib.util
import json
import statistics
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("time_to_quality", ROOT / "bench" / "time_to_quality.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_time_to_quality_bench_on_the_toy(tmp_path, toy_pair_dir) -> None:
    data = yaml.safe_load((ROOT / "examples" / "toy_calibrate.yaml").read_text())
    data["pair"] = {"name": "toy", "student": str(toy_pair_dir / "student"), "teacher": str(toy_pair_dir / "teacher")}
    for section in ("probe", "train", "eval"):
        data[section]["prompts"] = str(toy_pair_dir / "prompts" / f"{section}.jsonl")
    data["train"] |= {"steps": 10, "batch_size": 32}
    data["eval"] |= {"num_prompts": 16, "samples": 2}
    data["probe"] |= {"num_prompts": 8}
    data["output"] = str(tmp_path / "unused.yaml")
    (tmp_path / "cal.yaml").write_text(yaml.safe_dump(data))
    plan = {"kind": "plan", "calibration": str(ROOT / "calibrations" / "toy.yaml"), "candidates": [
        {"name": "noise", "relative_std": 0.01, "step_time": {"rollout_speedup": 2.0}},
        {"name": "stale_1", "staleness": 1, "step_time": {"overlap": True}},
        {"name": "unrun", "mismatch": 0.002}]}  # fmt: skip
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    ledger = tmp_path / "toy.ttq.ledger.jsonl"
    argv = ["--config", str(tmp_path / "cal.yaml"), "--plan", str(tmp_path / "plan.yaml"), "--every", "2",
            "--replicates", "2", "--pilot-steps", "2", "--pilot-runs", "1", "--ledger", str(ledger),
            "--out", str(tmp_path / "out.json")]  # fmt: skip
    bench = _bench()
    out = bench.main(argv)
    assert json.loads((tmp_path / "out.json").read_text())["candidates"].keys() == {"noise", "stale_1", "unrun"}
    runs = [json.loads(line) for line in ledger.read_text().splitlines() if json.loads(line).get("kind") == "run"]
    assert len(runs) == 6 and all([e[0] for e in r["evals"]] == [0, 2, 4, 6, 8, 10] for r in runs)
    calibration_seeds = {r.seed for r in bench.load_runs(bench.load_calibration(plan["calibration"]), [], None)[1]}
    assert not set(out["seeds"]) & calibration_seeds  # out of sample: the prediction has seen none of these runs
    assert out["pilot"]["steps"] == [2, 4] and out["plan_rollout_share"] == pytest.approx(out["pilot"]["rollout_share"])
    assert out["plan_step_seconds"] == pytest.approx(out["pilot"]["seconds_per_step"]) and out["mixed_calls"] is False
    assert out["candidates"]["unrun"]["runs"] is False and "measured" not in out["candidates"]["unrun"]
    tau, reached = out["tau"], 0
    for name, kind in (("noise", "noise"), ("stale_1", "staleness")):
        arm = out["candidates"][name]
        assert arm["wall_time"] == "real" and arm["level"]["kind"] == kind
        m, eff, ratio = arm["measured"], [], []
        assert [p["seed"] for p in m["pairs"]] == out["seeds"]
        for pair in m["pairs"]:  # re-derived from the ledger's records
            base = next(
                r for r in runs if r["seed"] == pair["seed"] and json.loads(r["key"])["level"]["kind"] == "baseline"
            )
            run = next(r for r in runs if r["seed"] == pair["seed"] and json.loads(r["key"])["level"]["kind"] == kind)
            assert pair["target"] == base["evals"][-1][1] + tau
            wall = run["seconds"] - run["seconds_setup"] - run["seconds_probe"] - run["seconds_evaluation"]
            assert pair["seconds_per_step"] == pytest.approx(wall / 10)
            t, tb = pair["steps_to_target"], pair["baseline_steps_to_target"]
            assert pair["steps_efficiency"] == (0.0 if t is None else pytest.approx(tb / t))
            reached += t is not None
            eff.append(pair["steps_efficiency"])
            ratio.append(pair["seconds_per_step"] / pair["baseline_seconds_per_step"])
        assert m["steps_efficiency"]["mean"] == pytest.approx(statistics.mean(eff))
        assert m["speedup"] == pytest.approx(statistics.mean(eff) / statistics.mean(ratio))
        c = arm["comparison"]["speedup"]
        assert c["predicted"] == arm["predicted"]["speedup"] and c["measured"] == m["speedup"]
        assert c["relative_error"] == pytest.approx(c["measured"] / c["predicted"] - 1)
    assert reached  # the recipe improves the student: some runs reach their pair's target
    n_lines = len(ledger.read_text().splitlines())
    again = bench.main(argv)  # resumes: every run is in the ledgers, none is made
    assert len(ledger.read_text().splitlines()) == n_lines and len(again["calls"]) == 2
    assert again["candidates"]["stale_1"]["measured"] == out["candidates"]["stale_1"]["measured"]
    with pytest.raises(SystemExit):  # not NAME.ledger.jsonl: the pilots' ledgers could not be named after it
        bench.main([*argv[:-4], "--ledger", str(tmp_path / "x.jsonl")])
    with pytest.raises(SystemExit):  # no pilot and no step_seconds: plan's times would be in steps, not seconds
        bench.main([*argv, "--pilot-steps", "0"])
