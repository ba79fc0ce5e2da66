"""Rollouts sampled on a background thread while the trainer runs: k-step-stale asynchronous RL for real.

    with BackgroundRollouts(engine) as rollouts:
        rollouts.submit(batch_0, sampling, seed_0, max_new_tokens)                  # the engine as it is
        rollouts.submit(batch_1, sampling, seed_1, max_new_tokens, weights=theta_0, noise_step=1)
        ro = rollouts.result()              # batch 0's Rollouts; batch 1 samples while the caller trains
        rollouts.submit(None, ..., weights=theta_1, noise_step=2)   # prompts None: a weight sync alone

One worker thread owns the engine: every job is a weight sync (`engine.load_weights(weights, noise_step)`, when
given) then a `sample`, in submission order, so a sync never happens while a sample is in flight and the engine's
state after job j is a pure function of the jobs up to j, exactly as if the caller had made the same calls itself.
`opd.train(..., staleness=k)` with `train.rollouts: async` submits batch t+k (θ_t) while step t trains.

Why a thread: torch ops release the GIL, so on ≥ 2 CPU cores the engine's decode overlaps the trainer's forward and
backward; on CUDA the worker runs on its own stream (the snapshot it syncs from is waited for by an event recorded on
the caller's stream, and the worker synchronizes its stream before a job ends, so the job's inputs may be freed and
its outputs, CPU tensors, read). What keeps it bit-identical to the caller making the calls: the engine samples with
seeded generators only (`draw_uniforms`, the noise's `noise_seed`), never the global torch RNG; the worker runs with
the caller's intra-op thread count (OpenMP keeps it per thread); the caller hands over snapshots it never touches again
(the engine copies them into its own tensors: it shares none with the trainer). An exception in the worker is raised
by `result()` in the caller; `close()` (the context's exit) cancels queued jobs and joins the thread on every path.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from admitcheck.config import SamplingConfig
    from admitcheck.rollout.engines.base import Rollouts

THREAD_NAME = "admitcheck-rollouts"  # the worker's name (tests look for it among the live threads)


@dataclass(frozen=True)
class _Job:
    prompts: list[list[int]] | None  # None: a weight sync without a sample
    sampling: SamplingConfig | None
    seed: int
    max_new_tokens: int
    weights: dict[str, torch.Tensor] | None  # None: sample with the engine as it is
    noise_step: int
    ready: torch.cuda.Event | None  # recorded on the caller's stream after the snapshot (CUDA snapshots only)


class BackgroundRollouts:
    """A FIFO of (weight sync, sample) jobs that one worker thread runs on `engine` (see the module docstring)."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self._threads = torch.get_num_threads()  # the caller's: OpenMP keeps the count per thread
        device = getattr(engine, "device", None)
        cuda = isinstance(device, torch.device) and device.type == "cuda"
        self._stream = torch.cuda.Stream(device=device) if cuda else None
        self._pending: deque[Future] = deque()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=THREAD_NAME)
        self._closed = False

    def __enter__(self) -> BackgroundRollouts:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def submit(
        self,
        prompts: list[list[int]] | None,
        sampling: SamplingConfig | None,
        seed: int,
        max_new_tokens: int,
        *,
        weights: dict[str, torch.Tensor] | None = None,
        noise_step: int = 0,
    ) -> None:
        """Queue a job: load `weights` (a snapshot the caller no longer writes) at `noise_step`, then sample."""
        if self._closed:
            raise RuntimeError("BackgroundRollouts is closed")
        ready = None
        cuda = [v for v in (weights or {}).values() if v.is_cuda]
        if cuda:  # the snapshot's copy kernels were queued on the caller's stream: the worker's waits for them
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(cuda[0].device))
        job = _Job(prompts, sampling, seed, max_new_tokens, weights, noise_step, ready)
        self._pending.append(self._pool.submit(self._run, job))

    def result(self) -> Rollouts | None:
        """The oldest job's Rollouts (None for a sync alone), waiting for it; the worker's exception is raised here."""
        return self._pending.popleft().result()

    @property
    def pending(self) -> int:
        return len(self._pending)

    def close(self) -> None:
        """Cancel the queued jobs, wait for the running one, join the thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for future in self._pending:
            future.cancel()
        self._pending.clear()
        self._pool.shutdown(wait=True, cancel_futures=True)

    # ------------------------------------------------------------------------------------------------ the worker

    def _run(self, job: _Job) -> Rollouts | None:
        if torch.get_num_threads() != self._threads:
            torch.set_num_threads(self._threads)
        if self._stream is None:
            return self._work(job)
        with torch.cuda.device(self._stream.device), torch.cuda.stream(self._stream):
            if job.ready is not None:
                self._stream.wait_event(job.ready)
            try:
                return self._work(job)
            finally:
                self._stream.synchronize()  # the snapshot may be freed now; nothing of this job is left in flight

    def _work(self, job: _Job) -> Rollouts | None:
        if job.weights is not None:
            self.engine.load_weights(job.weights, noise_step=job.noise_step)
        if job.prompts is None:
            return None
        return self.engine.sample(job.prompts, job.sampling, job.seed, job.max_new_tokens)


def worker_threads() -> list[threading.Thread]:
    """The live background-rollout workers (none once every `BackgroundRollouts` is closed)."""
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_NAME)]
