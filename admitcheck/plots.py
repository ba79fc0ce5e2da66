"""Every chart admitcheck draws, as PNG bytes (None without matplotlib); callers write them through `io`.

png = plot_calibration(load_calibration("calibrations/toy.yaml"))   # quality cost vs mismatch, the budget
png = plot_sensitivity(report)                                       # per-unit excess k3, most sensitive first
png = plot_backtest(load_backtest("calibrations/toy.backtest.yaml"))  # observed vs predicted cost per candidate
png = plot_plan(plan(cfg))                                           # quality against wall-clock per candidate
"""

from __future__ import annotations

import io as _stdio
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from admitcheck.admission.backtest_report import BacktestReport
    from admitcheck.calibration.schema import CalibrationArtifact
    from admitcheck.measurement.sensitivity import SensitivityReport


def plot_calibration(cal: CalibrationArtifact) -> bytes | None:
    """PNG bytes: runs with mismatch error bars, the fit, τ and the budget (None without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np
    except ImportError:
        return None
    runs, b = cal.runs, cal.budget
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    colors = {"noise": "tab:blue", "rollout": "tab:green", "staleness": "tab:purple"}
    report = [lv for lv in cal.level_report if lv.kind != "baseline"]
    for lv in report:
        color, rs = colors.get(lv.kind, "black"), [r for r in runs if r.level == lv.level]
        face = color if lv.in_fit else "white"
        ax.scatter([r.fit_x for r in rs], [r.quality_cost for r in rs], s=8, color=color, alpha=0.4)
        lo, hi = lv.paired_cost_interval or (lv.paired_cost, lv.paired_cost)
        err = [[lv.paired_cost - lo], [hi - lv.paired_cost]]
        ax.errorbar([lv.x], [lv.paired_cost], yerr=err, fmt="o", color=color, mfc=face, capsize=2)
    for kind, color in colors.items():
        if any(lv.kind == kind for lv in report):
            ax.scatter([], [], color=color, label=kind + " (mean paired cost, 95% CI; hollow: held out)")
    xs = np.array([lv.x for lv in report] or [1e-3, 1.0])
    grid = np.geomspace(xs.min() / 3, xs.max() * 3, 300)
    ax.plot(grid, cal.predict_cost(grid), color="black", lw=1.5, label="monotone fit")
    ax.axhline(0.0, color="tab:gray", lw=0.8)
    ax.axhline(cal.tau, color="tab:red", ls="--", lw=1, label=f"τ = {cal.tau:.3g}")
    if math.isfinite(b.value) and b.value > 0:
        ax.axvline(b.value, color="tab:orange", lw=1.5, label=f"budget {b.value:.3g} ({b.kind})")
        lo, hi = b.interval
        if b.kind == "point" and math.isfinite(hi) and lo > 0:
            ax.axvspan(lo, hi, color="tab:orange", alpha=0.15, label="budget 95% CI")
    ax.set_xscale("log")
    ax.set_xlabel(f"mismatch {cal.metric}, x = {cal.x_measure} (nats/token)")
    unit = "task reward" if cal.recipe.loss == "grpo" else "nats/token"  # RL's quality is 1 − held-out task reward
    ax.set_ylabel(f"paired quality cost ({unit})")
    ax.set_title(f"calibration: {cal.name} ({cal.recipe.loss}, lr {cal.recipe.lr:g})")
    ax.legend(fontsize=8, loc="upper left")
    return _png(plt, fig)


def plot_sensitivity(report: SensitivityReport) -> bytes | None:
    """PNG bytes: excess k3 per unit with its interval, most sensitive on top (None without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = report.units[::-1]
    colors = {"kv": "tab:purple", "attn": "tab:blue", "mlp": "tab:green"}
    fig, ax = plt.subplots(figsize=(6.5, 0.35 * len(rows) + 1.5), dpi=110)
    err = [
        [max(r.excess - r.excess_interval[0], 0) for r in rows],
        [max(r.excess_interval[1] - r.excess, 0) for r in rows],
    ]
    ax.barh([r.name for r in rows], [r.excess for r in rows], xerr=err, color=[colors[r.kind] for r in rows], capsize=2)
    ax.axvline(report.all_excess, color="black", ls="--", lw=1, label=f"whole recipe {report.all_excess:.3g}")
    ax.set_xlabel("k3 above the floor (nats/token)")
    ax.set_title(f"sensitivity: Σ units / whole = {report.sum_ratio:.2f}")
    ax.legend(fontsize=8)
    return _png(plt, fig)


def plot_backtest(report: BacktestReport) -> bytes | None:
    """PNG bytes (None without matplotlib): observed cost against the runs' mismatch beside the calibration curve,
    τ and the budget, by family (colour) and verdict (filled: ADMIT); observed against predicted cost."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np
    except ImportError:
        return None
    c, rows = report.calibration, report.candidates
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.8), dpi=110)
    # one colour per source family (`admission.backtest.FAMILIES`)
    colors = {
        "dtype": "tab:gray",
        "noise": "tab:blue",
        "fp8_weights": "tab:orange",
        "int8": "tab:brown",
        "fp8_kv": "tab:green",
        "staleness": "tab:purple",
        "combination": "tab:red",
    }
    ax.plot(c.curve.x, c.curve.cost, color="black", lw=1, label="calibration curve (weight noise)")
    ax.axhline(c.tolerance, color="black", ls="--", lw=0.8, label="τ")
    lo, hi = c.budget_interval  # 0 / inf: below the smallest level / above the largest; drawn to the grid's ends
    grid = c.curve.x
    ax.axvspan(
        lo if lo > 0 else grid[0], hi if np.isfinite(hi) else grid[-1], color="gold", alpha=0.2, label="budget interval"
    )
    seen = set()
    for r in rows:
        t, col = r.truth, colors[r.family]
        face = col if r.verdict.decision == "ADMIT" else "white"
        lab = r.family if r.family not in seen else None
        seen.add(r.family)
        err = [[t.cost - t.interval[0]], [t.interval[1] - t.cost]]
        ax.errorbar([r.x], [t.cost], yerr=err, fmt="o", color=col, mfc=face, capsize=2, label=lab)
        bx.errorbar([r.predicted_cost], [t.cost], yerr=err, fmt="o", color=col, mfc=face, capsize=2)
        if r.agrees is False:
            ax.annotate(r.name, (r.x, t.cost), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel(f"mismatch at the start weights ({c.metric}, nats/token)")
    ax.set_ylabel("quality cost (paired, nats/token)")
    ax.set_title("full OPD runs: filled = ADMIT, hollow = REJECT")
    ax.legend(fontsize=7)
    lim = [min(bx.get_xlim()[0], bx.get_ylim()[0]), max(bx.get_xlim()[1], bx.get_ylim()[1])]
    bx.plot(lim, lim, color="black", lw=0.8)
    bx.axhline(c.tolerance, color="black", ls="--", lw=0.8)
    bx.set_xlabel("cost the curve predicts at that mismatch")
    bx.set_ylabel("observed cost")
    bx.set_title("one scale for all sources: on the diagonal")
    return _png(plt, fig)


def plot_plan(plan: Any) -> bytes | None:
    """PNG bytes (None without matplotlib): held-out quality against wall-clock per candidate (`admission.plan`):
    its own runs' mean curve, or the baseline's stretched by the predicted steps ratio, each at its step time; the
    target (baseline final + τ) dotted, and a dot where each is predicted to reach it (its pairs' mean efficiency:
    a mean curve can end above the target while most pairs reach it, and the other way round)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    c = plan.calibration
    target = c.baseline_final_mean + c.tau
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
    for row in plan.rows:
        if row.name not in plan.curves:
            continue
        t, q = plan.curves[row.name]
        style = {"color": "black", "lw": 2} if row.source == "baseline" else {"lw": 1.2}
        ls = "--" if row.source == "noise curve" else "-"
        (line,) = ax.plot(t, q, ls=ls, label=f"{row.name} (×{row.speedup:.2f}; {row.source})", **style)
        if math.isfinite(row.time_to_quality):  # where it is predicted to reach the target (over the pairs)
            ax.plot([row.time_to_quality], [target], "o", color=line.get_color(), ms=5)
    ax.axhline(target, color="tab:red", ls=":", lw=1, label=f"target: baseline final + τ = {target:.3g}")
    ax.plot([], [], "o", color="gray", ms=5, label="predicted time-to-quality (mean efficiency over pairs)")
    ax.set_yscale("log")
    ax.set_xlabel(f"wall-clock ({plan.time_unit})")
    ax.set_ylabel("held-out reverse KL (nats/token)")
    ax.set_title(f"plan: {c.name} (dashed: read off the noise levels)")
    ax.legend(fontsize=7)
    return _png(plt, fig)


def _png(plt: Any, fig: Any) -> bytes:
    """The figure laid out, as PNG bytes; the figure is closed."""
    fig.tight_layout()
    buf = _stdio.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
