"""A campaign that outlives the call that started it (issue #37), on the toy pair on CPU, through the very script the
GPU sessions use (bench/smollm2_campaign.sh): started detached (its own process session, 2 pool workers), SIGKILLed
mid-way as a machine taken back would kill it, polled, started again: only the missing runs are made, the finished
ones are never rewritten, and the artifact is the in-process calibration's.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from admitcheck.calibration.calibrate import calibrate
from admitcheck.calibration.ledger import ledger_path
from admitcheck.calibration.progress import read_progress
from admitcheck.calibration.record import RunRecord
from admitcheck.cli import app
from admitcheck.config import CalibrateConfig
from tests.test_calibrate import comparable, write_config
from tests.test_cli import assert_user_error
from tests.test_executors import RUNS, local_reference, run_lines, toy_config  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "smollm2_campaign.sh"


def script(stage: str, *args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), stage, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip


def session_members(sid: int) -> list[int]:
    """The processes of session `sid` (Linux: read off /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == sid:
                    out.append(int(entry))
            except OSError:  # gone meanwhile
                pass
    return out


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("setsid") is None or not os.path.isdir("/proc"), reason="needs Linux's setsid")
def test_detached_campaign_killed_midway_resumes_only_the_missing_runs(
    toy_pair_dir,
    tmp_path,
    local_reference,  # noqa: F811
) -> None:
    out = tmp_path / "toy.yaml"
    cfg = write_config(tmp_path / "cal.yaml", toy_config(toy_pair_dir, out))
    env = os.environ | {"CONFIGS": str(cfg), "PY": sys.executable, "JOBS": "2", "RUN": str(tmp_path / "run"),
                        "OUT": str(tmp_path / "out"), "EVERY": "1", "OMP_NUM_THREADS": "1"}  # fmt: skip
    started = script("start", env=env)
    assert "started (pid" in started.stdout, started.stdout + started.stderr
    pid = int((tmp_path / "run" / "cal.pid").read_text())
    assert os.getsid(pid) == pid  # its own session: a call's end (which kills its process group) spares it
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline:
        if ledger_path(out).exists() and len(run_lines(out)) >= 1:
            break
        time.sleep(0.2)
    assert len(run_lines(out)) >= 1, (tmp_path / "run" / "cal.log").read_text()[-2000:]
    members = session_members(pid)
    assert len(members) >= 3  # the shell, the driver and its pool workers (at least one)
    os.killpg(pid, signal.SIGKILL)  # the machine taken back: everything in the session dies at once
    for _ in range(100):
        if not session_members(pid):
            break
        time.sleep(0.1)
    assert not session_members(pid)
    before = ledger_path(out).read_bytes()
    before = before[: before.rfind(b"\n") + 1]  # whole lines (a torn one is dropped, then made again)
    finished = read_progress(ledger_path(out)).runs
    assert 1 <= finished < RUNS and not out.exists()

    polled = script("status", env=env)
    assert f": {finished} runs" in polled.stdout and "stopped" in polled.stdout, polled.stdout + polled.stderr
    restarted = script("start", env=env)  # the resume: the same command again
    assert "started (pid" in restarted.stdout, restarted.stdout + restarted.stderr
    done = script("poll", "400", env=env)
    assert "rc=0" in done.stdout, done.stdout[-3000:] + (tmp_path / "run" / "cal.log").read_text()[-2000:]
    assert ledger_path(out).read_bytes().startswith(before)  # appended to, never rewritten
    keys = [r["key"] for r in run_lines(out)]
    assert len(keys) == len(set(keys)) == RUNS  # the finished runs were not made again
    progress = read_progress(ledger_path(out))
    assert progress.runs == RUNS and progress.runs_per_minute and progress.runs_per_minute > 0
    with tarfile.open(tmp_path / "out" / "smollm2_campaign.tgz") as tar:  # collected: what a call brings back
        assert any(n.endswith("toy.ledger.jsonl") for n in tar.getnames()), tar.getnames()
    resumed = calibrate(CalibrateConfig.model_validate(toy_config(toy_pair_dir, out)))  # all runs there: no run
    assert comparable(resumed) == comparable(local_reference[1])


