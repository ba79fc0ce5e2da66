"""Re-measure a calibration ledger's level x under the screen's functional (issue #35), on CPU.

    OMP_NUM_THREADS=1 nice -n 10 python bench/remeasure_levels.py examples/toy_calibrate.yaml \
        --out bench/results/remeasure_toy.json            # report only: old x, new x, k3, kl_exact per run
    python bench/remeasure_levels.py examples/toy_calibrate.yaml --write   # also rewrite the ledger's x

Each finished level run of the config's ledger (baselines have no x) is measured again exactly as `calibrate`
measures it now (`levels.level_mismatch`: the run's engine at the start weights on the probe set, its x through
`ProbeRun.functional`, the screen's code path). The report says, per run, the stored and the new `mismatch`, the new
`mismatch_interval`, and whether the stored k3 and kl_exact (uncapped token means) are reproduced — i.e. whether a
run line changes in anything but its x. `--write` replaces `mismatch` and `mismatch_interval` of those lines (nothing
else; the uncapped k3 and kl_exact token means stay in the line as they were) and records the functional in the
ledger's header line (`functional`: a key `Ledger.open` does not compare). Then
re-fit (the lead's re-fit command) so the artifact's budget and `protocol.functional` carry the new functional.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def level_of(spec: dict):
    """The `levels.Level` of a ledger key's level spec."""
    from admitcheck.calibration.levels import Level
    from admitcheck.config import RolloutConfig

    rollout = RolloutConfig.model_validate(spec["rollout"]) if spec.get("rollout") else None
    return Level(
        "remeasured",
        spec["kind"],
        relative_std=spec.get("relative_std") or 0.0,
        rollout=rollout,
        staleness=spec.get("staleness") or 0,
        systematic=bool(spec.get("systematic", False)),
    )


def main(argv: list[str] | None = None) -> int:
    from admitcheck import io
    from admitcheck.calibration.ledger import ledger_path
    from admitcheck.calibration.levels import level_functional, level_mismatch, load_context
    from admitcheck.config import CalibrateConfig

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", type=Path)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--write", action="store_true", help="rewrite the ledger's mismatch and mismatch_interval")
    ap.add_argument("--limit", type=int, default=None, help="at most this many runs (a quick look)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    config = io.load_config(args.config, CalibrateConfig)
    ledger = ledger_path(Path(config.output))
    ctx = load_context(config, str(args.config))
    functional = level_functional(config, ctx.tokens.vocab_size)
    lines = ledger.read_text(encoding="utf-8").splitlines()
    rows, cache = [], {}
    for i, line in enumerate(lines):
        rec = json.loads(line)
        if rec.get("kind", "run") != "run" or "key" not in rec or rec.get("mismatch") is None:
            continue
        if args.limit is not None and len(rows) >= args.limit:
            break
        key = json.loads(rec["key"])
        cache_key = rec["key"]
        if cache_key not in cache:
            cache[cache_key] = dataclasses.asdict(level_mismatch(ctx, config, level_of(key["level"]), key["seed"]))
        new = cache[cache_key]
        same = {  # the uncapped token means as stored (CPU kernels differ in the 7th digit)
            k: (rec.get(k) is None and new[k] is None)
            or (rec.get(k) is not None and new[k] is not None and math.isclose(rec[k], new[k], rel_tol=1e-5))
            for k in ("k3", "kl_exact")
        }
        rows.append({"line": i, "level": key["level"], "seed": key["seed"], "old_mismatch": rec["mismatch"],
                     "new_mismatch": new["mismatch"], "new_interval": new["mismatch_interval"],
                     "k3": new["k3"], "kl_exact": new["kl_exact"], "reproduced": same})  # fmt: skip
        if args.write:
            rec["mismatch"], rec["mismatch_interval"] = new["mismatch"], new["mismatch_interval"]
            lines[i] = json.dumps(rec, sort_keys=True)
        print(f"line {i}: {key['level']['kind']} {rows[-1]['old_mismatch']:.4g} -> {new['mismatch']:.4g} {same}",
              file=sys.stderr)  # fmt: skip
    if args.write:
        header = json.loads(lines[0])  # a record of what the x in this ledger is (Ledger.open compares other keys)
        if header.get("kind") == "header" and functional is not None:
            header["functional"] = functional.to_dict()
            lines[0] = json.dumps(header, sort_keys=True)
        ledger.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = {
        "config": str(args.config),
        "ledger": str(ledger),
        "functional": functional.to_dict() if functional else None,
        "runs": rows,
        "all_reproduced": all(all(r["reproduced"].values()) for r in rows),
        "ratio_new_over_old": [r["new_mismatch"] / r["old_mismatch"] for r in rows if r["old_mismatch"]],
        "written": args.write,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
