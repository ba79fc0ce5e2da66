"""Re-fit every shipped calibration from its ledger and re-make the toy backtests' verdicts: one command, no run made.

    python bench/refit_shipped.py   # rewrites calibrations/*.yaml, .png, the pooled SmolLM2 budget, the toy backtests;
                                    # writes bench/results/budget_refit.json
    python bench/refit_shipped.py --only toy toy_rl   # just those artifacts (toy: and its backtests); their entries
                                                      # replace theirs in budget_refit.json, the rest is kept

What it does (issue 34), in order:
1. `refit.refit` of calibrations/toy.yaml, toy-seed1000.yaml, toy-seed2000.yaml, toy_rl.yaml, toy_rl-seed1000.yaml,
   smollm2.yaml, smollm2-seed1000.yaml, smollm2-seed2000.yaml:
   the ledger's records fitted with this admitcheck's estimator (the seed-effect power law, gated; else the bracket);
   each artifact and its chart rewritten (ledgers untouched).
2. `refit.refit_pooled` of the three SmolLM2 calibrations → calibrations/smollm2-pooled.yaml (+ .png), beside the
   seed-0 one: the runs of the three as one calibration.
3. `backtest.rejudge` of calibrations/toy.backtest.yaml against the re-fitted toy.yaml
   (their screen config's policy.undecided), with their Markdown and chart.
4. bench/results/budget_refit.json: per artifact the budget, interval, factor hi/lo, method and why, the model
   (B, interval, exponent, residual sd / τ, lack of fit), the bracket, the baseline check; the backtests' agreement.
Re-run it after a ledger's x is re-measured (another screen estimand): everything above follows from the ledgers.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's admitcheck, not an installed one
SHIPPED = (
    "toy",
    "toy-seed1000",
    "toy-seed2000",
    "toy_rl",
    "toy_rl-seed1000",
    "smollm2",
    "smollm2-seed1000",
    "smollm2-seed2000",
)
POOLED = ("smollm2", "smollm2-seed1000", "smollm2-seed2000")
BACKTESTS = ("toy.backtest",)


def _summary(cal) -> dict:
    b = cal.budget
    lo, hi = b.interval
    out = {
        "budget": b.value,
        "kind": b.kind,
        "interval": [lo, hi],
        "factor": hi / lo if lo > 0 and math.isfinite(hi) else None,
        "method": b.method,
        "method_reason": b.method_reason,
        "tau": cal.tau,
        "runs": len(cal.runs),
        "warnings": list(b.warnings),
    }
    if b.model is not None:
        m = b.model
        out["model"] = {
            "budget": m.value,
            "interval": list(m.interval),
            "exponent": m.exponent,
            "residual_sd_over_tau": m.residual_sd / m.tau if m.residual_sd is not None else None,
            "lack_of_fit_p": m.lack_of_fit.p_value,
            "lack_of_fit_f": m.lack_of_fit.f,
            "lack_of_fit_dof": list(m.lack_of_fit.dof),
            "lack_of_fit_x_known_p": m.lack_of_fit_x_known.p_value if m.lack_of_fit_x_known else None,
            "dof": m.dof,
            "x_log_se": m.x_log_se,
        }
    if b.bracket is not None:
        out["bracket"] = {"interval": list(b.bracket.interval), "below": b.bracket.below, "above": b.bracket.above,
                          "level_alpha": b.bracket.level_alpha}  # fmt: skip
    if b.baseline_check is not None:
        out["baseline_check"] = b.baseline_check.model_dump(exclude={"rule"})
    if b.isotonic is not None:
        out["isotonic"] = b.isotonic.model_dump()
    return out


def x_diagnostics(cal) -> dict:
    """Two checks behind the model's choice of x (docs/calibration.md): the within-level correlation of a run's log x
    with its paired cost (levels with ≥ 3 pairs), and the lack of fit of the same model with each run at its own x."""
    import numpy as np
    from scipy import stats

    from admitcheck.calibration.model import fit_seed_power_law

    fitted = [r for r in cal.runs if r.kind != "baseline" and r.in_fit]
    by: dict[str, list] = {}
    for r in fitted:
        by.setdefault(r.level, []).append((math.log(r.fit_x), r.quality_cost))
    dx, dc = [], []
    for v in by.values():
        if len(v) >= 3:
            a = np.array(v)
            dx += list(a[:, 0] - a[:, 0].mean())
            dc += list(a[:, 1] - a[:, 1].mean())
    corr = stats.pearsonr(dx, dc)
    base = [r for r in cal.runs if r.kind == "baseline"]
    runs = base + fitted
    m = fit_seed_power_law([r.replicate for r in runs], [0.0 if r.kind == "baseline" else r.fit_x for r in runs],
                           [r.quality for r in runs], [r.level for r in runs], cal.tau)  # fmt: skip
    return {"within_level_corr_logx_cost": float(corr[0]), "within_level_corr_p": float(corr[1]), "pairs": len(dx),
            "per_run_x_lack_of_fit_p": m.lack_of_fit.p_value}  # fmt: skip


def main(only: tuple[str, ...] | None = None) -> dict:
    """Everything in the module docstring; `only`: the artifacts to re-fit (names of SHIPPED or "smollm2-pooled"),
    the toy backtests re-judged only with "toy", every other entry of budget_refit.json kept as it was."""
    from admitcheck import io
    from admitcheck.admission.backtest import rejudge, write_backtest
    from admitcheck.admission.backtest_report import load_backtest
    from admitcheck.calibration.artifact import load_calibration, write_calibration
    from admitcheck.calibration.refit import refit, refit_pooled
    from admitcheck.config import ScreenConfig
    from admitcheck.report import write_backtest_companions, write_calibration_chart

    cal_dir = ROOT / "calibrations"
    out = ROOT / "bench" / "results" / "budget_refit.json"
    result: dict = {"command": "python bench/refit_shipped.py", "calibrations": {}, "backtests": {}}
    if only is not None:
        unknown = set(only) - {*SHIPPED, "smollm2-pooled"}
        if unknown:
            raise SystemExit(f"--only: unknown artifacts {sorted(unknown)}; known: {[*SHIPPED, 'smollm2-pooled']}")
        result = json.loads(out.read_text())
        result.setdefault("partial_refits", []).append(f"python bench/refit_shipped.py --only {' '.join(only)}")
    for name in (n for n in SHIPPED if only is None or n in only):
        cal = write_calibration(refit(cal_dir / f"{name}.yaml"), cal_dir / f"{name}.yaml")
        write_calibration_chart(cal)
        result["calibrations"][name] = _summary(cal) | {"x_diagnostics": x_diagnostics(cal)}
        print(name, json.dumps(result["calibrations"][name]["interval"]), cal.budget.method, flush=True)
    if only is None or "smollm2-pooled" in only:
        pooled_path = cal_dir / "smollm2-pooled.yaml"
        pooled = refit_pooled([cal_dir / f"{n}.yaml" for n in POOLED], pooled_path, name="smollm2")
        pooled = write_calibration(pooled, pooled_path)
        write_calibration_chart(pooled)
        result["calibrations"]["smollm2-pooled"] = _summary(pooled) | {"from": list(POOLED)}
        print("smollm2-pooled", pooled.budget.value, pooled.budget.interval, pooled.budget.method, flush=True)
    toy = load_calibration(cal_dir / "toy.yaml")
    for name in BACKTESTS if only is None or "toy" in only else ():
        path = cal_dir / f"{name}.yaml"
        report = load_backtest(path)
        cfg_file = (path.parent / report.provenance.config["screen_config"]).resolve()
        undecided = io.load_config(cfg_file, ScreenConfig).policy.undecided
        new = write_backtest(rejudge(report, toy, undecided), path)
        write_backtest_companions(new)
        a = new.agreement
        result["backtests"][name] = {
            "calibration": "toy.yaml",
            "agreement": a.fraction,
            "agree": a.agree,
            "decided_truths": a.decided_truths,
            "interval": list(a.interval),
            "ambiguous": a.ambiguous,
            "confusion": a.confusion,
            "verdicts": {r.name: [r.verdict.decision, r.verdict.marginal, r.truth.label] for r in new.candidates},
        }
        print(name, f"agreement {a.agree}/{a.decided_truths}", flush=True)
    out.write_text(json.dumps(result, indent=2, default=float))
    return result


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="+", default=None, help="re-fit just these artifacts (module docstring)")
    args = ap.parse_args()
    main(tuple(args.only) if args.only else None)