def test_status_reads_the_ledger_quickly_and_names_a_missing_one(toy_pair_dir, tmp_path) -> None:
    out = tmp_path / "toy.yaml"
    cfg = write_config(tmp_path / "cal.yaml", toy_config(toy_pair_dir, out))
    assert_user_error(CliRunner().invoke(app, ["calibrate", str(cfg), "--status"]), "toy.ledger.jsonl", "no ledger yet")
    phases = {"rollout": 2.0, "teacher": 1.0, "backward": 3.0, "sync": 0.1}
    runs = [RunRecord(seed=s, quality=0.5, seconds=10.0 + s, seconds_by_phase=phases, seconds_setup=5.0 - 4 * s,
                      seconds_evaluation=4.0, finished_at=1000.0 + 20 * s).keyed(f"k{s}") for s in (0, 1)]  # fmt: skip
    lines = [{"kind": "header"}] + [r.line() for r in runs]
    text = "".join(json.dumps(line) + "\n" for line in lines) + '{"kind": "run", "se'  # a torn append
    ledger_path(out).write_text(text)
    result = CliRunner().invoke(app, ["calibrate", str(cfg), "--status", "--json"])
    assert result.exit_code == 0, result.output
    got = json.loads(result.output)
    assert got["runs"] == 2 and got["last_finished_at"] == 1020.0
    assert got["runs_per_minute"] == pytest.approx(60 * 2 / (1020.0 - (1000.0 - 10.0)), abs=0.01)  # from run 0's start
    assert got["median_phase_seconds"] == {"rollout": 2.0, "teacher": 1.0, "backward": 3.0, "sync": 0.1,
                                           "evaluation": 4.0, "setup": 3.0}  # fmt: skip
    assert ledger_path(out).read_text() == text  # read only: the torn line is left for `calibrate` to drop
    human = CliRunner().invoke(app, ["calibrate", str(cfg), "--status"])
    assert human.exit_code == 0 and ": 2 runs" in human.output and "runs/min" in human.output


def test_status_rate_is_the_latest_stretch_of_work_not_the_time_between_sessions(tmp_path) -> None:
    """A ledger made over two sessions a day apart: runs/minute is the second session's (its runs back to back and
    overlapping, 4 workers), not the 3 runs over a day; a pause shorter than IDLE_GAP_S (a round's fit) does not cut."""
    from admitcheck.calibration.progress import IDLE_GAP_S, progress_of

    def run(seed: int, finished: float, seconds: float) -> RunRecord:
        return RunRecord(seed=seed, quality=0.5, seconds=seconds, finished_at=finished).keyed(f"k{seed}")

    day1 = [run(s, 1000.0 + 60 * s, 60.0) for s in range(2)]
    gap = 1000.0 + 86400.0
    day2 = [run(10 + i, gap + 60.0 + 15 * i, 60.0) for i in range(8)]  # 4 in flight at once, one every 15 s
    pause = gap + 60.0 + 15 * 7 + IDLE_GAP_S / 2  # a round's fit: shorter than the idle gap
    day2 += [run(20, pause + 60.0, 60.0)]
    p = progress_of(tmp_path / "x.ledger.jsonl", day1 + day2)
    assert p.runs == 11 and p.rate_runs == 9 and p.last_finished_at == pause + 60.0
    assert p.runs_per_minute == pytest.approx(round(60 * 9 / (pause + 60.0 - gap), 2))
    assert progress_of(tmp_path / "y", day1).rate_runs == 2  # one stretch: every run counts
    assert progress_of(tmp_path / "z", []).runs_per_minute is None


