"""The run-averaged x on the screening side: a pipeline's logged mismatch per step set against the run-averaged
budget (`budget.by_x`'s run entry, `CalibrationArtifact.budget.run_averaged`), and where a point lies against a
budget's interval (`admission.trajectory` uses it for its checkpoint prediction).

    r = logged_run_average(read_logs("rollouts.jsonl"), load_calibration("calibrations/toy.yaml"))
    r.steps[0].k3, r.value, r.budget_interval, r.position        # nats/token; "below" | "within" | "above" | ...

The run-averaged x is a calibration run's per-step token-mean k3 (`RunRecord.in_run_k3`) averaged over its first
`protocol.run_window` steps; a pipeline's logs hold the same quantity per step, so their mean over the logged steps
is set against that budget. A point beside an interval, not a verdict: no interval on the logged mean is published
(none has been tested by simulation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from admitcheck.calibration.schema import CalibrationArtifact

if TYPE_CHECKING:
    from admitcheck.measurement.logs import StepMismatch


def position_against(value: float, interval: tuple[float, float] | None) -> str:
    """Where a point mismatch lies against a budget's interval: below its lower end, within, above its upper end."""
    if interval is None:
        return "no budget"
    if not math.isfinite(value):
        return "not finite"
    return "below" if value < interval[0] else "above" if value > interval[1] else "within"


def against_run_budget(value: float, run: Any) -> dict[str, Any]:
    """A point run-averaged x beside the run-averaged budget `run` (`budget.run_averaged`; None: the artifact has
    none): the budget, its interval, where the point lies and its ratio, as `LoggedRunAverage` and
    `trajectory.RunX` name them."""
    interval = (float(run.interval[0]), float(run.interval[1])) if run is not None else None
    return {
        "budget": run.value if run is not None else None,
        "budget_interval": interval,
        "position": position_against(value, interval),
        "ratio_to_budget": value / run.value if run is not None and run.value > 0 else None,
    }


@dataclass(frozen=True)
class LoggedRunAverage:
    """A pipeline's logged mismatch per step set against the run-averaged budget (`budget.by_x["run"]`), which is
    the same quantity: each step's token-mean k3 (as a calibration run records `in_run_k3`), averaged over the
    steps. A point beside the budget's interval, not a verdict: no interval on the logged mean has been tested."""

    steps: list[StepMismatch]
    value: float  # mean over the logged steps of their token-mean k3, nats/token
    budget: float | None  # B under the run-averaged x; None: the artifact has none (`why`)
    budget_interval: tuple[float, float] | None
    position: str  # below / within / above the budget's interval, "no budget" or "not finite"
    ratio_to_budget: float | None
    run_window: int | None  # the steps of a calibration run the budget's x averages (the first N)
    notes: list[str]


def logged_run_average(logs: Any, calibration: CalibrationArtifact) -> LoggedRunAverage:
    """The logs' per-step k3 against the calibration's run-averaged budget (`LoggedRunAverage`)."""
    import numpy as np

    from admitcheck.measurement.logs import per_step_k3

    steps = per_step_k3(logs)
    value = float(np.mean([s.k3 for s in steps]))
    run = calibration.budget.run_averaged
    window = calibration.protocol.run_window
    notes = []
    if run is None:
        why = calibration.budget.run_missing or "written before both budgets were stored: re-fit it"
        notes.append(f"the calibration has no run-averaged budget: {why}")
    if steps[0].step is None:
        notes.append("the rows state no training step: every row is taken as one step")
    elif window is not None and steps[-1].step >= window:
        notes.append(
            f"logged steps reach {steps[-1].step}, while the budget's x averages a calibration run's first {window} "
            "steps: mismatch can drift later in a run (admission.trajectory measures it at checkpoints)"
        )
    return LoggedRunAverage(steps=steps, value=value, **against_run_budget(value, run), run_window=window, notes=notes)
