"""Screening cost and sequential efficiency on the toy pair (the performance figures of issue #4).

    python bench/screen_cost.py                                   # builds (or reuses) the toy pair in ./toy
    python bench/screen_cost.py --toy-dir toy --threads 1 --candidates fp8_kv heavy_noise

1. Cost: one calibration run (one OPD training run of the calibration recipe with its mismatch measurement and
   quality evaluations: the unit a calibration repeats for every level and seed) against screening one candidate
   (all of `screen()`: tokenizer, reference model, floor, sequential measurement), in this process, same threads.
   Target: ratio ≤ 5% (against a whole calibration, many runs, it is smaller still).
2. Sequential efficiency: each candidate's k3 over the maximum probes, then screens against budgets 3× above and
   3× below it. Target: decided with ≤ 25% of the maximum probes.
3. The intervals' miss rates on the toy pair: bench/coverage.py --toy.
The screen settings are examples/toy_screen.yaml's; the calibration recipe is examples/toy_calibrate.yaml's when it
exists, else the schema defaults. Budgets come from a stand-in artifact with the pair's real fingerprints (only the
budget differs from a real calibration, and the screen reads nothing else). Prints tables, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's admitcheck, not an installed one


def stand_in_artifact(path: Path, screen_cfg, cal_cfg, budget: float) -> Path:
    """An artifact of this pair and protocol with budget `budget` (nats/token, a point with the shipped toy
    calibration's relative interval, ×0.645 to ×1.49)."""
    from admitcheck import io
    from admitcheck.calibration.artifact import (
        SCHEMA_VERSION,
        CalibrationArtifact,
        dump_calibration,
        fingerprint_pair,
        prompt_hashes,
        training_recipe_of,
    )
    from admitcheck.measurement.metrics import WINSOR_KAPPA

    fp = fingerprint_pair(screen_cfg.pair) | {"prompts": prompt_hashes(cal_cfg)}
    data = {
        "schema_version": SCHEMA_VERSION,
        "name": "toy",
        "metric": "k3",
        "pair": fp,
        "protocol": {
            "sampling": screen_cfg.sampling.model_dump(),
            "probe": {"max_new_tokens": screen_cfg.probe.max_new_tokens},
            "reference": {"dtype": screen_cfg.reference.dtype},
            "functional": {"estimator": "kl_exact", "kappa": WINSOR_KAPPA},  # what the toy's levels measure
        },
        "recipe": training_recipe_of(cal_cfg) | {"prompts": str(Path(cal_cfg.train.prompts).resolve())},
        "tolerance": {"value": 0.05, "rule": "stand-in"},
        "quality": {},
        "runs": [
            {
                "level": "baseline",
                "seed": 0,
                "mismatch": 0.0,
                "fit_x": budget / 100,
                "quality": 1.0,
                "quality_cost": 0.0,
            }
        ],
        "curve": {"form": "log_logistic", "params": {"plateau": 1.0, "x50": budget * 3, "steepness": 2.0}},
        # the shipped toy calibration's relative interval, [0.0101, 0.0234] around 0.0157
        "budget": {"value": budget, "kind": "point", "interval": [budget * 0.645, budget * 1.49], "confidence": 0.95},
        "provenance": {"note": "bench stand-in"},
    }
    io.write_text_atomic(path, dump_calibration(CalibrationArtifact.model_validate(data)))
    return path


def configs(toy: Path, tmp: Path):
    from admitcheck import io
    from admitcheck.config import CalibrateConfig, ScreenConfig

    paths = {"student": toy / "student", "teacher": toy / "teacher"}
    pair = {"name": "toy", **{k: str(v) for k, v in paths.items()}}
    screen_raw = io.read_yaml(ROOT / "examples" / "toy_screen.yaml")
    screen_raw |= {"pair": pair, "calibration": str(tmp / "cal.yaml")}
    screen_raw["probe"] |= {"prompts": str(toy / "prompts" / "probe.jsonl")}
    screen_cfg = ScreenConfig.model_validate(screen_raw)
    example = ROOT / "examples" / "toy_calibrate.yaml"
    cal_raw = io.read_yaml(example) if example.is_file() else {}
    cal_raw |= {"pair": pair, "probe": screen_raw["probe"] | {"num_prompts": screen_cfg.probe.num_prompts}}
    cal_raw["probe"].pop("min_prompts")
    for section in ("train", "eval"):
        cal_raw[section] = cal_raw.get(section, {}) | {"prompts": str(toy / "prompts" / f"{section}.jsonl")}
    cal_raw |= {"sampling": screen_raw.get("sampling", {}), "reference": screen_raw.get("reference", {})}
    return screen_cfg, CalibrateConfig.model_validate({k: v for k, v in cal_raw.items() if k != "output"})


def calibration_run_seconds(cal_cfg) -> float:
    """One OPD run of the calibration (baseline level, seed 0), models already loaded, as `calibrate` runs it."""
    from admitcheck.calibration.levels import Level, load_context, run_one

    ctx = load_context(cal_cfg)
    t0 = time.perf_counter()
    run_one(ctx, cal_cfg, Level("baseline", "baseline", 1), seed=0)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--toy-dir", default="toy", help="toy pair dir (built when missing)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads for both sides of the ratio")
    ap.add_argument(
        "--candidates",
        nargs="*",
        default=["bf16", "fp8_kv", "int8_weights", "heavy_noise"],
        help="toy_screen.yaml candidates for parts 2 and 3 (part 1 screens the first)",
    )
    ap.add_argument("--skip-calibration-run", action="store_true", help="skip part 1's denominator")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON result here")
    args = ap.parse_args(argv)

    import torch

    from admitcheck.admission.screen import screen
    from admitcheck.pairs.toy import build_toy_pair

    torch.set_num_threads(args.threads)
    build_toy_pair(args.toy_dir)
    tmp = Path(tempfile.mkdtemp(prefix="screen_cost_"))
    screen_cfg, cal_cfg = configs(Path(args.toy_dir).resolve(), tmp)
    out: dict = {"threads": args.threads, "probe": screen_cfg.probe.model_dump(exclude={"prompts"})}

    # 2 (first: it also gives part 1 its candidate's full-probe k3) -- full measurement, then budgets 3x away
    max_probes = screen_cfg.probe.num_prompts
    full = screen_cfg.model_copy(update={"probe": screen_cfg.probe.model_copy(update={"min_prompts": max_probes})})
    stand_in_artifact(tmp / "cal.yaml", screen_cfg, cal_cfg, 1.0)
    rows, per_seq = [], {}
    for name in args.candidates:
        ref = screen(full, candidates=[name]).verdicts[0]
        per_seq[name] = ref
        row = {"candidate": name, "estimator": ref.estimator, "k3_full": ref.mismatch, "probes_max": max_probes}
        for label, factor in (("budget_3x_above", 3.0), ("budget_3x_below", 1 / 3)):
            stand_in_artifact(tmp / "cal.yaml", screen_cfg, cal_cfg, ref.mismatch * factor)
            v = screen(screen_cfg, candidates=[name]).verdicts[0]
            row[label] = {
                "decision": v.decision,
                "marginal": v.marginal,
                "probes": v.probes,
                "share_of_max": v.probes / max_probes,
                "decided_by": v.decided_by,
                "heavy_tail": v.heavy_tail,
                "top_share": v.top_share,
                "capped_share": v.capped_share,
            }
        rows.append(row)
    out["sequential"] = rows

    # 1 -- cost ratio: screen one candidate (everything screen() does) against one calibration run
    first = args.candidates[0]
    stand_in_artifact(tmp / "cal.yaml", screen_cfg, cal_cfg, per_seq[first].mismatch * 3)
    t0 = time.perf_counter()
    screen(screen_cfg, candidates=[first])
    screen_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    screen(full, candidates=[first])  # the worst case: every probe up to the maximum
    screen_max_s = time.perf_counter() - t0
    run_s = math.nan if args.skip_calibration_run else calibration_run_seconds(cal_cfg)
    out["cost"] = {
        "candidate": first,
        "screen_seconds": screen_s,
        "screen_seconds_max_probes": screen_max_s,
        "calibration_run_seconds": run_s,
        "ratio": screen_s / run_s,
        "ratio_max_probes": screen_max_s / run_s,
        "train_steps": cal_cfg.train.steps,
    }

    # 3 -- the intervals' miss rates on the toy pair moved to bench/coverage.py --toy (one probe loop, public API)
    _print(out)
    print(json.dumps(out))
    if args.out:
        args.out.write_text(json.dumps(out, indent=2))
    return out


def _print(out: dict) -> None:
    c = out["cost"]
    print(
        f"cost: one calibration run ({c['train_steps']} OPD steps) {c['calibration_run_seconds']:.1f} s; "
        f"screen({c['candidate']}) {c['screen_seconds']:.2f} s -> {100 * c['ratio']:.2f}%, at the maximum probes "
        f"{c['screen_seconds_max_probes']:.2f} s -> {100 * c['ratio_max_probes']:.2f}%"
    )
    print("sequential (probes used / max):")
    for r in out["sequential"]:
        a, b = r["budget_3x_above"], r["budget_3x_below"]
        print(
            f"  {r['candidate']:<14} {r['estimator']} {r['k3_full']:.3g}  budget 3x above: {a['decision']} "
            f"{a['probes']}/{r['probes_max']}{' (heavy tail)' if a['heavy_tail'] else ''}  budget 3x below: "
            f"{b['decision']}{' (marginal)' if b['marginal'] else ''} "
            f"{b['probes']}/{r['probes_max']}{' (heavy tail)' if b['heavy_tail'] else ''}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
