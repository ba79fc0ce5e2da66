"""Executors: run named tasks on this machine or on a Ray cluster and hand back each record as it finishes.

    tasks = [Task(key="a", name="noise-1/seed 3", fn=work, args=(cfg, 3)), ...]   # fn: picklable, returns a record
    runner = make_executor("ray", address="10.0.0.5:6379", num_gpus=0.25)   # or "local", jobs=2
    runner.start()                       # connects now: a cluster that does not answer fails before any work
    for task, record in runner.run(tasks, on_status=print):    # in finishing order
        ledger.append(record.keyed(task.key))                  # the caller's ledger stays the source of truth
    runner.close()

A task is anything picklable: `fn(*args)` runs in this process (local, jobs = 1), in one of `jobs` spawned worker
processes (local) or in a Ray actor (one per slot), and returns a picklable record (`record.RunRecord`). Workers
live as long as the executor, so what a task caches per process (the pair, the engines: `calibration.workers`)
serves the next. The executor knows nothing of calibrations or ledgers: `calibrate` and `backtest` build the tasks,
skip the ones already in their ledger, and append what comes back.

Failures. Ray: a task whose worker dies (killed, node lost, out of memory) runs again on a new slot, at most
`max_retries` times; a task that raises does not (it would raise again). The other tasks run to the end and are
handed back first; then the run raises the task's own AdmitcheckError (a model dir missing on a worker: exit 2), a
bug with its remote traceback, or `TasksFailed` naming every task out of retries (exit 3). Local: the first
exception stops the queue (runs already going still finish) and is raised as is.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any, Literal

from admitcheck.errors import AdmitcheckError, ConfigError

StatusFn = Callable[[str], None]  # one line: the runs in flight, retried and failed
INSTALL_RAY = "pip install 'admitcheck[ray]'"
CONNECT_TIMEOUT_S = 5.0  # a head node that does not accept a TCP connection within this is reported, exit 3


@dataclass(frozen=True)
class Task:
    """One unit of work: `fn(*args)` -> a picklable record; `key` is unique (the caller's ledger key), `name` shown."""

    key: str
    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()


class ClusterError(AdmitcheckError):
    """The Ray cluster cannot be reached or used (exit 3)."""

    exit_code = 3


class TasksFailed(AdmitcheckError):
    """Tasks whose workers kept dying; the finished ones were handed back first (exit 3). `.failed`: name -> reason."""

    exit_code = 3

    def __init__(self, failed: dict[str, str], retries: int) -> None:
        lines = "; ".join(f"{name}: {why}" for name, why in failed.items())
        super().__init__(
            f"{len(failed)} task(s) failed after {retries} retries: {lines}. Everything that finished is in the "
            "ledger: run the command again to retry the rest",
            field="--executor",
        )
        self.failed = failed


class _Board:
    """Per-task status on the driver, summarised in one line for the progress bar."""

    def __init__(self, on_status: StatusFn | None, verb: str = "running") -> None:
        self.on_status, self.verb = on_status, verb
        self.in_flight: list[str] = []
        self.retried: dict[str, int] = {}
        self.failed: dict[str, str] = {}
        self.note = ""  # a cluster-wide remark (no node offers the resources a task asks for)

    def show(self) -> None:
        if self.on_status is None:
            return
        parts = [self.note] if self.note else []
        if self.in_flight:
            more = f" +{len(self.in_flight) - 3}" if len(self.in_flight) > 3 else ""
            parts.append(f"{self.verb} {', '.join(self.in_flight[:3])}{more}")
        if self.retried:
            parts.append("retried " + ", ".join(f"{n} ×{k}" for n, k in self.retried.items()))
        if self.failed:
            parts.append("failed " + ", ".join(self.failed))
        self.on_status(" · ".join(parts))

    def start(self, name: str) -> None:
        self.in_flight.append(name)
        self.show()

    def finish(self, name: str, *, failure: str | None = None) -> None:
        self.in_flight.remove(name)
        if failure is not None:
            self.failed[name] = failure
        self.show()

    def retry(self, name: str) -> None:
        self.retried[name] = self.retried.get(name, 0) + 1
        self.show()


class Executor:
    """The interface: start() (connect), run(tasks) -> (task, record) as they finish, close(). Reusable."""

    def start(self) -> None:
        """Acquire what the tasks run on; errors here come before any work (nothing written)."""

    def run(self, tasks: list[Task], on_status: StatusFn | None = None) -> Iterator[tuple[Task, Any]]:
        raise NotImplementedError

    def close(self) -> None:
        """Release what start() acquired (idempotent)."""


@dataclass
class LocalExecutor(Executor):
    """This machine: in this process (jobs=1), else a pool of `jobs` spawned worker processes (no
    retries). The pool starts with the first parallel run and lives until close(): its workers keep what their
    tasks cache per process (a calibration's pair and engines, `calibration.workers`) from round to round."""

    jobs: int = 1
    _pool: ProcessPoolExecutor | None = field(default=None, repr=False)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _workers(self) -> ProcessPoolExecutor:
        if self._pool is None:
            import multiprocessing as mp

            self._pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=mp.get_context("spawn"))
        return self._pool

    def run(self, tasks: list[Task], on_status: StatusFn | None = None) -> Iterator[tuple[Task, Any]]:
        board = _Board(on_status)
        if self.jobs == 1:
            for task in tasks:
                board.start(task.name)
                record = task.fn(*task.args)
                board.finish(task.name)
                yield task, record
            return
        pool = self._workers()
        futures = {pool.submit(task.fn, *task.args): task for task in tasks}
        queued = [t.name for t in tasks]  # the pool takes them in order: the first `jobs` start at once
        for _ in range(min(self.jobs, len(queued))):
            board.start(queued.pop(0))
        error: BaseException | None = None
        try:
            for fut in as_completed(futures):  # after a failure, runs already going still finish into the ledger
                if fut.cancelled():
                    continue
                task = futures[fut]
                if fut.exception() is not None:
                    error = error or fut.exception()
                    for f in futures:
                        f.cancel()
                    continue
                if task.name in board.in_flight:
                    board.finish(task.name)
                if queued:
                    board.start(queued.pop(0))
                yield task, fut.result()
        finally:  # the caller stopped early: what has not started does not start
            for f in futures:
                f.cancel()
        if error is not None:
            if isinstance(error, BrokenProcessPool):  # a worker died: the next run starts a fresh pool
                self.close()
            raise error


