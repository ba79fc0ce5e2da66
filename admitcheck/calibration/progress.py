"""A campaign's progress from its ledger, read without loading a model (`calibrate --status`): runs, the latest
stretch's runs/minute, median seconds by phase, GPU utilisation.

    p = read_progress(ledger_path(Path(cfg.output)))   # LedgerProgress; CalibrationError when there is no ledger
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from admitcheck.calibration.ledger import read_live
from admitcheck.calibration.record import RunRecord
from admitcheck.errors import CalibrationError


@dataclass(frozen=True)
class LedgerProgress:
    """What a ledger says of its campaign, read without loading a model (`calibrate --status`). Seconds are medians
    over the runs that recorded them. runs/minute is the latest stretch of work's: the runs with a finish time, back
    to back or overlapping, from the stretch's first start (a run's finish − its seconds) to its last finish; an idle
    gap of more than IDLE_GAP_S with no run in flight (a campaign resumed in a later session) starts a new stretch, so
    the time between sessions does not count (until 2026-12-07 it did: a ledger made over two sessions read 0.29
    runs/minute where its last session made ~3)."""

    path: Path
    runs: int
    last_finished_at: float | None  # Unix time
    runs_per_minute: float | None
    rate_runs: int  # the runs the rate counts (the latest stretch's)
    median_seconds: float | None
    median_phase_seconds: dict[str, float]  # rollout, teacher, backward, sync, evaluation, probe, setup
    gpu_utilization: float | None  # mean % over the runs that sampled it

    def to_dict(self) -> dict[str, Any]:
        return {k: str(v) if isinstance(v, Path) else v for k, v in self.__dict__.items()}


PHASES = ("rollout", "teacher", "backward", "sync", "evaluation", "probe", "setup")
IDLE_GAP_S = 300.0  # no run in flight for longer than this: the campaign stopped, and its next runs are a new stretch


def latest_stretch(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (start, finish) spans of the latest stretch of work: sorted by start, cut where a span starts more than
    IDLE_GAP_S after every earlier span finished."""
    spans = sorted(spans)
    cut, reach = 0, -math.inf
    for i, (start, finish) in enumerate(spans):
        if start - reach > IDLE_GAP_S:
            cut = i
        reach = max(reach, finish)
    return spans[cut:]


def progress_of(path: Path, runs: list[RunRecord]) -> LedgerProgress:
    """The progress of `runs` (a ledger's, in file order)."""
    import statistics

    def median(values: list[float | None]) -> float | None:
        got = [v for v in values if v is not None]
        return round(statistics.median(got), 2) if got else None

    timed = [r for r in runs if r.finished_at is not None and r.seconds is not None]
    stretch = latest_stretch([(r.finished_at - r.seconds, r.finished_at) for r in timed])
    span = max(f for _, f in stretch) - stretch[0][0] if stretch else 0.0
    rate = 60.0 * len(stretch) / span if span > 0 else None
    phases = {}
    for name in PHASES:
        step = [r.seconds_by_phase.get(name) for r in runs]
        around = [getattr(r, f"seconds_{name}", None) for r in runs] if name in PHASES[4:] else []
        value = median(around or step)
        if value is not None:
            phases[name] = value
    gpu = [r.gpu_utilization for r in runs if r.gpu_utilization is not None]
    return LedgerProgress(
        path=path,
        runs=len(runs),
        last_finished_at=max((r.finished_at for r in timed), default=None),
        runs_per_minute=round(rate, 2) if rate is not None else None,
        rate_runs=len(stretch),
        median_seconds=median([r.seconds for r in runs]),
        median_phase_seconds=phases,
        gpu_utilization=round(sum(gpu) / len(gpu), 1) if gpu else None,
    )


def read_progress(path: Path) -> LedgerProgress:
    """A ledger's progress, read as it is being written (`read_live`); CalibrationError when there is no ledger."""
    if not path.exists():
        raise CalibrationError("no ledger yet: the campaign has not started (or writes elsewhere)", file=str(path))
    return progress_of(path, read_live(path)[1])
