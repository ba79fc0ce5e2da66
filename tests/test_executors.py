"""admitcheck.calibration.executors and `calibrate --executor ray`, against a local Ray instance this module starts
(CPU only).

Generic executor behaviour on trivial tasks (retry after a killed worker, failures named, a task's own error kept),
then the calibration must-holds on the toy pair with a tiny config (6 runs of 4 steps): the same artifact as
--executor local, a worker SIGKILLed mid-run, a driver SIGKILLed mid-calibration and resumed, and the two exits
(Ray not installed: 2; an address that does not answer: 3, ledger untouched).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import closing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from admitcheck import io
from admitcheck.calibration.calibrate import calibrate
from admitcheck.calibration.executors import LocalExecutor, RayExecutor, Task, TasksFailed, _host_port
from admitcheck.calibration.ledger import ledger_path
from admitcheck.cli import app
from admitcheck.config import CalibrateConfig
from admitcheck.errors import ConfigError
from tests.test_calibrate import comparable, write_config
from tests.test_cli import assert_user_error

ROOT = Path(__file__).resolve().parents[1]
RUNS = 6  # 2 paired replicates of the baseline and of 2 noise levels in toy_config (max_runs 6: no extra round)


def toy_config(toy: Path, out: Path) -> dict:
    """A calibration small enough for CI (6 runs of 4 steps, ~3 s each on one core), big enough to kill mid-run."""
    p = toy / "prompts"
    return {
        "pair": {"name": "toy", "student": str(toy / "student"), "teacher": str(toy / "teacher")},
        "probe": {"prompts": str(p / "probe.jsonl"), "num_prompts": 16, "max_new_tokens": 16, "batch_size": 16},
        "train": {"prompts": str(p / "train.jsonl"), "steps": 4, "batch_size": 16, "max_new_tokens": 12},
        "eval": {"prompts": str(p / "eval.jsonl"), "num_prompts": 32, "samples": 1, "max_new_tokens": 12,
                 "batch_size": 32},
        "levels": {"auto_noise": {"count": 2, "min_mismatch": 1e-3, "max_mismatch": 1.0}, "max_runs": 6},
        "bootstrap": 50,
        "output": str(out),
    }  # fmt: skip


def run_lines(out: Path) -> list[dict]:
    return [r for r in io.read_jsonl(ledger_path(out)) if r["kind"] == "run"]


class StatusLog:
    """A progress callback that keeps the executor's status lines (as the CLI's bars show them)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, label: str, done: int, total: int) -> None:
        pass

    def status(self, label: str, text: str) -> None:
        self.lines.append(text)


