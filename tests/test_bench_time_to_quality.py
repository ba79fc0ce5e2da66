"""bench/time_to_quality.py on the toy pair, a recipe of 6 steps: the measured side read back from its ledger (deferred
evaluations every 2 steps, the baseline paired by seed, steps-to-target and seconds per step as plan defines them),
the pilot's step timings handed to `plan`, a candidate with only a mismatch listed and not run, and a second call
that makes no run (the ledgers resume)."""

from __future__ import annotations

import importlib.util
import json
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
    for section, name in (("probe", "probe"), ("train", "train"), ("eval", "eval")):
        data[section]["prompts"] = str(toy_pair_dir / "prompts" / f"{name}.jsonl")
    data["train"] |= {"steps": 6, "batch_size": 16}
    data["eval"] |= {"num_prompts": 8, "samples": 1}
    data["probe"] |= {"num_prompts": 8}
    data["output"] = str(tmp_path / "unused.yaml")
    (tmp_path / "cal.yaml").write_text(yaml.safe_dump(data))
    plan = {"kind": "plan", "calibration": str(ROOT / "calibrations" / "toy.yaml"), "candidates": [
        {"name": "stale_1", "staleness": 1, "step_time": {"overlap": True}},
        {"name": "unrun", "mismatch": 0.002}]}  # fmt: skip
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    ledger = tmp_path / "toy.ttq.ledger.jsonl"
    argv = ["--config", str(tmp_path / "cal.yaml"), "--plan", str(tmp_path / "plan.yaml"), "--every", "2",
            "--replicates", "2", "--pilot-steps", "2", "--pilot-runs", "1", "--ledger", str(ledger),
            "--out", str(tmp_path / "out.json")]  # fmt: skip
    bench = _bench()
    out = bench.main(argv)
    assert json.loads((tmp_path / "out.json").read_text())["candidates"].keys() == {"stale_1", "unrun"}
    runs = [json.loads(line) for line in ledger.read_text().splitlines() if json.loads(line).get("kind") == "run"]
    assert len(runs) == 4 and all([e[0] for e in r["evals"]] == [0, 2, 4, 6] for r in runs)
    assert out["pilot"]["runs"] == 1 and out["pilot"]["steps"] == [2, 4] and out["plan_rollout_share"] == pytest.approx(out["pilot"]["rollout_share"])
    assert out["candidates"]["unrun"]["runs"] is False and "measured" not in out["candidates"]["unrun"]
    stale = out["candidates"]["stale_1"]
    assert stale["wall_time"] == "real" and stale["level"]["staleness"] == 1
    tau = out["tau"]
    for pair in stale["measured"]["pairs"]:  # re-derived from the ledger's records
        base = next(r for r in runs if r["seed"] == pair["seed"] and r["staleness"] is None)
        run = next(r for r in runs if r["seed"] == pair["seed"] and r["staleness"] == 1)
        assert pair["target"] == base["evals"][-1][1] + tau
        assert pair["seconds_per_step"] == pytest.approx(sum(run["seconds_by_phase"].values()) / 6)
        t = pair["steps_to_target"]
        assert t is None or 0 < t <= 6
    assert [p["seed"] for p in stale["measured"]["pairs"]] == out["seeds"]
    n_lines = len(ledger.read_text().splitlines())
    again = bench.main(argv)  # resumes: every run is in the ledgers, none is made
    assert len(ledger.read_text().splitlines()) == n_lines
    assert again["candidates"]["stale_1"]["measured"] == stale["measured"]
