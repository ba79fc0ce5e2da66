"""OPD and RL (GRPO) calibrations of one pair on one plot (docs/rl_vs_opd.png).

    python bench/rl_vs_opd_plot.py calibrations/toy.yaml calibrations/toy_rl.yaml --out docs/rl_vs_opd.png

Left: each run's quality cost in units of its calibration's τ against its mismatch (k3), with both fitted curves and
budgets (the objectives' qualities have different units — nats for OPD, task reward for RL — so cost/τ is the
common scale: 1 is "over τ"). Right: the held-out task reward (exact match of the student's own samples) at the
end of every run, which both objectives record, on one axis. The title: the budget ratio as `admitcheck compare`
gives it (docs/compare.md).
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from admitcheck.calibration.artifact import load_calibration


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("first")
    ap.add_argument("second")
    ap.add_argument("--out", default="docs/rl_vs_opd.png")
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), dpi=110)
    for path, color in ((args.first, "tab:blue"), (args.second, "tab:red")):
        cal = load_calibration(path)
        tau, b, loss = cal.tau, cal.budget, cal.recipe.loss
        measured = [r for r in cal.runs if r.fit_x is not None]  # baseline runs (schema 2) carry no x
        runs = [r for r in measured if r.in_fit is not False]
        held = [r for r in measured if r.in_fit is False]
        x = np.array([r.fit_x for r in runs])  # (n,) nats/token
        left.plot(x, [r.quality_cost / tau for r in runs], "o", color=color, label=f"{loss} runs")
        if held:
            left.plot([r.fit_x for r in held], [r.quality_cost / tau for r in held], "o", mfc="white",
                      color=color, label=f"{loss} held out ({', '.join(r.level for r in held)})")  # fmt: skip
        grid = np.geomspace(x.min() / 3, x.max() * 3, 300)
        left.plot(grid, cal.predict_cost(grid) / tau, color=color, lw=1.2)
        if b.kind == "point" and math.isfinite(b.value):
            left.axvline(b.value, color=color, ls=":", lw=1.2)
            lo, hi = b.interval
            left.axvspan(lo, hi, color=color, alpha=0.12, label=f"{loss} budget {b.value:.3g} [{lo:.3g}, {hi:.3g}]")
        elif math.isfinite(b.value):  # a bound: a dashed line, and the side it bounds in the label
            sign = "≤" if b.kind == "upper_bound" else "≥"
            left.axvline(b.value, color=color, ls="--", lw=1.2, label=f"{loss} budget {sign} {b.value:.3g} ({b.kind})")
        ordered = sorted(runs, key=lambda r: r.fit_x)
        right.plot([r.fit_x for r in ordered], [r.accuracy for r in ordered], "o-", color=color,
                   label=f"{loss}: final held-out task reward")  # fmt: skip
        if held:
            right.plot([r.fit_x for r in held], [r.accuracy for r in held], "o", mfc="white", color=color)
        right.axhline(cal.runs[0].accuracy_start, color="gray", ls="--", lw=1)
    left.axhline(1.0, color="black", ls="--", lw=1, label="τ (cost/τ = 1)")
    left.set_xscale("log")
    left.set_yscale("symlog", linthresh=2)
    left.set_xlabel("mismatch k3 (nats/token)")
    left.set_ylabel("quality cost / τ")
    left.legend(fontsize=7, loc="upper left")
    right.set_xscale("log")
    right.set_xlabel("mismatch k3 (nats/token)")
    right.set_ylabel("exact match of own samples (held out)")
    right.set_title("dashed: before training; hollow: held out of the fit", fontsize=8, color="gray")
    right.legend(fontsize=8, loc="lower left")
    from admitcheck.calibration.compare import compare_calibrations
    from admitcheck.calibration.shared_seeds import load_seed_runs

    cals = [load_calibration(p) for p in (args.first, args.second)]
    cmp = compare_calibrations(*cals, *(load_seed_runs(c) for c in cals))  # the ratio `admitcheck compare` prints
    lo, hi = cmp.ratio_interval
    fig.suptitle(
        "OPD vs RL at equal rollout mismatch (same pair, levels, seeds, steps)\n"
        f"budget ratio {cmp.second.objective} / {cmp.first.objective} = {cmp.ratio:.2g}, "
        f"{100 * cmp.confidence:.0f}% interval [{lo:.2g}, {hi:.2g}] ({cmp.method}; each at its own τ)"
    )
    fig.tight_layout()
    fig.savefig(args.out)
    print(args.out)


if __name__ == "__main__":
    main()
