"""Where a run's wall time goes outside its OPD steps, and how busy the GPU was meanwhile.

    clock = PhaseClock()
    with clock.phase("setup"):
        engine = keep.engine(rollout, weights)          # seconds add up per phase name
    evaluator = clock.timed("evaluation", evaluator)    # every call of it counts as "evaluation"
    clock.seconds                                       # {"setup": 0.41, "evaluation": 3.2}
    with GpuSampler("cuda") as gpu:                     # samples utilisation every 1 s in a thread
        ...
    gpu.mean_percent                                    # mean % over the samples; None on CPU or without NVML

The OPD steps time their own phases (rollout, teacher, backward, sync: `runs.OPDResult.seconds`); this clock times
what a run does around them: setup (the pair loaded by a worker's first run, the engine built or retargeted, the
student copied), the probe (the start-mismatch measurement) and the held-out evaluations.

GPU utilisation is NVML's: the percentage of time over the last sample period during which a kernel ran on the
device, read through `torch.cuda.utilization` (pynvml), else `nvidia-smi`; neither: None. It is the device's,
not the run's: runs sharing a GPU see the same figure, which is what a campaign's throughput question needs.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

SAMPLE_EVERY_S = 1.0  # NVML averages utilisation over 1/6 s to 1 s (by product); an nvidia-smi read is a process


class PhaseClock:
    """Wall-clock seconds accumulated per phase name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def timed(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn` with every call counted under `name`."""

        def call(*args: Any, **kwargs: Any) -> Any:
            with self.phase(name):
                return fn(*args, **kwargs)

        return call

    def get(self, name: str) -> float | None:
        """The phase's seconds, rounded to 10 ms; None when it never ran."""
        return round(self.seconds[name], 2) if name in self.seconds else None


def nvml_reader(device: str) -> Callable[[], float] | None:
    """A function returning the device's utilisation in % now, or None when it cannot be read (CPU, no CUDA, neither
    pynvml nor nvidia-smi): a run record then says null rather than a made-up 0. Without pynvml it asks nvidia-smi
    for the device by UUID (right under CUDA_VISIBLE_DEVICES too). The CUDA branches have not run yet (no GPU in
    the sessions that wrote them): tests/test_workers.py's gpu test checks them on the first GPU session."""
    if not device.startswith("cuda"):
        return None
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        index = torch.device(device).index
        dev = torch.cuda.current_device() if index is None else index
    except Exception:  # any failure to reach CUDA means "not measured"
        return None
    try:
        torch.cuda.utilization(dev)  # raises without pynvml (ModuleNotFoundError) or NVML (RuntimeError)
        return lambda: float(torch.cuda.utilization(dev))
    except Exception:  # no pynvml: nvidia-smi, when the machine has it
        pass
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return None
    uuid = str(torch.cuda.get_device_properties(dev).uuid)
    gpu = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
    cmd = ["nvidia-smi", "-i", gpu, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]
    return lambda: float(subprocess.run(cmd, capture_output=True, text=True, timeout=5, check=True).stdout.strip())


class GpuSampler:
    """Samples `read()` every `every_s` seconds in a daemon thread while the block runs; `mean_percent` after.
    `read` None (CPU, no NVML): no thread, `mean_percent` None."""

    def __init__(self, device: str = "cpu", read: Callable[[], float] | None = None, every_s: float = SAMPLE_EVERY_S):
        self.read = read if read is not None else nvml_reader(device)
        self.every_s = every_s
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> GpuSampler:
        if self.read is not None:
            self._thread = threading.Thread(target=self._loop, name="gpu-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * self.every_s + 1)

    def _loop(self) -> None:
        assert self.read is not None
        while True:
            try:
                self.samples.append(self.read())
            except Exception:  # NVML went away mid-run: keep what was read
                return
            if self._stop.wait(self.every_s):
                return

    @property
    def mean_percent(self) -> float | None:
        return round(sum(self.samples) / len(self.samples), 1) if self.samples else None