@pytest.fixture(scope="module")
def ray_address():
    """One small local Ray instance for the module: 2 CPUs, 200 MB object store, no dashboard."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, object_store_memory=200 * 1024**2, include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="module")
def local_reference(toy_pair_dir, tmp_path_factory):
    """The tiny calibration with --executor local (in this process): (config, artifact)."""
    cfg = CalibrateConfig.model_validate(toy_config(toy_pair_dir, tmp_path_factory.mktemp("local") / "toy.yaml"))
    return cfg, calibrate(cfg)


# ------------------------------------------------------------------------------------------------ generic tasks


def _square(x: int) -> dict:
    return {"y": x * x}


def _die_once(marker: str) -> dict:
    """SIGKILLs its own worker on the first attempt (the marker file records it), returns on the next."""
    if not os.path.exists(marker):
        Path(marker).write_text("killed")
        os.kill(os.getpid(), signal.SIGKILL)
    return {"attempt": 2}


def _always_die() -> dict:
    os.kill(os.getpid(), signal.SIGKILL)
    return {}


def _config_error(counter: str) -> dict:
    with open(counter, "a") as fh:
        fh.write("x")
    raise ConfigError("no such model dir on this worker", file="cfg.yaml", field="pair.student")


def test_local_executor_runs_in_process_in_order() -> None:
    tasks = [Task(str(i), f"t{i}", _square, (i,)) for i in range(4)]
    log = []
    got = list(LocalExecutor(1).run(tasks, on_status=log.append))
    assert [(t.key, r["y"]) for t, r in got] == [("0", 0), ("1", 1), ("2", 4), ("3", 9)]
    assert log[0] == "running t0" and log[-1] == ""


@pytest.mark.parametrize(
    ("address", "want"),
    [("10.0.0.5:6379", ("10.0.0.5", 6379)), ("ray://head:10001", ("head", 10001)), ("[::1]:6379", ("::1", 6379)),
     ("auto", None), ("local", None), ("head", None)],
)  # fmt: skip
def test_host_port(address, want) -> None:
    assert _host_port(address) == want


@pytest.mark.ray
def test_ray_retries_a_killed_worker_and_hands_each_record_back_once(ray_address, tmp_path) -> None:
    tasks = [Task("a", "dies once", _die_once, (str(tmp_path / "marker"),)), Task("b", "square", _square, (3,))]
    log: list[str] = []
    with closing(RayExecutor(max_retries=1)) as runner:
        got = list(runner.run(tasks, on_status=log.append))
    assert sorted((t.key, r) for t, r in got) == [("a", {"attempt": 2}), ("b", {"y": 9})]
    assert (tmp_path / "marker").exists() and any("retried dies once ×1" in line for line in log)


@pytest.mark.ray
def test_ray_names_tasks_out_of_retries_after_the_others_finish(ray_address) -> None:
    tasks = [Task("a", "always dies", _always_die), Task("b", "square", _square, (4,))]
    got = []
    with closing(RayExecutor(max_retries=1)) as runner, pytest.raises(TasksFailed) as err:
        for item in runner.run(tasks):
            got.append(item)
    assert [t.key for t, _ in got] == ["b"]  # the healthy task reached the caller before the error
    assert list(err.value.failed) == ["always dies"] and "2 attempts" in err.value.failed["always dies"]
    assert err.value.exit_code == 3


@pytest.mark.ray
def test_ray_keeps_a_tasks_own_error_and_does_not_retry_it(ray_address, tmp_path) -> None:
    counter = tmp_path / "attempts"
    with closing(RayExecutor(max_retries=3)) as runner, pytest.raises(ConfigError) as err:
        list(runner.run([Task("a", "bad", _config_error, (str(counter),))]))
    assert err.value.field == "pair.student" and counter.read_text() == "x"  # raised once: not retried


# ------------------------------------------------------------------------------------------------ error exits


def test_ray_not_installed_exits_2_with_the_install_command(toy_pair_dir, tmp_path, monkeypatch) -> None:
    cfg = write_config(tmp_path / "cal.yaml", toy_config(toy_pair_dir, tmp_path / "toy.yaml"))
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    result = CliRunner().invoke(app, ["calibrate", str(cfg), "--executor", "ray"])
    assert_user_error(result, "pip install 'admitcheck[ray]'", "--executor", code=2)
    assert not ledger_path(tmp_path / "toy.yaml").exists()


def test_unreachable_ray_address_exits_3_and_leaves_the_ledger_alone(toy_pair_dir, tmp_path, monkeypatch) -> None:
    pytest.importorskip("ray")
    with socket.socket() as s:  # a port nothing listens on: bound, then closed
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    out = tmp_path / "toy.yaml"
    cfg = write_config(tmp_path / "cal.yaml", toy_config(toy_pair_dir, out))
    ledger_path(out).write_bytes(b'{"kind": "header"}\n{"kind": "run", "key": "k"}\n')  # an earlier calibration's
    before = ledger_path(out).read_bytes()
    monkeypatch.setenv("RAY_ADDRESS", address)  # honoured like --ray-address
    t0 = time.perf_counter()
    result = CliRunner().invoke(app, ["calibrate", str(cfg), "--executor", "ray"])
    assert_user_error(result, address, "--ray-address", code=3)
    assert time.perf_counter() - t0 < 30  # a refused connection is immediate; 30 s leaves room for a loaded host
    assert ledger_path(out).read_bytes() == before and not out.exists()


@pytest.mark.parametrize(
    ("cpus", "gpus", "node", "want"),
    [(1, 0.1, {"CPU": 16, "GPU": 1}, 10), (1, 0.25, {"CPU": 2, "GPU": 1}, 2), (1, 0, {"CPU": 2}, 2),
     (1, 0.5, {"CPU": 8}, 0), (0.5, 0, {"CPU": 3}, 6)],
)  # fmt: skip
def test_ray_slots_a_node_holds(cpus, gpus, node, want) -> None:
    assert RayExecutor(num_cpus=cpus, num_gpus=gpus)._fits(node) == want


@pytest.mark.ray
def test_ray_slots_keep_their_process_across_runs(ray_address) -> None:
    """One actor per slot, kept until close(): a second run() is handed to the same worker processes."""
    with closing(RayExecutor()) as runner:
        first = {r for _, r in runner.run([Task(str(i), f"t{i}", os.getpid) for i in range(4)])}
        again = {r for _, r in runner.run([Task(str(i), f"t{i}", os.getpid) for i in range(2)])}
    assert len(first) == 2 and again <= first  # the instance's 2 CPUs: 2 slots, the same two processes


# ------------------------------------------------------------------------------------------------ calibrate on Ray


@pytest.mark.ray
@pytest.mark.slow
def test_ray_calibration_gives_the_local_artifact(ray_address, local_reference, toy_pair_dir, tmp_path) -> None:
    cfg = CalibrateConfig.model_validate(toy_config(toy_pair_dir, tmp_path / "toy.yaml"))
    cal = calibrate(cfg, executor="ray")
    assert cal.budget == local_reference[1].budget and cal.runs == local_reference[1].runs
    assert comparable(cal) == comparable(local_reference[1])
    assert len(run_lines(tmp_path / "toy.yaml")) == RUNS


def _kill_one_run(killed: list[int], stop: threading.Event, after_s: float = 0.5) -> None:
    """SIGKILL the first Ray worker seen executing a calibration run, `after_s` into it (mid-run)."""
    import psutil

    while not stop.is_set():
        for p in psutil.process_iter(["pid", "cmdline"]):
            title = " ".join(p.info["cmdline"] or [])
            mine = title.startswith("ray::") and "/seed " in title  # Ray titles a worker by its task's name
            if mine and os.getpid() in {a.pid for a in p.parents()}:  # a worker of this module's Ray instance
                time.sleep(after_s)
                if p.is_running():
                    p.send_signal(signal.SIGKILL)
                    killed.append(p.info["pid"])
                    return
        time.sleep(0.05)


@pytest.mark.ray
@pytest.mark.slow
def test_killed_worker_is_retried_and_every_run_is_in_the_ledger_once(
    ray_address, local_reference, toy_pair_dir, tmp_path
) -> None:
    out = tmp_path / "toy.yaml"
    cfg = CalibrateConfig.model_validate(toy_config(toy_pair_dir, out))
    killed, stop, log = [], threading.Event(), StatusLog()
    killer = threading.Thread(target=_kill_one_run, args=(killed, stop), daemon=True)
    killer.start()
    try:
        cal = calibrate(cfg, executor="ray", progress=log)
    finally:
        stop.set()
        killer.join(timeout=10)
    assert killed, "no worker was killed: the test proved nothing"
    assert any("retried" in line for line in log.lines), log.lines
    keys = [r["key"] for r in run_lines(out)]
    assert len(keys) == len(set(keys)) == RUNS  # every run exactly once
    assert comparable(cal) == comparable(local_reference[1])


@pytest.mark.ray
@pytest.mark.slow
def test_killed_driver_resumes_from_the_ledger(ray_address, local_reference, toy_pair_dir, tmp_path) -> None:
    out = tmp_path / "toy.yaml"
    cfg_file = write_config(tmp_path / "cal.yaml", toy_config(toy_pair_dir, out))
    cmd = [sys.executable, "-m", "admitcheck", "calibrate", str(cfg_file), "--executor", "ray"]
    env = os.environ | {"RAY_ADDRESS": ray_address, "OMP_NUM_THREADS": "1"}
    driver = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and driver.poll() is None:
        try:
            if ledger_path(out).exists() and len(run_lines(out)) >= 1:
                break
        except Exception:  # a line being appended right now
            pass
        time.sleep(0.1)
    assert driver.poll() is None, driver.stderr.read().decode()[-2000:]  # still running: killed mid-calibration
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    before = ledger_path(out).read_bytes()
    finished = len(run_lines(out))
    assert 1 <= finished < RUNS and not out.exists()
    cal = calibrate(CalibrateConfig.model_validate(toy_config(toy_pair_dir, out)), executor="ray")
    assert ledger_path(out).read_bytes().startswith(before)  # appended to, never rewritten
    keys = [r["key"] for r in run_lines(out)]
    assert len(keys) == len(set(keys)) == RUNS  # the finished runs were not run again
    assert comparable(cal) == comparable(local_reference[1])


@pytest.mark.ray
def test_ray_says_when_no_node_offers_the_resources(ray_address) -> None:
    """A GPU request on this CPU-only instance would wait forever (for an autoscaler): the status says so."""

    class Seen(Exception):
        pass

    def first_status(line: str) -> None:
        raise Seen(line)  # stops the run at its first status line; run() cancels what it submitted

    with closing(RayExecutor(num_gpus=0.5)) as runner, pytest.raises(Seen) as seen:
        list(runner.run([Task("a", "needs a GPU", _square, (2,))], on_status=first_status))
    assert str(seen.value).startswith("waiting: no node offers 1 CPU + 0.5 GPU")