class _Slot:
    """A Ray actor: one worker process of one slot, running its tasks one at a time, so that what they cache per
    process (a calibration's pair and engines) serves every run the slot is handed."""

    def run(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        return fn(*args)


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a Ray address to probe ("10.0.0.5:6379", "ray://head:10001"); None for auto/local/no port."""
    bare = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = bare.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


@dataclass
class RayExecutor(Executor):
    """A Ray cluster (`address`, else RAY_ADDRESS, else a local instance): one actor per slot, each run a call on an
    idle slot. A slot asks for `num_cpus` CPUs and `num_gpus` GPUs (fractions: runs share a GPU); there are as many
    as the cluster holds when the first run starts (at least 1, at most the runs), kept until close(), so a slot
    loads the pair and its engines once. Args travel by value (configs, paths): model dirs and prompt files are read
    by the workers from those paths, so they must be on a file system every node shares."""

    address: str | None = None
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    max_retries: int = 3  # resubmissions of a task whose worker died
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    init_kwargs: dict[str, Any] | None = None  # extra ray.init arguments for a local instance (tests: num_cpus=2)
    _started_ray: bool = field(default=False, repr=False)
    _slots: list[Any] = field(default_factory=list, repr=False)  # the actors, kept across run() calls

    def start(self) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError(
                f"--executor ray needs Ray, which is not installed: {INSTALL_RAY}", field="--executor"
            ) from None
        address = self.address or os.environ.get("RAY_ADDRESS") or None
        hp = _host_port(address) if address else None
        if hp is not None:
            try:
                socket.create_connection(hp, timeout=self.connect_timeout_s).close()
            except OSError as exc:
                raise ClusterError(f"no Ray cluster answers at {address} ({exc})", field="--ray-address") from None
        if ray.is_initialized():  # this process is already connected (a notebook, a test): use that cluster
            return
        kwargs = {"include_dashboard": False, "log_to_driver": False}
        if address is None:
            kwargs.update(self.init_kwargs or {})
        try:
            ray.init(address=address, **kwargs)
        except (ConnectionError, TimeoutError, RuntimeError, ValueError) as exc:
            why = f"cannot connect to the Ray cluster at {address or 'a new local instance'}: {exc}"
            raise ClusterError(why, field="--ray-address") from None
        self._started_ray = True

    def close(self) -> None:
        if not (self._slots or self._started_ray):
            return
        import ray

        for slot in self._slots:
            ray.kill(slot)
        self._slots = []
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    def _fits(self, resources: dict[str, float]) -> int:
        """How many slots of this size `resources` hold (1 GPU / 0.1 is 10, not float floor division's 9)."""
        need = {"CPU": self.num_cpus, "GPU": self.num_gpus}
        return min(int(resources.get(k, 0.0) / v + 1e-9) for k, v in need.items() if v > 0)

    def _new_slot(self) -> Any:
        import ray  # a dead slot is replaced by run(), not restarted by Ray (max_restarts 0)

        return ray.remote(_Slot).options(num_cpus=self.num_cpus, num_gpus=self.num_gpus).remote()

    def run(self, tasks: list[Task], on_status: StatusFn | None = None) -> Iterator[tuple[Task, Any]]:
        import ray
        from ray.exceptions import RayError, RayTaskError, TaskCancelledError

        self.start()  # no-op when connected
        board = _Board(on_status, verb="running")
        nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
        if not any(self._fits(r) for r in nodes):
            board.note = f"waiting: no node offers {self.num_cpus:g} CPU + {self.num_gpus:g} GPU per run yet"
        want = min(max(sum(self._fits(r) for r in nodes), 1), len(tasks))
        while len(self._slots) < want:
            self._slots.append(self._new_slot())
        attempts: dict[str, int] = {}
        queue = list(tasks)
        idle = list(range(len(self._slots)))
        pending: dict[Any, tuple[Task, int]] = {}  # ref -> (task, slot index)

        def submit() -> None:
            while queue and idle:
                task, i = queue.pop(0), idle.pop(0)
                attempts[task.key] = attempts.get(task.key, 0) + 1
                pending[self._slots[i].run.options(name=task.name).remote(task.fn, task.args)] = (task, i)
                board.start(task.name)

        raised: list[BaseException] = []  # exceptions the tasks themselves raised (not retried)
        try:
            submit()
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                task, i = pending.pop(ready[0])
                try:
                    record = ray.get(ready[0])
                except RayTaskError as exc:  # the task raised: keep its own error (exit 2 for a missing path)
                    cause = getattr(exc, "cause", None)
                    raised.append(cause if isinstance(cause, AdmitcheckError) else exc)
                    board.finish(task.name, failure=type(cause or exc).__name__)
                    idle.append(i)
                    submit()
                    continue
                except TaskCancelledError:
                    board.finish(task.name, failure="cancelled")
                    idle.append(i)
                    continue
                except RayError as exc:  # the slot's process or its node died (RayActorError): a new slot, run again
                    ray.kill(self._slots[i])
                    self._slots[i] = self._new_slot()
                    idle.append(i)
                    n = attempts[task.key]
                    if n <= self.max_retries:
                        board.in_flight.remove(task.name)
                        board.retry(task.name)
                        queue.insert(0, task)
                    else:
                        board.finish(task.name, failure=f"{type(exc).__name__} ({n} attempt{'s' * (n > 1)})")
                    submit()
                    continue
                board.finish(task.name)
                idle.append(i)
                submit()
                yield task, record
        finally:  # the caller stopped early (an interrupt, an error): no run left behind, its slot goes with it
            busy = {i for _, i in pending.values()}
            for i in busy:
                ray.kill(self._slots[i])
            self._slots = [slot for i, slot in enumerate(self._slots) if i not in busy]
        if raised:
            raise raised[0]
        if board.failed:
            raise TasksFailed(board.failed, self.max_retries)


def make_executor(
    kind: Literal["local", "ray"] | str,
    *,
    jobs: int = 1,
    address: str | None = None,
    num_cpus: float = 1.0,
    num_gpus: float = 0.0,
    file: str | None = None,
) -> Executor:
    """The executor `--executor kind` names (ConfigError for another name)."""
    if kind == "local":
        return LocalExecutor(jobs)
    if kind == "ray":
        return RayExecutor(address, num_cpus=num_cpus, num_gpus=num_gpus)
    raise ConfigError(f"unknown executor {kind!r}: use local or ray", file=file, field="--executor")