def test_a_tracked_config_runs_from_an_ignored_copy_the_working_tree_sync_leaves_alone(tmp_path) -> None:
    """The device tool copies the working tree onto the device at every call; on 2026-12-06 that put the tracked
    21-run SmolLM2 ledger back over the running campaign's between calls. A tracked config (examples/*.yaml) now runs
    from out/NAME.campaign.yaml (git-ignored) whose output is $RUN/cal/, seeded once from the tracked ledger: the
    campaign's ledger is outside what the sync writes, and the tracked one is never written. Read by `status`
    (nothing is run)."""
    tracked = ROOT / "calibrations" / "toy.ledger.jsonl"
    before = tracked.read_bytes()
    shadow = ROOT / "out" / "toy_calibrate.campaign.yaml"
    existed = shadow.exists()
    env = os.environ | {"CONFIGS": "examples/toy_calibrate.yaml", "PY": sys.executable, "RUN": str(tmp_path / "run"),
                        "OUT": str(tmp_path / "out")}  # fmt: skip
    try:
        done = script("status", env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        cfg = yaml.safe_load(shadow.read_text())
        cal = tmp_path / "run" / "cal"
        assert Path(cfg["output"]) == cal / "toy.yaml"
        assert (cal / "toy.ledger.jsonl").read_bytes() == before  # seeded from the tracked ledger
        assert f"{cal / 'toy.ledger.jsonl'}: 111 runs" in done.stdout
        (cal / "toy.ledger.jsonl").write_text("changed by the campaign\n")  # a campaign's appends ...
        assert script("status", env=env).returncode == 0
        assert (cal / "toy.ledger.jsonl").read_text() == "changed by the campaign\n"  # ... are never re-seeded over
        assert tracked.read_bytes() == before
    finally:
        if not existed:
            shadow.unlink(missing_ok=True)


def test_a_session_runs_its_steps_in_the_order_named_with_mps_only_around_the_steps_that_use_it(tmp_path) -> None:
    """`STEPS` orders a session's chain (a short device session can take the noise step before the backtest); MPS is
    started before the first step that shares the GPU through it and quit before noise/ttq and at the end; an unknown
    step is refused before anything starts. DRY_RUN prints the chain instead of starting it."""
    env = os.environ | {"PY": sys.executable, "RUN": str(tmp_path / "run"), "OUT": str(tmp_path / "out"),
                        "BACKTESTS": "cfg/bt.yaml", "DRY_RUN": "1", "JOBS": "2"}  # fmt: skip

    def steps_of(steps: str) -> list[str]:
        done = script("session", env=env | {"STEPS": steps})
        assert done.returncode == 0, done.stdout + done.stderr
        line = next(x for x in done.stdout.splitlines() if x.startswith("would run: "))
        named = [
            "mps_off" if p.endswith("mps_off") else "mps" if p.endswith(" mps") else "noise" if "bench/noise.py" in p
            else "backtest" if "admitcheck backtest 'cfg/bt.yaml'" in p else "ttq" if "time_to_quality" in p
            else "throughput" if "--campaign-compile true" in p and "gpu_smollm2.py" in p else None
            for p in (q.strip() for q in line.removeprefix("would run: ").split(";"))
        ]  # fmt: skip
        return [s for s in named if s is not None]

    assert steps_of("noise backtest") == ["noise", "mps", "backtest", "mps_off"]
    assert steps_of("backtest noise ttq") == ["mps", "backtest", "mps_off", "noise", "ttq"]
    assert steps_of("ttq") == ["ttq"]
    assert steps_of("ttq throughput") == ["ttq", "mps", "throughput", "mps_off"]  # issue 37's, compiled by default
    assert not (tmp_path / "run" / "session.pid").exists()  # nothing was started
    refused = script("session", env=env | {"STEPS": "backtest nosie"})
    assert refused.returncode == 2 and "unknown session step nosie" in refused.stderr
